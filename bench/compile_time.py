"""How long `tlm compile W --budget B` takes, end to end (the user's wait), for one or more trees
of tlm interleaved in rounds (a tree: a checkout, e.g. `git worktree add /tmp/old REV`).

    python bench/compile_time.py [--workloads bert_tiny] [--trees new=. old=/tmp/old] [--rounds 2] [--budget 0]

Each (round, tree, workload) is one fresh `python -m tlm.cli compile W --budget B --no-compare`
process on an empty record database (tasks come from the shared cache when the trees' graph code
is the same); the picks of every tree are compared (the sentences each stored: at budget 0 the
same programs give one digest; above it, measurements decide and digests differ). Medians per
tree; appends rows to bench/results/compile_time.{md,json} with the host's load average, since a
compile shares the machine with whatever else runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def one(tree: Path, workload: str, db: Path, budget: str = "0") -> tuple[float, str | None]:
    """Seconds of one compile, and the digest of the sentences it stored (None if it failed)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tlm.cli", "compile", workload, "--budget", budget, "--db", str(db),
                           "--no-compare", "--json"], cwd=tree, env=env, capture_output=True, text=True)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        print(f"{tree} {workload}: {proc.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return took, None
    with sqlite3.connect(db / "records.sqlite") as con:
        rows = con.execute("select task_hash, sentence from records order by task_hash").fetchall()
    return took, hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:12]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workloads", nargs="+", default=["bert_tiny"])
    p.add_argument("--trees", nargs="+", default=[f"this={ROOT}"], metavar="LABEL=PATH")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--budget", default="0", help="tlm compile's --budget (0: nothing measured)")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "compile_time"))
    args = p.parse_args(argv)
    from tlm.graph.target import host_target
    from tlm.measure.shards import host_label

    trees = dict(t.split("=", 1) for t in args.trees)
    times: dict[tuple[str, str], list[float]] = {}
    picks: dict[tuple[str, str], set] = {}
    loads = []
    with tempfile.TemporaryDirectory(prefix="tlm-ct-") as tmp:
        for r in range(args.rounds):
            for w in args.workloads:
                for label, path in trees.items():
                    loads.append(os.getloadavg()[0])
                    took, digest = one(Path(path).resolve(), w, Path(tmp) / f"{label}-{w}-{r}", args.budget)
                    print(f"round {r} {w} {label}: {took:.1f} s", flush=True)
                    times.setdefault((w, label), []).append(took)
                    picks.setdefault((w, label), set()).add(digest)
    commits = {label: subprocess.run(["git", "-C", path, "rev-parse", "--short", "HEAD"], capture_output=True,
                                     text=True).stdout.strip() for label, path in trees.items()}
    rows = [{"date": time.strftime("%Y-%m-%d %H:%M"), "hardware": host_label(host_target()), "workload": w,
             "budget": args.budget,
             "tree": label, "commit": commits[label], "median_s": round(statistics.median(v), 1),
             "runs": [round(x, 1) for x in v], "load": round(statistics.median(loads), 2),
             "picks": sorted(d or "failed" for d in picks[(w, label)])} for (w, label), v in times.items()]
    out = Path(args.out)
    old = json.loads(out.with_suffix(".json").read_text()) if out.with_suffix(".json").exists() else []
    allrows = old + rows
    out.with_suffix(".json").write_text(json.dumps(allrows, indent=1))
    lines = ["# `tlm compile W --budget B`, wall time", "",
             "Command: `python bench/compile_time.py --workloads W --trees LABEL=PATH ... --rounds N [--budget B]` (see its docstring): "
             "fresh processes, empty record databases, trees interleaved; `picks`: a digest of the sentences each run "
             "stored (one value: every run of that tree picked the same programs); `load`: the host's 1-minute load "
             "average when the runs started (2 cores: above ~1, other work shared them).", "",
             "| date | hardware | workload | budget | tree | commit | median s | runs s | load | picks |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['date']} | {r['hardware']} | {r['workload']} | {r.get('budget', '0')} | {r['tree']} | {r['commit']} | {r['median_s']} | "
              f"{', '.join(map(str, r['runs']))} | {r['load']} | {', '.join(r['picks'])} |" for r in allrows]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
