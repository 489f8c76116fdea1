"""The main job: `tlm compile SOURCE [--budget Kg] [--db DIR]` and `tlm.compile(...)`.

`tlm compile SOURCE --db DIR [-o OUT] [--json]` and `compile_model(module, example_inputs,
db=...)` compile with the records of a database (tlm/compiler/build.py). With `--budget Kg`
(`compile_model(..., budget=)`) the model's tasks are first tuned with the TLM tuner
(tlm/search/tlm_tuner.py), into `--db` or a run directory under the tlm cache, then compiled in one go.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from tlm.compiler.build import CompileConfig, CompiledModel, compile_imported
from tlm.errors import TlmError


def default_run_dir(source: str, target) -> str:
    """Where `--budget` without `--db` keeps its records: TLM_CACHE/runs/SOURCE-TARGETDIGEST.

    Records are keyed by task and target, so models that share tasks may share the directory."""
    import hashlib
    import re

    from tlm.graph.extract import cache_dir
    from tlm.graph.target import resolve_target

    info = resolve_target(target)
    name = os.path.basename(source)[: -len(".onnx")] if source.endswith(".onnx") else source
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_.") or "model"
    digest = hashlib.sha256(info.key.encode()).hexdigest()[:12]
    return str(cache_dir() / "runs" / f"{slug[:60]}-{digest}")


def tune_and_compile(imported, tasks, target, *, db: str | None, budget: str | int | None,
                     model: str | None = None, tune_config=None, output: str | None = None,
                     config: CompileConfig | None = None, progress: bool = False) -> CompiledModel:
    """Tune `tasks` with the TLM tuner to `budget` (unless it is None), then compile."""
    from tlm.graph.target import resolve_target

    info = resolve_target(target)
    t0 = time.perf_counter()
    db, tune_s, earlier = _tune_first(imported, tasks, info, db, budget, model, tune_config, progress)
    out = compile_imported(imported, db, target=info, output=output, config=config, tasks=tasks)
    out.budget = None if budget is None else str(budget)
    out.tune_s = tune_s
    out.earlier_measurements = earlier
    out.wall_s = time.perf_counter() - t0
    return out


def _tune_first(imported, tasks, info, db, budget, model, tune_config, progress) -> tuple[str, float | None, int]:
    """Tune `tasks` into `db` (a run directory by default) when a budget is given: (db, tuning
    seconds or None, measurements the database held before)."""
    t0 = time.perf_counter()
    tune_s, earlier = None, 0
    if budget is not None:
        from tlm.search.base import TuneConfig
        from tlm.search.tune import tune

        db = db or default_run_dir(imported.source, info)
        earlier = _measured_before(db, tasks, info)
        try:
            tune(list(tasks), "tlm", budget, db, target=info, config=tune_config or TuneConfig(),
                 progress=progress, model=model)
        except Exception as err:  # TVM's own errors become one line naming the stage (tlm.graph.diagnose)
            from tlm.errors import interrupted
            from tlm.graph.diagnose import SCHEDULE, explain

            if isinstance(err, TlmError) or interrupted():
                raise
            raise TlmError(explain(err, "tuning", SCHEDULE)) from None
        tune_s = time.perf_counter() - t0
    elif db is None:
        raise TlmError("a record database (db) is needed unless a budget is given")
    elif model is not None:
        raise TlmError("a model is only used with a budget (it tunes the tasks first)")
    if not os.path.isdir(db):
        raise TlmError(f"no record database directory {db}")
    return db, tune_s, earlier


def tune_and_plan(imported, tasks, target, *, db: str | None, budget: str | int | None,
                  model: str | None = None, tune_config=None, output: str | None = None,
                  progress: bool = False) -> dict[str, Any]:
    """A GPU target: tune (budget 0 needs no GPU), then write the whole-model GPU plan
    (tlm.compiler.gpu_plan) to `output` (default: the run directory's `plan`), the records of
    `db` applied and TVM's dlight rules for the other tasks; then, on a machine with the target's
    GPU (tlm.measure.cuda_local.local_gpu), runs, checks and times it there. Elsewhere nothing runs
    (TVM's wheel has no CUDA runtime): `python -m tlm.measure.cuda_plan PLAN` does it on a GPU machine."""
    from tlm.compiler.gpu_plan import build_plan, summary

    t0 = time.perf_counter()
    db, tune_s, earlier = _tune_first(imported, tasks, target, db, budget, model, tune_config, progress)
    out = output or os.path.join(db, "plan")
    plan = build_plan(imported.source, target=target, db=db, out=out, imported=imported, tasks=tasks)
    report = {"source": imported.source, "target": target.config, "card": plan.meta["card"],
              "budget": None if budget is None else str(budget), "db": db, "plan": os.path.abspath(out),
              "summary": summary(plan), "schedules": plan.meta["schedules"], "db_tasks": plan.meta["db_tasks"],
              "files_bytes": plan.meta.get("files_bytes"), "earlier_measurements": earlier, "tune_s": tune_s,
              "run": f"python -m tlm.measure.cuda_plan {out} --out RESULTS", "ran": None}
    report["not_run"] = _run_here(report, target, out)
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    return report


def _run_here(report: dict[str, Any], target, out: str) -> str | None:
    """Run and check the plan on this machine's GPU (report["ran"]: tlm.measure.cuda_plan's
    result); or why not, when there is none. A wrong or failed run raises."""
    from pathlib import Path

    from tlm.measure.cuda_local import local_gpu

    if why := local_gpu(target):
        return why
    from tlm.measure.cuda_plan import run

    ran = report["ran"] = run(Path(out), Path(out) / "run", log=lambda *_: None)
    if ran.get("error") or ran.get("wrong"):
        raise TlmError(f"the plan ran on this GPU and failed: {ran.get('error') or ran.get('why') or 'wrong output'} "
                       f"(max abs diff {ran.get('max_abs_diff')}; {Path(out) / 'run'})")
    return None


NOT_RUN = ("not run or checked here, {why}; on a machine with the NVIDIA GPU (Python with numpy, CuPy and nvcc; "
           "no TVM needed) `{run}` compiles it, checks the output against this CPU's and times it")


def _measured_before(db: str, tasks, info) -> int:
    """Records of these tasks already in `db` before tuning: a budget counts what is measured on
    top of them, so a run directory that an earlier, bigger budget filled is reused as it is."""
    if not os.path.isdir(db):
        return 0
    from tlm.measure.database import GREEDY, open_db

    database = open_db(db, create=False)
    try:  # as compile_database counts them: greedy programs are stored, not measured
        return sum(database.count(t.hash, info.key) - database.count(t.hash, info.key, GREEDY) for t in tasks)
    finally:
        database.close()


def compile_model(module, example_inputs=None, *, db: str | None = None, target=None,
                  output: str | None = None, config: CompileConfig | None = None,
                  budget: str | int | None = None, model: str | None = None, tune_config=None,
                  progress: bool = False) -> CompiledModel:
    """`tlm.compile`: a torch.nn.Module (with example inputs), a zoo name or an .onnx path ->
    a callable compiled model with its latency figures.

    With `budget` (e.g. "4g", 200 or 0) the model's tasks are first tuned with the TLM tuner
    (`model`: its model directory, default the shipped one) into `db` (default: a run
    directory under the tlm cache); without it `db` is required and only read."""
    from tlm.graph.extract import load
    from tlm.graph.target import resolve_target

    info = resolve_target(target)
    if info.kind == "cuda":
        raise TlmError(f"a model for {info.kind} is built as a GPU plan, not a callable here (no GPU): "
                       "`tlm compile SOURCE --target GPU --budget 0 -o DIR` writes one")
    imported, tasks = load(module, example_inputs, info)
    return tune_and_compile(imported, tasks, info, db=db, budget=budget, model=model,
                            tune_config=tune_config, output=output, config=config, progress=progress)


def _fmt_us(row: dict[str, Any]) -> str:
    if row["best_us"]:  # "c": re-picked cold on the cores; "*": not the one-thread best (fewer cores)
        return f"{row['best_us']:.1f}" + ("c" if row.get("cold_picked") else "*" if row.get("for_threads") else "")
    return "greedy" if row["status"] == "greedy" else "untuned"


def _cmd_compile(args: argparse.Namespace) -> int:
    from tlm.graph.extract import load
    from tlm.graph.sources import check_source
    from tlm.graph.target import resolve_target
    from tlm.search.base import TuneConfig

    t0 = time.perf_counter()
    check_source(args.source)
    if args.budget is None and args.db is None:
        raise TlmError("give --db DIR (a tuned record database) or --budget B|Kg (tune with the TLM tuner first)")
    if args.budget is None and args.model is not None:
        raise TlmError("--model needs --budget (it tunes the tasks first)")
    if args.cold_pick < 0:
        raise TlmError(f"--cold-pick must be 0 or more, not {args.cold_pick}")
    if args.budget is None and not os.path.isdir(args.db):
        raise TlmError(f"no record database directory {args.db}")
    if args.budget is not None:
        from tlm.search.base import parse_budget

        parse_budget(args.budget, 1, allow_zero=True)  # a bad budget fails before the import
    info = resolve_target(args.target)
    imported, tasks = load(args.source, target=info)
    cfg = CompileConfig(repeat=args.repeat, compare=not args.no_compare, cold_pick=args.cold_pick)
    tcfg = TuneConfig(batch_size=args.batch_size, seed=args.seed, cost_model=args.cost_model, donors=args.donors)
    progress = not args.json and sys.stderr.isatty() or args.progress
    if info.kind == "cuda":
        return _plan_report(tune_and_plan(imported, tasks, info, db=args.db, budget=args.budget, model=args.model,
                                          tune_config=tcfg, output=args.output, progress=progress), args)
    model = tune_and_compile(imported, tasks, info, db=args.db, budget=args.budget,
                             model=args.model, tune_config=tcfg, output=args.output, config=cfg,
                             progress=progress)
    model.wall_s = time.perf_counter() - t0  # the whole command, task extraction included
    report = {"source": args.source, **model.to_json()}
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        from rich.console import Console
        from rich.table import Table

        console = Console(width=None if sys.stdout.isatty() else 200)
        tasks_table = Table(title=f"{args.source}: tasks ({model.tuned_tasks} tuned, "
                                  f"{model.greedy_tasks} greedy, of {model.tasks})")
        for col in ("#", "task", "weight", "measured", "best us"):
            tasks_table.add_column(col, justify="left" if col == "task" else "right")
        for i, r in enumerate(model.task_rows):
            tasks_table.add_row(str(i), r["name"], str(r["weight"]), str(r["measured"]), _fmt_us(r))
        est = model.weighted_task_latency_us
        tasks_table.caption = ("total weighted latency of the tuned tasks: "
                               + ("-" if est is None else f"{est / 1e3:.3f} ms") + " (one thread)"
                               + ("; * a record estimated faster on the cores than the one-thread best"
                                  if any(r.get("for_threads") and not r.get("cold_picked") for r in model.task_rows) else "")
                               + ("; c a record timed faster with its weights cold on the cores (tlm.compiler.cold_pick)"
                                  if any(r.get("cold_picked") for r in model.task_rows) else ""))
        console.print(tasks_table)
        fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        table = Table(title=f"{args.source}: {model.tuned_tasks}/{model.tasks} tasks tuned, "
                            f"{model.measurements} measurements, {model.threads} threads")
        for col in ("runtime", "median ms"):
            table.add_column(col, justify="right" if col != "runtime" else "left")
        table.add_row("tlm (TVM)", fmt(model.latency_ms))
        table.add_row("PyTorch eager", fmt(model.pytorch_ms))
        table.add_row("ONNX Runtime", fmt(model.onnxruntime_ms))
        console.print(table)
        verdict = "match" if model.matches else "MISMATCH"
        print(f"outputs {verdict}: max abs diff {model.max_abs_diff:.3g} (tolerance {model.tolerance:.3g})")
        if model.onnxruntime_note:
            print(f"ONNX Runtime: {model.onnxruntime_note}")
        budget = f", budget {model.budget}" if model.budget is not None else ""
        tuning = f" ({model.tune_s:.1f} s tuning)" if model.tune_s is not None else ""
        cold = ""
        if fp := model.final_pick:
            cold = (f"; final pick: {len(fp['timed'])} tasks' best records timed cold on {model.threads} threads "
                    f"({model.cold_measurements} re-timings now), {len(fp['changed'])} changed"
                    + (f", whole model {fp['whole_ms'][1]:.3g} ms against {fp['whole_ms'][0]:.3g} "
                       f"(faster in {fp.get('wins', '?')} of {fp.get('rounds', '?')} rounds): "
                       + ("applied" if fp["applied"] else "not applied") if "whole_ms" in fp else ""))
        print(f"measurements: {model.measurements}{budget}{model.earlier_note()}{cold}; wall time "
              f"{model.wall_s:.1f} s{tuning}")
        print(f"records: {model.db}")
        print(f"artifact: {model.artifact}")
    if (note := model.untuned_note()) is not None:  # on stderr, with --json too
        print(f"tlm: warning: {note}", file=sys.stderr)
    return 0 if model.matches else 3


def _plan_report(report: dict[str, Any], args: argparse.Namespace) -> int:
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        t = report["db_tasks"] or {}
        print(f"{report['summary']}")
        print(f"tasks: {t.get('tuned', 0)} tuned, {t.get('greedy', 0)} with the cost model's pick unmeasured "
              f"(budget {report['budget']}), {t.get('untuned', 0)} untuned (dlight's rules)")
        print(f"records: {report['db']}")
        print(f"plan: {report['plan']}")
        if ran := report.get("ran"):
            print(f"ran on this GPU ({ran['device']['name']}): {ran['median_ms']:.3f} ms median, output checked against "
                  f"this CPU's (max abs diff {ran['max_abs_diff']:.3g})")
    if report.get("not_run"):
        print(f"tlm: warning: {NOT_RUN.format(run=report['run'], why=report['not_run'])}", file=sys.stderr)
    return 0


def register_cli(sub) -> None:
    from tlm.search.base import TuneConfig

    p = sub.add_parser("compile", help="build a whole model with the best records (optionally tune it first) and compare it")
    p.add_argument("source", help="a zoo workload name or a path to an .onnx file")
    p.add_argument("--db", default=None,
                   help="record database directory (with --budget: default a run directory under the tlm cache)")
    p.add_argument("--budget", default=None,
                   help="tune with the TLM tuner first: total measurements B, Kg for K per task, "
                        "or 0 for each task's greedy program without measuring")
    p.add_argument("--model", default=None,
                   help="TLM model directory for --budget (default: the shipped one for the target)")
    p.add_argument("--cost-model", default="auto",
                   help="--budget: the cost model ranking the model's samples: auto (the shipped one), none, or a directory")
    p.add_argument("-o", "--output", default=None,
                   help="where to save the compiled library (.so); for a GPU target the plan's directory")
    p.add_argument("--target", default=None,
                   help="'host' (default), a GPU name (h100, a100, ...: writes a GPU plan) or a TVM target as JSON")
    p.add_argument("--repeat", type=int, default=10, help="timed repeats (median)")
    p.add_argument("--no-compare", action="store_true", help="skip PyTorch / ONNX Runtime timing")
    p.add_argument("--cold-pick", type=int, default=CompileConfig.cold_pick, metavar="K",
                   help="CPU: re-time each heavy task's K best records with their weights cold on the "
                        "model's threads and apply the fastest (default %(default)s; 0: the records' own pick)")
    p.add_argument("--batch-size", type=int, default=16, help="--budget: candidates measured per batch")
    p.add_argument("--seed", type=int, default=0, help="--budget: sampling seed")
    p.add_argument("--donors", type=int, default=TuneConfig.donors, metavar="K",
                   help="--budget: the measured programs of the K corpus tasks with the same operators at the "
                        "nearest shapes join each task's first-choice samples (0: the samples only)")
    p.add_argument("--progress", action="store_true", help="show tuning progress even when not a terminal")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_compile)
