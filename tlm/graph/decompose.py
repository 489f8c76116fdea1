"""Operators TVM's PyTorch importer has no conversion for, rewritten into ones it has:
`nn.EmbeddingBag`, adaptive max pooling (`nn.AdaptiveMaxPool1d/2d`, the values; a pool with one
window size and stride where the input divides, else the maxima of PyTorch's windows), `F.unfold`
(a grouped conv with one-hot kernels), `torch.cdist` (its definition), trilinear interpolation
(three 1-D ones), `torch.erfinv` (PyTorch's own algorithm), `F.rrelu` in eval mode (a leaky
ReLU), `nn.ConvTranspose3d` (a conv3d over the zero-dilated input), `Tensor.unfold` (a gather),
a mixture of experts' token counts (`torch.histc` over a given range) and grouped matmul (dense:
every expert, masked) and `torch.fft` over a real
input whose complex output is taken apart (`.real`, `.imag`, `view_as_real`: FNet's token mixing),
as a DFT per dimension in real matmuls; TVM has no complex dtype, so an FFT whose complex value is
used otherwise (`.abs()`) stays refused. Converters the importer lacks or gets wrong are in
tlm.graph.converters.

`nn.EmbeddingBag` (and `F.embedding_bag`) reach torch.export as `aten.embedding_bag`, which
becomes `aten._embedding_bag` in TVM 0.27's importer, which refuses it (torch has no decomposition
for it). `decompose_unsupported` replaces it,
in the exported program, by its definition over static shapes: with n indices in B bags,

    member[b, j] = offsets[b] <= j < end[b]                  (and indices[j] != padding_idx)
    rows = weight[indices] * per_sample_weights               (n, D)
    sum = member @ rows;  mean = sum / max(1, |bag|);  max = max over the bag's rows (0 if empty)

a (B, n) mask and a matmul instead of a segment reduction: TVM has every one of those operators,
and bags of a model's size (hundreds of indices) cost little. Only the bags themselves are
computed: a program that also reads the operator's other outputs (offset2bag, bag sizes, the
max's indices; training code) is left as it was, and its refusal stands.
"""

from __future__ import annotations

import math
from typing import Any


def _embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                   per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    """aten._embedding_bag over static shapes (its first output; the other three are placeholders
    that `decompose_unsupported` makes sure no one reads)."""
    import torch

    n = indices.shape[0]
    starts = offsets[:-1] if include_last_offset else offsets
    ends = offsets[1:] if include_last_offset else torch.cat([offsets[1:], offsets.new_full((1,), n)])
    pos = torch.arange(n, dtype=offsets.dtype, device=offsets.device)
    member = (pos[None, :] >= starts[:, None]) & (pos[None, :] < ends[:, None])  # (B, n)
    if padding_idx is not None and padding_idx >= 0:
        member = member & (indices != padding_idx)[None, :]
    rows = torch.index_select(weight, 0, indices)  # (n, D)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights[:, None]
    mask = member.to(weight.dtype)
    size = mask.sum(dim=1)  # (B,)
    if mode == 2:  # max
        picked = torch.where(member[:, :, None], rows[None, :, :], torch.finfo(weight.dtype).min)
        out = torch.where(size[:, None] > 0, picked.amax(dim=1), 0.0)
    else:
        out = mask @ rows
        if mode == 1:  # mean
            out = out / torch.clamp(size, min=1.0)[:, None]
    unused = offsets.new_zeros(offsets.shape)
    return out, indices.new_zeros(indices.shape), unused, unused


def _adaptive_max_pool(x, output_size):
    """aten.adaptive_max_pool{1,2}d over static shapes: PyTorch's windows (output i of n over an
    input of size L reads [floor(i L / n), ceil((i + 1) L / n))), as a max pool where every window
    has one size and stride, else as the maxima of slices (its indices output a placeholder)."""
    import torch
    import torch.nn.functional as F

    dims = len(output_size)
    sizes = [int(s) for s in x.shape[-dims:]]
    if all(L % n == 0 for L, n in zip(sizes, output_size)):
        kernel = [L // n for L, n in zip(sizes, output_size)]
        out = (F.max_pool1d if dims == 1 else F.max_pool2d)(x, kernel, kernel)
    else:
        out = x
        for axis, (L, n) in enumerate(zip(sizes, output_size)):
            axis = out.dim() - dims + axis
            out = torch.stack([out.narrow(axis, i * L // n, -(-(i + 1) * L // n) - i * L // n).amax(axis)
                               for i in range(n)], axis)
    return out, torch.zeros(out.shape, dtype=torch.int64, device=x.device)


def _im2col(x, kernel_size, dilation, padding, stride):
    """aten.im2col (`F.unfold`) as a grouped convolution with one-hot kernels: output channel
    c * kh * kw + i * kw + j of input channel c copies tap (i, j), exactly (one product by 1, the
    rest by 0). TVM's importer turned it into an index_tensor that failed to broadcast."""
    import torch
    import torch.nn.functional as F

    batched = x.dim() == 4
    x = x if batched else x.unsqueeze(0)
    c, (kh, kw) = x.shape[1], kernel_size
    eye = torch.eye(kh * kw, dtype=x.dtype, device=x.device).reshape(kh * kw, 1, kh, kw)
    cols = F.conv2d(x, eye.repeat(c, 1, 1, 1), stride=stride, padding=padding, dilation=dilation, groups=c)
    cols = cols.reshape(x.shape[0], c * kh * kw, -1)
    return cols if batched else cols.squeeze(0)


def _cdist(x1, x2, p: float = 2.0, compute_mode=None):
    """aten._cdist_forward (`torch.cdist`) from its definition: the p-norm of every pairwise
    difference, (..., P, M) and (..., R, M) -> (..., P, R) (p = 2: a square root of summed squares;
    p = inf: the largest difference)."""
    import torch

    diff = (x1.unsqueeze(-2) - x2.unsqueeze(-3)).abs()  # (..., P, R, M)
    if p == 2:
        return diff.square().sum(-1).sqrt()
    if p == float("inf"):
        return diff.amax(-1)
    if p == 1:
        return diff.sum(-1)
    return diff.pow(p).sum(-1).pow(1.0 / p)


def _trilinear(x, output_size, align_corners, scale_factors):
    """aten.upsample_trilinear3d.vec as three 1-D linear interpolations (gathers of the two
    neighbours along one axis and their weighted sum), PyTorch's source positions: TVM's import of
    torch's own decomposition failed (index_tensor could not broadcast). Positions and weights are
    computed by operators (a decomposition cannot hold constant tensors)."""
    import math

    import torch

    sizes = [int(n) for n in x.shape[2:]]
    outs = ([int(n) for n in output_size] if output_size is not None
            else [int(math.floor(n * f)) for n, f in zip(sizes, scale_factors)])
    for axis, (n_in, n_out) in enumerate(zip(sizes, outs), start=2):
        i = torch.arange(n_out, dtype=torch.float32, device=x.device)
        if align_corners:
            src = i * ((n_in - 1) / (n_out - 1)) if n_out > 1 else i * 0.0
        else:
            step = 1.0 / scale_factors[axis - 2] if scale_factors is not None else n_in / n_out
            src = torch.clamp((i + 0.5) * step - 0.5, min=0.0)
        lo = torch.clamp(torch.floor(src), max=n_in - 1)
        hi = torch.clamp(lo + 1, max=n_in - 1)
        shape = [1] * x.dim()
        shape[axis] = n_out
        w = (src - lo).to(x.dtype).reshape(shape)
        x = (torch.index_select(x, axis, lo.to(torch.int64)) * (1 - w)
             + torch.index_select(x, axis, hi.to(torch.int64)) * w)
    return x


def _rrelu(x, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None):
    """aten.rrelu_with_noise_functional in eval mode (`F.rrelu(training=False)`, `nn.RReLU` in
    eval): a leaky ReLU with the mean slope (lower + upper) / 2; the noise output is unread."""
    import torch

    return torch.nn.functional.leaky_relu(x, (lower + upper) / 2), torch.zeros_like(noise)


def _rrelu_plain(x, lower=0.125, upper=1.0 / 3.0, training=False, generator=None):
    """aten.rrelu in eval mode, as torch.export keeps it before its own decompositions."""
    import torch

    return torch.nn.functional.leaky_relu(x, (lower + upper) / 2)


_ERFINV_A, _ERFINV_B = (0.886226899, -1.645349621, 0.914624893, -0.140543331), (-2.118377725, 1.442710462,
                                                                               -0.329097515, 0.012229801)
_ERFINV_C, _ERFINV_D = (-1.970840454, -1.624906493, 3.429567803, 1.641345311), (3.543889200, 1.637067800)


def _erfinv(y):
    """aten.erfinv by PyTorch's own CPU algorithm (ATen's calc_erfinv): a rational first guess on
    |y| <= 0.7 and another beyond, two Newton steps on erf, +-inf at +-1 and NaN past it."""
    import math

    import torch

    def poly(coeffs, z):  # coeffs[0] + coeffs[1] z + ...
        out = coeffs[-1] + z * 0
        for c in reversed(coeffs[:-1]):
            out = out * z + c
        return out

    a = y.abs()
    z = y * y
    central = y * poly(_ERFINV_A, z) / (poly(_ERFINV_B, z) * z + 1.0)
    t = torch.sqrt(-torch.log((1.0 - a.clamp(max=1.0)) / 2.0))  # NaN-free; used where |y| > 0.7
    tail = torch.sign(y) * poly(_ERFINV_C, t) / (poly(_ERFINV_D, t) * t + 1.0)
    x = torch.where(a <= 0.7, central, tail)
    for _ in range(2):
        x = x - (torch.erf(x) - y) / ((2.0 / math.sqrt(math.pi)) * torch.exp(-x * x))
    inf = torch.sign(y) * (a * 0 + math.inf)
    return torch.where(a > 1.0, a * math.nan, torch.where(a == 1.0, inf, x))


def _conv_transpose3d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """aten.conv_transpose3d (`nn.ConvTranspose3d`, which TVM's importer refuses: it has no 3-D
    transposed convolution) as its definition: the input zero-dilated by the stride (a pad of a
    new unit axis and a reshape), padded by dilation (k - 1) - padding (+ output_padding at the
    end), then a conv3d with the weights flipped and in/out channels swapped per group. Over the
    zeros, as TVM's own 2-D one is; the 3-D layers of models are rare."""
    import torch.nn.functional as F

    stride, padding, output_padding, dilation = (list(v) if isinstance(v, (list, tuple)) else [v] * 3
                                                 for v in (stride, padding, output_padding, dilation))
    for i, s in enumerate(stride):  # axis 2 + i: L -> (L - 1) s + 1
        if s > 1:
            ax, n = 2 + i, x.shape[2 + i]
            shape = list(x.shape)
            shape[ax] = n * s
            x = F.pad(x.unsqueeze(ax + 1), [0, 0] * (4 - ax) + [0, s - 1]).reshape(shape).narrow(ax, 0, (n - 1) * s + 1)
    cin, coutg, *k = weight.shape  # (Cin, Cout / groups, kd, kh, kw)
    w = weight.reshape(groups, cin // groups, coutg, *k).transpose(1, 2).reshape(groups * coutg, cin // groups, *k)
    edges = [(dilation[i] * (k[i] - 1) - padding[i], dilation[i] * (k[i] - 1) - padding[i] + output_padding[i])
             for i in range(3)]
    pads = [max(0, e) for i in (2, 1, 0) for e in edges[i]]
    y = F.conv3d(F.pad(x, pads), w.flip([2, 3, 4]), bias, 1, 0, dilation, groups)
    for i, (lo, hi) in enumerate(edges):  # padding past the kernel's reach crops instead
        if lo < 0 or hi < 0:
            y = y.narrow(2 + i, max(0, -lo), y.shape[2 + i] - max(0, -lo) - max(0, -hi))
    return y


def _dft(x, dims, norm=None, inverse: bool = False, onesided: bool = False):
    """torch.fft's transform of a real `x` over `dims` in real arithmetic: per dimension of size n,
    products with the n x n matrices C = cos(2 pi jk / n) and S = sin(2 pi jk / n) (the DFT is
    C - iS, its inverse C + iS; jk taken mod n so the angles stay small), the result handed back as
    torch.complex(re, im) for `_real_parts` to take apart. `onesided` (rfft): the last of `dims`
    keeps its n // 2 + 1 first outputs. `norm` as torch.fft's: None/"backward", "ortho", "forward"."""
    import torch

    dims = [d % x.dim() for d in dims]
    sign, total, re, im = (1.0 if inverse else -1.0), 1, x, None
    for i, d in enumerate(reversed(dims)):  # the last first: a one-sided transform halves it
        n = x.shape[d]
        total *= n
        k = torch.arange(n, device=x.device)
        cols = k[: n // 2 + 1] if onesided and i == 0 else k
        angle = (torch.outer(k, cols) % n).to(x.dtype) * (2 * math.pi / n)  # (n, cols)
        c, s = torch.cos(angle), torch.sin(angle)
        re_d = re.movedim(d, -1)
        new_re, new_im = re_d @ c, (re_d @ s) * sign
        if im is not None:
            im_d = im.movedim(d, -1)
            new_re, new_im = new_re - (im_d @ s) * sign, new_im + im_d @ c
        re, im = new_re.movedim(-1, d), new_im.movedim(-1, d)
    if norm == "ortho" or (norm == "forward") != inverse:  # "backward" (None) scales the inverse
        scale = total ** -0.5 if norm == "ortho" else 1.0 / total
        re, im = re * scale, im * scale
    return torch.complex(re, im)


def _fft_rewrite(default_dim, inverse: bool, onesided: bool):
    """The rewrite of one torch.fft op (`fft_X`: one dim, `fft_X2`: two, `fft_Xn`: any; None: all)."""

    def rewrite(x, size=None, dim=default_dim, norm=None):  # size (n / s) is None: `_real_fft`
        dims = range(x.dim()) if dim is None else [dim] if isinstance(dim, int) else dim
        return _dft(x, list(dims), norm, inverse, onesided)

    return rewrite


def _fft_ops() -> dict:
    """{aten op of torch.fft over a real input: its rewrite} (sizes `n`/`s` are left: not rewritten)."""
    import torch

    aten = torch.ops.aten
    return {getattr(aten, f"fft_{name}{suffix}").default: _fft_rewrite(dim, inverse, onesided)
            for name, inverse, onesided in (("fft", False, False), ("ifft", True, False), ("rfft", False, True))
            for suffix, dim in (("", -1), ("2", (-2, -1)), ("n", None))}


def _real_fft(node) -> bool:
    """Whether a torch.fft node transforms a real tensor at its own size (what `_dft` rewrites)."""
    val = getattr(node.args[0], "meta", {}).get("val")
    return (val is not None and val.dtype.is_floating_point
            and (len(node.args) < 2 or node.args[1] is None) and node.kwargs.get("n", node.kwargs.get("s")) is None)


def _real_parts(exported) -> bool:
    """Takes apart every view_as_real(complex(re, im)) in `exported` (in place): a select of the last
    dimension reads `re` or `im` itself (`.real` of an FFT computes no imaginary part), any other
    use reads stack([re, im], -1). Whether no complex value is left."""
    import torch

    aten = torch.ops.aten
    graph = exported.graph_module.graph
    for view in list(graph.nodes):
        pair = view.args[0] if view.target is aten.view_as_real.default else None
        if getattr(pair, "target", None) is not aten.complex.default:
            continue
        last = view.meta["val"].dim() - 1
        for use in list(view.users):
            if use.target is aten.select.int and use.args[1] in (-1, last):
                use.replace_all_uses_with(pair.args[use.args[2] % 2])
        if view.users:
            with graph.inserting_after(view):
                stacked = graph.call_function(aten.stack.default, (list(pair.args), -1))
            stacked.meta["val"] = torch.stack([a.meta["val"] for a in pair.args], -1)
            view.replace_all_uses_with(stacked)
    graph.eliminate_dead_code()
    exported.graph_module.recompile()
    return not any(getattr(n.meta.get("val"), "is_complex", lambda: False)() for n in graph.nodes)


def _tensor_unfold(x, dimension, size, step):
    """aten.unfold (`Tensor.unfold`: windows of `size` every `step` along `dimension`, a new last
    dim) as one gather: index_select of the windows' positions, then a reshape and a move."""
    import torch

    dim = dimension % max(x.dim(), 1)
    n = (x.shape[dim] - size) // step + 1
    idx = (torch.arange(n, device=x.device)[:, None] * step + torch.arange(size, device=x.device)).reshape(-1)
    win = x.index_select(dim, idx)  # (..., n * size, ...)
    return win.reshape(*x.shape[:dim], n, size, *x.shape[dim + 1:]).movedim(dim + 1, -1)


def _grouped_mm(x, weight, offs, *rest):
    """A grouped matmul of rows sorted by group (transformers' `grouped_mm_fallback`, `aten._grouped_mm`
    of a 2-D input and 3-D weights: a mixture of experts' tokens), (S, d) x (E, d, h) with cumulative
    row counts `offs` (E,) -> (S, h), computed densely: every row times every group's weights, kept
    where the row lies in the group (rows past the last group stay 0, as in the fallback). E times
    the flops, static shapes; exact, since every other product is multiplied by 0."""
    import torch

    rows = torch.arange(x.shape[0], device=x.device)
    ends = offs.to(torch.int64)
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])
    member = ((rows[None] >= starts[:, None]) & (rows[None] < ends[:, None])).to(x.dtype)  # (E, S)
    every = torch.einsum("sd,edh->esh", x, weight)
    return (every * member[:, :, None]).sum(0)


def _histc(x, bins=100, min=0, max=0):  # noqa: A002 - aten's argument names
    """aten.histc with its range given (a mixture of experts' tokens per expert): bin
    (x - min) * bins / (max - min), the top edge in the last bin, values outside not counted;
    the counts in x's dtype. A histogram over the data's own range (min == max) is left alone."""
    import torch

    flat = x.reshape(-1)
    pos = ((flat - min) * bins / (max - min)).floor().clamp(max=bins - 1)
    inside = (flat >= min) & (flat <= max)
    hits = (pos[None] == torch.arange(bins, device=x.device, dtype=x.dtype)[:, None]) & inside[None]
    return hits.to(x.dtype).sum(1)


def _grouped_mm_node(node) -> bool:
    """Whether a node is a grouped matmul `_grouped_mm` rewrites (2-D rows, 3-D weights, offsets, no bias)."""
    name = str(node.target)
    if name not in ("transformers.grouped_mm_fallback.default", "aten._grouped_mm.default"):
        return False
    args = node.args
    vals = [a.meta.get("val") if hasattr(a, "meta") else a for a in args[:3]]
    if len(vals) < 3 or any(v is None for v in vals) or vals[0].dim() != 2 or vals[1].dim() != 3:
        return False
    return all(a is None for a in args[3:]) and not any(v is not None for v in node.kwargs.values())


def _rrelu_training(node) -> bool:  # random slopes: left as it was (and refused)
    import torch

    aten = torch.ops.aten
    at = {aten.rrelu_with_noise_functional.default: 4, aten.rrelu.default: 3}.get(node.target)
    return at is not None and bool(node.args[at] if len(node.args) > at else node.kwargs.get("training", False))


def _only_first_output_read(node) -> bool:
    import operator

    return all(u.op == "call_function" and u.target is operator.getitem and (u.args[1] == 0 or not u.users)
               for u in node.users)


def decompose_unsupported(exported) -> Any:
    """`exported` (a torch.export ExportedProgram) with the operators this module knows rewritten
    into ones TVM's importer converts; the same program where there are none (or where one of
    them has an output other than its first read)."""
    import torch

    aten = torch.ops.aten  # export keeps `embedding_bag`; TVM's importer decomposes it to `_embedding_bag`
    ops = {op: _embedding_bag for op in (aten.embedding_bag.default, aten.embedding_bag.padding_idx,
                                         aten._embedding_bag.default, aten._embedding_bag_forward_only.default)}
    ops.update({op: _adaptive_max_pool for op in (aten.adaptive_max_pool1d.default, aten.adaptive_max_pool2d.default)})
    single = {aten.im2col.default: _im2col, aten._cdist_forward.default: _cdist, aten.cdist.default: _cdist,
              aten.upsample_trilinear3d.vec: _trilinear, aten.erfinv.default: _erfinv,
              aten.conv_transpose3d.input: _conv_transpose3d, aten.unfold.default: _tensor_unfold}
    grouped = [n for n in exported.graph.nodes if n.op == "call_function"
               and str(n.target) in ("transformers.grouped_mm_fallback.default", "aten._grouped_mm.default")]
    histc = [n for n in exported.graph.nodes if n.op == "call_function" and n.target == aten.histc.default]
    if histc and all(len(n.args) > 3 and n.args[2] != n.args[3] for n in histc):
        single[aten.histc.default] = _histc
    # a target is rewritten only where every call of it has the form _grouped_mm computes (no bias)
    single.update({n.target: _grouped_mm for n in grouped
                   if all(_grouped_mm_node(m) for m in grouped if m.target == n.target)})
    ops.update(single)
    ops[aten.rrelu_with_noise_functional.default] = _rrelu
    single[aten.rrelu.default] = ops[aten.rrelu.default] = _rrelu_plain
    found = {n.target for n in exported.graph.nodes if n.op == "call_function" and n.target in ops
             and (n.target in single or _only_first_output_read(n))
             and not (n.target in (aten._cdist_forward.default, aten.cdist.default) and len(n.args) > 2
                      and n.args[2] == 0)  # p = 0 counts differing entries: left as it was
             and not _rrelu_training(n)}
    ffts = _fft_ops()
    found |= {n.target for n in exported.graph.nodes if n.op == "call_function" and n.target in ffts and _real_fft(n)}
    ops.update(ffts)
    if not found:
        return exported
    out = exported.run_decompositions({op: ops[op] for op in found})
    if found & set(ffts) and not _real_parts(out):
        return exported  # a complex value other than an FFT's parts: refused as it was
    return out
