"""Transposed 2-D and 1-D convs as one sub-pixel conv2d (conv1d) and a depth-to-space, run by
`tlm.graph.passes.prepare` before the layout pass.

TVM's TOPI legalizes `R.nn.conv2d_transpose` (PyTorch's `ConvTranspose2d`) as an ordinary
convolution over the input dilated with zeros: at stride 2, 3 of 4 multiply-adds read an inserted
zero (at stride 3, 8 of 9), and the schedule cannot skip them: DCGAN's generator (k=4, s=2,
p=1) ran 5x slower than PyTorch. `conv2d_transpose` tasks are also rare in tlm's training corpus,
where plain `conv2d` tasks are common. Each spatial axis of stride s, kernel K, padding
(pad_begin, pad_end) splits into s phases (the sub-pixel decomposition):

    y[o] = sum over o + pad_begin = i*s + k of x[i] * w[k]
    o + pad_begin = q*s + r (0 <= r < s): taps k = r + s*j (j < T = ceil(K / s)), i = q - j

so phase r is an ordinary convolution of x with the flipped sub-kernel w[r + s*(T-1-t)] (the
kernel zero-padded at its end to T*s taps). All s_h*s_w phases are ONE conv2d whose output
channels are (r_h, r_w, c_out), followed by a depth-to-space (reshape, permute, reshape) that
interleaves the phases, and a slice that crops to the call's own output shape:

    x [N, C_in, H, W] -> conv2d(W2 [s_h*s_w*C_out, C_in, T_h, T_w], stride 1, padding lo/hi)
      -> Z [N, s_h*s_w*C_out, M_h, M_w] -> [N, s_h, s_w, C_out, M_h, M_w]
      -> [N, C_out, M_h, s_h, M_w, s_w] -> [N, C_out, M_h*s_h, M_w*s_w] -> [..., start:start + out]

The conv's padding is chosen per axis (`_axis`) so that Z holds every output position and as
few others as possible (a padding of T-1 on both sides works too, but computes whole rows that
the slice drops); `output_padding` is covered the same way, so the result is exact. W2 is
computed with numpy at rewrite time (the weight is a constant), and the layout pass then gives
the new conv2d NHWC like any other (a transpose back to NCHW, the depth-to-space, the slice,
the epilogue after it and the next conv's transpose to NHWC then fuse into one injective task:
DCGAN's tasks are 5 conv2d and 5 of those). A stride of 1 on both axes is rewritten too: there the
sub-pixel form is the plain convolution (flipped, transposed kernel, padding K-1-p) with no
depth-to-space, which lets the layout pass give it NHWC as well. A 1x1 input (a generator's
first layer) is a matmul instead (`_as_matmul`): as a conv it would read one real tap of K_h*K_w.
`conv1d_transpose` (PyTorch's `ConvTranspose1d`: HiFi-GAN's and EnCodec's upsampling, k=2s) is the
same with the h axis left out: a conv1d with s*C_out output channels, which the layout pass gives
NWC, and a depth-to-space over w.

Calls that do not qualify (a weight that is not a constant, groups > 1, dilation > 1, other
layouts or dtypes than NCHW/IOHW (NCW/IOW) float32, dynamic shapes) keep TVM's transposed convolution,
with one warning per reason; a graph the pass fails on is returned unchanged, with a warning.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from tlm.errors import TlmWarning

_OPS = {2: "relax.nn.conv2d_transpose", 1: "relax.nn.conv1d_transpose"}  # spatial dims -> operator
_LEFT = "left as TVM's dilated transposed convolution"


@dataclass(frozen=True)
class _Axis:
    """The sub-pixel form of one spatial axis of a transposed conv."""

    stride: int  # s: phases
    taps: int  # T = ceil(K / s): taps of each phase's sub-kernel
    lo: int  # the conv's padding at the begin and end of the axis
    hi: int
    size: int  # M: the conv's output size (each phase's positions)
    start: int  # where the call's output begins in the interleaved M*s positions
    out: int  # the call's output size


def _axis(n: int, k: int, s: int, pad_begin: int, out: int) -> _Axis:
    """The sub-pixel form of an axis: input size `n`, kernel `k`, stride `s`, padding at the begin
    `pad_begin`, output size `out` (the call's; the padding at the end and output_padding are in it).

    Conv output m of phase r is interleaved position D = m*s + r, which is output o = D - start
    with start = pad_begin - (T-1-lo)*s. The begin padding lo = T-1 - pad_begin // s (at least 0)
    makes start = pad_begin mod s (the least); the end padding hi makes M*s >= start + out."""
    taps = -(-k // s)
    lo = max(0, taps - 1 - pad_begin // s)
    start = pad_begin - (taps - 1 - lo) * s
    need = -(-(start + out) // s)  # conv outputs that cover [start, start + out)
    hi = max(0, need - n - lo + taps - 1)
    size = n + lo + hi - taps + 1
    return _Axis(s, taps, lo, hi, size, start, out)


def subpixel_weight(weight, strides: tuple[int, ...]):
    """The sub-pixel conv's OI(H)W weight from a transposed conv's IO(H)W weight (numpy), 1-D or 2-D:
    W2[(r_h*s_w + r_w)*C_out + co, ci, t_h, t_w] = Wpad[ci, co, r_h + s_h*(T_h-1-t_h), r_w + s_w*(T_w-1-t_w)],
    Wpad the weight zero-padded at the end of each spatial axis to T*s taps (1-D: the same without h)."""
    import math

    import numpy as np

    c_in, c_out, *kernel = weight.shape
    dims = len(kernel)
    taps = [-(-k // s) for k, s in zip(kernel, strides)]
    wpad = np.pad(weight, [(0, 0), (0, 0)] + [(0, t * s - k) for t, s, k in zip(taps, strides, kernel)])
    # tap k = j*s + r -> (j, r): [C_in, C_out, T_h, s_h, T_w, s_w]; flip j (t = T-1-j)
    split = wpad.reshape(c_in, c_out, *[v for t, s in zip(taps, strides) for v in (t, s)])
    split = split[(slice(None), slice(None)) + (slice(None, None, -1), slice(None)) * dims]
    # -> [s_h, s_w, C_out, C_in, T_h, T_w] -> [s_h*s_w*C_out, C_in, T_h, T_w]
    order = [3 + 2 * i for i in range(dims)] + [1, 0] + [2 + 2 * i for i in range(dims)]
    w2 = split.transpose(order).reshape(math.prod(strides) * c_out, c_in, *taps)
    return np.ascontiguousarray(w2)


def _ints(values) -> list[int]:
    return [int(v) for v in values]


_LAYOUTS = {2: ("NCHW", "IOHW", "NCHW"), 1: ("NCW", "IOW", "NCW")}  # spatial dims -> data, kernel, out


def _unqualified(call, weight, dims: int) -> str | None:
    """Why a conv{dims}d_transpose call keeps TVM's form, or None when it is rewritten."""
    from tvm import relax

    from tlm.graph.layout import static_shape

    a = call.attrs
    if not isinstance(weight, type(relax.const(0.0))):
        return "its weight is not a constant"
    if int(a.groups) != 1:
        return "groups > 1"
    if any(d != 1 for d in _ints(a.dilation)):
        return "dilation > 1"
    if (str(a.data_layout), str(a.kernel_layout), str(a.out_layout)) != _LAYOUTS[dims]:
        data, kernel, out = _LAYOUTS[dims]
        return f"a layout other than {data} data, {kernel} kernel, {out} output"
    dtypes = {str(call.args[0].ty.dtype), str(weight.ty.dtype), str(call.ty.dtype)}
    if dtypes != {"float32"}:
        return "a dtype other than float32"
    if static_shape(call.args[0]) is None or static_shape(call) is None:
        return "a dynamic shape"
    if len(_ints(a.padding)) != 2 * dims or len(_ints(a.strides)) != dims:
        return "an unexpected padding or stride attribute"
    return None


def _as_matmul(builder, call, w):
    """A transposed conv of a 1x1 input (a generator's first layer: noise [N, C_in, 1, 1]) is a
    matmul: y[n, co, o_h, o_w] = sum_ci x[n, ci] * w[ci, co, o_h + top, o_w + left] (0 outside the
    kernel), where the conv form would read one real tap of K_h*K_w."""
    import numpy as np
    from tvm import relax

    from tlm.graph.layout import static_shape

    x = call.args[0]
    n, c_in = static_shape(x)[:2]
    _, c_out, k_h, k_w = w.shape
    top, left = _ints(call.attrs.padding)[:2]
    out_h, out_w = static_shape(call)[2:]
    # taps o + pad for o < out, zero where that runs past the kernel: [C_in, C_out, out_h, out_w]
    wpad = np.pad(w, [(0, 0), (0, 0), (0, max(0, top + out_h - k_h)), (0, max(0, left + out_w - k_w))])
    taps = wpad[:, :, top:top + out_h, left:left + out_w].reshape(c_in, c_out * out_h * out_w)
    flat = builder.emit(relax.op.reshape(x, [n, c_in]))
    y = builder.emit(relax.op.matmul(flat, relax.const(np.ascontiguousarray(taps), "float32"), out_dtype="float32"))
    return relax.op.reshape(y, [n, c_out, out_h, out_w])


def _subpixel(builder, call, weight, dims: int):
    """The sub-pixel form of a qualifying call with constant `weight` (its intermediate values
    emitted in `builder`), `dims` = 1 or 2 spatial axes."""
    from tvm import relax

    from tlm.graph.layout import static_shape

    x = call.args[0]
    w = weight.value.numpy()  # [C_in, C_out, K_h, K_w] (1-D: [C_in, C_out, K])
    n, _, *spatial = static_shape(x)
    if dims == 2 and tuple(spatial) == (1, 1) and min(_ints(call.attrs.padding)[:2]) >= 0:
        return _as_matmul(builder, call, w)
    _, c_out, *kernel = w.shape
    strides = _ints(call.attrs.strides)
    begin = _ints(call.attrs.padding)[:dims]  # the end paddings and output_padding: in the output shape
    outs = static_shape(call)[2:]
    axes = [_axis(*args) for args in zip(spatial, kernel, strides, begin, outs)]
    w2 = relax.const(subpixel_weight(w, tuple(strides)), "float32")
    conv = relax.op.nn.conv2d if dims == 2 else relax.op.nn.conv1d
    # Z [N, s_h*s_w*C_out, M_h, M_w]
    z = conv(x, w2, strides=1, padding=[a.lo for a in axes] + [a.hi for a in axes], out_dtype="float32")
    if any(s != 1 for s in strides):  # depth-to-space
        z = builder.emit(z)
        z = builder.emit(relax.op.reshape(z, [n, *strides, c_out, *[a.size for a in axes]]))
        # [N, C_out, M_h, s_h, M_w, s_w]
        z = builder.emit(relax.op.permute_dims(z, [0, dims + 1] + [v for i in range(dims) for v in (dims + 2 + i, 1 + i)]))
        z = relax.op.reshape(z, [n, c_out, *[a.size * a.stride for a in axes]])
    if any(a.start != 0 or a.size * a.stride != a.out for a in axes):
        z = relax.op.strided_slice(builder.emit(z), axes=list(range(2, 2 + dims)), begin=[a.start for a in axes],
                                   end=[a.start + a.out for a in axes])
    return z


def subpixel_conv_transpose(mod):
    """Every qualifying `conv2d_transpose` in `mod` as a sub-pixel conv2d and a depth-to-space
    (see the module docstring); modules without one are returned as they are."""
    import tvm
    from tvm import relax

    from tlm.errors import first_line
    from tlm.graph.layout import calls_op

    ops = {dims: tvm.ir.Op.get(name) for dims, name in _OPS.items()}
    skipped: dict[tuple[str, str], int] = {}  # (operator, reason) -> calls left

    @relax.expr_functor.mutator
    class Rewrite(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            dims = next((d for d, op in ops.items() if isinstance(call, relax.Call) and call.op.same_as(op)), None)
            if dims is None:
                return call
            weight = call.args[1]
            if isinstance(weight, relax.Var) and isinstance(self.lookup_binding(weight), type(relax.const(0.0))):
                weight = self.lookup_binding(weight)
            reason = _unqualified(call, weight, dims)
            if reason is not None:
                key = (f"conv{dims}d_transpose", reason)
                skipped[key] = skipped.get(key, 0) + 1
                return call
            return _subpixel(self.builder_, call, weight, dims)

    funcs = [gv for gv, f in mod.functions.items()
             if isinstance(f, relax.Function) and any(calls_op(f, op) for op in ops.values())]
    if not funcs:
        return mod
    try:
        # a weight computed from constants (PyTorch's weight norm, g * v / |v|: HiFi-GAN's, EnCodec's) folded
        # into one first; FoldConstant returns a new module, so the caller's stays as it was
        mod = relax.transform.FoldConstant()(mod)
        out = mod.clone()
        for gv in funcs:
            out[gv] = Rewrite().visit_expr(mod[gv])
        out = relax.transform.DeadCodeElimination()(relax.transform.CanonicalizeBindings()(out))
        relax.analysis.well_formed(out)
    except Exception as err:  # a graph this pass does not know: left as it was
        warnings.warn(f"tlm: transposed convs {_LEFT}: the rewrite failed ({first_line(err, limit=160)})",
                      stacklevel=2, category=TlmWarning)
        return mod
    for (name, reason), count in skipped.items():
        calls = "call" if count == 1 else "calls"
        warnings.warn(f"tlm: {count} {name} {calls} {_LEFT}: {reason}", stacklevel=2, category=TlmWarning)
    return out
