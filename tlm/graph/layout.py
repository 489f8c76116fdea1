"""Conv layout passes (issue 13, item 4), run by `tlm.graph.passes.prepare` before fusion.

- `fold_pads`: `conv2d(pad(x))` -> `conv2d(x, padding + pad)` for zero padding of the spatial
  axes (TF-style "same" padding, as in Hugging Face's MobileNetV2, writes every conv so). The
  pad otherwise fuses into the previous conv's task as an epilogue that writes a larger, mostly
  constant tensor (and its border is easy to get wrong), and it blocks layout conversion.
- `convert_conv_layout`: 2-D convs to NHWC activations and HWIO kernels (the layout of the
  paper's data set) with Relax's ConvertLayout; `clip` is first written as `minimum(maximum())`,
  which ConvertLayout knows how to carry through (it stops at `clip`, leaving a transpose pair
  around every ReLU6). Constant weights are transposed at compile time (FoldConstant).

`CONV_LAYOUT` is the default, chosen by measurement: `bench/results/layout.md` (NCHW vs NHWC at
the same MetaSchedule budget, resnet_50 and mobilenet_v2).
"""

from __future__ import annotations

CONV_LAYOUT = "NHWC"
LAYOUTS = {"NCHW": None, "NHWC": ["NHWC", "HWIO"]}


def _int_list(values) -> list[int]:
    return [int(v) for v in values]


def _calls(func, op) -> bool:
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
        if isinstance(func, relax.Function) and _calls(func, op):
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
        lo, hi = (relax.const(float(v.value), x.ty.dtype) for v in call.args[1:3])
        return relax.op.minimum(mutator.builder_.emit(relax.op.maximum(x, lo)), hi)

    return _rewrite_calls(mod, "relax.clip", rewrite)


def convert_conv_layout(mod, layout: str = CONV_LAYOUT):
    """2-D convs in `layout` ("NCHW": unchanged; "NHWC": NHWC data, HWIO kernels)."""
    import tvm
    from tvm import relax

    from tlm.errors import TlmError

    if layout not in LAYOUTS:
        raise TlmError(f"unknown conv layout {layout!r} (one of {', '.join(LAYOUTS)})")
    conv = tvm.ir.Op.get("relax.nn.conv2d")
    if LAYOUTS[layout] is None or not any(isinstance(f, relax.Function) and _calls(f, conv)
                                          for f in mod.functions.values()):
        return mod  # models without a 2-D conv keep their tasks (and hashes) as they are
    mod = relax.transform.ConvertLayout({"relax.nn.conv2d": LAYOUTS[layout]})(clip_as_minmax(mod))
    return relax.transform.FoldConstant()(mod)
