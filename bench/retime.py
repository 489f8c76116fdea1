"""How far one program's timing drifts between the held-out benchmark's contenders (issue 15).

    .venv/bin/python bench/retime.py [--run results/heldout-HARDWARE] [--name retime]

Reads a `tlm eval` held-out run (nothing is measured): every program that two of its contender
databases both timed (TLM@0, TLM@1 and TLM@k start from the same first choice, so they time it at
different hours), the ratio of its slowest to its fastest timing, against the spread of the
repeats within one timing (the slowest over the fastest of a record's first `repeat` readings).
With the run's re-timing (OUT/heldout/retimed.csv, tlm.eval.retime), the summed latency of every
contender as timed while tuning and as re-timed together, and the issue's targets both ways.

Writes OUT/NAME.json and OUT/NAME.md (default OUT: bench/results).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _timings(run: Path) -> dict[tuple[str, str], list[dict]]:
    """{(task hash, program id): [{db, created, median_us, within}]} over the run's databases."""
    from types import SimpleNamespace

    from tlm.eval.heldout import program_id

    out: dict[tuple[str, str], list[dict]] = {}
    for db in sorted((run / "dbs" / "heldout").rglob("records.sqlite")):
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        name = str(db.parent.relative_to(run / "dbs" / "heldout"))
        name = name.split("/")[-1] if name.startswith("model-") else name  # model-TAG/tlm@k: tlm@k
        for h, sent, trace, lat, med, created in con.execute(
                "SELECT task_hash, sentence, trace_json, latencies_json, median_s, created FROM records "
                "WHERE error IS NULL AND median_s IS NOT NULL"):
            pid = program_id(SimpleNamespace(sentence=sent, trace_json=json.loads(trace) if trace else None))
            first = json.loads(lat)[:5]
            out.setdefault((h, pid), []).append({"db": name, "created": created, "median_us": med * 1e6,
                                                 "within": max(first) / min(first)})
        con.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run", default=None, help="a tlm eval held-out run (default results/heldout-HARDWARE)")
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    p.add_argument("--name", default="retime")
    args = p.parse_args(argv)
    if args.run is None:
        from tlm.graph.target import resolve_target
        from tlm.measure.shards import hardware_slug

        args.run = f"results/heldout-{hardware_slug(resolve_target(None).key)}"
    run = Path(args.run)
    if not (run / "dbs" / "heldout").is_dir():
        print(f"retime: {run}: no held-out databases (run `tlm eval --suite heldout` there first)", file=sys.stderr)
        return 2
    names = {t["hash"]: t["name"] for t in json.loads((run / "heldout" / "tasks.json").read_text())}
    many = [(k, v) for k, v in _timings(run).items() if len({x["db"] for x in v}) > 1]
    drift = sorted(({"task": names.get(h, h), "program": pid, "timings": len(v),
                     "slowest_over_fastest": max(x["median_us"] for x in v) / min(x["median_us"] for x in v),
                     "within_max": max(x["within"] for x in v),
                     "us": [round(x["median_us"], 1) for x in sorted(v, key=lambda x: x["created"])],
                     "dbs": [x["db"] for x in sorted(v, key=lambda x: x["created"])]}
                    for (h, pid), v in many), key=lambda d: -d["slowest_over_fastest"])
    lines = [f"# One program's timings across a held-out run ({run.name})", "",
             f"Command: `.venv/bin/python bench/retime.py --run {args.run} --name {args.name}` (reads the run's "
             "databases; measures nothing).", "",
             f"{len(drift)} programs were timed by more than one contender, at different times of the run. "
             "`drift`: the slowest of their timings over the fastest (each timing the median of its repeats); "
             "`within`: the largest spread of the first 5 repeats of one timing (slowest over fastest).", ""]
    if drift:
        ds = [d["slowest_over_fastest"] for d in drift]
        ws = [d["within_max"] for d in drift]
        lines += [f"drift: median {statistics.median(ds):.2f}, max {max(ds):.2f}, above 1.25 on "
                  f"{sum(x > 1.25 for x in ds)} of {len(ds)}; within one timing: median {statistics.median(ws):.2f}, "
                  f"max {max(ws):.2f}.", "",
                  "| task | timings (us, in time order) | contenders | drift | within |", "|---|---|---|---:|---:|"]
        lines += [f"| {d['task'][:40]} | {', '.join(map(str, d['us']))} | {', '.join(d['dbs'])} | "
                  f"{d['slowest_over_fastest']:.2f} | {d['within_max']:.2f} |" for d in drift]
    summary = {"run": args.run, "drift": drift}
    csv_path = run / "heldout.csv"
    if csv_path.is_file():
        import csv

        from tlm.eval.heldout import TARGETS, summed
        from tlm.eval.tables import num

        rows = list(csv.DictReader(open(csv_path)))
        rows = [r for r in rows if r.get("retimed") == "1" and not r["method"].startswith("tlm[")]
        if rows:
            tuned = [dict(r, best_us=r["tuned_us"]) for r in rows]
            cols = list(dict.fromkeys(f"{r['method']}@{r['k']}" for r in rows))
            tot = {c: (sum(num(r["tuned_us"]) or 0 for r in rows if f"{r['method']}@{r['k']}" == c),
                       sum(num(r["best_us"]) or 0 for r in rows if f"{r['method']}@{r['k']}" == c)) for c in cols}
            lines += ["", f"## Re-timed together ({len({r['hash'] for r in rows})} tasks, OUT/heldout/retimed.csv)", "",
                      "| contender | summed ms as tuned | summed ms re-timed | re-timed / tuned |", "|---|---:|---:|---:|"]
            lines += [f"| {c} | {a / 1e3:.2f} | {b / 1e3:.2f} | {b / a:.2f} |" for c, (a, b) in tot.items() if a]
            lines += ["", "| target | as tuned | re-timed |", "|---|---:|---:|"]
            for a, b, goal in TARGETS:
                s1, s2 = summed(tuned, a, b)[0], summed(rows, a, b)[0]
                if s1 or s2:
                    lines.append(f"| {a} vs {b} >= {goal:g} | {s1 or 0:.2f} | {s2 or 0:.2f} |")
            summary["summed_ms"] = {c: [a / 1e3, b / 1e3] for c, (a, b) in tot.items()}
    os.makedirs(args.out, exist_ok=True)
    Path(args.out, f"{args.name}.json").write_text(json.dumps(summary, indent=1))
    Path(args.out, f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:12]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
