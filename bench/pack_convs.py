"""Convolution weights packed at compile time (tlm.compiler.pack): what it gains, task by task and
on whole models (issue 46: a whole model against its tasks timed alone).

    python bench/pack_convs.py --dbs 'work/ort-gap/znver4-2c/dbs/{workload}@b10g'
        [--workloads resnet_50,mobilenet_v2,dcgan] [--tasks 8] [--rounds 20] [--out bench/results/pack_convs]

Tasks: each workload's heaviest convolution tasks (calls x best latency) in its records, the best
program as tuned and the same program with its weight (argument 1) layout-free and packed by
MetaSchedule's RewriteLayout, timed warm (the tuner's protocol: repeats back to back) and cold
(every argument but the input flushed before each call, as a layer of a model finds its weights),
2 threads, 3 alternations, medians. Whole models: each workload compiled from the same records
with `pack_convs` on and off, both checked against PyTorch, then timed interleaved round by round
(TVM's timer, 200 ms per round), with the cross-core round trip of each round (bench/xcore.py).
Appends rows to OUT.json and writes OUT.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from xcore import interleaved_ms  # bench/ is on the path when a bench script runs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def tasks_part(workload: str, db_path: str, top: int, alternations: int = 3) -> list[dict]:
    from tlm.compiler.pack import COMPILE_PACK_OPS, packed_candidate
    from tlm.graph.target import resolve_target
    from tlm.graph.tasks import op_names
    from tlm.measure.database import open_db
    from tlm.measure.config import MeasureConfig
    from tlm.measure.measurer import Candidate, Measurer

    db = open_db(db_path, create=False)
    key = db.target_keys()[0]
    target = resolve_target(json.loads(key))
    best = db.best_by_task(key)
    tasks = {h: db.task(h) for h in best}
    convs = [h for h in sorted(best, key=lambda h: -tasks[h].weight * best[h])
             if COMPILE_PACK_OPS & set(op_names(tasks[h].name))][:top]
    timers = {"warm": Measurer(target, MeasureConfig(threads=2)),
              "cold": Measurer(target, MeasureConfig(threads=2, number=1, repeat=15, min_repeat_ms=0))}
    rows = []
    for h in convs:
        task = tasks[h]
        trace = db.trace_of(db.compile_record(h, key), task)
        packed = packed_candidate(task, trace)
        if packed is None:
            print(f"{workload} {task.name}: RewriteLayout refused the program", flush=True)
            continue
        cands = [Candidate(task=task, trace=trace, proposer="bench"), packed]
        ms = {f"{k}_{v}": [] for k in timers for v in ("plain", "packed")}
        for _ in range(alternations):
            for k, m in timers.items():
                for res, v in zip(m.measure(cands), ("plain", "packed")):
                    if not res.ok:
                        raise SystemExit(f"{workload} {task.name} {v}: {str(res.error)[:300]}")
                    ms[f"{k}_{v}"].append(res.median_s * 1e3)
        row = {"workload": workload, "task": task.name, "calls": task.weight,
               **{k: round(statistics.median(v), 4) for k, v in ms.items()}}
        rows.append(row)
        print(f"{workload} {task.name[:48]:48s} x{task.weight} warm {row['warm_plain']:.3f} -> "
              f"{row['warm_packed']:.3f}  cold {row['cold_plain']:.3f} -> {row['cold_packed']:.3f}", flush=True)
    for m in timers.values():
        m.close()
    return rows


def whole_part(workload: str, db_path: str, rounds: int, out_dir: Path) -> dict:
    import numpy as np
    import tvm

    import tlm
    from tlm.compiler.build import CompileConfig

    models = {}
    for pack in (True, False):
        name = "packed" if pack else "plain"
        m = tlm.compile(workload, db=db_path, output=str(out_dir / f"{workload}-{name}.so"),
                        config=CompileConfig(compare=False, repeat=3, min_repeat_ms=50, pack_convs=pack))
        if not m.matches:
            raise SystemExit(f"{workload} {name}: output differs from PyTorch by {m.max_abs_diff}")
        models[name] = m
    from tlm.graph.extract import import_source

    args = [tvm.runtime.tensor(np.ascontiguousarray(x), tvm.cpu()) for x in import_source(workload).inputs]
    med, trip = interleaved_ms({k: m.vm for k, m in models.items()}, args, rounds)
    print(f"{workload}: packed {med['packed']:.3f} ms, plain {med['plain']:.3f} ms "
          f"({med['plain'] / med['packed']:.3f}x)", flush=True)
    return {"workload": workload, "packed_ms": round(med["packed"], 4), "plain_ms": round(med["plain"], 4),
            "round_trip_ns": trip,
            "rounds": rounds, "max_abs_diff": models["packed"].max_abs_diff}


def _whole_cells(r: dict) -> list:
    return [r["date"], r["hardware"], r["commit"], f"`{r['records']}`", r["workload"], f"{r['packed_ms']:.2f}",
            f"{r['plain_ms']:.2f}", f"{r['plain_ms'] / r['packed_ms']:.3f}x", r["round_trip_ns"], r["rounds"]]


def _task_cells(r: dict) -> list:
    return [r["date"], r["hardware"], r["workload"], r["task"], r["calls"], *(f"{r[k]:.3f}" for k in
            ("warm_plain", "warm_packed", "cold_plain", "cold_packed")), f"{r['cold_plain'] / r['cold_packed']:.2f}x"]


SECTIONS = (  # (part, title, header, cells)
    ("whole", "Whole models (interleaved rounds)", "date | hardware | commit | records | workload | packed | plain | "
     "plain / packed | round trip ns | rounds", _whole_cells),
    ("tasks", "Heaviest convolution tasks, each alone (2 threads, 3 alternations)", "date | hardware | workload | task | "
     "calls | warm | warm, packed | cold | cold, packed | cold / cold packed", _task_cells),
)


def write(rows: list[dict], out: Path) -> None:
    lines = ["# Convolution weights packed at compile time (tlm.compiler.pack)", "",
             "Command: `python bench/pack_convs.py --dbs PATTERN` (see the script's docstring). Medians in ms; "
             "`cold`: every argument but the input flushed before each call."]
    for part, title, header, cells in SECTIONS:
        lines += ["", f"## {title}", "", f"| {header} |", "|" + "---|" * (header.count("|") + 1)]
        lines += ["| " + " | ".join(str(c) for c in cells(r)) + " |" for r in rows if r["part"] == part]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dbs", required=True, help="records directory per workload, with {workload} in it")
    p.add_argument("--workloads", default="resnet_50,mobilenet_v2,dcgan")
    p.add_argument("--tasks", type=int, default=8, help="conv tasks per workload timed alone (0: none)")
    p.add_argument("--rounds", type=int, default=20, help="interleaved rounds of the whole models (0: none)")
    p.add_argument("--out", default=str(ROOT / "bench/results/pack_convs"))
    args = p.parse_args(argv)
    import tlm  # noqa: F401 - sets TVM's thread count before TVM starts its pool
    from ort_gap import _hardware

    out = Path(args.out)
    rows = json.loads(out.with_suffix(".json").read_text()) if out.with_suffix(".json").exists() else []
    hardware = _hardware()[1]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    stamp = {"date": time.strftime("%Y-%m-%d %H:%M"), "hardware": hardware, "commit": commit}
    libs = ROOT / "work" / "pack_convs"
    libs.mkdir(parents=True, exist_ok=True)
    for w in args.workloads.split(","):
        db = args.dbs.format(workload=w)
        if not Path(db).is_dir():
            raise SystemExit(f"no records directory {db}")
        if args.rounds:
            rows.append({"part": "whole", **stamp, "records": db, **whole_part(w, db, args.rounds, libs)})
            write(rows, out)
        if args.tasks:
            rows += [{"part": "tasks", **stamp, **r} for r in tasks_part(w, db, args.tasks)]
            write(rows, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
