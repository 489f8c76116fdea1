"""Which blocks the design spaces may inline: costly math read more than once stays computed once.

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


def _is_load(expr) -> bool:
    return type(expr).__name__ in ("TensorLoad", "BufferLoad")  # TVM 0.27's load: `source` is the buffer's Var


def _operands(expr) -> list | None:
    """The sub-expressions of an arithmetic node (binary op, call, cast, select); None for a leaf."""
    if hasattr(expr, "op") and hasattr(expr, "args"):  # Call (tirx has no Python class for it here)
        return list(expr.args)
    if hasattr(expr, "a") and hasattr(expr, "b"):
        return [expr.a, expr.b]
    kind = type(expr).__name__
    if kind == "Cast":
        return [expr.value]
    if kind == "Select":
        return [expr.condition, expr.true_value, expr.false_value]
    return None


def _op_count(expr) -> int:
    """Arithmetic nodes of a TIR expression tree (binary ops, calls, casts, selects; leaves and loads 0)."""
    parts = None if _is_load(expr) else _operands(expr)
    return 0 if parts is None else 1 + sum(_op_count(p) for p in parts)


def _loads(expr, count: dict | None = None) -> dict:
    """How many times the TIR expression `expr` loads each buffer (buffer -> count)."""
    count = {} if count is None else count
    if _is_load(expr):
        buf = expr.source if hasattr(expr, "source") else expr.buffer
        count[buf] = count.get(buf, 0) + 1
    for part in list(expr.indices) if _is_load(expr) else _operands(expr) or []:
        _loads(part, count)
    return count


def _costly_shared(sch) -> list:
    """Block RVs of the spatial blocks of `sch`'s main function whose value, with the blocks it
    would inline into it, costs more than COSTLY_OPS arithmetic operations, and that are loaded at
    least twice (by two blocks, or twice by one: inlining copies the value into every load).

    A block's cost counts its own arithmetic plus, for every load of an inlinable producer, that
    producer's cost: inlining substitutes the whole expression at each load. Without the second
    part a chain of activations (mish, elu, selu, a PReLU: each reads its input two or three times)
    grew 2-3x per link when inlined, past 10^5 nodes for seven, and TVM's scheduling and LLVM
    took minutes (the op battery's op_activations: over 900 s). Marked blocks cost their readers
    nothing (a load from memory), so what is inlined stays linear in the chain."""
    from tvm import tirx

    blocks = sch.get_child_blocks(sch.get_sblock("root", func_name="main"))
    stmts = [sch.get(rv) for rv in blocks]
    loads = [_loads(getattr(b.body, "value", None)) for b in stmts]  # a BufferStore's value
    read_by: dict = {}  # buffer -> loads of it in the blocks after its producer
    for count in loads:
        for buf, n in count.items():
            read_by[buf] = read_by.get(buf, 0) + n
    inlined_cost: dict = {}  # output buffer of an inlinable (unmarked spatial) block -> its cost
    out = []
    for rv, block, count in zip(blocks, stmts, loads):
        value = getattr(block.body, "value", None)  # a BufferStore's value
        if (len(block.writes) != 1 or value is None
                or any(int(iv.iter_type) != tirx.IterVar.DataPar for iv in block.iter_vars)):
            continue  # not a spatial block with one output: never inlined, its readers load it
        cost = _op_count(value) + sum(inlined_cost.get(buf, 0) * n for buf, n in count.items())
        buf = block.body.buffer  # the BufferStore's buffer (the block's one output)
        if cost > COSTLY_OPS and read_by.get(buf, 0) >= 2:
            out.append(rv)
        else:
            inlined_cost[buf] = cost
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
