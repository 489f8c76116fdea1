"""Conv layout passes (issue 13, item 4), run by `tlm.graph.passes.prepare` before fusion.

- `fold_pads`: `conv2d(pad(x))` -> `conv2d(x, padding + pad)` for zero padding of the spatial
  axes (TF-style "same" padding, as in Hugging Face's MobileNetV2, writes every conv so). The
  pad otherwise fuses into the previous conv's task as an epilogue that writes a larger, mostly
  constant tensor (and its border is easy to get wrong), and it blocks layout conversion.
- `convert_conv_layout`: 2-D convs to NHWC activations and HWIO kernels (the layout of the
  paper's data set), 1-D convs to NWC and WIO, with Relax's ConvertLayout; `clip` is first written as `minimum(maximum())`,
  which ConvertLayout knows how to carry through (it stops at `clip`, leaving a transpose pair
  around every ReLU6). Constant weights are transposed at compile time (FoldConstant).

What the layout conversion must not break (issue 48). ConvertLayout carries NHWC on through
every layout-aware op, also into ones that nothing legalizes in NHWC: a transposed conv
(`conv2d_transpose`, which TOPI lowers only as NCHW/IOHW) came out NHWC/IOHW and stopped the
build ("CodeGenVM cannot emit this Relax operator"); `PINNED` keeps such ops in a layout that
legalizes, with transposes around them. TVM 0.27's layout inference of `squeeze`,
`permute_dims` and `stack` indexes with their axes as written: a negative squeeze axis (Swin's
pooler, `AdaptiveAvgPool1d` then `flatten`) writes out of bounds (`std::bad_alloc`), a negative
permutation is an "Invalid layout", and a squeeze axis of a non-unit dim (torch's `squeeze()`)
an "undefined bijective layout"; `normalize_axes` writes them in the form it handles. Should
the conversion still fail, or put an op in a layout that does not legalize, the model keeps its
NCHW convs, with one `tlm: warning:` line on stderr naming the operator.

`CONV_LAYOUT` is the default, chosen by measurement: `layout` in bench/README.md (NCHW vs NHWC at
the same MetaSchedule budget, resnet_50 and mobilenet_v2). 1-D convs follow since 2026-11-29
(extraction version 6): in NCW a program vectorizes over output positions, which a strided conv
reads a stride apart (gathers), and its channels (32-64 in audio front ends) are too few to
split; in NWC it vectorizes over the channels. The outside battery's six models with 1-D convs
ran 0.99-6.63x as fast whole at budget 0, 2.25x geomean (znver5; `conv1d_layout` in bench/README.md).
"""

from __future__ import annotations

import sys

CONV_LAYOUT = "NHWC"
# name -> {conv op: [data layout, kernel layout]}; "NHWC" names the 1-D convs' NWC too.
LAYOUTS = {"NCHW": None, "NHWC": {"relax.nn.conv2d": ["NHWC", "HWIO"], "relax.nn.conv1d": ["NWC", "WIO"]}}
# Layout-aware ops kept in the (data, kernel) layout their legalization supports.
PINNED = {"relax.nn.conv2d_transpose": ["NCHW", "IOHW"], "relax.nn.conv1d_transpose": ["NCW", "IOW"]}


def _int_list(values) -> list[int]:
    return [int(v) for v in values]


def calls_op(func, op) -> bool:
    """Whether a Relax function calls `op` anywhere."""
    from tvm import relax

    found = []
    relax.analysis.post_order_visit(func, lambda e: found.append(1) if isinstance(e, relax.Call)
                                    and e.op.same_as(op) else None)
    return bool(found)


def _rewrite_calls(mod, op_name: str, rewrite):
    """Every Relax function's calls of `op_name` replaced by `rewrite(mutator, call)` (the call
    itself to leave it), bottom-up; functions without such a call are left as they are."""
    import tvm
    from tvm import relax

    op = tvm.ir.Op.get(op_name)

    @relax.expr_functor.mutator
    class Rewrite(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            return rewrite(self, call) if isinstance(call, relax.Call) and call.op.same_as(op) else call

    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function) and calls_op(func, op):
            mod[gv] = Rewrite().visit_expr(func)
    return mod


def fold_pads(mod):
    """Zero padding of a conv2d's spatial axes becomes the conv's own padding."""
    import tvm
    from tvm import relax

    pad_op = tvm.ir.Op.get("relax.nn.pad")

    def fold(mutator, call):
        x = call.args[0]
        bound = mutator.lookup_binding(x) if isinstance(x, relax.Var) else None
        if not (isinstance(bound, relax.Call) and bound.op.same_as(pad_op)):
            return call
        a, c = bound.attrs, call.attrs
        if str(a.pad_mode) != "constant" or float(a.pad_value) != 0.0:
            return call
        layout = str(c.data_layout)
        width = _int_list(a.pad_width)
        if len(layout) != 4 or len(width) != 8:
            return call
        h, w = layout.index("H"), layout.index("W")
        if any(width[2 * i] or width[2 * i + 1] for i in range(4) if i not in (h, w)):
            return call
        top, left, bottom, right = _int_list(c.padding)
        padding = [top + width[2 * h], left + width[2 * w], bottom + width[2 * h + 1], right + width[2 * w + 1]]
        out_dtype = str(c.out_dtype) if str(c.out_dtype) not in ("", "void") else None
        return relax.op.nn.conv2d(
            bound.args[0], call.args[1], strides=_int_list(c.strides), padding=padding,
            dilation=_int_list(c.dilation), groups=int(c.groups), data_layout=layout,
            kernel_layout=str(c.kernel_layout), out_layout=str(c.out_layout), out_dtype=out_dtype)

    mod = _rewrite_calls(mod, "relax.nn.conv2d", fold)
    return relax.transform.DeadCodeElimination()(relax.transform.CanonicalizeBindings()(mod))


def clip_as_minmax(mod):
    """`clip(x, lo, hi)` -> `minimum(maximum(x, lo), hi)` (same values; a layout-agnostic form)."""
    from tvm import relax

    def rewrite(mutator, call):
        x = call.args[0]
        dtype = str(getattr(x.ty.dtype, "dtype", x.ty.dtype))
        if dtype.startswith(("int", "uint")):  # integer bounds as integers; a bound at (or past) the limit is none
            import numpy as np

            info, (lo, hi) = np.iinfo(dtype), (float(v.value) for v in call.args[1:3])
            if lo > info.min:
                x = mutator.builder_.emit(relax.op.maximum(x, relax.const(int(np.ceil(lo)), dtype)))
            return relax.op.minimum(x, relax.const(int(np.floor(hi)), dtype)) if hi < info.max else x
        lo, hi = (relax.const(float(v.value), x.ty.dtype) for v in call.args[1:3])
        return relax.op.minimum(mutator.builder_.emit(relax.op.maximum(x, lo)), hi)

    return _rewrite_calls(mod, "relax.clip", rewrite)


def static_shape(expr) -> tuple | None:
    """An expression's shape as ints, or None when unknown or symbolic (also tlm.graph.passes, .widths)."""
    shape = getattr(expr.ty, "shape", None)
    try:
        return tuple(int(v) for v in shape.values)
    except (AttributeError, TypeError):  # unknown or symbolic shape
        return None


def normalize_axes(mod):
    """Non-negative axes for `squeeze`, `permute_dims` and `stack` (same values), and only the
    unit axes of a `squeeze`: the forms TVM 0.27's layout inference handles. Calls already in
    that form are left as they are."""
    from tvm import relax

    def squeeze(mutator, call):
        x, axis = call.args[0], call.attrs.axis
        shape = static_shape(x)
        if axis is None or shape is None:
            return call
        axes, n = [int(a) for a in axis], len(shape)
        if all(0 <= a < n and shape[a] == 1 for a in axes):
            return call
        keep = sorted({a % n for a in axes if shape[a % n] == 1})
        return relax.op.squeeze(x, keep) if keep else x  # no unit axis listed: squeeze removes none

    def permute(mutator, call):
        axes = call.attrs.axes
        if axes is None or all(int(a) >= 0 for a in axes):
            return call
        return relax.op.permute_dims(call.args[0], [int(a) % len(axes) for a in axes])

    def stack(mutator, call):
        axis, ndim = call.attrs.axis, getattr(call.ty, "ndim", -1)
        if axis is None or int(axis) >= 0 or ndim < 0:
            return call
        return relax.op.stack(call.args[0], int(axis) % ndim)

    for name, rewrite in (("relax.squeeze", squeeze), ("relax.permute_dims", permute), ("relax.stack", stack)):
        mod = _rewrite_calls(mod, name, rewrite)
    return mod


def _op_name(call) -> str:
    return str(getattr(call.op, "name", None) or getattr(call.op, "name_hint", "?"))


def _layouts(mod) -> dict[tuple[str, str], object]:
    """(op name, data layout) -> one call, for every call of an op with a layout attribute."""
    from tvm import relax

    found: dict = {}

    def visit(e):
        if isinstance(e, relax.Call) and e.attrs is not None:
            lay = getattr(e.attrs, "data_layout", None) or getattr(e.attrs, "layout", None)
            if isinstance(lay, str):
                found.setdefault((_op_name(e), str(lay)), e)

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return found


def _legalizes(call) -> bool:
    """Whether LegalizeOps lowers this call (its variable arguments made parameters)."""
    from tvm import relax

    bb = relax.BlockBuilder()
    params = [relax.Var(f"a{i}", a.ty) for i, a in enumerate(call.args) if isinstance(a, relax.Var)]
    it = iter(params)
    args = [next(it) if isinstance(a, relax.Var) else a for a in call.args]
    try:
        with bb.function("main", params):
            out = bb.emit(relax.Call(call.op, args, call.attrs, call.ty_args))
            bb.emit_func_output(out)
        return not calls_op(relax.transform.LegalizeOps()(bb.get())["main"], call.op)
    except Exception:  # a call this probe cannot rebuild alone: left to the build to judge
        return True


def _unconverted(mod, layout: str, reason: str):
    print(f"tlm: warning: convs left in their original layout, not {layout}: {reason}", file=sys.stderr)
    sys.stderr.flush()
    return mod


def convert_conv_layout(mod, layout: str = CONV_LAYOUT):
    """Convs in `layout` ("NCHW": unchanged; "NHWC": 2-D convs NHWC/HWIO, 1-D NWC/WIO); ops in
    `PINNED` in their legal layout. A model that TVM's ConvertLayout fails on, or whose
    conversion leaves an op that does not legalize, is returned unchanged (a warning on stderr)."""
    import tvm
    from tvm import relax

    from tlm.errors import TlmError, first_line, quiet_stderr

    if layout not in LAYOUTS:
        raise TlmError(f"unknown conv layout {layout!r} (one of {', '.join(LAYOUTS)})")
    convs = [tvm.ir.Op.get(name) for name in LAYOUTS[layout] or ()]
    if not any(isinstance(f, relax.Function) and calls_op(f, conv)
               for f in mod.functions.values() for conv in convs):
        return mod  # models without a conv keep their tasks (and hashes) as they are
    original = mod
    mod = normalize_axes(clip_as_minmax(mod))
    desired = {**LAYOUTS[layout], **PINNED}
    last: list[str] = []

    def desired_for(call):  # TVM calls this for each call in turn: the last one names a failure
        last[:] = [_op_name(call)]
        return desired

    try:
        with quiet_stderr():
            converted = relax.transform.ConvertLayout(desired, desired_for)(mod)
    except Exception as err:  # TVM's InternalError / TVMError (std::bad_alloc, failed checks)
        at = f" at {last[0]}" if last else ""
        return _unconverted(original, layout, f"TVM's ConvertLayout failed{at} ({first_line(err, limit=120)})")
    before = _layouts(mod)
    bad = sorted({op for (op, lay), call in _layouts(converted).items()
                  if (op, lay) not in before and op not in desired and not _legalizes(call)})
    if bad:
        return _unconverted(original, layout, f"{', '.join(bad)} would not legalize in it")
    with quiet_stderr():  # TVM's warnings while it folds constants (e.g. `take` of Swin's position bias)
        return relax.transform.FoldConstant()(converted)
