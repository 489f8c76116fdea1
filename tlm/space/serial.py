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

Unless what it writes is large (SERIAL_OUT_BYTES) and the model runs on more than one core: a
serial kernel runs on the calling thread, so it reads the half of its input that the other core
wrote in the parallel kernel before it, and the parallel kernel after it reads half of its output
from this core. On znver4 (2 cores, `python bench/serial_bytes.py`, 2026-12-06) that costs more
than the pool trip it saves from 32 KB up: a serial copy of a row-parallel kernel's output took
0.5 us longer in sequence than alone at 16 KB, 1.9 at 32 KB, 4.7 at 64 KB and 18.4 at 256 KB, a
copy split by the same rows 0.1-0.6 us, where a trip through the pool cost 1.15 us. bert_tiny's
layer norms ([128, 128], 64 KB) were such kernels; whole models gained up to 13% (densenet_block,
bench/results/serial_bytes-models.md).
"""

from __future__ import annotations

# Iteration points summed over a task's blocks (reductions included) under which its spaces are
# serial. On znver3 (2 cores; bench/results/serial_tasks.md) every task below 65,536 ran faster on
# one thread (median 0.09x the parallel time, at most 0.86x). Above it one thread was still
# 0.52-0.98x there, 0.6-1.3x in a first probe with conv1d and bert_tiny tasks: larger tasks keep
# the choice, on hosts where two threads scale better than these.
SERIAL_WORK = 65536
# Bytes of a task's output from which it keeps its parallel loops on a target of several cores,
# whatever its work (the module's docstring; bench/results/serial_bytes.md).
SERIAL_OUT_BYTES = 32768


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


def output_bytes(task) -> int:
    """Bytes of the task's output (its function's last argument)."""
    import math

    import tvm

    if not task.args:
        return 0
    out = task.args[-1]
    dtype = tvm.DataType(out["dtype"])
    return math.prod(out["shape"]) * ((dtype.bits * dtype.lanes + 7) // 8)


def is_serial(task, target) -> bool:
    """Whether `task`'s spaces on `target` are serial: a CPU target, little work, and on several
    cores an output small enough that no other core has to fetch it (SERIAL_OUT_BYTES)."""
    if target.kind == "cuda" or (target.cores > 1 and output_bytes(task) >= SERIAL_OUT_BYTES):
        return False  # the byte count first: task_work builds a schedule of the task
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
