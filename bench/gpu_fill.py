"""Would a launch-shape rule help the GPU cost model's zero-measurement pick? (issue 49: TLM@0 on
the H100 is 0.26x dlight, the cost model's pick of 10 samples 0.61x.)

    python bench/gpu_fill.py [--cost-model pretrained/costmodel-cuda-sm90] [--out bench/results/gpu_fill]

Programs of the held-out H100 run (the GPU TLM's 10 proposals and MetaSchedule's first-round
programs per task, results/gpu/run-2026-11-27-h100-b) and of training bundles a and b (random
programs, the same run): per task, the cost model's order of the correct programs, then the pick
of each rule, judged by the programs' measured latencies. `fill`: the fewest thread blocks any of
the program's kernels launches (the launch plans are in the bundles' manifests, made here without a
GPU); a rule `fill >= f x min(cap, best fill)` takes the cost model's first program that fills
that much, else its first. The training bundles are in the cost model's training data (it ranks
them almost perfectly), so only the held-out rows say how a rule generalises.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "results/gpu/run-2026-11-27-h100-b"
BUNDLES = ROOT / "results/gpu/bundles"
SETS = [("held-out, GPU TLM's proposals", "bundle-heldout", "tlm"),
        ("held-out, MetaSchedule's programs", "bundle-heldout", "metaschedule"),
        ("training bundle a (random)", "bundle-a", None), ("training bundle b (random)", "bundle-b", None)]
RULES = [(0.5, 1), (1.0, 1), (0.5, 2), (1.0, 2)]  # (fraction, cap in SMs)


def _prod(v: list[int]) -> int:
    return v[0] * v[1] * v[2]


@functools.lru_cache(maxsize=None)
def _bundle(bundle: str) -> tuple[dict, dict, dict]:
    """(manifest, tasks, {(task hash, candidate): result}) of a bundle and its H100 run, read once."""
    from tlm.measure.gpu_bundle import read_tasks

    res = {}
    with open(RUN / f"{bundle}-results.jsonl") as f:
        for line in f:
            d = json.loads(line)
            res[(d["t"], d["k"])] = d
    return json.load(gzip.open(BUNDLES / bundle / "manifest.json.gz")), read_tasks(BUNDLES / bundle), res


def load_set(bundle: str, proposer: str | None, model) -> list[dict]:
    """[{lat: [s per program], fill: [blocks], order: cost model's order}] per task with 2+ correct programs."""
    from tlm.graph.target import resolve_target
    from tlm.space.language import parse

    manifest, tasks, res = _bundle(bundle)
    target = resolve_target(manifest["target"])
    rows = []
    for t in manifest["tasks"]:
        items = []
        for c in t.get("candidates", []):
            r = res.get((t["hash"], c["id"]))
            if (proposer and c.get("proposer") != proposer) or not r or not r["lat"] or r["err"]:
                continue
            items.append((statistics.median(r["lat"]), min(_prod(k["grid"]) for k in c["kernels"]), c["sentence"]))
        if len(items) < 2:
            continue
        schs = [parse(s, tasks[t["hash"]], target).sch for _, _, s in items]
        rows.append({"lat": [i[0] for i in items], "fill": [i[1] for i in items],
                     "order": list(model.rank(tasks[t["hash"]], schs, target))})
    return rows


def pick(row: dict, frac: float | None, cap: int) -> float:
    """Latency of the rule's pick (frac None: the cost model's first)."""
    order = row["order"]
    if frac is not None:
        need = frac * min(cap, max(row["fill"]))
        for i in order:
            if row["fill"][i] >= need:
                return row["lat"][i]
    return row["lat"][order[0]]


def report(sets: dict[str, list[dict]], sms: int, command: str) -> str:
    lines = ["# A launch-shape rule for the GPU cost model's pick (issue 49)", "",
             f"Command: `{command}`. Data: the H100 run `results/gpu/run-2026-11-27-h100-b` ({sms} SMs). "
             "Per contender: summed latency of the picks over the tasks (ms), geometric mean of pick / "
             "best of the task's correct programs, and on how many tasks the rule's pick is >5% slower "
             "(worse) or faster (better) than the cost model's. See the script's docstring.", "",
             "| programs | tasks | best of all | cost model | " + " | ".join(
                 f"fill >= {f} x min({c * sms}, best)" for f, c in RULES) + " |",
             "|---|---:|---:|---:|" + "---:|" * len(RULES)]
    for label, rows in sets.items():
        best = [min(r["lat"]) for r in rows]
        cm = [pick(r, None, 0) for r in rows]
        geo_cm = statistics.geometric_mean([a / b for a, b in zip(cm, best)])
        cells = [f"{sum(best) * 1e3:.2f}", f"{sum(cm) * 1e3:.2f} ({geo_cm:.2f})"]
        for f, c in RULES:
            p = [pick(r, f, c * sms) for r in rows]
            worse = sum(a > 1.05 * b for a, b in zip(p, cm))
            better = sum(a * 1.05 < b for a, b in zip(p, cm))
            cells.append(f"{sum(p) * 1e3:.2f} ({statistics.geometric_mean([a / b for a, b in zip(p, best)]):.2f}; "
                         f"worse {worse}, better {better})")
        lines.append(f"| {label} | {len(rows)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cost-model", default=str(ROOT / "pretrained/costmodel-cuda-sm90"))
    p.add_argument("--out", default=str(ROOT / "bench/results/gpu_fill"))
    args = p.parse_args()
    from tlm.graph.target import resolve_target
    from tlm.search.costmodel import CostModel

    target = resolve_target(_bundle("bundle-heldout")[0]["target"])
    model = CostModel.load(args.cost_model, target)
    sets = {label: load_set(bundle, proposer, model) for label, bundle, proposer in SETS}
    sms = target.cores  # the SM count of a GPU target (tlm.graph.target)
    command = "python bench/gpu_fill.py" + "".join(f" {a}" for a in sys.argv[1:])
    text = report(sets, sms, command)
    Path(args.out).with_suffix(".md").write_text(text)
    Path(args.out).with_suffix(".json").write_text(json.dumps(sets))
    print(text)


if __name__ == "__main__":
    main()
