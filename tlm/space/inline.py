"""Which blocks the design spaces may inline: costly math that several blocks read stays computed once.

MetaSchedule's AutoInline rule inlines every elementwise block into its consumers. For a cheap
block (x - max, a bias add) that is what a hand-written kernel does too; for a block of costly
math read by two blocks it computes the math twice. Softmax after fast math is the case that
matters: TVM's CPU rules refuse to inline a block that calls `exp` (`disallow_op=["tirx.exp"]`),
but the vectorizable polynomial of `topi.fast_exp` (tlm.graph.passes) is plain arithmetic, so
the exponential was inlined into both the sum reduction (a serial loop) and the normalization,
and computed twice per element. `keep_shared_math` marks such blocks with MetaSchedule's own
opt-out annotation (`meta_schedule.inline_rule = "disable"`, honoured by AutoInline), so the
space computes them once, in a loop nest of their own that the vectorizer can take.

The task (its TIR, its hash) does not change: the annotation only steers space generation, and
a trace replays on the task's own module as before.
"""

from __future__ import annotations

# Arithmetic nodes in a block's value above which recomputing it in a second consumer costs more
# than a round trip through memory: fast_exp is ~100, x - max or a bias add 1-2.
COSTLY_OPS = 24
INLINE_RULE = "meta_schedule.inline_rule"


def _op_count(expr) -> int:
    """Arithmetic nodes of a TIR expression tree (binary ops, calls, casts, selects; leaves 0)."""
    if hasattr(expr, "op") and hasattr(expr, "args"):  # Call (tirx has no Python class for it here)
        return 1 + sum(_op_count(a) for a in expr.args)
    if hasattr(expr, "a") and hasattr(expr, "b"):
        return 1 + _op_count(expr.a) + _op_count(expr.b)
    kind = type(expr).__name__
    if kind == "Cast":
        return 1 + _op_count(expr.value)
    if kind == "Select":
        return 1 + _op_count(expr.condition) + _op_count(expr.true_value) + _op_count(expr.false_value)
    return 0


def _costly_shared(sch) -> list:
    """Block RVs of the spatial blocks of `sch`'s main function that at least two blocks read and
    whose value costs more than COSTLY_OPS arithmetic operations."""
    from tvm import tirx

    out = []
    for rv in sch.get_child_blocks(sch.get_sblock("root", func_name="main")):
        block = sch.get(rv)
        if len(block.writes) != 1 or any(int(iv.iter_type) != tirx.IterVar.DataPar for iv in block.iter_vars):
            continue  # not a spatial block with one output
        value = getattr(block.body, "value", None)  # a BufferStore's value
        if value is not None and _op_count(value) > COSTLY_OPS and len(sch.get_consumers(rv)) >= 2:
            out.append(rv)
    return out


def shared_costly_blocks(mod) -> list[str]:
    """Names of the blocks `keep_shared_math` marks."""
    from tvm import s_tir

    sch = s_tir.Schedule(mod, debug_mask=0)
    return [str(sch.get(rv).name_hint) for rv in _costly_shared(sch)]


def space_mod(task, target):
    """The module a task's design spaces are generated from, for every tuner (tlm's, random,
    MetaSchedule's): CPU targets keep shared costly math; CUDA spaces are TVM's as they are."""
    return task.mod if target.kind == "cuda" else keep_shared_math(task.mod)


def keep_shared_math(mod):
    """`mod` with its shared costly blocks marked not to be inlined (the same module when there
    is none)."""
    from tvm import s_tir

    sch = s_tir.Schedule(mod, debug_mask=0)
    blocks = _costly_shared(sch)
    for rv in blocks:
        sch.annotate(rv, INLINE_RULE, "disable")
    return sch.mod if blocks else mod
