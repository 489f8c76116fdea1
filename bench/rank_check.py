"""How well a cost model orders programs it has never seen: the measured records of a database, re-ranked.

    python bench/rank_check.py DB [DB ...] [--cost-models shipped=pretrained/costmodel-llvm-x86_64 new=DIR]
        [--min-programs 10] [--name rank-check]

Each DB is a tlm record database (a directory with records.sqlite) whose tasks are in no training
data, for example a battery cell's `work/outside-zoo/CPU-CORESc/dbs/MODEL@10g`, or a folder of a
run's committed record shards, for example `results/full-llvm-znver4-2c/records/*/tlm@32g` (the
held-out workloads' programs TLM@32g measured; ingested once into work/rank-check/). For every task with
at least --min-programs correct records measured on this host's target, each cost model scores the
measured programs; the table gives the Spearman correlation between its score and the measured
speed, and what its top-scored program costs against the task's best (what `--budget 0` would have
applied if those programs had been its samples). No measurement is taken: the latencies are the
records'. Writes bench/results/NAME.{md,json}; earlier runs stay, less the rows this run redoes (the
same date, hardware, database and cost model: `merge`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench/results"


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation (scipy's); 0 when either side is constant (it orders nothing)."""
    import math

    from scipy.stats import spearmanr

    if len(set(a)) < 2 or len(set(b)) < 2:
        return 0.0
    rho = spearmanr(a, b).statistic
    return 0.0 if math.isnan(rho) else float(rho)


def task_rows(db_dir: str, cost_models: dict, target, min_programs: int) -> list[dict]:
    """One row per (task, cost model) of a database."""
    from tlm.measure.database import open_db
    from tlm.search.costmodel import features
    from tlm.space.language import parse

    rows = []
    with open_db(db_dir) as db:
        for task_hash in sorted(db.best_by_task(target.key)):
            task = db.task(task_hash)
            if task is None:
                continue
            recs = [r for r in db.records(task_hash, target.key) if r.error is None and r.median_s]
            schedules, lat = [], []
            for rec in {r.sentence: r for r in recs}.values():  # a sentence measured twice counts once
                try:
                    schedules.append(parse(rec.sentence, task, target).sch)
                    lat.append(rec.median_s)
                except Exception:  # noqa: BLE001 - a sentence of an older space: left out
                    continue
            if len(lat) < min_programs:
                continue
            x = features(task, schedules, target)
            for label, cm in cost_models.items():
                score = [float(s) for s in cm.predict(x, target)]
                top = max(range(len(score)), key=lambda i: score[i])
                rows.append({"db": db_dir, "task": task.name, "kind": task.kind, "programs": len(lat),
                             "cost_model": label, "spearman": round(spearman(score, [-v for v in lat]), 3),
                             "top_ms": lat[top] * 1e3, "best_ms": min(lat) * 1e3,
                             "median_ms": statistics.median(lat) * 1e3,
                             "top_rank": sum(v < lat[top] for v in lat)})
    return rows


def merge(runs: list[dict], run: dict) -> list[dict]:
    """`runs` with `run` last: an earlier run's rows that `run` redoes (the same date, hardware,
    database and cost model, label and directory) leave it, and a run left with none goes."""
    def key(r: dict, row: dict) -> tuple:
        path = r["cost_models"].get(row["cost_model"])  # a directory, absolute or from the checkout's root
        return r["date"], r["hardware"], row["db"], row["cost_model"], path and str((ROOT / path).resolve())

    redone = {key(run, row) for row in run["rows"]}
    out = []
    for r in runs:
        rows = [row for row in r["rows"] if key(r, row) not in redone]
        if rows:
            labels = {row["cost_model"] for row in rows}
            out.append(dict(r, rows=rows, cost_models={k: v for k, v in r["cost_models"].items() if k in labels}))
    return out + [run]


def write(runs: list[dict], stem: Path) -> None:
    stem.with_suffix(".json").write_text(json.dumps(runs, indent=1))
    lines = ["# Cost models re-ranking measured programs of unseen tasks", "",
             "Command: `python bench/rank_check.py DB ... --cost-models LABEL=DIR ...` (see its docstring). "
             "Per task: Spearman between the model's score and the measured speed (1: perfect order, 0: "
             "none), the latency of the model's top-scored program over the task's best measured one "
             "(`top/best`; 1.0: it picked the fastest) and over the median program (`top/median`). No "
             "new measurement: the records' own latencies.", ""]
    for run in reversed(runs):
        lines += [f"## {run['date']}, {run['hardware']}, commit {run['commit']}", "",
                  "| database | task | kind | programs | cost model | Spearman | top/best | top/median | top's rank |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in run["rows"]:
            db = r["db"] if r["db"].count("/") <= 1 else Path(r["db"]).name  # older runs kept the path
            lines.append(f"| {db} | {r['task'][:48]} | {r['kind']} | {r['programs']} | "
                         f"{r['cost_model']} | {r['spearman']:+.2f} | {r['top_ms'] / r['best_ms']:.2f} | "
                         f"{r['top_ms'] / r['median_ms']:.2f} | {r['top_rank']} |")
        lines += [""]
        for label in dict.fromkeys(r["cost_model"] for r in run["rows"]):
            mine = [r for r in run["rows"] if r["cost_model"] == label]
            for kind in sorted({r["kind"] for r in mine}) + ["all"]:
                sel = [r for r in mine if kind in ("all", r["kind"])]
                lines.append(f"- `{label}`, {kind} ({len(sel)} tasks): mean Spearman "
                             f"{statistics.fmean(r['spearman'] for r in sel):+.2f}, geomean top/best "
                             f"{statistics.geometric_mean([r['top_ms'] / r['best_ms'] for r in sel]):.2f}, "
                             f"summed top {sum(r['top_ms'] for r in sel):.3g} ms against best "
                             f"{sum(r['best_ms'] for r in sel):.3g} ms")
        lines.append("")
    stem.with_suffix(".md").write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    import subprocess

    from ort_gap import _db_from_shards  # bench/ is on the path when a bench script runs
    from tlm.graph.target import resolve_target
    from tlm.measure.shards import host_label
    from tlm.search.costmodel import CostModel, default_cost_model

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dbs", nargs="+", help="record databases (directories with records.sqlite)")
    p.add_argument("--cost-models", nargs="+", default=None, metavar="LABEL=DIR",
                   help="default: shipped=the shipped cost model for this host")
    p.add_argument("--min-programs", type=int, default=10)
    p.add_argument("--name", default="rank-check")
    args = p.parse_args(argv)
    target = resolve_target("host")
    specs = args.cost_models or [f"shipped={default_cost_model(target)}"]
    paths = dict(spec.partition("=")[::2] for spec in specs)  # label -> directory
    for label, path in paths.items():
        if not path or not Path(path).is_dir():
            print(f"rank_check: --cost-models {label}={path}: want LABEL=DIR with a cost model", file=sys.stderr)
            return 2
    cost_models = {label: CostModel.load(path, target) for label, path in paths.items()}
    dbs = []
    for db in args.dbs:
        if (Path(db) / "records.sqlite").is_file():
            dbs.append((db, Path(db).name))
        elif any(Path(db).rglob("*.jsonl.xz")):  # a run's shards: RUN/records/WORKLOAD/METHOD
            label = f"{Path(db).parent.name}/{Path(db).name}"
            dbs.append((_db_from_shards(db, ROOT / "work/rank-check" / label.replace("/", "@")), label))
        else:
            print(f"rank_check: {db}: neither a record database (records.sqlite) nor record shards", file=sys.stderr)
            return 2
    rows = [dict(r, db=label) for db, label in dbs for r in task_rows(db, cost_models, target, args.min_programs)]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    run = {"date": time.strftime("%Y-%m-%d"), "hardware": host_label(target), "commit": commit,
           "cost_models": paths, "rows": rows}
    stem = RESULTS / args.name
    runs = json.loads(stem.with_suffix(".json").read_text()) if stem.with_suffix(".json").exists() else []
    write(merge(runs, run), stem)
    print(f"rank_check: {len(rows)} rows -> {stem}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
