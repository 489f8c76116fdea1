"""Graph passes: what tlm changes in TVM's Relax pipeline, and the one pass list that both task
extraction and the whole-model compile run (so tuned records always find their tasks).

- `prepare`: before fusion, target-independent: batch norm decomposed into arithmetic that fuses
  into convs (or, opted in, folded into their weights: tlm.graph.batchnorm), zero pads folded into convs and convs in NHWC (tlm.graph.layout), constant operands of commutative ops put second (frontend-independent hashes),
  elementwise ops moved before reshapes so they fuse into the matmul before (`sink_reshapes`),
  matmuls of odd widths split into a round part and a padded tail (tlm.graph.widths).
- `fuse_passes`: library dispatch, legalization with fast vectorizable math (`FAST_MATH`),
  op patterns, constant folding, FuseOps, FuseTIR, then `layout_free` (pre-packed weights).

Pre-packed weights. `layout_free` marks the constant weights of the tasks in `PREPACK_OPS`
layout-free (what TVM's AttachAttrLayoutFreeBuffers does, names kept), so that MetaSchedule's RewriteLayout
postprocessor packs them in the layout the chosen schedule reads best; the measurer checks such
programs through their packing (tlm.measure.workers) and the whole-model compile splits the
packing out and folds it into the constants (`prepack_fold`), so a user passes inputs as before.
Other tasks carry no mark: their hashes (and records) are those of extraction version 2.

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

from tlm.graph.layout import static_shape

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


# Elementwise ops that commute with a reshape (binary ones: see Sink.operand for the other side).
_UNARY = ("relax.nn.gelu", "relax.nn.gelu_tanh", "relax.nn.relu", "relax.nn.silu", "relax.tanh", "relax.sigmoid",
          "relax.erf", "relax.exp", "relax.sqrt", "relax.rsqrt", "relax.negative", "relax.abs", "relax.clip")
_BINARY = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.power", "relax.maximum",
           "relax.minimum")


def sink_reshapes(mod):
    """Move elementwise ops before the reshapes they follow: `f(reshape(y))` -> `reshape(f(y))`.

    torch.export writes `Linear` on a 3-D input (and GPT-2 its Conv1D) as reshape -> matmul ->
    add -> reshape, so an activation after it follows a reshape, and FuseOps, which fuses only
    elementwise ops into a matmul's epilogue, leaves it a task of its own. Once the activation
    is computed before the reshape it joins the matmul's task. Applied op by op, so a whole
    elementwise chain (GPT-2's tanh GELU, a residual add) moves; `reshape(reshape(y))` then
    becomes one reshape, or none when it restores y's shape.
    """
    import tvm
    from tvm import relax

    unary = [tvm.ir.Op.get(n) for n in _UNARY]
    binary = [tvm.ir.Op.get(n) for n in _BINARY]
    reshape_op = tvm.ir.Op.get("relax.reshape")

    def is_op(expr, ops) -> bool:
        return isinstance(expr, relax.Call) and any(expr.op.same_as(o) for o in ops)

    @relax.expr_functor.mutator
    class Sink(relax.PyExprMutator):
        def reshaped(self, expr):
            """(y, target shape) when `expr` is a variable bound to reshape(y, shape)."""
            bound = self.lookup_binding(expr) if isinstance(expr, relax.Var) else None
            if is_op(bound, [reshape_op]) and static_shape(bound.args[0]) is not None and static_shape(expr) is not None:
                return bound.args[0], bound.args[1]
            return None

        def operand(self, y, z, out: tuple):
            """The other operand `z` of `op(reshape(y) -> out, z)` recast for `op(y, z')`, or None.

            z' is z reshaped to y's shape when z has the output's shape (a residual add), else z
            without the leading dims the reshape changes, where z must broadcast (size 1); e.g.
            an attention mask [1, 1, S, S] against scores reshaped [H, S, S] -> [1, H, S, S]."""
            ys, zs = static_shape(y), static_shape(z)
            if ys is None or zs is None:
                return None
            if zs == out:
                return z if zs == ys else self.builder_.emit(relax.op.reshape(z, ys))
            k = 0  # trailing dims that the reshape keeps
            while k < min(len(out), len(ys)) and out[-1 - k] == ys[-1 - k]:
                k += 1
            lead = len(zs) - k
            if lead > 0 and any(d != 1 for d in zs[:lead]):
                return None
            return z if lead <= 0 else self.builder_.emit(relax.op.reshape(z, zs[lead:]))

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if is_op(call, [reshape_op]) and (inner := self.reshaped(call.args[0])) is not None:
                y = inner[0]  # reshape(reshape(y)): one reshape, or y itself
                return y if static_shape(y) == static_shape(call) else relax.op.reshape(y, call.args[1])
            if is_op(call, unary) and (r := self.reshaped(call.args[0])) is not None:
                # the other arguments (clip's min and max) are scalars: they stay as they are
                inner = self.builder_.emit(relax.Call(call.op, [r[0], *call.args[1:]], call.attrs, call.ty_args))
                return relax.op.reshape(inner, r[1])
            if is_op(call, binary) and len(call.args) == 2:
                a, b = call.args
                ra, rb = self.reshaped(a), self.reshaped(b)
                out = static_shape(call)
                if ra and rb and static_shape(ra[0]) == static_shape(rb[0]) and static_shape(a) == static_shape(b):
                    args, shape = [ra[0], rb[0]], ra[1]
                elif ra and static_shape(a) == out and (z := self.operand(ra[0], b, out)) is not None:
                    args, shape = [ra[0], z], ra[1]
                elif rb and static_shape(b) == out and (z := self.operand(rb[0], a, out)) is not None:
                    args, shape = [z, rb[0]], rb[1]
                else:
                    return call
                inner = self.builder_.emit(relax.Call(call.op, args, call.attrs, call.ty_args))
                return relax.op.reshape(inner, shape)
            return call

    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mod[gv] = Sink().visit_expr(func)
    return relax.transform.DeadCodeElimination()(relax.transform.CanonicalizeBindings()(mod))


def prepare(mod, sink: bool = True, conv_layout: str | None = None, fold_bn: bool = False):
    """Passes before fusion: batch norms become arithmetic that fuses into the convs before them
    (`fold_bn=True`: folded into those convs' weights instead, tlm.graph.batchnorm, off until the
    shipped models are refit on such tasks); zero pads fold into the convs after them and convs take `conv_layout` (default
    `tlm.graph.layout.CONV_LAYOUT`; tlm.graph.layout); operand order is made
    frontend-independent; elementwise ops move before reshapes (into matmul epilogues;
    `sink=False` leaves them, for the benchmarks' "before"); matmuls of odd widths computed as a
    round part and a padded tail (tlm.graph.widths); an ONNX export's
    `Clip` is `maximum` / `minimum` again and its exact-GELU chain `gelu` and its N-D matmuls 2-D (tlm.graph.rewrite); transposed 2-D convs become one
    sub-pixel conv2d and a depth-to-space, before the layout pass (tlm.graph.deconv)."""
    from tvm import relax

    from tlm.graph.batchnorm import fold_batch_norms
    from tlm.graph.deconv import subpixel_conv_transpose
    from tlm.graph.layout import CONV_LAYOUT, convert_conv_layout, fold_pads
    from tlm.graph.widths import split_odd_widths
    from tlm.graph.rewrite import flatten_matmuls, fold_gelu, lift_min_max, round_epsilons

    mod = relax.transform.DecomposeOpsForInference()(fold_batch_norms(mod) if fold_bn else mod)
    mod = round_epsilons(flatten_matmuls(fold_gelu(lift_min_max(relax.transform.CanonicalizeBindings()(mod)))))
    mod = subpixel_conv_transpose(mod)
    mod = convert_conv_layout(fold_pads(mod), conv_layout or CONV_LAYOUT)
    mod = constants_last(mod)
    mod = sink_reshapes(mod) if sink else mod
    return split_odd_widths(mod)


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
    return bb.call_te(topi.nn.fast_softmax, call.args[0], call.attrs.axis, primfunc_name_hint="softmax")


# pow(x, k) for these constant exponents: multiplications (or sqrt) instead of powf.
def _sqrt(x):
    from tvm import topi

    return topi.sqrt(x)


_POWERS: dict[float, Callable[[Any], Any]] = {
    2.0: lambda x: x * x,
    3.0: lambda x: x * x * x,
    4.0: lambda x: (x * x) * (x * x),
    0.5: _sqrt,
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


# Operator words of the tasks whose weights are pre-packed (measured paired: `prepack` in bench/README.md;
# convs gained 1.00-1.02x there, so they are not packed).
PREPACK_OPS = frozenset({"matmul", "dense", "batch_matmul"})


def layout_free(ops: frozenset[str] = PREPACK_OPS):
    """A module pass: the constant arguments of fused TIR functions whose name holds one of `ops`
    become layout-free (`layout_free_buffers`, constant at every call site). TVM's own
    AttachAttrLayoutFreeBuffers marks every function and renames them all (`matmul2` ->
    `matmul21`); this one keeps the names and leaves other functions as they were."""
    import tvm
    from tvm import relax

    from tlm.graph.tasks import op_names

    call_tir = tvm.ir.Op.get("relax.call_tir")

    @tvm.transform.module_pass(opt_level=0, name="tlm.LayoutFree")
    def _pass(mod, _ctx):
        free: dict = {}  # GlobalVar -> argument indices constant at every call so far
        for func in mod.functions.values():
            if not isinstance(func, relax.Function):
                continue
            for block in getattr(func.body, "blocks", []):
                for binding in block.bindings:
                    call = binding.value
                    if not (isinstance(call, relax.Call) and call.op.same_as(call_tir)):
                        continue
                    gv, args = call.args[0], call.args[1]
                    args = list(args.fields) if isinstance(args, relax.Tuple) else [args]
                    consts = {i for i, a in enumerate(args) if isinstance(a, tvm.ir.expr.Constant)}
                    free[gv] = free[gv] & consts if gv in free else consts
        for gv, idx in free.items():
            if idx and ops & set(op_names(gv.name_hint)):
                mod[gv] = mod[gv].with_attr("layout_free_buffers", sorted(idx))
        return mod

    return _pass


def root_blocks():
    """A fused function whose body is one block without the root block around it (TOPI's
    cumulative sum, written with the IR builder) gets the root block every other task has:
    MetaSchedule's design spaces and the weight-packing split both look for it (RoBERTa's
    position ids failed both). Other functions are left as they are."""
    import tvm
    from tvm.s_tir.stmt import SBlock, SBlockRealize
    from tvm.tirx import PrimFunc

    @tvm.transform.module_pass(opt_level=0, name="tlm.RootBlocks")
    def _pass(mod, _ctx):
        for gv, func in list(mod.functions.items()):
            body = func.body if isinstance(func, PrimFunc) else None
            if isinstance(body, SBlockRealize) and body.block.name_hint != "root":
                root = SBlock([], [], [], "root", body)
                mod[gv] = func.with_body(SBlockRealize([], True, root))
        return mod

    return _pass


def prepack_fold() -> list:
    """After the records are applied: each task's weight packing becomes its own function, and
    constant folding runs it once at compile time (the packed weights are constants)."""
    from tvm import relax

    # The split passes each packed function's weights as a tuple it builds and takes apart again
    # (mobilenet_v2's convolutions: 262 VM builtin calls more per call, 0.2 ms); canonicalized
    # bindings read the folded constants directly.
    return [relax.transform.SplitLayoutRewritePreproc(), relax.transform.FoldConstant(),
            relax.transform.CanonicalizeBindings(), relax.transform.DeadCodeElimination()]


def fuse_passes(target, fast_math: bool = True, prepack: bool | frozenset[str] = True) -> list:
    """The passes from a prepared Relax module to fused TIR tasks: what extraction runs, and
    what the whole-model compile runs before it applies the records (tlm.compiler.build).
    `fast_math=False` is TVM's own legalization, `prepack=False` no pre-packed weights (the
    benchmarks' "before"; a set of op words: those ops'); pre-packing is for CPU targets only."""
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
        root_blocks(),
        *([layout_free(PREPACK_OPS if prepack is True else frozenset(prepack))]
          if prepack and target.kind.name == "llvm" else []),
    ]
