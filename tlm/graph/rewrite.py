"""Graph rewrites that give one model the same tasks from either door (PyTorch or ONNX).

ONNX before opset 20 has no Gelu: `torch.onnx.export` writes GELU as `x * 0.5 * (1 + erf(x /
sqrt(2)))`, and TVM's ONNX importer keeps the five elementwise ops. Through torch.export the same
model has `R.nn.gelu`, which tlm's fast-math legalization computes with a polynomial
(tlm.graph.passes) where the ONNX chain calls the exact `erf`. `fold_gelu` turns the chain back
into `R.nn.gelu` (in any operand order, `/ sqrt(2)` or `* 1/sqrt(2)`); anything else is left as
it was.

The same holds for matmuls: torch.export writes `Linear` on an N-D input as a 2-D matmul
between reshapes ((1, 16, 16, 384) -> (256, 384) @ (384, 96)), while ONNX's MatMul keeps the
leading axes ((1, 16, 16, 384) @ (384, 96)). The N-D form is a different task, which the model
schedules badly (a ConvNeXt-style CNN's MLP ran 16-24x slower from the ONNX door at budget 0,
issue 48 item 6). `flatten_matmuls` gives it the 2-D form of the PyTorch door. Batched matmuls
likewise: torch.export writes a 4-D `q @ k^T` as one 3-D batch matmul over the flattened leading
axes ((16, 3, 16, 16) -> (48, 16, 16)), ONNX keeps the four axes (Swin's window attention ran
4-6x slower per matmul from the ONNX door at budget 0); they get the 3-D form.

TVM's ONNX importer writes `Clip` (ReLU6 in MobileNets) as two `call_tir`s of TOPI's maximum and
minimum, which the layout pass cannot see through: each conv got a transpose to NCHW, the clip and
a transpose back as tasks of their own, where the PyTorch door's `R.clip` fuses into the conv.
`lift_min_max` gives those calls back as `R.maximum` / `R.minimum` (only where the called
function is exactly TOPI's, checked structurally).

ONNX stores a normalization's epsilon as float32 (1e-12 arrives as 9.99999996e-13), torch.export
as the Python float: two tasks for one layer norm, and a first choice of each (an ELECTRA's
layer norms ran 10x slower from the ONNX door at budget 0). `round_epsilons` gives both the
shortest decimal of the same float32, which is what the kernel computes with either way.
"""

from __future__ import annotations

import math

_SQRT2 = math.sqrt(2.0)


def _scalar(expr) -> float | None:
    """The value of a scalar (or one-element) float constant, else None."""
    from tvm.ir.expr import Constant

    if not isinstance(expr, Constant):
        return None
    data = expr.value.numpy()
    return float(data.reshape(-1)[0]) if data.size == 1 and data.dtype.kind == "f" else None


def _near(value: float | None, want: float) -> bool:
    return value is not None and abs(value - want) <= 1e-5 * abs(want)


def _gelu_pattern():
    """(pattern, x, the erf's divisor pattern, scale, one, half): 0.5 * x * (1 + erf(x / s)) or
    (... erf(x * s) ...) in its written operand orders."""
    from tvm.relax.dpl import is_const, is_op, wildcard

    x, scale, one, half = wildcard(), is_const(), is_const(), is_const()
    divided = is_op("relax.divide")(x, scale)
    scaled = divided | is_op("relax.multiply")(x, scale) | is_op("relax.multiply")(scale, x)
    erf = is_op("relax.erf")(scaled)
    inner = is_op("relax.add")(erf, one) | is_op("relax.add")(one, erf)
    x_inner = is_op("relax.multiply")(x, inner) | is_op("relax.multiply")(inner, x)
    half_x = is_op("relax.multiply")(x, half) | is_op("relax.multiply")(half, x)
    pattern = (is_op("relax.multiply")(x_inner, half) | is_op("relax.multiply")(half, x_inner)
               | is_op("relax.multiply")(half_x, inner) | is_op("relax.multiply")(inner, half_x))
    return pattern, x, divided, scale, one, half


def fold_gelu(mod):
    """`R.nn.gelu(x)` for every exact-GELU chain of elementwise ops in `mod` (checked constants)."""
    from tvm import relax
    from tvm.relax.dpl import rewrite_call

    pattern, x, divided, scale, one, half = _gelu_pattern()

    def rewriter(expr, matches):
        want = _SQRT2 if divided in matches else 1.0 / _SQRT2
        if not (_near(_scalar(matches[scale]), want) and _near(_scalar(matches[one]), 1.0)
                and _near(_scalar(matches[half]), 0.5)):
            return expr
        return relax.op.nn.gelu(matches[x])

    def per_func(func):
        new = rewrite_call(pattern, rewriter, func)
        return None if new.same_as(func) else new

    return per_function(mod, per_func)


def per_function(mod, rewrite):
    """`mod` with each Relax function replaced by `rewrite(func)` where that is not None; `mod`
    itself when nothing changed (callers tell "nothing to do" by identity)."""
    from tvm import relax

    out = mod
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function) and (new := rewrite(func)) is not None:
            out = out.clone() if out is mod else out
            out[gv] = new
    return out


def _mutate(mod, mutator):
    """`per_function` with a fresh `mutator(mod)` per function, whose `changed` says whether its
    visit changed anything."""

    def per_func(func):
        visitor = mutator(mod)
        new = visitor.visit_expr(func)
        return new if visitor.changed else None

    return per_function(mod, per_func)


def flatten_matmuls(mod):
    """`reshape(matmul(reshape(x, (M, K)), w), (..., N))` for every `matmul(x, w)` with an N-D
    (N >= 3) `x` of static shape and a 2-D `w`: the form torch.export gives `Linear`; and
    `reshape(matmul(reshape(x, (B, M, K)), reshape(w, (B, K, N))), (..., M, N))` for an N-D
    (N >= 4) batched matmul whose operands have the same leading axes: torch.export's `bmm`."""
    from tvm import relax

    from tlm.graph.layout import static_shape

    @relax.expr_functor.mutator
    class Flatten(relax.PyExprMutator):
        changed = False

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if str(getattr(call.op, "name", "")) != "relax.matmul":
                return call
            x, w = call.args
            xs, ws = static_shape(x), static_shape(w)
            if xs is None or ws is None or len(xs) < 3:
                return call
            if len(ws) == 2:
                flat = self.builder_.emit(relax.op.reshape(x, (math.prod(xs[:-1]), xs[-1])))
                out = self.builder_.emit(relax.op.matmul(flat, w, out_dtype=call.attrs.out_dtype))
                self.changed = True
                return relax.op.reshape(out, (*xs[:-1], ws[1]))
            if len(xs) >= 4 and len(ws) == len(xs) and list(xs[:-2]) == list(ws[:-2]):
                batch = math.prod(xs[:-2])
                fx = self.builder_.emit(relax.op.reshape(x, (batch, *xs[-2:])))
                fw = self.builder_.emit(relax.op.reshape(w, (batch, *ws[-2:])))
                out = self.builder_.emit(relax.op.matmul(fx, fw, out_dtype=call.attrs.out_dtype))
                self.changed = True
                return relax.op.reshape(out, (*xs[:-1], ws[-1]))
            return call

    return _mutate(mod, Flatten)


def lift_min_max(mod):
    """`R.maximum(x, c)` / `R.minimum(x, c)` for every `call_tir` of a function that is exactly
    TOPI's elementwise maximum / minimum of `x` and a scalar `c` (TVM's ONNX `Clip`: `c` is the
    bound, NaN-guarded by a `where` that constant folding removes later); the
    functions no longer called are dropped. A module with nothing to change is returned as is."""
    import tvm
    from tvm import relax, te, tirx, topi
    from tvm_ffi.structural import structural_equal

    from tlm.graph.layout import static_shape

    call_tir = tvm.ir.Op.get("relax.call_tir")
    ops = {"maximum": (topi.maximum, relax.op.maximum), "minimum": (topi.minimum, relax.op.minimum)}

    def lifted(call):
        gv, args = call.args[0], call.args[1]
        kind = ops.get(str(getattr(gv, "name_hint", "")).rstrip("0123456789"))
        fields = getattr(args, "fields", None)
        if kind is None or fields is None or len(fields) != 2:
            return None
        shapes = [static_shape(f) for f in fields]
        dtype = getattr(fields[0].ty, "dtype", None)
        if None in shapes or shapes[1] != () or dtype != getattr(fields[1].ty, "dtype", None):
            return None
        x, c = (te.placeholder([tirx.IntImm("int64", d) for d in s], dtype, name=n) for s, n in zip(shapes, "AB"))
        want = te.create_prim_func([x, c, kind[0](x, c)]).without_attr("global_symbol")
        if static_shape(call) != shapes[0] or not structural_equal(want, mod[gv], map_free_vars=True):
            return None
        return kind[1](*fields)

    @relax.expr_functor.mutator
    class Lift(relax.PyExprMutator):
        changed = False

        def visit_call_(self, call):
            call = super().visit_call_(call)
            new = lifted(call) if call.op.same_as(call_tir) else None
            self.changed |= new is not None
            return call if new is None else new

    out = _mutate(mod, Lift)
    return out if out is mod else relax.transform.DeadCodeElimination()(out)


_NORMS = ("relax.nn.layer_norm", "relax.nn.group_norm", "relax.nn.rms_norm")


def _short(eps: float) -> float:
    """The shortest decimal that is the same float32 as `eps` (1e-12 for 9.99999996e-13)."""
    import numpy as np

    return float(str(np.float32(eps)))  # numpy prints a float32 as its shortest unique decimal


def round_epsilons(mod):
    """Layer, group and RMS norms with `_short` epsilons; a module with nothing to change is returned as is."""
    from tvm import relax

    @relax.expr_functor.mutator
    class Round(relax.PyExprMutator):
        changed = False

        def visit_call_(self, call):
            call = super().visit_call_(call)
            name = str(getattr(call.op, "name", ""))
            if name not in _NORMS or (eps := _short(float(call.attrs.epsilon))) == float(call.attrs.epsilon):
                return call
            a = call.attrs
            self.changed = True
            if name == "relax.nn.layer_norm":
                return relax.op.nn.layer_norm(*call.args, axes=list(a.axes), epsilon=eps, center=a.center, scale=a.scale)
            if name == "relax.nn.group_norm":
                return relax.op.nn.group_norm(*call.args, num_groups=a.num_groups, channel_axis=a.channel_axis,
                                              axes=list(a.axes), epsilon=eps, center=a.center, scale=a.scale)
            return relax.op.nn.rms_norm(*call.args, axes=list(a.axes), epsilon=eps)

    return _mutate(mod, Round)


# Elementwise aten ops whose result takes PyTorch's promoted dtype (int64 / 4 is float32).
_PROMOTING = frozenset({"add", "sub", "mul", "div", "true_divide", "pow", "rsub", "maximum", "minimum",
                        "remainder", "fmod", "atan2", "hypot", "where", "clamp", "lerp"})


def promote_torch_arithmetic(exported) -> int:
    """Casts before the arithmetic of a torch.export graph whose tensor operands differ from
    its result's dtype (PyTorch's type promotion); returns how many were inserted.

    TVM's importer computes `aten.div` (and the other binary ops) in the dtype of their operands:
    an int64 tensor divided by 4 came out int64 (`x / 4` truncated, where PyTorch gives float32),
    silently, and `torch.log(pos / mid)` on int64 positions (DeBERTa's relative buckets) failed
    to import. Each operand is cast to the dtype PyTorch computes the result in, as PyTorch does."""
    import torch

    graph = exported.graph_module.graph
    count = 0
    for node in list(graph.nodes):
        schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
        out = node.meta.get("val")
        if schema is None or schema.name.split("::")[-1] not in _PROMOTING or not isinstance(out, torch.Tensor):
            continue
        args = list(node.args)
        for i, arg in enumerate(args):
            val = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
            if not isinstance(val, torch.Tensor) or val.dtype == out.dtype or val.dtype == torch.bool and i == 0 \
                    and schema.name.endswith("where"):
                continue
            with graph.inserting_before(node):
                cast = graph.call_function(torch.ops.aten._to_copy.default, (arg,), {"dtype": out.dtype})
            with val.fake_mode if hasattr(val, "fake_mode") else _nullcontext():
                cast.meta["val"] = val.to(out.dtype)
            args[i] = cast
            count += 1
        node.args = tuple(args)
    if count:
        graph.lint()
        exported.graph_module.recompile()
    return count


def _nullcontext():
    import contextlib

    return contextlib.nullcontext()
