"""Tuners through the shared measurer and database: `tlm tune SOURCE --tuner ...`.

- tlm: the language model proposes the programs (tlm/tune_tlm.py: greedy program first, then
  samples, rounds to the tasks that take the most time; `--budget 0`: the greedy program only).

- metaschedule: MetaSchedule's evolutionary search with its XGBoost cost model, driven task by
  task through its TuneContext API (the loop its TaskScheduler runs), but every candidate goes
  through `tlm.measure.Measurer` and into `tlm.database.Database`.
- random: random programs of the MetaSchedule design space (fresh decisions replayed on each
  space's trace, then the postprocessors), well-spread seeds, no repeats.
The budget counts measurements (failures included) per task, proposer and target (the tlm
tuner spends the same total where it helps most); re-running the same command resumes from
what the database holds.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from tlm.errors import TlmError
from tlm.measure import Candidate, MeasureConfig, Measurer, plain_json
from tlm.tasks import Task

TUNERS = ("metaschedule", "random", "tlm")


@dataclass
class TuneConfig:
    """One tuning run; saved into the database's meta table."""

    tuner: str = "metaschedule"
    budget: str = "16g"
    batch_size: int = 16
    seed: int = 0
    model: str | None = None  # tlm: model directory (default: the shipped one for the target)
    round_size: int = 4  # tlm: new programs per task per scheduling round
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


def _seeds(seed: int, task: Task, round_: int, n: int) -> list[int]:
    """Well-spread seeds: small consecutive seeds give nearly identical first draws in TVM."""
    import numpy as np

    rng = np.random.default_rng([seed, int(task.hash, 16) & 0x7FFFFFFF, round_])
    return [int(x) for x in rng.integers(1, 2**31 - 1, size=n)]


def _context(task: Task, target, strategy: str | None = None):
    from tlm.intrin import light_tensor_intrin
    from tvm.s_tir import meta_schedule as ms

    light_tensor_intrin()
    return ms.TuneContext(
        mod=task.mod, target=target.tvm(), space_generator="post-order-apply",
        search_strategy=strategy, task_name=task.name, num_threads=max(1, target.cores),
    )


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


class Tuner:
    """Runs one tuner over tasks; `run()` returns the summary rows. `Tuner(...)` with
    `config.tuner == "tlm"` is a `tlm.tune_tlm.TlmTuner`."""

    def __new__(cls, tasks=None, db=None, target=None, config=None, *args, **kwargs):
        if cls is Tuner and config is not None and config.tuner == "tlm":
            from tlm.tune_tlm import TlmTuner

            return super().__new__(TlmTuner)
        return super().__new__(cls)

    def __init__(self, tasks: list[Task], db, target, config: TuneConfig, progress: bool = True):
        if config.tuner not in TUNERS:
            raise TlmError(f"bad tuner {config.tuner!r}: use one of {', '.join(TUNERS)}")
        self.tasks, self.db, self.target, self.config = tasks, db, target, config
        self.budgets = parse_budget(config.budget, len(tasks))
        self.progress = progress
        self.measurer = Measurer(target, config.measure)
        self.measured = 0

    def done(self, task: Task) -> int:
        return self.db.count(task.hash, self.target.key, self.config.tuner)

    def _commit(self, results) -> None:
        self.db.add_results(results, self.target.key)
        self.measured += len(results)

    def _tune_random(self, task: Task, left: int, tick) -> None:
        ctx = _context(task, self.target)
        spaces = ctx.generate_design_space()
        seen = {json.dumps(r.trace_json) for r in self.db.records(task.hash, self.target.key)}
        rnd = self.db.last_round(task.hash, self.target.key, "random") + 1
        misses = 0
        while left > 0 and misses < 5:
            n = min(left, self.config.batch_size)
            schs = random_programs(task, ctx, spaces, _seeds(self.config.seed, task, rnd, 4 * n), seen)[:n]
            misses = misses + 1 if not schs else 0
            if schs:
                results = self.measurer.measure(
                    [Candidate(task, schedule=s, proposer="random", round=rnd) for s in schs])
                self._commit(results)
                left -= len(results)
                tick(results)
            rnd += 1

    def _tune_metaschedule(self, task: Task, left: int, tick, msdb, cost_model) -> None:
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo
        from tvm.s_tir.meta_schedule.database import TuningRecord
        from tvm.s_tir.meta_schedule.runner import RunnerResult

        ctx = _context(task, self.target, strategy="evolutionary")
        ctx.pre_tuning(max_trials=left, num_trials_per_iter=min(left, self.config.batch_size),
                       design_spaces=ctx.generate_design_space(), database=msdb, cost_model=cost_model)
        workload = msdb.commit_workload(task.mod)
        args_info = ArgInfo.from_prim_func(task.mod["main"])
        rnd = self.db.last_round(task.hash, self.target.key, "metaschedule") + 1
        while left > 0:
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
        ctx.post_tuning()

    def run(self) -> list[dict[str, Any]]:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        for t in self.tasks:
            self.db.add_task(t)
        self.db.set_meta(f"tune_config/{self.config.tuner}", self.config.to_json())
        self.db.set_meta("target", self.target.config)
        left = [max(0, b - self.done(t)) for t, b in zip(self.tasks, self.budgets)]
        msdb = cost_model = None
        if self.config.tuner == "metaschedule" and any(left):
            from tvm.s_tir import meta_schedule as ms

            # Resume: the search starts from every correct record measured before on this target.
            msdb = self.db.to_metaschedule(self.target, best_only=False)
            cost_model = ms.cost_model.XGBModel(extractor="per-store-feature", adaptive_training=True)
        with Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("{task.fields[status]}"),
            disable=not self.progress, transient=False, console=_stderr_console(),
        ) as bar:
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

                if self.config.tuner == "random":
                    self._tune_random(task, n, tick)
                else:
                    self._tune_metaschedule(task, n, tick, msdb, cost_model)
        self.measurer.close()
        return summarize(self.tasks, self.db, self.target, self.config.tuner)


def _stderr_console():
    from rich.console import Console

    return Console(stderr=True)


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
    _stderr_console().print(table)


def tune(source: str | list[Task], tuner: str = "metaschedule", budget: str | int = "16g",
         db: str = "tlm-db", target=None, config: TuneConfig | None = None,
         progress: bool = True, model: str | None = None) -> list[dict[str, Any]]:
    """Tune a model's tasks (a zoo name, an .onnx path, or a list of Tasks) into the database.

    `tuner="tlm"` uses the language model in `model` (a directory; default: the shipped model
    for the target) and accepts `budget=0` (store each task's greedy program, measure nothing).
    """
    from tlm.database import open_db
    from tlm.target import resolve_target

    config = config or TuneConfig()
    config.tuner, config.budget = tuner, str(budget)
    if model is not None:
        config.model = str(model)
    if tuner not in TUNERS:
        raise TlmError(f"bad tuner {tuner!r}: use one of {', '.join(TUNERS)}")
    if config.model and tuner != "tlm":
        raise TlmError("a model is only used by the tlm tuner (--tuner tlm)")
    allow_zero = tuner == "tlm"
    parse_budget(config.budget, 1, allow_zero)  # a bad budget fails before any model is imported
    info = resolve_target(target)
    if isinstance(source, str):
        from tlm.graph import tasks_for_source

        tasks = tasks_for_source(source, target=info).tasks
    else:
        tasks = list(source)
    if not tasks:
        raise TlmError("no tuning tasks found")
    parse_budget(config.budget, len(tasks), allow_zero)  # bad budgets fail before the database is touched
    if tuner == "tlm" and config.model is None:
        from tlm.tune_tlm import default_model_dir

        default_model_dir(info)  # a missing model fails before the database is touched
    database = open_db(db)
    try:
        return Tuner(tasks, database, info, config, progress=progress).run()
    finally:
        database.close()


def measure_config_from_args(args: argparse.Namespace) -> MeasureConfig:
    cfg = MeasureConfig(repeat=args.repeat, min_repeat_ms=args.min_repeat_ms)
    if args.rpc_tracker:
        host, _, port = args.rpc_tracker.rpartition(":")
        if not host or not port.isdigit():
            raise TlmError(f"bad --rpc-tracker {args.rpc_tracker!r}: use HOST:PORT")
        cfg.tracker_host, cfg.tracker_port, cfg.tracker_key = host, int(port), args.rpc_key
        cfg.rpc_workers = args.rpc_workers
    return cfg


def add_measure_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repeat", type=int, default=5, help="timed repeats per program (median)")
    p.add_argument("--min-repeat-ms", type=int, default=30, help="minimum duration of one repeat")
    p.add_argument("--rpc-tracker", default=None, help="HOST:PORT of a TVM RPC tracker to measure on")
    p.add_argument("--rpc-key", default="tlm", help="device key registered with the tracker")
    p.add_argument("--rpc-workers", type=int, default=1, help="parallel RPC sessions")


def _cmd_tune(args: argparse.Namespace) -> int:
    config = TuneConfig(batch_size=args.batch_size, seed=args.seed, measure=measure_config_from_args(args))
    rows = tune(args.source, args.tuner, args.budget, args.db, args.target, config,
                progress=not args.json and sys.stderr.isatty() or args.progress, model=args.model)
    if args.json:
        json.dump({"source": args.source, "tuner": args.tuner, "budget": args.budget,
                   "measurements": sum(r["measured"] for r in rows), "tasks": rows}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_summary(rows, f"{args.source}: {args.tuner}, budget {args.budget}")
    return 0


def register_cli(sub) -> None:
    p = sub.add_parser("tune", help="tune a model's tasks (language model or a baseline) into a record database")
    p.add_argument("source", help="a zoo workload name or a path to an .onnx file")
    p.add_argument("--tuner", choices=TUNERS, default="metaschedule")
    p.add_argument("--budget", default="16g",
                   help="total measurements B, or Kg for K per task (tlm: 0 = greedy program only)")
    p.add_argument("--model", default=None,
                   help="tlm: model directory (default: pretrained/tlm-ft-KIND-ISA, else tlm-base-KIND-ISA)")
    p.add_argument("--db", required=True, help="record database directory")
    p.add_argument("--target", default=None, help="'host' (default), or a TVM target as JSON")
    p.add_argument("--batch-size", type=int, default=16, help="candidates measured per batch")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--progress", action="store_true", help="show progress even when not a terminal")
    add_measure_args(p)
    p.set_defaults(func=_cmd_tune)
