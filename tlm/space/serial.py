"""Which tasks run on one thread: a parallel loop costs more than a small task's whole work.

MetaSchedule's CPU rules mark every task's root block for parallel loops
(`ParallelizeVectorizeUnroll(max_jobs_per_core=16)`; the RewriteParallelVectorizeUnroll postproc
then makes the outer loops `parallel`), whatever the task's size. Each parallel loop is a trip
through TVM's thread pool: on the 2-core hosts measured (znver3, 2026-11-28,
bench/results/serial_tasks.md) 8-10 us, where a 384-element strided slice takes 0.04 us on one
thread and an LSTM's split of its four gates 0.04 us against 35 (one pool trip per output). A
model of many small tasks (an unrolled LSTM, the reshapes and layer norms of a small
transformer) spent most of its time starting and stopping threads.

So the spaces of a task with little work have no parallel loop: the same rules with
`max_jobs_per_core=-1`, every other rule, postprocessor and mutator as the target's defaults.
This is the space's definition (like PyTorch's `at::internal::GRAIN_SIZE` for its own kernels),
for every tuner: tlm's, random, and MetaSchedule's own through `tlm.search.baselines`. A task's
TIR and hash do not change; its programs are serial.
"""

from __future__ import annotations

# Iteration points summed over a task's blocks (reductions included) under which its spaces are
# serial. On znver3 (2 cores; bench/results/serial_tasks.md) every task below 65,536 ran faster on
# one thread (median 0.09x the parallel time, at most 0.86x). Above it one thread was still
# 0.52-0.98x there, 0.6-1.3x in a first probe with conv1d and bert_tiny tasks: larger tasks keep
# the choice, on hosts where two threads scale better than these.
SERIAL_WORK = 65536


def task_work(mod) -> int | None:
    """Iteration points of the blocks of `mod`'s main function summed (a matmul m x n x k counts
    m*n*k, a copy its elements); None when an extent is not a constant."""
    from tvm import s_tir

    sch = s_tir.Schedule(mod, debug_mask=0)
    total = 0
    stack = list(sch.get_child_blocks(sch.get_sblock("root", func_name="main")))
    while stack:
        rv = stack.pop()
        points = 1
        for iv in sch.get(rv).iter_vars:
            extent = iv.dom.extent
            if not hasattr(extent, "value"):
                return None
            points *= int(extent.value)
        total += points
    return total


def is_serial(task, target) -> bool:
    """Whether `task`'s spaces on `target` are serial: a CPU target and little work."""
    if target.kind == "cuda":
        return False
    work = task_work(task.mod)
    return work is not None and work < SERIAL_WORK


def serial_generator(ctx):
    """A PostOrderApply with the rules, postprocessors and mutators `ctx` (a TuneContext built with
    the target's default space generator) resolved, and no parallel loops."""
    from tvm.s_tir import meta_schedule as ms

    gen = ctx.space_generator
    rules = []
    for rule in gen.sch_rules:
        if isinstance(rule, ms.schedule_rule.ParallelizeVectorizeUnroll):
            rule = ms.schedule_rule.ParallelizeVectorizeUnroll(
                max_jobs_per_core=-1, max_vectorize_extent=int(rule.max_vectorize_extent),
                unroll_max_steps=[int(s) for s in rule.unroll_max_steps], unroll_explicit=bool(rule.unroll_explicit))
        rules.append(rule.clone())
    return ms.space_generator.PostOrderApply(sch_rules=rules, postprocs=list(gen.postprocs),
                                             mutator_probs=dict(gen.mutator_probs))
