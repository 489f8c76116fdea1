"""Converters TVM's PyTorch importer lacks or gets wrong (`CONVERTERS`, passed to
from_exported_program as its `custom_convert_map`): `torch.amax`/`amin` (Relax's max/min over the
same axes), `torch.exp2`, `torch.hypot`, `clamp` of an integer tensor with one bound, ELU's scales
(`F.selu` was silently wrong), `F.grid_sample`'s grid layout (the output came out in the wrong
shape), an integer `//` by a Python int, and `cumsum`/`cumprod` of bool or narrow integers
(PyTorch's output is int64; TVM's was the input's dtype: a bool scan failed to build),
`arange` with a negative step (sized wrongly), `index_put` / `index_add_` of whole rows
(refused), `max.dim` / `min.dim` (a top-k; none), and a `split` / `chunk` whose pieces only feed pointwise ops (an LSTM or GRU cell's
gates after PyTorch's decomposition, a GLU): TVM's split is a kernel of its own that writes every
piece, slices fuse into their consumers (lstm: one kernel fewer per step, 4 -> 3, as from the
ONNX door; tlm.graph.onnx_rnn). Operators the importer has no conversion for at all
are rewritten before it, at the PyTorch level, by tlm.graph.decompose.
"""

from __future__ import annotations

import math


def dtype_of(x) -> str:
    """A Relax tensor expression's dtype as a string ("int64")."""
    return str(getattr(x.ty.dtype, "dtype", x.ty.dtype))


def _reduce(op_name: str):
    """A converter of aten.amax/amin (x, dim=[], keepdim=False) to Relax's max/min over those axes."""

    def convert(node, importer):
        from tvm import relax

        x = importer.env[node.args[0]]
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", [])
        keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
        axis = [int(d) for d in dim] if dim else None  # [] is every axis, as in PyTorch
        return importer.block_builder.emit(getattr(relax.op, op_name)(x, axis, keepdim))

    return convert


def _max_min_dim(kind: str):
    """A converter of aten.max.dim / min.dim (`x.max(dim=2)`, `torch.min(x, 1)`: values and
    indices) to Relax's max / min and argmax / argmin over that axis. TVM's converter made max.dim
    a top-k of 1 (a sort-like kernel: PointNet's global max pool over 256 points was its slowest
    kernel, 54 us of 150) and has none for min.dim. The first index of equal values, as PyTorch;
    indices nobody reads are dead code."""

    def convert(node, importer):
        from tvm import relax

        bb = importer.block_builder
        x = importer.env[node.args[0]]
        ndim = len(importer.shape_of(x))
        if ndim == 0:  # a 0-d tensor (dim 0 or -1): itself, at index 0 (TVM's top-k refused it)
            return bb.emit(relax.Tuple([x, relax.const(0, "int64")]))
        dim = int(node.args[1] if len(node.args) > 1 else node.kwargs["dim"]) % ndim
        keepdim = bool(node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False))
        values = bb.emit(getattr(relax.op, kind)(x, [dim], keepdim))
        indices = bb.emit(getattr(relax.op, "arg" + kind)(x, dim, keepdim))
        return bb.emit(relax.Tuple([values, indices]))

    return convert


def _int_clamp(kind: str):
    """A converter of aten.clamp / clamp_min / clamp_max of an integer tensor: a maximum and / or a
    minimum with the bounds given. TVM's own writes a clip with +-inf for a missing bound, which
    legalization cannot convert to an integer (`x.long().clamp(max=49)` failed with "Cannot
    convert infinity to BigInt"). Other dtypes and tensor bounds go to TVM's converter."""

    def convert(node, importer):
        import numpy as np
        from tvm import relax

        own = getattr(importer, {"clamp": "_clamp", "clamp_min": "_clamp_min", "clamp_max": "_clamp_max"}[kind])
        x = importer.env[node.args[0]]
        dtype = dtype_of(x)
        if not dtype.startswith(("int", "uint")):
            return own(node)
        args = list(node.args[1:])
        if kind == "clamp":
            lo = args[0] if args else node.kwargs.get("min")
            hi = args[1] if len(args) > 1 else node.kwargs.get("max")
        else:
            lo, hi = (args[0], None) if kind == "clamp_min" else (None, args[0])
        if not all(b is None or isinstance(b, int | float) for b in (lo, hi)):
            return own(node)  # a tensor bound: TVM's maximum / minimum
        if lo is not None:
            x = relax.op.maximum(x, relax.const(int(np.ceil(lo)), dtype))
        if hi is not None:
            x = relax.op.minimum(x, relax.const(int(np.floor(hi)), dtype))
        return importer.block_builder.emit(x)

    return convert


def _exp2(node, importer):
    """aten.exp2, which TVM's importer lacks: exp(x ln 2)."""
    from tvm import relax

    x = importer.env[node.args[0]]
    dtype = dtype_of(x)
    return importer.block_builder.emit(relax.op.exp(relax.op.multiply(x, relax.const(math.log(2.0), dtype))))


def _out_dtype(node, default: str) -> str:
    """The dtype PyTorch gives the node's output (torch.export's fake value), else `default`."""
    val = node.meta.get("val")
    return str(val.dtype).replace("torch.", "") if val is not None else default


def _scan(op_name: str):
    """A converter of aten.cumsum / cumprod in the output dtype PyTorch gives: TVM's kept the
    input's, so the cumulative sum of a bool tensor (transformers' packed-sequence mask, in every
    causal model called without an attention mask) was a bool scan that LLVM codegen refused; an
    int32 one would wrap where PyTorch's int64 does not."""

    def convert(node, importer):
        from tvm import relax

        x = importer.env[node.args[0]]
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        out = _out_dtype(node, dtype_of(x))
        return importer.block_builder.emit(getattr(relax.op, op_name)(x, dim, None if out == dtype_of(x) else out))

    return convert


def _arange(node, importer):
    """aten.arange with a negative step: Relax sized it as if the step were positive (arange(32,
    -32, -1) had 66 elements, so Funnel's relative positions failed to import), so such a range is
    start + step * arange(n) with PyTorch's n = ceil((end - start) / step); others as TVM does."""
    from tvm import relax

    start, end, step = (list(node.args) + [None, None, None])[:3] if len(node.args) == 3 else (None, None, None)
    if not all(isinstance(v, (int, float)) for v in (start, end, step)) or step >= 0:
        return importer._arange(node)
    dtype = _out_dtype(node, "float32" if any(isinstance(v, float) for v in (start, end, step)) else "int64")
    n = max(0, math.ceil((end - start) / step))
    i = relax.op.arange(0, n, 1, dtype=dtype)
    return importer.block_builder.emit(relax.op.add(relax.op.multiply(i, relax.const(step, dtype)),
                                                    relax.const(start, dtype)))


def _index_put(node, importer):
    """aten.index_put(_) with one 1-D index tensor for the first of several dims (`x.index_add_(0,
    idx, rows)`, `x[idx] += rows`: message passing in graph networks), which TVM's importer refused
    (it wants one index tensor per dim): a scatter of whole rows, the index broadcast over the
    rows' other dims; adding where `accumulate` (duplicates summed, as PyTorch does). A bool mask
    of rows set to one value (`x[mask] = 0`) is a select. Others as TVM does."""
    from tvm import relax

    data, indices = importer.env[node.args[0]], node.args[1]
    accumulate = node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False)
    ndim = len(data.ty.shape) if getattr(data.ty, "shape", None) is not None else 0
    if not (isinstance(indices, (list, tuple)) and len(indices) == 1 and indices[0] is not None and ndim >= 1):
        return importer._index_put(node)
    idx, values = importer.env[indices[0]], importer.env[node.args[2]]
    bb = importer.block_builder
    if len(idx.ty.shape) == 1 and dtype_of(idx) == "bool" and not accumulate and len(values.ty.shape) == 0:
        mask = bb.emit(relax.op.reshape(idx, [int(idx.ty.shape[0])] + [1] * (ndim - 1)))  # x[mask] = v
        return bb.emit(relax.op.where(mask, relax.op.astype(values, dtype_of(data)), data))
    if len(idx.ty.shape) != 1 or not dtype_of(idx).startswith("int") or ndim < 2:
        return importer._index_put(node)
    rows = [int(d) for d in values.ty.shape]
    if len(rows) != ndim:  # values broadcast to (n, *data.shape[1:]) first
        rows = [int(idx.ty.shape[0])] + [int(d) for d in data.ty.shape[1:]]
        values = bb.emit(relax.op.broadcast_to(values, rows))
    where = bb.emit(relax.op.broadcast_to(relax.op.reshape(idx, [rows[0]] + [1] * (ndim - 1)), rows))
    return bb.emit(relax.op.scatter_elements(data, where, values, 0, "add" if accumulate else "update"))


def _elu(node, importer):
    """aten.elu(x, alpha, scale, input_scale) = scale * (x if x > 0 else alpha * (exp(input_scale * x) - 1)).
    TVM's converter reads alpha only: `F.selu` (which torch decomposes to an elu with scale 1.0507)
    came out without its scale, 0.62 off on a unit normal input, silently. Plain ELUs go to TVM's
    converter (their tasks unchanged)."""
    from tvm import relax

    args = list(node.args) + [None] * 4
    alpha = args[1] if args[1] is not None else node.kwargs.get("alpha", 1.0)
    scale = args[2] if args[2] is not None else node.kwargs.get("scale", 1.0)
    input_scale = args[3] if args[3] is not None else node.kwargs.get("input_scale", 1.0)
    if scale == 1 and input_scale == 1:
        return importer._elu(node)
    x = importer.env[node.args[0]]
    dtype = x.ty.dtype
    inner = x if input_scale == 1 else relax.op.multiply(x, relax.const(float(input_scale), dtype))
    neg = relax.op.nn.relu(relax.op.subtract(relax.const(1.0, dtype), relax.op.exp(inner)))
    out = relax.op.add(relax.op.multiply(relax.const(-float(alpha), dtype), neg), relax.op.nn.relu(x))
    return importer.block_builder.emit(relax.op.multiply(out, relax.const(float(scale), dtype)) if scale != 1 else out)


def _hypot(node, importer):
    """aten.hypot, which TVM's importer lacks: sqrt(a^2 + b^2)."""
    from tvm import relax

    a, b = importer.env[node.args[0]], importer.env[node.args[1]]
    return importer.block_builder.emit(relax.op.sqrt(relax.op.add(relax.op.multiply(a, a), relax.op.multiply(b, b))))


def _grid_sampler(node, importer):
    """aten.grid_sampler_2d with PyTorch's grid, (N, H_out, W_out, 2), turned into the (N, 2, H_out,
    W_out) grid that Relax's grid_sample and TOPI's read: TVM's converter passed it as it was, and
    the output came out (N, C, W_out, 2) (the op battery's op_grid_sample)."""
    from tvm import relax

    args = list(node.args) + [0, 0, False][len(node.args) - 2:]
    data, grid = importer.env[node.args[0]], importer.env[node.args[1]]
    grid = importer.block_builder.emit(relax.op.permute_dims(grid, [0, 3, 1, 2]))
    return importer.block_builder.emit(relax.op.image.grid_sample(
        data, grid, method={0: "bilinear", 1: "nearest", 2: "bicubic"}.get(args[2], "bilinear"), layout="NCHW",
        padding_mode={0: "zeros", 1: "border", 2: "reflection"}.get(args[3], "zeros"), align_corners=bool(args[4])))


def _div_mode(node, importer):
    """aten.div.Tensor_mode (`//`, `torch.floor_divide`, `torch.div(rounding_mode=...)`) with a
    Python number of the tensor's kind as the divisor: the number in the tensor's dtype. TVM's
    converter made it int32 or float32 whatever the tensor, and an int64 tensor `// 3` failed to
    import (binary operators need one dtype). Everything else goes to TVM's converter."""
    from tvm import relax

    x, y = importer.env.get(node.args[0]), node.args[1]
    dtype = dtype_of(x) if isinstance(x, relax.Expr) else ""
    is_int = dtype.startswith(("int", "uint"))
    if not (isinstance(y, int | float) and not isinstance(y, bool) and dtype and is_int == isinstance(y, int)):
        return importer._div(node)
    y = relax.const(y, dtype)
    mode = node.args[2] if len(node.args) > 2 else node.kwargs.get("rounding_mode")
    if mode == "floor":
        return importer.block_builder.emit(relax.op.floor_divide(x, y))
    if mode == "trunc":  # an integer Div truncates (TIR's and LLVM's sdiv)
        div = relax.op.divide(x, y)
        return importer.block_builder.emit(div if is_int else relax.op.trunc(div))
    if mode is None and not is_int:
        return importer.block_builder.emit(relax.op.divide(x, y))
    return importer._div(node)  # an integer true division (PyTorch's is float): as TVM does it


def _pointwise_pieces(node) -> bool:
    """Whether every piece of a split node is read (through `getitem`) by pointwise ops only."""
    import operator

    import torch

    for user in node.users:
        if user.target is not operator.getitem:
            return False
        for reader in user.users:
            if reader.op != "call_function" or torch.Tag.pointwise not in getattr(reader.target, "tags", ()):
                return False
    return bool(node.users)


def _split(kind: str):
    """aten.split.Tensor / split_with_sizes / chunk as strided slices where its pieces feed
    pointwise ops (see the module); otherwise TVM's own converter."""

    def convert(node, importer):
        from tvm import relax

        if not _pointwise_pieces(node):
            return (importer._chunk if kind == "chunk" else importer._split)(node)
        x = importer.env[node.args[0]]
        dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
        shape = [int(d) for d in importer.shape_of(x)]
        dim = dim % len(shape)
        size, arg = shape[dim], node.args[1]
        if kind == "chunk":  # torch.chunk: pieces of ceil(size / chunks)
            step = -(-size // arg)
            sizes = [min(step, size - lo) for lo in range(0, size, step)]
        elif isinstance(arg, list | tuple):
            sizes = list(arg)
        else:
            sizes = [min(arg, size - lo) for lo in range(0, size, arg)]
        pieces, lo = [], 0
        for n in sizes:
            pieces.append(importer.block_builder.emit(relax.op.strided_slice(x, axes=[dim], begin=[lo], end=[lo + n])))
            lo += n
        return tuple(pieces)

    return convert


# TVM importer's name of an aten operator -> its converter (from_exported_program's custom_convert_map)
CONVERTERS = {"amax.default": _reduce("max"), "amin.default": _reduce("min"), "max.dim": _max_min_dim("max"),
              "min.dim": _max_min_dim("min"), "exp2.default": _exp2, "elu.default": _elu,
              "hypot.default": _hypot, "grid_sampler_2d.default": _grid_sampler, "div.Tensor_mode": _div_mode,
              "cumsum.default": _scan("cumsum"), "arange.start_step": _arange,
              "index_put.default": _index_put, "index_put_.default": _index_put, "cumprod.default": _scan("cumprod"),
              "split.Tensor": _split("split"), "split_with_sizes.default": _split("split"), "chunk.default": _split("chunk"),
              **{f"{kind}.default": _int_clamp(kind) for kind in ("clamp", "clamp_min", "clamp_max")}}
