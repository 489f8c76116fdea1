"""`tlm tune SOURCE --tuner tlm|metaschedule|random --budget B|Kg --db DIR`: one entry for every tuner.

- tlm: the language model proposes the programs (tlm.search.tlm_tuner: greedy program first, then
  samples, rounds to the tasks that take the most time; `--budget 0`: the greedy program only).
- metaschedule, random: the baselines (tlm.search.baselines).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tlm.errors import TlmError
from tlm.graph.target import resolve_target
from tlm.graph.tasks import Task
from tlm.measure.database import open_db
from tlm.measure.config import add_measure_args, measure_config_from_args
from tlm.model.lm import default_model_dir
from tlm.search.base import TuneConfig, Tuner, parse_budget, print_summary
from tlm.search.baselines import MetaScheduleTuner, RandomTuner
from tlm.search.tlm_tuner import TlmTuner

TUNERS: dict[str, type[Tuner]] = {"metaschedule": MetaScheduleTuner, "random": RandomTuner, "tlm": TlmTuner}


def tune(source: str | list[Task], tuner: str = "metaschedule", budget: str | int = "16g",
         db: str = "tlm-db", target=None, config: TuneConfig | None = None,
         progress: bool = True, model: str | None = None) -> list[dict[str, Any]]:
    """Tune a model's tasks (a zoo name, an .onnx path, or a list of Tasks) into the database.

    `tuner="tlm"` uses the language model in `model` (a directory; default: the shipped model
    for the target) and accepts `budget=0` (store each task's greedy program, measure nothing).
    """

    config = config or TuneConfig()
    config.tuner, config.budget = tuner, str(budget)
    if model is not None:
        config.model = str(model)
    if tuner not in TUNERS:
        raise TlmError(f"bad tuner {tuner!r}: use one of {', '.join(TUNERS)}")
    if config.model and tuner != "tlm":
        raise TlmError("a model is only used by the tlm tuner (--tuner tlm)")
    allow_zero = TUNERS[tuner].allow_zero
    parse_budget(config.budget, 1, allow_zero)  # a bad budget fails before any model is imported
    info = resolve_target(target)
    if isinstance(source, str):
        from tlm.graph.extract import tasks_for_source

        tasks = tasks_for_source(source, target=info).tasks
    else:
        tasks = list(source)
    if not tasks:
        raise TlmError("no tuning tasks found")
    if sum(parse_budget(config.budget, len(tasks), allow_zero)) and info.kind == "cuda":  # bad budgets fail before the database is touched
        from tlm.measure.cuda_local import local_gpu

        if why := local_gpu(info):
            raise TlmError(f"measuring {info.kind} programs needs this machine's NVIDIA GPU: {why}. Use --budget 0 "
                           "(the cost model's pick, nothing measured), or build a bundle here (tlm gpu bundle) and "
                           "measure it on a GPU machine (bench/gpu_device.sh)")
    if tuner == "tlm" and config.model is None:
        default_model_dir(info)  # a missing model fails before the database is touched
    if tuner == "tlm" and config.cost_model not in ("auto", "none"):
        from tlm.search.costmodel import CostModel

        CostModel.load(config.cost_model)  # so does a bad --cost-model
    tasks = tunable(tasks, info)
    database = open_db(db)  # also when no task has a design space: the compile builds them untuned from it
    try:
        return TUNERS[tuner](tasks, database, info, config, progress=progress).run() if tasks else []
    finally:
        database.close()


def tunable(tasks: list[Task], target) -> list[Task]:
    """The tasks that have a design space; each one without is said once and left to TVM's
    default schedule (the whole-model build lowers it untuned): a model with a cumulative sum
    (RoBERTa's position ids), whose TOPI form has no block MetaSchedule can schedule, compiles
    instead of being refused."""
    from tlm.space.design import task_space

    out = []
    for task in tasks:
        try:
            task_space(task, target)
        except TlmError as err:
            print(f"tlm: warning: {err}; {task.name} is compiled with TVM's default schedule, untuned",
                  file=sys.stderr)
            continue
        out.append(task)
    return out


def _cmd_tune(args: argparse.Namespace) -> int:
    if args.cm_adapt_trees < 0:
        raise TlmError("--cm-adapt-trees must be >= 0")
    config = TuneConfig(batch_size=args.batch_size, seed=args.seed, measure=measure_config_from_args(args),
                        cost_model=args.cost_model, cm_adapt_trees=args.cm_adapt_trees, donors=args.donors)
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
    p.add_argument("--tuner", choices=tuple(TUNERS), default="metaschedule")
    p.add_argument("--budget", default="16g",
                   help="total measurements B, or Kg for K per task (tlm: 0 = greedy program only)")
    p.add_argument("--model", default=None,
                   help="tlm: model directory (default: the shipped model for the target's ISA, else the nearest one)")
    p.add_argument("--cost-model", default="auto",
                   help="tlm: the cost model ranking the samples: auto (the shipped one for the target), "
                        "none, or a directory (tlm costmodel)")
    p.add_argument("--cm-adapt-trees", type=int, default=TuneConfig.cm_adapt_trees,
                   help="tlm: trees the cost model is boosted on a task's measured programs before ranking "
                        "its later samples (0: off)")
    p.add_argument("--db", required=True, help="record database directory")
    p.add_argument("--target", default=None, help="'host' (default), or a TVM target as JSON")
    p.add_argument("--batch-size", type=int, default=16, help="candidates measured per batch")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--donors", type=int, default=TuneConfig.donors, metavar="K",
                   help="tlm: the measured programs of the K corpus tasks with the same operators at the nearest "
                        "shapes join each task's first-choice samples (0: the samples only; tlm.search.donors)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--progress", action="store_true", help="show progress even when not a terminal")
    add_measure_args(p)
    p.set_defaults(func=_cmd_tune)
