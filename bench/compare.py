"""TLM against MetaSchedule at equal measurement counts on one workload, in one run.

    python bench/compare.py mobilenet_v2 --run tlm-1g=DB1:tlm --run tlm-4g=DB2:tlm \
        --run ms-4g=DB3:metaschedule [--out bench/results] [--rounds 5]

Each `--run LABEL=DB:PROPOSER` names a record database and the proposer whose records count
(tlm, metaschedule, random). Two figures per run:
- the task-level estimate: sum over the workload's tasks of weight x best measured latency
  (tasks with no correct record count at the run's best-known default: they are listed);
- the real end-to-end latency of the whole model compiled from that database (tlm compile's
  build, output checked against PyTorch), timed interleaved with the other runs, PyTorch eager
  and ONNX Runtime: `--rounds` rounds, each times every contender once, medians reported.
Writes OUT/compare-SOURCE.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def task_figures(tasks, db_dir: str, proposer: str, target) -> dict:
    from tlm.measure.database import open_db

    db = open_db(db_dir, create=False)
    try:
        rows, total, missing = [], 0.0, []
        measured = 0
        for t in tasks:
            recs = [r for r in db.records(t.hash, target.key, proposer) if r.latencies_s or r.error]
            measured += len(recs)
            ok = [r.median_s for r in recs if r.median_s is not None and not r.error]
            best = min(ok) if ok else None
            rows.append({"task": t.name, "weight": t.weight, "measured": len(recs),
                         "best_us": best * 1e6 if best else None})
            if best is None:
                missing.append(t.name)
            else:
                total += t.weight * best
        return {"measurements": measured, "weighted_us": total * 1e6, "missing": missing, "tasks": rows}
    finally:
        db.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("source")
    ap.add_argument("--run", action="append", required=True, help="LABEL=DB_DIR:PROPOSER")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)

    import torch

    from tlm.compiler.build import CompileConfig, compile_imported
    from tlm.eval.run import interleaved, reference_runners
    from tlm.graph.extract import load
    from tlm.graph.target import host_target

    target = host_target()
    threads = target.cores
    torch.set_num_threads(threads)
    imported, tasks = load(args.source, target=target)
    runs = []
    for spec in args.run:
        label, rest = spec.split("=", 1)
        db_dir, proposer = rest.rsplit(":", 1)
        fig = task_figures(tasks, db_dir, proposer, target)
        model = compile_imported(imported, db_dir, target=target, tasks=tasks,
                                 config=CompileConfig(repeat=3, min_repeat_ms=50, compare=False))
        runs.append({"label": label, "db": db_dir, "proposer": proposer, **fig,
                     "matches": model.matches, "max_abs_diff": model.max_abs_diff, "_model": model})
        print(f"{label}: {fig['measurements']} measurements, task estimate {fig['weighted_us'] / 1e3:.2f} ms, "
              f"output matches: {model.matches}", flush=True)

    inputs = imported.inputs
    contenders = {r["label"]: (lambda m=r["_model"]: m(*inputs)) for r in runs}
    refs, note = reference_runners(imported, threads)
    if note:
        print(f"onnxruntime skipped: {note}", file=sys.stderr)
    contenders.update(refs)
    times = interleaved(contenders, args.rounds)  # every contender once per round, under no_grad
    e2e = {k: statistics.median(v) for k, v in times.items()}

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for r in runs:
        r.pop("_model")
        r["e2e_ms"] = e2e[r["label"]]
    report = {"source": args.source, "target": target.config, "threads": threads, "rounds": args.rounds,
              "runs": runs, "e2e_ms": e2e, "e2e_all_ms": times,
              "created": time.strftime("%Y-%m-%d %H:%M:%S")}
    (out / f"compare-{args.source}.json").write_text(json.dumps(report, indent=1))
    lines = [f"# {args.source}: TLM vs MetaSchedule at equal measurement counts ({target.cpu}, {threads} threads)",
             "", f"Run {report['created']}; end-to-end: median of {args.rounds} interleaved rounds; "
             "every compiled model's output checked against PyTorch.", "",
             "| run | proposer | measurements | task estimate (ms) | tasks w/o correct record | e2e (ms) | output ok |",
             "|---|---|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r['label']} | {r['proposer']} | {r['measurements']} | {r['weighted_us'] / 1e3:.2f} | "
                     f"{len(r['missing'])} | {r['e2e_ms']:.2f} | {r['matches']} |")
    for k in ("pytorch", "onnxruntime"):
        if k in e2e:
            lines.append(f"| {k} | - | - | - | - | {e2e[k]:.2f} | reference |")
    (out / f"compare-{args.source}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
