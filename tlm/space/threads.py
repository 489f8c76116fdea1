"""How much faster a CPU program runs on a model's threads than on the one thread it was timed on.

Every CPU program is timed on one TVM thread (`tlm.measure.MeasureConfig.threads`, how the corpus
was measured), but a compiled model runs its kernels on all the host's cores. A program's
parallel loop decides what it gains there: MetaSchedule's tiling may leave the outer spatial
loops at extent 1 (no parallel loop at all), and such a program, timed alone on one thread, can
be the fastest record of its task and then run on one core in the model. On znver4 (2 cores)
this was mobilenet_v2's classifier (1x1280 @ 1280x1000, 0.22 ms in the model against ONNX
Runtime's 0.13) and 960->160 convolutions, and a 1x1 convolution of resnet_50 (2.5 ms serial
where a record 3% slower on one thread has a parallel loop of 7).

`speedup(mod, threads)` estimates the gain from the loops alone: each store's executions
(product of its enclosing loops' extents) over a parallel loop of extent e run in
ceil(e / threads) / e of the time; the program's speedup is the work-weighted harmonic mean.
It assumes compute-bound scaling, which the measured picks of bench/results/parallel_pick.md
check against whole models, and charges a parallel program one trip through the thread pool
(POOL_TRIP_S); a task of less than PARALLEL_WORK points keeps its one-thread best. A compile
applies it to measured one-thread latencies (`Database.fastest_on`); the TLM tuner's cost-model
ranking uses `coarse_speedup`, which only demotes programs far from using every thread (its
predictions are too rough for the rest).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

# One trip through TVM's thread pool (start and join a parallel loop): 8-10 us on the 2-core hosts
# measured (znver3, tlm.space.serial). Without it a 6 us task's serial record lost to a parallel
# one of 11 us on one thread (ast, znver4).
POOL_TRIP_S = 8e-6
# Tasks under this many iteration points (tlm.space.serial.task_work) keep the cost model's
# ranking as it is: at 2x, a parallel loop gains its pool trip back only above ~16 us of work,
# about 300,000 points of a matmul on znver4 (mobilenet_v2's 1.28M-point classifier: 70 us).
PARALLEL_WORK = 8 * 65536
# A measured record under 5 pool trips (40 us) on one thread is applied as it is: re-picks of
# 10-13 us tasks measured 0.89x and 0.97x end to end (distilbert, resnet_odd; znver4), those of
# 42-370 us tasks 1.02-1.36x (bench/results/parallel_pick.md).
REPICK_S = 5 * POOL_TRIP_S

# Stores of blocks that MetaSchedule's layout rewriting runs once at compile time (the packed
# weights, folded into constants) are no work of a call.
_PREPROC = "meta_schedule.layout_rewrite_preproc"


def loop_speedup(extent: int, threads: int) -> float:
    """A parallel loop of `extent` iterations on `threads` threads (static chunks): extent /
    ceil(extent / threads); 1.0 for a serial loop or one thread."""
    if threads <= 1 or extent <= 1:
        return 1.0
    return extent / math.ceil(extent / threads)


def _extent(loop) -> int:
    from tvm import tirx

    return int(loop.extent.value) if isinstance(loop.extent, tirx.expr.IntImm) else 1


class Store(NamedTuple):
    """A BufferStore of a program, where it runs."""

    executions: int  # the extents of the loops around it multiplied
    par: int  # the parallel loops' extents around it multiplied
    block: Any  # the SBlock it is in (None: outside any block)
    loops: tuple = ()  # the For loops around its block's SBlockRealize, outermost first
    bindings: Any = None  # that SBlockRealize's iter_values (the block's iter vars in loop vars)


def _stores(stmt, iters: int, par: int, out: list[Store], block: Any = None, loops: tuple = (),
            at: tuple = ((), None)) -> None:
    """Append a Store for every BufferStore under `stmt`; `loops`: the For loops around `stmt`,
    `at`: (loops, bindings) of the block realize `stmt` is in."""
    from tvm import s_tir, tirx

    if stmt is None:
        return
    if isinstance(stmt, tirx.stmt.BufferStore):
        out.append(Store(iters, par, block, *at))
    elif isinstance(stmt, tirx.stmt.For):
        n = _extent(stmt)
        _stores(stmt.body, iters * n, par * n if stmt.kind == tirx.stmt.ForKind.PARALLEL else par, out, block,
                loops + (stmt,), at)
    elif isinstance(stmt, tirx.stmt.SeqStmt):
        for s in stmt.seq:
            _stores(s, iters, par, out, block, loops, at)
    elif isinstance(stmt, s_tir.stmt.SBlockRealize):
        _stores(stmt.block, iters, par, out, block, loops, (loops, stmt.iter_values))
    elif isinstance(stmt, s_tir.stmt.SBlock):
        if _PREPROC in stmt.annotations:
            return
        _stores(stmt.init, iters, par, out, stmt, loops, at)
        _stores(stmt.body, iters, par, out, stmt, loops, at)
    elif isinstance(stmt, tirx.stmt.IfThenElse):
        _stores(stmt.then_case, iters, par, out, block, loops, at)
        _stores(stmt.else_case, iters, par, out, block, loops, at)
    else:  # attributes, buffer declarations, bindings: what matters is inside
        _stores(getattr(stmt, "body", None), iters, par, out, block, loops, at)


def stores(mod: Any) -> list[Store]:
    """Every BufferStore of `mod`'s PrimFuncs (the stores of compile-time layout-rewrite blocks left
    out: they are no work of a call)."""
    from tvm import tirx

    out: list[Store] = []
    for func in mod.functions.values():
        if isinstance(func, tirx.PrimFunc):
            _stores(func.body, 1, 1, out)
    return out


def speedup(mod: Any, threads: int) -> float:
    """Estimated time on one thread over time on `threads` threads of a scheduled IRModule (its
    PrimFuncs' stores, work-weighted); 1.0 when nothing runs in parallel or threads <= 1."""
    if threads <= 1:
        return 1.0
    found = stores(mod)
    work = sum(st.executions for st in found)
    if work == 0:
        return 1.0
    return work / sum(st.executions / loop_speedup(st.par, threads) for st in found)


def _worth_threads(mod: Any, threads: int) -> bool:
    """More than one thread, and a task of at least PARALLEL_WORK points (tlm.space.serial.task_work)."""
    from tlm.space.serial import task_work

    if threads <= 1:
        return False
    work = task_work(mod)
    return work is not None and work >= PARALLEL_WORK


def fastest(mod: Any, candidates: list[tuple[float, Any]], threads: int) -> int:
    """Index of the candidate (one-thread seconds, trace JSON of a schedule of `mod`) estimated
    fastest on `threads` threads: seconds / `speedup`, plus a trip through the thread pool for a
    parallel one; a trace that no longer replays keeps its one-thread time. Ties go to the earlier
    candidate (callers list them fastest first, so 0 is the one-thread best). A task of less than
    PARALLEL_WORK points, or whose best runs under REPICK_S, keeps its one-thread best: the pool
    trip's cost varies from host to host and minute to minute by as much as such a task's time."""
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    if not _worth_threads(mod, threads) or not candidates or candidates[0][0] < REPICK_S:
        return 0
    best, best_s = 0, math.inf
    for i, (seconds, trace) in enumerate(candidates):
        gain = 1.0
        if trace is not None:
            try:
                sch = Schedule(mod)
                Trace.apply_json_to_schedule(trace, sch)
                gain = speedup(sch.mod, threads)
            except Exception:  # noqa: BLE001 - a trace of another space version: timed as it is
                pass
        estimate = seconds / gain + (POOL_TRIP_S if gain > 1.0 else 0.0)
        if estimate < best_s:
            best, best_s = i, estimate
    return best


def coarse_speedup(mod: Any, threads: int) -> float:
    """`speedup` for ranking predicted latencies: a program within 3/4 of full use of the threads
    counts as full. The cost model's errors are larger than the gap between two well-parallel
    programs (a loop of 7 against 8 on 2 threads, 1.75 against 2): on znver4 at budget 0, ranking
    by the exact gain swapped such programs for ones up to 7x slower (resnet_50 0.99x end to end,
    bench/results/parallel_pick.md), while demoting serial programs only is what gains."""
    gain = speedup(mod, threads)
    return float(threads) if gain >= 0.75 * threads else gain


def ranking_gains(mod: Any, schedules: list, threads: int) -> list[float] | None:
    """Each schedule's `coarse_speedup`, for `CostModel.order(gains=)`; None where they cannot
    matter or would mislead: one thread, or a task of less than PARALLEL_WORK points."""
    if not _worth_threads(mod, threads):
        return None
    return [coarse_speedup(sch.mod, threads) for sch in schedules]
