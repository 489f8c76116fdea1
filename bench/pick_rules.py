"""Rules for TLM's first choice, judged with every sample measured (issue 15, point 2).

    .venv/bin/python bench/pick_rules.py --samples work/fc-s27/samples-tlm-ft-llvm-x86_64-128.json
        [--heldout results/heldout-HARDWARE] [--pool 32] [--seeds 0] [--work DIR] [--name pick_rules]

bench/first_choice.py measures only the programs the contenders pick; here every one of the first
--pool samples of each held-out task and seed (a cache that bench/first_choice.py wrote: the shipped
generator's samples) is measured, all of a task's in one batch (WORK/eval-db, resumable), so that
any pick rule is scored offline on the same timings, and the best of the pool (the oracle) bounds
what any rule over that pool can reach. The rules, fixed before the measurement:

- cost: the shipped cost model's top pick (what `--budget 0` and TLM@1 use today);
- logprob: the generator's most likely sample;
- borda: the best sum of the two ranks (cost model, log-probability), ties to the cost model;
- cost top K, most likely (K = 3, 5): the most likely of the cost model's K best;
- most likely K, cost (K = 8, 16): the cost model's top of the K most likely (a plausibility
  filter: a sample the generator finds unlikely is more often one the cost model has not seen
  the like of);
- oracle: the fastest of the pool; `cost best of K` (K = 2, 4, 8): the fastest of the cost model's
  K best (what K measurements would find without the tuner's online update).

Scores: MetaSchedule@64's best latency (the held-out run's, re-timed) over the pick's, summed over
tasks (the issue's TLM@1 target: >= 0.8) and per-task geomean, and the geomean of the pick over the
oracle. Writes OUT/NAME.json and OUT/NAME.md (default OUT: bench/results).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def ranks(order: list[int]) -> dict[int, int]:
    return {j: r for r, j in enumerate(order)}


def rules(cost_order: list[int], logprob: list[float]) -> dict[str, list[int]]:
    """{rule: the sample indices it picks (one; several for the best-of-K references)}."""
    n = len(cost_order)
    lp_order = sorted(range(n), key=lambda j: (-logprob[j], j))
    rc, rl = ranks(cost_order), ranks(lp_order)
    out = {"cost": [cost_order[0]], "logprob": [lp_order[0]],
           "borda": [min(range(n), key=lambda j: (rc[j] + rl[j], rc[j]))]}
    for k in (3, 5):
        out[f"cost top {k}, most likely"] = [max(cost_order[:k], key=lambda j: (logprob[j], -rc[j]))]
    for k in (8, 16):
        top = set(lp_order[:k])
        out[f"most likely {k}, cost"] = [next(j for j in cost_order if j in top)]
    for k in (2, 4, 8):
        out[f"cost best of {k}"] = cost_order[:k]
    out["oracle"] = list(range(n))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--samples", required=True, help="bench/first_choice.py's sample cache (JSON)")
    p.add_argument("--heldout", default=None, help="a tlm eval held-out run (default results/heldout-HARDWARE)")
    p.add_argument("--pool", type=int, default=32)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--tasks", type=int, default=20)
    p.add_argument("--work", default=None, help="default work/pick-rules-HARDWARE")
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    p.add_argument("--name", default="pick_rules")
    args = p.parse_args(argv)

    from bench.learning import Bench, _geomean
    from tlm.eval.heldout import read_tasks
    from tlm.graph.extract import tasks_for_source
    from tlm.graph.target import resolve_target
    from tlm.measure.measurer import MeasureConfig
    from tlm.measure.shards import hardware_slug
    from tlm.search.costmodel import load_cost_model
    from tlm.space.design import task_space
    from tlm.space.language import parse

    target = resolve_target(None)
    hw = hardware_slug(target.key)
    run = Path(args.heldout or ROOT / "results" / f"heldout-{hw}")
    cfg = json.loads((run / "config.json").read_text())
    if cfg.get("hardware") != hw:
        sys.exit(f"bench/pick_rules.py: {run} was measured on {cfg.get('hardware')}, not on this {hw}")
    tbw = {w: tasks_for_source(w, target=target).tasks for w in cfg["workloads"]}
    picked = read_tasks(run / "heldout" / "tasks.json", tbw)[: args.tasks]
    with open(run / "heldout.csv", newline="") as f:
        ms64 = {r["hash"]: float(r["best_us"]) * 1e-6 for r in csv.DictReader(f)
                if r["method"] == "metaschedule" and r["k"] == "64" and r["best_us"]}
    cache = json.loads(Path(args.samples).read_text())
    cm = load_cost_model("auto", target)
    work = Path(args.work or ROOT / "work" / f"pick-rules-{hw}")
    work.mkdir(parents=True, exist_ok=True)
    bench, per_task, t0 = Bench(work, target, MeasureConfig()), [], time.time()
    try:
        for seed in args.seeds:
            for i, (w, task) in enumerate(picked):
                key = f"{task.hash}/{seed}"
                if key not in cache:
                    print(f"[seed {seed}] {task.name}: no samples in the cache, skipped", flush=True)
                    continue
                space, ok, schs = task_space(task, target), [], []
                for g in cache[key][: args.pool]:
                    try:
                        schs.append(parse(g["sentence"], task, target, space=space).sch)
                        ok.append(g)
                    except Exception:  # noqa: BLE001 - an unparsable sample is never picked
                        continue
                if not ok:
                    continue
                lat = bench.latencies(task, [g["sentence"] for g in ok])
                lats = [lat[g["sentence"]] for g in ok]
                picks = rules(cm.rank(task, schs, target), [g["logprob"] for g in ok])
                got = {r: min(lats[j] for j in js) for r, js in picks.items()}
                per_task.append({"task": task.name, "hash": task.hash, "workload": w, "kind": task.kind,
                                 "seed": seed, "samples": len(ok), "latency_s": got, "ms64": ms64.get(task.hash),
                                 "all_s": lats})
                print(f"[seed {seed}, {i + 1}/{len(picked)}] {task.name}: "
                      + ", ".join(f"{r} {v * 1e6:.0f}" for r, v in got.items() if "of" not in r), flush=True)
    finally:
        bench.close()

    scores = {}
    for r in per_task[0]["latency_s"] if per_task else []:
        xs = [(t["latency_s"][r], t["latency_s"]["oracle"], t["ms64"]) for t in per_task
              if math.isfinite(t["latency_s"][r])]
        both = [(x, m) for x, _, m in xs if m]
        scores[r] = {"ms64_over_pick_summed": sum(m for _, m in both) / sum(x for x, _ in both) if both else None,
                     "ms64_over_pick_geomean": _geomean([m / x for x, m in both]),
                     "pick_over_oracle_geomean": _geomean([x / o for x, o, _ in xs]), "tasks": len(xs)}
    res = {"settings": {**vars(args), "hardware": hw, "heldout": str(run), "seconds": round(time.time() - t0)},
           "tasks": per_task, "scores": scores}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(res, indent=1, default=str))
    cmd = (f"`.venv/bin/python bench/pick_rules.py --samples {args.samples} --pool {args.pool} --seeds "
           f"{' '.join(map(str, args.seeds))}" + (f" --heldout {args.heldout}" if args.heldout else "")
           + (f" --work {args.work}" if args.work else "") + f" --name {args.name}`")
    f = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    lines = [f"# Rules for TLM's first choice, every sample measured ({hw})", "",
             f"{len(per_task)} (task, seed) of the held-out tasks of `{run}`, seeds {args.seeds}; the first {args.pool} "
             f"samples of the shipped generator each (bench/first_choice.py's cache), all measured, a task's in one "
             f"batch; {res['settings']['seconds']} s.", "", f"Command: {cmd}", "",
             "| rule | MS@64 / pick, summed | MS@64 / pick, geomean | pick / oracle, geomean | tasks |",
             "|---|---:|---:|---:|---:|"]
    lines += [f"| {r} | {f(s['ms64_over_pick_summed'])} | {f(s['ms64_over_pick_geomean'])} | "
              f"{f(s['pick_over_oracle_geomean'])} | {s['tasks']} |" for r, s in scores.items()]
    (out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / args.name}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
