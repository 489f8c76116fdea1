"""Flaws of a program read from its TIR before any code is generated: what it costs LLVM to
build, and work it redoes. An unmeasured pick (`--budget 0`) is never timed, so the TLM tuner
takes the first of the cost model's ranking without either flaw (`first_fine`).

Some programs of a design space are fast to run but take LLVM minutes to compile: a vectorized
loop whose extent is not a power of two (a conv1d's 49 output positions) under a large
`pragma_auto_unroll_max_step` becomes thousands of odd-width vector loads and stores in one body,
and LLVM's type legalization splits each of them lane by lane. Measured on znver3 (LLVM 17,
a HuBERT feature extractor's conv1d tasks): 77,616 lanes in odd-width vector accesses took over
15 minutes to build, 41,184 took 10 s, 1,127 took 0.2 s; power-of-two widths of any count build
in well under a second. `odd_vector_lanes` counts those lanes after TVM's own lowering (the
unrolling included), and `too_slow_to_build` says when a program should not be a first choice.

Redone work: a program may compute a reduction at a location inside a loop its result does not
depend on, so the reduction runs again on every turn. Picks of the shipped models did so (timed
on znver3, 2026-12-01, against the ranking's next program without it, `bench/lean_pick.py`):
generated for znver5, poolformer's group norm [1,4,4,96] 272 us against 2.5 (its 192-element
partial sums redone per output) and the [1,24,64] layer norm of data2vec_audio 48 us against 1.0;
generated for znver3, mpnet's layer norm 24 us against 0.6. TVM's flop estimate of the scheduled
program counts every turn; over the task's own estimate (`flops_ratio`) those were 28-67x, while
the first choices of the zoo's convolutions and matmuls count at most 1.4x (padding recomputed at
tile edges). A little redone work can pay: layer norms at 4.2x (a row's sums redone per column
tile) ran faster than the 1.3x programs after them (bert_base's 66 us against 85), so the limit is
8x. Some tasks count more in every program (an inlined select of four resizes: 4.0x), so the
limit also rises with the leanest program ranked (`lean_limit`). Where the rest of a task counts
many flops a value (a sigmoid), a redone reduction hides in the flop ratio, so the ratio judged
is also the most a reduction block runs over (`reduction_redo`, `redone_work`): a long one, each
run over its domain; a short one, which LLVM unrolls and hoists out of the loops inside the
last loop it depends on, only the turns of the loops around that one.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

from tlm.errors import TlmError
from tlm.graph.target import TargetInfo

# Lanes in odd-width vector accesses above which LLVM's build time grows past seconds (see above).
ODD_LANES_LIMIT = 4096
# A program counts as redoing work when its flops exceed both this many times the task's and
# REDUNDANCY_SLACK times the leanest ranked program's (see above).
REDUNDANCY_LIMIT = 8.0
REDUNDANCY_SLACK = 2.0
# A reduction block counts (reduction_redo) when it makes this share of a program's block executions;
# one that reduces at least this many values a result counts every run, a shorter one only the turns
# LLVM cannot hoist it out of (see reduction_redo).
REDO_SHARE = 0.25
REDO_MIN_VALUES = 256
# A shorter reduction counts from this many runs of its block on: the softmax and group-norm programs
# refused with fewer (4,096-32,768 runs, redone 16-1536x) ran 0.3-1.2 us, faster than the next
# program; those with more (547K-590K runs) 1.55x and 14x slower (bench/results/redo-pick.md).
REDO_MIN_RUNS = 1 << 17
# ... and from this many turns it cannot be hoisted out of on: style_transfer's instance norms [1,16,16,64]
# redo their partial sums 16x in 21 of their first 22 ranked programs (51-73 us), and refusing them
# walked the ranking down to a program LLVM did not build in 30 s; redone 45x and 256x they ran 1.5x
# and 14x slower than the next program.
REDO_MIN_TURNS = 32


def _lanes(expr_type: Any) -> int:
    import tvm

    return tvm.DataType(str(expr_type.dtype)).lanes


def odd_vector_lanes(mod, target: TargetInfo) -> int:
    """Total lanes of the vector loads and stores whose width is not a power of two in `mod`
    (a scheduled IRModule) once lowered by TVM's default TIR pipeline for `target` (LLVM only)."""
    import tvm_ffi
    from tvm import tirx
    from tvm.ir.expr import TensorLoad

    tvm_target = target.tvm()
    lowered = tirx.transform.BindTarget(tvm_target.with_host(tvm_target))(mod)
    lowered = tirx.get_default_tir_pipeline(tvm_target)[0](lowered)
    total = 0

    def visit(node) -> None:
        nonlocal total
        lanes = _lanes(node.value.ty if isinstance(node, tirx.stmt.BufferStore) else node.ty)
        if lanes > 1 and lanes & (lanes - 1):
            total += lanes

    for func in lowered.functions.values():
        if isinstance(func, tirx.PrimFunc):
            tvm_ffi.structural_walk(func.body, ((TensorLoad, tirx.stmt.BufferStore), visit))
    return total


def odd_vector_loops(mod) -> bool:
    """Whether a scheduled IRModule vectorizes a loop whose extent is not a power of two (only
    such loops make odd-width vectors, so only they need the lowering `odd_vector_lanes` does)."""
    import tvm_ffi
    from tvm import tirx

    found = False

    def visit(loop) -> None:
        nonlocal found
        if loop.kind == tirx.stmt.ForKind.VECTORIZED:
            extent = loop.extent
            found = found or not isinstance(extent, tirx.expr.IntImm) or bool(extent.value & (extent.value - 1))

    for func in mod.functions.values():
        if isinstance(func, tirx.PrimFunc):
            tvm_ffi.structural_walk(func.body, ((tirx.stmt.For, visit),))
    return found


def too_slow_to_build(mod, target: TargetInfo, limit: int = ODD_LANES_LIMIT) -> int:
    """The odd-width vector lanes of `mod` when over `limit` on an LLVM target, else 0 (fine, or a
    target whose build time this does not predict)."""
    if target.kind != "llvm" or not odd_vector_loops(mod):
        return 0
    lanes = odd_vector_lanes(mod, target)
    return lanes if lanes > limit else 0


def flops_ratio(mod, task_flops: float) -> float | None:
    """TVM's flop estimate of `mod` (a scheduled IRModule) over `task_flops` (the task's own): 1.0
    when each value is computed once, more when work is redone in a loop (see above); None when
    either is unknown."""
    from tvm.s_tir.analysis import estimate_tir_flops

    if not task_flops or task_flops <= 0:
        return None
    try:
        return float(estimate_tir_flops(mod)) / task_flops
    except Exception:  # noqa: BLE001 - estimation is best effort (data-dependent loops)
        return None


def reduction_redo(mod) -> float:
    """How many times over a reduction of `mod` (a scheduled IRModule) runs, the largest among the
    reduction blocks that make at least REDO_SHARE of the program's block executions; 1.0 when
    each runs once. A reduction of at least REDO_MIN_VALUES values a result counts every run: its
    executions (the extents of the loops around it multiplied) over its own iteration domain. TVM's
    flop estimate misses such a program when the rest of the task counts many flops a value
    (gn_decoder's group norm + SiLU: its statistics, 4,096 values a group, redone for each of 32
    rows counted 2.1x the task's flops and ran 626 us against 27 for the next program; znver4,
    2026-12-06). A shorter one counts only the loops it does not depend on that enclose a loop
    its result does (`_redo_loops`): LLVM unrolls a short reduction and hoists it out of the loops
    inside those, so bert_base's layer norm that sums 32 partial sums again for each of a row's
    768 columns (the innermost loop) ran 11.8 us against 22.4 for the ranking's next (bert_tiny's
    softmax over 128 values redone 128x: 31.7 against 53.7), while gn_decoder's group norm [1, 16,
    16, 48] that sums 48 partial sums again in each of 16 x 16 pixels, loops around its channel
    loop, ran 221 us against 15.5 (znver4, 2026-12-06). A short one whose block runs fewer than
    REDO_MIN_RUNS times, or that turns fewer than REDO_MIN_TURNS times, is not counted."""
    from tvm import tirx

    from tlm.space.threads import stores

    runs = {st.block: st for st in stores(mod) if st.block is not None}  # a block's stores run alike
    total = sum(st.executions for st in runs.values())
    redo = []
    for block, st in runs.items():
        extents = [iv.dom.extent for iv in block.iter_vars]
        if not extents or not all(isinstance(e, tirx.expr.IntImm) for e in extents):
            continue
        reduced = math.prod(int(iv.dom.extent.value) for iv in block.iter_vars
                            if int(iv.iter_type) == tirx.IterVar.CommReduce)
        if reduced == 1 or st.executions < REDO_SHARE * total:
            continue
        if reduced >= REDO_MIN_VALUES:
            redo.append(st.executions / max(1, math.prod(int(e.value) for e in extents)))
        elif st.bindings is not None and st.executions >= REDO_MIN_RUNS:
            turns = _redo_loops(block, st)
            redo.append(turns if turns >= REDO_MIN_TURNS else 1.0)
    return max(redo, default=1.0)


def _redo_loops(block, st) -> float:
    """The extents multiplied of the loops around a reduction block (`st`: one of its stores) that
    none of its bindings uses and that enclose a loop one of its spatial bindings uses (loops of
    extent 1 left out): the turns LLVM cannot hoist it out of."""
    from tvm import tirx
    from tvm.tirx.analysis import undefined_vars

    def used(values) -> set:
        return {v for e in values for v in undefined_vars(e)}

    spatial = used(e for iv, e in zip(block.iter_vars, st.bindings) if int(iv.iter_type) != tirx.IterVar.CommReduce)
    every = used(st.bindings)
    loops = [lp for lp in st.loops if isinstance(lp.extent, tirx.expr.IntImm) and int(lp.extent.value) > 1]
    last = max((i for i, lp in enumerate(loops) if lp.loop_var in spatial), default=-1)
    return float(math.prod(int(lp.extent.value) for lp in loops[:last] if lp.loop_var not in every))


def redone_work(mod, task_flops: float) -> float | None:
    """The redone-work ratio the budget-0 pick judges: the larger of TVM's flop estimate over the
    task's (`flops_ratio`) and the most a sizeable reduction runs over (`reduction_redo`); None
    when the flop estimate is unknown."""
    ratio = flops_ratio(mod, task_flops)
    if ratio is None:
        return None
    try:
        return max(ratio, reduction_redo(mod))
    except Exception:  # noqa: BLE001 - a program this walk does not know: the flop estimate alone
        return ratio


def lean_limit(ratios: list[float | None]) -> float:
    """The flops ratio above which a ranked program redoes work: REDUNDANCY_LIMIT, or
    REDUNDANCY_SLACK x the leanest of `ratios` when that is more."""
    known = [r for r in ratios if r is not None]
    return max(REDUNDANCY_LIMIT, REDUNDANCY_SLACK * min(known)) if known else float("inf")


def redundancy(ratio: float | None, limit: float) -> str | None:
    """Why a program with flops ratio `ratio` should not be a first choice, or None."""
    if ratio is None or ratio <= limit:
        return None
    return f"redoes work ({ratio:.0f}x the task's work: a reduction inside a loop it does not depend on)"


def odd_lanes_problem(lanes: int) -> str | None:
    """Why a program with `lanes` (too_slow_to_build) should not be a first choice, or None."""
    return f"has {lanes:,} lanes in odd-width vector accesses (LLVM would take minutes to build it)" if lanes else None


def first_fine(name: str, ranked: list, problem: Callable[[Any], str | None]) -> list:
    """[the first of `ranked` with no `problem`], with a note on stderr (naming task `name`) when it
    is not the first; else [the first of all] with a warning (nothing for an empty `ranked`).
    `problem(item)` says what is wrong with a program ("redoes work (...)") or gives None."""
    first = None
    for i, item in enumerate(ranked):
        got = problem(item)
        if not got:
            if i > 0:
                print(f"tlm: note: {name}: the model's first choice {first}; its choice #{i + 1} is used",
                      file=sys.stderr)
            return [item]
        first = first or got
    if ranked:
        print(f"tlm: warning: {name}: none of the model's {len(ranked)} choices is free of flaws "
              f"(the first {first}); the first is used", file=sys.stderr)
    return ranked[:1]


def lowering_problem(error: str | None) -> str | None:
    """Why a program whose CUDA lowering gave `error` should not be a first choice, or None."""
    return None if error is None else f"does not lower to CUDA ({str(error).splitlines()[0][:160]})"
