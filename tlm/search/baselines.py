"""The baseline tuners, through the same measurer and database as the language model.

- metaschedule: MetaSchedule's evolutionary search with its XGBoost cost model, driven task by
  task through its TuneContext API (the loop its TaskScheduler runs), but every candidate goes
  through `tlm.measure.measurer.Measurer` and into `tlm.measure.database.Database`.
- random: random programs of the MetaSchedule design space (fresh decisions replayed on each
  space's trace, then the postprocessors), well-spread seeds, no repeats.
Both spend each task's budget in turn (task order = the model's, heaviest first).
"""

from __future__ import annotations

import json
import os
from typing import Any

from tlm.errors import check_interrupt, sigint_deferred
from tlm.graph.tasks import Task
from tlm.measure.measurer import Candidate
from tlm.search.base import Tuner, progress_bar, seeds, summarize
from tlm.space.design import plain_json


def tune_context(task: Task, target, strategy: str | None = None, seed: int | None = None):
    """MetaSchedule's TuneContext of a task: its design spaces, postprocessors, search strategy."""
    from tlm.space.design import space_context

    return space_context(  # the same spaces as tlm's own
        task, target, search_strategy=strategy, num_threads=max(1, target.cores if target.kind == "llvm" else (os.cpu_count() or 1)),
        rand_state=-1 if seed is None else int(seed) % (2**31 - 1),  # TVM takes an int64; task seeds are wider
    )


def metaschedule_first_round(task: Task, target, n: int, seed: int = 0) -> list:
    """The `n` schedules MetaSchedule measures first on a task (its evolutionary search with an
    empty database and an untrained XGBoost model: no measured feedback is needed, so this runs
    where the target's hardware is not, a GPU's included), in its order."""
    from tvm.s_tir import meta_schedule as ms

    ctx = tune_context(task, target, strategy="evolutionary", seed=seed)
    ctx.pre_tuning(max_trials=n, num_trials_per_iter=n, design_spaces=ctx.generate_design_space(),
                   database=ms.database.MemoryDatabase(),
                   cost_model=ms.cost_model.XGBModel(extractor="per-store-feature", adaptive_training=True))
    cands = list(ctx.generate_measure_candidates() or [])[:n]
    ctx.post_tuning()
    return [c.sch for c in cands]


def random_programs(task: Task, ctx, spaces, seeds: list[int], seen: set[str]) -> list:
    """Random schedules of the design spaces, skipping ones already in `seen` (trace JSON)."""
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    out = []
    for i, seed in enumerate(seeds):
        space = spaces[i % len(spaces)]
        try:
            sch = Schedule(task.mod, seed=seed)
            Trace(space.trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
            sch.enter_postproc()
            if not all(p.apply(sch) for p in ctx.space_generator.postprocs):
                continue
        except Exception:  # a sample the postprocessors reject is not a program
            continue
        key = json.dumps(plain_json(sch.trace.as_json()))
        if key not in seen:
            seen.add(key)
            out.append(sch)
    return out


class TaskByTaskTuner(Tuner):
    """A tuner that spends each task's budget in turn; subclasses tune one task (`_tune_task`)."""

    def _setup(self, left: list[int]) -> None:
        """Before the first task (`left`: measurements still to make per task)."""

    def _tune_task(self, task: Task, left: int, tick) -> None:
        raise NotImplementedError

    def run(self) -> list[dict[str, Any]]:
        self._start()
        left = [max(0, b - self.done(t)) for t, b in zip(self.tasks, self.budgets)]
        if any(left):
            self._setup(left)
        with progress_bar(disable=not self.progress) as bar:
            total = bar.add_task(f"{self.config.tuner}", total=sum(self.budgets),
                                 completed=sum(self.budgets) - sum(left), status="")
            for i, (task, n) in enumerate(zip(self.tasks, left)):
                if n <= 0:
                    continue

                def tick(results, task=task, i=i):
                    best = self.db.best(task.hash, self.target.key)
                    errs = sum(1 for r in results if not r.ok)
                    status = f"task {i + 1}/{len(self.tasks)} {task.name[:28]}"
                    status += f" best {best.median_s * 1e6:.1f} us" if best else " no valid program yet"
                    status += f" ({errs} errors in batch)" if errs else ""
                    bar.update(total, advance=len(results), status=status)

                self._tune_task(task, n, tick)
        self.measurer.close()
        return summarize(self.tasks, self.db, self.target, self.config.tuner)


class RandomTuner(TaskByTaskTuner):
    """Random programs of the design spaces, never one already in the database."""

    def _tune_task(self, task: Task, left: int, tick) -> None:
        ctx = tune_context(task, self.target)
        spaces = ctx.generate_design_space()
        seen = {json.dumps(r.trace_json) for r in self.db.records(task.hash, self.target.key)}
        rnd = self.db.last_round(task.hash, self.target.key, "random") + 1
        misses = 0
        while left > 0 and misses < 5:
            n = min(left, self.config.batch_size)
            schs = random_programs(task, ctx, spaces, seeds(self.config.seed, task, rnd, 4 * n), seen)[:n]
            misses = misses + 1 if not schs else 0
            if schs:
                results = self.measurer.measure(
                    [Candidate(task, schedule=s, proposer="random", round=rnd) for s in schs])
                self._commit(results)
                left -= len(results)
                tick(results)
            rnd += 1


class MetaScheduleTuner(TaskByTaskTuner):
    """MetaSchedule's evolutionary search and XGBoost cost model, one task at a time."""

    def _setup(self, left: list[int]) -> None:
        from tvm.s_tir import meta_schedule as ms

        # Resume: the search starts from every correct record measured before on this target.
        self.msdb = self.db.to_metaschedule(self.target, best_only=False)
        self.cost_model = ms.cost_model.XGBModel(extractor="per-store-feature", adaptive_training=True)

    def _tune_task(self, task: Task, left: int, tick) -> None:
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo

        msdb, cost_model = self.msdb, self.cost_model
        ctx = tune_context(task, self.target, strategy="evolutionary")
        ctx.pre_tuning(max_trials=left, num_trials_per_iter=min(left, self.config.batch_size),
                       design_spaces=ctx.generate_design_space(), database=msdb, cost_model=cost_model)
        workload = msdb.commit_workload(task.mod)
        args_info = ArgInfo.from_prim_func(task.mod["main"])
        rnd = self.db.last_round(task.hash, self.target.key, "metaschedule") + 1
        with sigint_deferred():  # Ctrl-C inside TVM's search would abort the process: honoured per batch
            self._search(ctx, msdb, cost_model, workload, args_info, task, left, rnd, tick)
        ctx.post_tuning()

    def _search(self, ctx, msdb, cost_model, workload, args_info, task: Task, left: int, rnd: int, tick) -> None:
        from tvm.s_tir.meta_schedule.database import TuningRecord
        from tvm.s_tir.meta_schedule.runner import RunnerResult

        while left > 0:
            check_interrupt()
            cands = ctx.generate_measure_candidates()
            if not cands:
                break
            cands = list(cands)[:left]
            results = self.measurer.measure(
                [Candidate(task, schedule=c.sch, proposer="metaschedule", round=rnd) for c in cands])
            self._commit(results)
            runner_results = [
                RunnerResult(r.latencies_s, None) if r.ok else RunnerResult(None, r.error or "failed")
                for r in results
            ]
            # What MetaSchedule's measure callbacks do: database, then cost model, then strategy.
            for c, r in zip(cands, results):
                if r.ok:
                    msdb.commit_tuning_record(TuningRecord(
                        c.sch.trace, workload, r.latencies_s, self.target.tvm(), args_info))
            cost_model.update(ctx, cands, runner_results)
            ctx.notify_runner_results(cands, runner_results)
            left -= len(results)
            rnd += 1
            tick(results)
