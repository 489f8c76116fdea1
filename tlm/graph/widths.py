"""Odd widths (issue 48, item 3): a matmul whose output width has no vector-friendly tile is
computed as a round part and a padded tail, run by `tlm.graph.passes.prepare` after the
epilogues have moved next to their matmuls.

MetaSchedule tiles a loop only by perfect factors (SamplePerfectTile), so a width without a
factor of 8 (one AVX2 register of float32; a prime such as 1031) offers no vector-wide innermost
tile anywhere in its design space: `Linear(512, 1031)` ran 9x slower than `Linear(512, 1024)`
at budget 0 on a Zen 4. Padding the width to the next multiple of 16 makes such tiles exist,
but measured it was not enough (tools/odd_widths.py, bench/results/odd_widths.md): a width the
tuner's model has not learned (1040 = 16 x 65) gets a vector-hostile innermost factor (5), and
ran 1.8x (budget 0) and 2.6x (10 measurements per task) slower than 1024 on a Zen 3, where
the split below runs 1.06x and 1.19x (unsplit 1031: 5.2x and 2.5x). So the width is split as
non-perfect tiles are, into a round part and a tail (`width_parts`):

    y = relu(x @ W + b)   ->   y = concat(relu(x @ W[:, :1024] + b[:1024]),
                                          relu(x @ pad(W[:, 1024:]) + pad(b[1024:])))[..., :1031]

- The round part is the largest multiple of `ROUND` (64, MetaSchedule's largest innermost
  factor on CPUs: every power-of-two innermost tile fits), the task a round width would give;
  the tail (< 64 columns) is zero-padded to a multiple of `MULTIPLE` (16 float32: one AVX-512
  register, two AVX2 ones, four NEON ones, half a CUDA warp) and is a small task of its own.
  The rule is the same for every target, so every CPU keeps the same tasks.
- The parts carry the matmul's epilogue (`CARRY_UNARY`, `CARRY_BINARY` with a constant or with
  another operand split the same way, reshapes that keep the last axis), so each stays one
  fused task; the concat and slice that give the model's tensor back are one injective task
  (with a reshape after them). Padded columns are sliced away, so their values never matter;
  constants are padded with 0 (1 for multiply, divide, power) to keep them tame.
- Only widths that are not a multiple of 8 are split, and only when the padding adds at most
  `MAX_EXTRA` of the work: 1000 (8 x 125, the zoo's classifier heads) and every round width
  (768, 1024, 3072) stay as they are, and a function without such a matmul is not rebuilt at
  all (its tasks and hashes are unchanged).
- A conv of one group with its channels last (NHWC or NWC, after tlm.graph.layout) and a width
  without a factor of 8 is padded whole to the next multiple of 8 (`conv_width_parts`), its
  epilogue carried the same way, for at most CONV_MAX_EXTRA more work: a conv's design space
  vectorizes over output channels, and at budget 0 the padded conv ran 1.1-7x faster than the odd
  one for widths 5-36 on a Zen 4 (DenseNet's growth of 12, a 36-channel transition, 21
  segmentation classes), where a matmul of the same widths gained nothing; 1-3 channels (an
  image's, a waveform's) padded to 8 were as often slower whole as faster (`conv_widths` in
  bench/README.md).
- A module the pass cannot rewrite is returned unchanged, with one `tlm: warning:` line.
"""

from __future__ import annotations

import sys

ROUND = 64  # the round part: a multiple of this
MULTIPLE = 16  # the tail (or a width under ROUND) is padded to a multiple of this
LANES = 8  # widths with a factor of this are left alone (an 8-lane innermost tile exists)
MAX_EXTRA = 0.10  # at most this much more work (padded columns / real columns)
# Convs whose output channels are the last axis (tlm.graph.layout's NHWC / NWC), by (data, kernel)
# layout: their output width is padded whole to a multiple of LANES (`conv_width_parts`).
CONVS = {"relax.nn.conv2d": ("NHWC", "HWIO"), "relax.nn.conv1d": ("NWC", "WIO")}
CONV_MAX_EXTRA = 0.6  # a conv is padded for at most this much more work (padded channels / real ones)

# Ops that act on each column on its own: the parts carry them.
CARRY_UNARY = ("relax.nn.relu", "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.nn.silu", "relax.tanh",
               "relax.sigmoid", "relax.erf", "relax.exp", "relax.sqrt", "relax.rsqrt", "relax.negative",
               "relax.abs", "relax.clip", "relax.astype")
# Binary op -> the value the padded columns of a constant operand get.
CARRY_BINARY = {"relax.add": 0.0, "relax.subtract": 0.0, "relax.multiply": 1.0, "relax.divide": 1.0,
                "relax.power": 1.0, "relax.maximum": 0.0, "relax.minimum": 0.0}
_FLOATS = ("float16", "float32", "float64")


def width_parts(n: int) -> tuple[tuple[int, int], ...] | None:
    """How a matmul of output width `n` is computed: (columns, computed width) per part, or None
    to leave it. 1031 -> ((1024, 1024), (7, 16)); 61 -> ((61, 64),); 1000, 1024, 24 -> None
    (a factor of 8; 24 would be a third more work)."""
    if n <= 0 or n % LANES == 0:
        return None
    bulk, tail = n - n % ROUND, n % ROUND
    padded = -(-tail // MULTIPLE) * MULTIPLE
    if padded - tail > MAX_EXTRA * n:
        return None
    return ((bulk, bulk), (tail, padded)) if bulk else ((tail, padded),)


def conv_width_parts(n: int) -> tuple[tuple[int, int], ...] | None:
    """How a conv of `n` output channels is computed: ((n, n rounded up to a multiple of LANES),),
    or None for a multiple of LANES or where that is over CONV_MAX_EXTRA more work. Budget-0 picks
    of one conv alone (znver4, 2026-12-06), padded against as is: 21 -> 24 channels 6.1x faster,
    36 -> 40 7.0x, 5 -> 8 1.8x, 12 -> 16 1.35x, 10 -> 16 1.1x, where a matmul of the same widths
    gained nothing from it (36 -> 48: 0.47x). Image and audio outputs of 1-3 channels padded to 8
    were mixed whole (bench/results/conv_widths.md): gn_decoder 1.07x and unet 1.08x faster,
    style_transfer (a 9x9 conv to 3 channels) 0.85x and hifigan (a conv1d to 1) 0.94x."""
    if n <= 0 or n % LANES == 0:
        return None
    padded = -(-n // LANES) * LANES
    return ((n, padded),) if padded - n <= CONV_MAX_EXTRA * n else None


def _conv_layout(call) -> bool:
    """Whether `call` is a conv of one group with its channels last (CONVS)."""
    layouts = CONVS.get(_op(call))
    attrs = call.attrs
    return (layouts is not None and (str(attrs.data_layout), str(attrs.kernel_layout)) == layouts
            and str(attrs.out_layout) in ("", layouts[0]) and int(attrs.groups) == 1)


def _op(call) -> str:
    return str(getattr(call.op, "name", ""))


def _part_consts(value, parts, fill: float) -> list:
    """Relax constants: numpy `value`'s last axis cut into `parts`, each padded with `fill`."""
    import numpy as np
    from tvm import relax

    out, start = [], 0
    for cols, width in parts:
        piece = value[..., start:start + cols]
        widths = [(0, 0)] * (value.ndim - 1) + [(0, width - cols)]
        out.append(relax.const(np.pad(piece, widths, constant_values=fill), str(value.dtype)))
        start += cols
    return out


def _rewriter():
    import tvm
    from tvm import relax

    from tlm.graph.layout import static_shape

    Const = type(relax.const(0.0))

    @relax.expr_functor.mutator
    class Split(relax.PyExprMutator):
        """Per dataflow block, `parts` maps an original variable to (its part variables, the
        layout `width_parts` gave); the original variable itself is remapped to the concat and
        slice of its parts, which dead-code elimination removes where only carried ops read it."""

        def __init__(self, mod=None):
            super().__init__(mod)
            self.parts: dict = {}
            self.changed = False

        def visit_dataflow_block_(self, block):
            self.parts = {}
            return super().visit_dataflow_block_(block)

        def bound(self, expr):
            """`expr` as visited, a variable replaced by the value it is bound to."""
            expr = self.visit_expr(expr)
            return self.lookup_binding(expr) if isinstance(expr, relax.Var) else expr

        def constant(self, expr):
            """A float constant operand as numpy, else None."""
            expr = self.bound(expr)
            if not isinstance(expr, Const) or str(expr.value.dtype) not in _FLOATS:
                return None
            return expr.value.numpy()

        def conv(self, call):
            x, w = call.args
            value = self.constant(w)
            layout = None if value is None or not _conv_layout(call) else conv_width_parts(value.shape[-1])
            if layout is None:
                return None
            data = self.visit_expr(x)
            return [relax.Call(call.op, [data, c], call.attrs, call.ty_args) for c in _part_consts(value, layout, 0.0)], layout

        def weight(self, expr):
            """A 2-D float constant operand (or `permute_dims` of one) as numpy, else None."""
            bound = self.bound(expr)
            if isinstance(bound, relax.Call) and _op(bound) == "relax.permute_dims":
                value = self.constant(bound.args[0])
                axes = None if bound.attrs.axes is None else [int(a) for a in bound.attrs.axes]
                value = None if value is None else value.transpose(axes)  # axes None: reversed
            else:
                value = self.constant(expr)
            return value if value is not None and value.ndim == 2 else None

        def matmul(self, call):
            x, w = call.args
            value = self.weight(w)
            layout = None if value is None else width_parts(value.shape[1])
            if layout is None:
                return None
            data = self.visit_expr(x)
            out_dtype = str(call.attrs.out_dtype)
            out_dtype = None if out_dtype in ("", "void", "None") else out_dtype  # None: an ONNX import
            return [relax.op.matmul(data, c, out_dtype=out_dtype) for c in _part_consts(value, layout, 0.0)], layout

        def carried(self, call):
            """The call on each part of its split operand(s), or None where the split ends."""
            op, args = _op(call), list(call.args)
            split = [self.parts.get(a) if isinstance(a, relax.Var) else None for a in args]
            if split[0] is not None and op in CARRY_UNARY:
                rest = [self.visit_expr(a) for a in args[1:]]
                vs, layout = split[0]
                return [relax.Call(call.op, [v, *rest], call.attrs, call.ty_args) for v in vs], layout
            if op == "relax.reshape" and split[0] is not None:
                vs, layout = split[0]
                shape = static_shape(call)
                if not shape or shape[-1] != sum(c for c, _ in layout):
                    return None
                return [relax.op.reshape(v, [*shape[:-1], w]) for v, (_, w) in zip(vs, layout)], layout
            if op not in CARRY_BINARY or len(args) != 2 or not any(split):
                return None
            if all(split):
                if split[0][1] != split[1][1]:
                    return None
                pairs = zip(split[0][0], split[1][0])
                return [relax.Call(call.op, [a, b], call.attrs, call.ty_args) for a, b in pairs], split[0][1]
            i = 0 if split[0] is not None else 1
            vs, layout = split[i]
            other = self.visit_expr(args[1 - i])
            if not isinstance(other, Const):
                return None
            value = other.value.numpy()
            if value.ndim and value.shape[-1] == sum(c for c, _ in layout):
                others = _part_consts(value, layout, CARRY_BINARY[op])
            elif value.ndim == 0 or value.shape[-1] == 1:
                others = [other] * len(vs)
            else:
                return None
            pairs = zip(vs, others) if i == 0 else zip(others, vs)
            return [relax.Call(call.op, list(p), call.attrs, call.ty_args) for p in pairs], layout

        def visit_var_binding_(self, binding):
            call = binding.value
            out = None
            if self.builder_.current_block_is_dataflow() and isinstance(call, relax.Call) \
                    and isinstance(call.op, tvm.ir.Op):
                op = _op(call)
                out = self.matmul(call) if op == "relax.matmul" else self.conv(call) if op in CONVS else self.carried(call)
            if out is None:
                return super().visit_var_binding_(binding)
            self.changed = True
            exprs, layout = out
            var = binding.var
            vs = [self.builder_.emit(e, f"{var.name}_part{i}") for i, e in enumerate(exprs)]
            axis = int(vs[0].ty.ndim) - 1
            whole = vs[0] if len(vs) == 1 else self.builder_.emit(relax.op.concat(vs, axis=axis), f"{var.name}_parts")
            n = sum(c for c, _ in layout)
            value = relax.op.strided_slice(whole, axes=[axis], begin=[0], end=[n])
            emit = self.builder_.emit_output if not isinstance(var, relax.DataflowVar) else self.builder_.emit
            self.set_var_remap(var, emit(value, var.name))
            self.parts[var] = (vs, layout)
            return None

    return Split


def _has_candidate(func) -> bool:
    """Whether a function has a matmul of a width that `width_parts` splits or a conv of a width
    that `conv_width_parts` pads."""
    from tvm import relax

    from tlm.graph.layout import static_shape

    found = []

    def visit(e):
        op = _op(e) if isinstance(e, relax.Call) else None
        if op == "relax.matmul" or (op in CONVS and _conv_layout(e)):
            shape = static_shape(e)
            parts = width_parts if op == "relax.matmul" else conv_width_parts
            if shape and parts(shape[-1]) is not None:
                found.append(e)

    relax.analysis.post_order_visit(func, visit)
    return bool(found)


def split_odd_widths(mod):
    """Matmuls with a constant 2-D weight and an odd output width (`width_parts`) computed as a
    round part and a padded tail, convs with a constant kernel and an odd output width padded
    (`conv_width_parts`), their epilogues with them, the model's tensor put back together after
    them."""
    from tvm import relax

    from tlm.errors import first_line

    original = mod
    try:
        Split = _rewriter()
        changed = False
        mod = mod.clone()  # the caller's module stays as it was, whatever happens
        for gv, func in list(mod.functions.items()):
            if not (isinstance(func, relax.Function) and _has_candidate(func)):
                continue
            rewriter = Split(original)
            new = rewriter.visit_expr(func)
            if rewriter.changed:
                mod[gv] = new
                changed = True
        if not changed:
            return original
        mod = relax.transform.DeadCodeElimination()(relax.transform.CanonicalizeBindings()(mod))
        relax.analysis.well_formed(mod)  # raises on the first violation
        return mod
    except Exception as err:  # a graph this pass does not know: left as it was
        print(f"tlm: warning: odd widths left unsplit: {first_line(err, limit=160)}", file=sys.stderr)
        sys.stderr.flush()
        return original
