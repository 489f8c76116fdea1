"""Which of the collector's proposals win, per CPU, from the committed corpus (issue 15, offline).

    python bench/collector_picks.py [--corpus data/corpus] [--out bench/results]

With its defaults (`tlm collect`: k_p 8, --transfer 1, --cm-explore 2, a cost model) the
collector measures a task's 8 programs of a round in this order: the fastest program of another
CPU (`transfer`), then 2 plain samples of the language model (`explore`), then the cost model's
top 5 of the remaining samples (`cost model`, best ranked first). Shards keep records in that
order, so each such batch (8 records of one task with one `at` time: one transfer, then 7 of the
model) is read back, and per batch with a correct program every latency is divided by the
batch's best. Reported per CPU: the geometric mean of that ratio for each proposer, and how often
each group holds the batch's best (ties count for each). Batches of other shapes (earlier
settings, tasks with fewer programs) are skipped. Nothing is measured. Writes
OUT/collector_picks.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import lzma
import math
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def batches(shard: Path):
    """(task hash, [(proposer, latency or inf)...]) per batch of a shard, in record order."""
    cur_key, cur = None, []
    with lzma.open(shard, "rt") as f:
        for line in f:
            rec = json.loads(line)
            if "t" not in rec:
                continue
            lat = sorted(rec.get("lat") or [])
            med = lat[len(lat) // 2] if lat and rec.get("err") is None else math.inf
            key = (rec["t"], rec.get("at"), rec.get("r"))
            if key != cur_key and cur:
                yield cur_key[0], cur
                cur = []
            cur_key = key
            cur.append((rec.get("by"), med))
    if cur:
        yield cur_key[0], cur


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", default=str(ROOT / "data" / "corpus"))
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = p.parse_args(argv)
    groups = ("transfer", "explore", "cost model top pick", "cost model top 5")
    rows = []
    for hw in sorted(d for d in Path(args.corpus).iterdir() if d.is_dir() and d.name != "tasks"):
        logs: dict[str, list[float]] = defaultdict(list)
        wins: dict[str, int] = defaultdict(int)
        n = 0
        for shard in sorted(hw.glob("*.jsonl.xz")):
            for _, b in batches(shard):
                if len(b) != 8 or b[0][0] != "transfer" or any(by != "tlm" for by, _ in b[1:]):
                    continue
                best = min(m for _, m in b)
                if not math.isfinite(best):
                    continue
                n += 1

                def r(x: float) -> float:  # a failed program counts as 10x the best
                    return math.log(x / best) if math.isfinite(x) else math.log(10.0)

                tr, ex, cm = b[0][1], [m for _, m in b[1:3]], [m for _, m in b[3:]]
                logs["transfer"].append(r(tr))
                logs["explore"] += [r(x) for x in ex]
                logs["cost model top pick"].append(r(cm[0]))
                logs["cost model top 5"] += [r(x) for x in cm]
                wins["transfer"] += tr == best
                wins["explore"] += min(ex) == best
                wins["cost model top pick"] += cm[0] == best
                wins["cost model top 5"] += min(cm) == best
        if n:
            rows.append({"hardware": hw.name, "batches": n,
                         **{g: {"geomean_over_best": round(math.exp(sum(logs[g]) / len(logs[g])), 3),
                                "best_share": round(wins[g] / n, 3)} for g in groups}})
    cmd = "python bench/collector_picks.py " + " ".join(argv if argv is not None else sys.argv[1:])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "collector_picks.json").write_text(json.dumps({"command": cmd.strip(), "rows": rows}, indent=1))
    lines = ["# Which of the collector's proposals win, per CPU", "",
             f"`{cmd.strip()}` (offline, from the committed shards). Batches: a task's 8 programs of a round, "
             "measured in the order transfer (another CPU's fastest), 2 plain samples (explore), the cost "
             "model's top 5 of 26 samples. Latency over the batch's best: geometric mean per program "
             "(a failed program counts 10x); best share: batches where one of the group's programs is the best "
             "(ties count for each); `cost model top 5`: each of the 5 picks for the latency, any of them for the share.", "",
             "| hardware | batches | " + " | ".join(f"{g}: latency / best" for g in groups) + " | "
             + " | ".join(f"{g}: best share" for g in groups) + " |",
             "|---|---:|" + "---:|" * (2 * len(groups))]
    for row in rows:
        lines.append(f"| {row['hardware']} | {row['batches']} | "
                     + " | ".join(f"{row[g]['geomean_over_best']:.3f}" for g in groups) + " | "
                     + " | ".join(f"{row[g]['best_share']:.2f}" for g in groups) + " |")
    (out / "collector_picks.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
