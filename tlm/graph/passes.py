"""Graph passes: what tlm changes in TVM's Relax pipeline, and the one pass list that both task
extraction and the whole-model compile run (so tuned records always find their tasks).

- `prepare`: before fusion, target-independent: batch norm decomposed into arithmetic that fuses
  into convs, constant operands of commutative ops put second (frontend-independent hashes).
- `fuse_passes`: library dispatch, legalization with fast vectorizable math (`FAST_MATH`),
  op patterns, constant folding, FuseOps, FuseTIR.

Fast math. TVM legalizes erf, tanh, exp, sigmoid (and GELU, SiLU, softmax through them) and
`pow` to scalar libm calls (`erff`, `expf`, `powf`) that LLVM cannot vectorize, so their tasks
run one element at a time whatever the schedule. For float32 they are legalized instead to
TVM's own polynomial forms (`topi.fast_erf`, `fast_tanh`, `fast_exp`, `nn.fast_softmax`), and
`pow` with exponent 2, 3, 4 or 0.5 to multiplications or `sqrt`. Other dtypes keep TVM's default.
The PrimFunc names are TVM's own, so task names (and the sentences' op words) stay the same.
"""

from __future__ import annotations

import math
from typing import Any, Callable

def constants_last(mod):
    """Put the constant operand of commutative ops second: `b + x` -> `x + b`.

    Frontends differ here (torch.export emits `bias + matmul`, ONNX Gemm `matmul + bias`), and
    the operand order changes the fused TIR and so the task hash; one order makes the same
    model give the same tasks from either frontend.
    """
    import tvm
    from tvm import relax

    ops = [tvm.ir.Op.get(name) for name in ("relax.add", "relax.multiply")]
    Const = type(relax.const(0.0))  # relax constants (the class moved between TVM versions)

    @relax.expr_functor.mutator
    class Swap(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if (any(call.op.same_as(op) for op in ops) and len(call.args) == 2 and isinstance(call.args[0], Const)
                    and not isinstance(call.args[1], Const)):
                return relax.Call(call.op, [call.args[1], call.args[0]], call.attrs, call.ty_args)
            return call

    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mod[gv] = Swap().visit_expr(func)
    return mod


def prepare(mod):
    """Passes before fusion: batch norm becomes arithmetic that fuses into convs; operand order
    is made frontend-independent."""
    from tvm import relax

    mod = relax.transform.DecomposeOpsForInference()(mod)
    mod = relax.transform.CanonicalizeBindings()(mod)
    return constants_last(mod)


# ---------------------------------------------------------------------- fast math
def _default(op_name: str) -> Callable:
    """TVM's registered legalization of an op (used for dtypes other than float32)."""
    import tvm

    return tvm.ir.Op.get(op_name).get_attr("FLegalize")


def _float32(op_name: str, name: str, te_fn: Callable) -> Callable:
    """A legalization that calls `te_fn` on the op's one tensor argument for float32 inputs."""

    def legalize(bb, call):
        if call.args[0].ty.dtype != "float32":
            return _default(op_name)(bb, call)
        return bb.call_te(te_fn, call.args[0], primfunc_name_hint=name)

    return legalize


def _sigmoid(x):
    from tvm import te, topi, tirx

    one = tirx.const(1.0, x.dtype)
    return te.compute(x.shape, lambda *i: one / (one + topi.fast_exp(-x)(*i)), name="T_sigmoid", tag="elemwise")


def _gelu(x):
    from tvm import tirx, topi

    half = tirx.const(0.5, x.dtype)
    return x * (half + topi.fast_erf(x * tirx.const(0.5**0.5, x.dtype)) * half)


def _gelu_tanh(x):
    from tvm import tirx, topi

    c = tirx.const(math.sqrt(2.0 / math.pi), x.dtype)
    inner = c * x * (tirx.const(1.0, x.dtype) + tirx.const(0.044715, x.dtype) * x * x)
    return tirx.const(0.5, x.dtype) * x * (tirx.const(1.0, x.dtype) + topi.fast_tanh(inner))


def _silu(x):
    from tvm import topi

    return topi.multiply(x, _sigmoid(x))


def _softmax(bb, call):
    from tvm import topi

    if call.args[0].ty.dtype != "float32":
        return _default("relax.nn.softmax")(bb, call)
    return bb.call_te(topi.nn.fast_softmax, call.args[0], call.attrs.axis)


# pow(x, k) for these constant exponents: multiplications (or sqrt) instead of powf.
_POWERS: dict[float, Callable[[Any], Any]] = {
    2.0: lambda x: x * x,
    3.0: lambda x: x * x * x,
    4.0: lambda x: (x * x) * (x * x),
    0.5: lambda x: __import__("tvm").topi.sqrt(x),
}


def _power(bb, call):
    from tvm.relax.transform.legalize_ops.common import _try_convert_to_scalar_const

    base, exp = call.args
    k = _try_convert_to_scalar_const(exp, python_native=True)  # the exponent, if a scalar constant
    if base.ty.dtype != "float32" or not isinstance(k, (int, float)) or float(k) not in _POWERS:
        return _default("relax.power")(bb, call)
    return bb.call_te(_POWERS[float(k)], base, primfunc_name_hint="power")


def fast_math_legalization() -> dict[str, Callable]:
    """LegalizeOps' `customize_legalize_map`: op name -> legalization with fast float32 math."""
    from tvm import topi

    return {
        "relax.erf": _float32("relax.erf", "erf", topi.fast_erf),
        "relax.tanh": _float32("relax.tanh", "tir_tanh", topi.fast_tanh),
        "relax.exp": _float32("relax.exp", "tir_exp", topi.fast_exp),
        "relax.sigmoid": _float32("relax.sigmoid", "tir_sigmoid", _sigmoid),
        "relax.nn.gelu": _float32("relax.nn.gelu", "gelu", _gelu),
        "relax.nn.gelu_tanh": _float32("relax.nn.gelu_tanh", "gelu_tanh", _gelu_tanh),
        "relax.nn.silu": _float32("relax.nn.silu", "silu", _silu),
        "relax.nn.softmax": _softmax,
        "relax.power": _power,
    }


def fuse_passes(target, fast_math: bool = True) -> list:
    """The passes from a prepared Relax module to fused TIR tasks: what extraction runs, and
    what the whole-model compile runs before it applies the records (tlm.compiler.build).
    `fast_math=False` is TVM's own legalization (the benchmarks' "before")."""
    from tvm import relax
    from tvm.relax import pipeline

    try:
        dispatch = list(pipeline.library_dispatch_passes(target))
    except (ValueError, AttributeError):
        dispatch = []
    return [
        *dispatch,
        relax.transform.LegalizeOps(customize_legalize_map=fast_math_legalization() if fast_math else None),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ]
