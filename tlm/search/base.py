"""Search, shared parts: the tuning config, budgets, seeds, and the `Tuner` base class.

A tuner proposes programs for tasks, measures them with `tlm.measure.measurer.Measurer` (a GPU's: `tlm.measure.cuda_local`) and
commits every result to `tlm.measure.database.Database` (proposer = the tuner's name). The
budget counts measurements (failures included) per task, proposer and target, so re-running
the same command resumes from what the database holds. The tuners: tlm.search.baselines
(MetaSchedule, random) and tlm.search.tlm_tuner (the language model); tlm.search.tune picks one.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from tlm.errors import TlmError
from tlm.graph.tasks import Task
from tlm.measure.cuda_local import measurer_for
from tlm.measure.config import MeasureConfig


@dataclass
class TuneConfig:
    """One tuning run; saved into the database's meta table."""

    tuner: str = "metaschedule"
    budget: str = "16g"
    batch_size: int = 16
    seed: int = 0
    model: str | None = None  # tlm: model directory (default: the shipped one for the target)
    round_size: int = 4  # tlm: new programs per task per scheduling round
    # tlm: the model's first choice for a task (what --budget 0 compiles, and the first program
    # measured): "cost" (the cost model's top pick of `pick_samples` distinct samples; by log-prob
    # when there is no cost model), "logprob" (the most likely sample by generation log-prob) or
    # "greedy" (word-by-word argmax). cost < logprob < greedy in latency (bench/results/learning-cm).
    pick: str = "cost"
    pick_samples: int = 32
    # tlm: a first choice that redoes work gives way to the next one ranked (tlm.space.build_cost);
    # False keeps it (to time a model with and without the check: bench/pick.py --lean-check both)
    lean_check: bool = True
    # tlm: the measured programs of this many corpus tasks with the task's operators at the
    # nearest shapes join the first choice's samples, their decisions carried over (tlm.search.donors;
    # 0: the samples only)
    donors: int = 3
    # tlm: the cost model ranking the model's samples (tlm.search.costmodel): "auto" (the shipped
    # one for the target, if any), "none", or a directory. With one, a task's n new programs are
    # the n it ranks first of `cm_pool` x n samples (the rest are not measured).
    cost_model: str = "auto"
    cm_pool: int = 4
    # tlm: the cost model learns from the task's own measurements as the run goes: before ranking
    # a task's samples, it is boosted `cm_adapt_trees` more rounds on that task's programs measured
    # in this run (CostModel.adapted; 0: the shipped model as is).
    cm_adapt_trees: int = 20
    measure: MeasureConfig = field(default_factory=MeasureConfig)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def parse_budget(text: str | int, num_tasks: int, allow_zero: bool = False) -> list[int]:
    """Per-task measurement budgets from `B` (a total, split evenly) or `Kg` (K per task).

    `allow_zero`: accept 0 (the tlm tuner's "greedy program only, no measurement")."""
    s = str(text).strip().lower()
    m = re.fullmatch(r"(\d+)(g?)", s)
    if not m or (int(m.group(1)) <= 0 and not allow_zero):
        raise TlmError(f"bad budget {text!r}: use a total number of measurements (e.g. 200) or Kg (e.g. 4g)")
    n = int(m.group(1))
    if m.group(2):
        return [n] * num_tasks
    return [n // num_tasks + (1 if i < n % num_tasks else 0) for i in range(num_tasks)]


def seeds(seed: int, task: Task, round_: int, n: int) -> list[int]:
    """Well-spread seeds: small consecutive seeds give nearly identical first draws in TVM."""
    import numpy as np

    rng = np.random.default_rng([seed, int(task.hash, 16) & 0x7FFFFFFF, round_])
    return [int(x) for x in rng.integers(1, 2**31 - 1, size=n)]


def stderr_console():
    from rich.console import Console

    return Console(stderr=True)


class Tuner:
    """Runs one tuner over tasks; `run()` commits every measurement and returns summary rows."""

    allow_zero = False  # whether budget 0 means something (the tlm tuner's greedy programs)

    def __init__(self, tasks: list[Task], db, target, config: TuneConfig, progress: bool = True):
        self.tasks, self.db, self.target, self.config = tasks, db, target, config
        self.budgets = parse_budget(config.budget, len(tasks), allow_zero=self.allow_zero)
        self.progress = progress
        self.measurer = measurer_for(target, config.measure)  # a CUDA target's: this machine's GPU
        self.measured = 0

    def done(self, task: Task) -> int:
        return self.db.count(task.hash, self.target.key, self.config.tuner)

    def _commit(self, results) -> None:
        self.db.add_results(results, self.target.key)
        self.measured += len(results)

    def _start(self) -> None:
        """Register the tasks and this run's config in the database."""
        for t in self.tasks:
            self.db.add_task(t)
        self.db.set_meta(f"tune_config/{self.config.tuner}", self.config.to_json())
        self.db.set_meta("target", self.target.config)

    def run(self) -> list[dict[str, Any]]:
        raise NotImplementedError


def progress_bar(disable: bool):
    """The tuners' rich progress bar on stderr: description, bar, count, time, status."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("{task.fields[status]}"),
                    disable=disable, transient=False, console=stderr_console())


def summarize(tasks: list[Task], db, target, proposer: str | None = None) -> list[dict[str, Any]]:
    rows = []
    for t in tasks:
        recs = db.records(t.hash, target.key, proposer)
        best = db.best(t.hash, target.key)
        rows.append({
            "name": t.name, "hash": t.hash, "weight": t.weight, "measured": len(recs),
            "errors": sum(1 for r in recs if r.error), "best_us": best.median_s * 1e6 if best else None,
            "gflops": t.flops / best.median_s / 1e9 if best and best.median_s else None,
        })
    return rows


def print_summary(rows: list[dict[str, Any]], title: str) -> None:
    from rich.table import Table

    table = Table(title=title)
    for col in ("#", "task", "weight", "measured", "errors", "best us", "GFLOPS"):
        table.add_column(col, justify="left" if col == "task" else "right")
    for i, r in enumerate(rows):
        best = f"{r['best_us']:.1f}" if r["best_us"] else ("greedy" if r.get("status") == "greedy" else "-")
        table.add_row(str(i), r["name"], str(r["weight"]), str(r["measured"]), str(r["errors"]),
                      best, f"{r['gflops']:.1f}" if r["gflops"] else "-")
    est = sum(r["weight"] * r["best_us"] for r in rows if r["best_us"])
    table.caption = f"weighted sum of best task latencies: {est / 1e3:.3f} ms"
    stderr_console().print(table)
