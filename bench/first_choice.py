"""TLM's first choice on held-out tasks: which generator and cost model, among how many samples (issue 15)?

    .venv/bin/python bench/first_choice.py [--heldout results/heldout-HARDWARE] [--pools 8 32 128]
        [--models shipped=pretrained/tlm-ft-llvm-x86_64 new=DIR] [--top-k 10]
        [--cost-models shipped=pretrained/costmodel-llvm-x86_64 new=DIR] [--tasks 20] [--generate-only]
        [--donors 3]

The first choice is what `tlm compile --budget 0` applies and what TLM@1 measures: the cost
model's top pick of `pick_samples` (default 32) samples of the shipped fine-tuned model. Per
held-out task of a `tlm eval` held-out run (its heldout/tasks.json; same hardware), each
generator (--models, default the shipped one) generates max(--pools) distinct samples once per
seed (cached in WORK: `--generate-only` fills the cache and stops, so generation can run beside
other work and the measuring alone); each contender (generator, cost model, pool size n) picks
its top 1 among the first n, and "logprob" the most likely of the first 32. With --top-k K, the
cost model's top K of the largest pool are measured too (contender `...top K`: the best of
them, a stand-in for TLM@K without the tuner's rounds). A task's distinct picks of every
contender are measured together, each once (WORK/eval-db, resumable; held-out tasks, never in
the corpus). Scores: geometric mean over tasks of the pick's latency over the best pick of any
first-choice contender, and the summed latency against the run's MetaSchedule@64 (its
heldout.csv), the issue's TLM@1 target (>= 0.8). With --donors K, each cost model also ranks the
first 32 samples together with the programs of the K nearest corpus tasks (tlm.search.donors;
contender `...+donorsK@32`, what `tlm compile --budget 0` picks since 2026-12-06).

Writes OUT/first_choice.json and OUT/first_choice.md (default OUT: bench/results).
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--heldout", default=None, help="a tlm eval held-out run (default results/heldout-HARDWARE)")
    p.add_argument("--models", nargs="+", default=None, metavar="LABEL=DIR",
                   help="the generators (default: shipped=the shipped model for this target)")
    p.add_argument("--top-k", type=int, default=0, help="also measure each cost model's top K of the largest pool")
    p.add_argument("--generate-only", action="store_true", help="fill the sample cache, measure nothing")
    p.add_argument("--cost-models", nargs="+", default=None, metavar="LABEL=DIR",
                   help="default: shipped=the shipped cost model for this target")
    p.add_argument("--pools", type=int, nargs="+", default=[8, 32, 128])
    p.add_argument("--tasks", type=int, default=20)
    p.add_argument("--donors", type=int, default=0, metavar="K",
                   help="also each cost model's pick among 32 samples and the K nearest corpus tasks' programs")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2],
                   help="sampling seeds: every (task, seed) is one first choice per contender")
    p.add_argument("--work", default=None, help="default work/first-choice-HARDWARE")
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    p.add_argument("--name", default="first_choice")
    p.add_argument("--other-hardware", action="store_true",
                   help="take the held-out tasks of a run measured on another CPU (its MetaSchedule@64 "
                        "latencies are not this CPU's: the MS@64 columns stay empty)")
    p.add_argument("--skip-changed", action="store_true",
                   help="leave out the held-out tasks whose definitions changed since the run (else an error)")
    args = p.parse_args(argv)

    from types import SimpleNamespace

    from bench.learning import Bench, _geomean
    from tlm.errors import TlmError
    from tlm.eval.heldout import read_tasks
    from tlm.graph.extract import tasks_for_source
    from tlm.graph.target import resolve_target
    from tlm.measure.config import MeasureConfig
    from tlm.measure.shards import hardware_slug
    from tlm.model.generate import Generator
    from tlm.model.lm import default_model_dir
    from tlm.search.costmodel import CostModel, load_cost_model
    from tlm.search.donors import donor_programs, load_index
    from tlm.space.design import task_space
    from tlm.space.language import parse

    target = resolve_target(None)
    hw = hardware_slug(target.key)
    run = Path(args.heldout or ROOT / "results" / f"heldout-{hw}")
    cfg = json.loads((run / "config.json").read_text())
    if cfg.get("hardware") != hw and not args.other_hardware:
        sys.exit(f"bench/first_choice.py: {run} was measured on {cfg.get('hardware')}, not on this {hw} "
                 "(--other-hardware: its tasks without its MetaSchedule latencies)")
    tbw = {w: tasks_for_source(w, target=target).tasks for w in cfg["workloads"]}
    try:
        picked = read_tasks(run / "heldout" / "tasks.json", tbw, skip_missing=args.skip_changed)[: args.tasks]
    except TlmError as err:
        sys.exit(f"bench/first_choice.py: {err} (or --skip-changed)")
    ms64 = {}
    if cfg.get("hardware") == hw:  # another CPU's MetaSchedule latencies are not this one's
        with open(run / "heldout.csv", newline="") as f:
            for r in csv.DictReader(f):
                if r["method"] == "metaschedule" and r["k"] == "64" and r["best_us"]:
                    ms64[r["hash"]] = float(r["best_us"]) * 1e-6

    models = {}
    for spec in args.models or [f"shipped={default_model_dir(target)}"]:
        label, _, path = spec.partition("=")
        models[label] = Path(path)
    cms = {}
    for spec in args.cost_models or ["shipped=auto"]:
        label, _, path = spec.partition("=")
        cms[label] = load_cost_model(path, target) if path == "auto" else CostModel.load(path, target)
    work = Path(args.work or ROOT / "work" / f"first-choice-{hw}")
    work.mkdir(parents=True, exist_ok=True)
    n_max, t0, per_task = max(args.pools), time.time(), []

    caches = {}  # generator label -> {"TASK/SEED": samples}; generation is the slow part
    for label, model in models.items():
        cache_path = work / f"samples-{model.name}-{n_max}.json"
        cache = json.loads(cache_path.read_text()) if cache_path.is_file() else {}
        missing = [(w, t, seed) for seed in args.seeds for w, t in picked if f"{t.hash}/{seed}" not in cache]
        gen = Generator.from_dir(model, target) if missing else None
        for j, (w, task, seed) in enumerate(missing):
            cache[f"{task.hash}/{seed}"] = [{"sentence": g.sentence, "logprob": g.logprob}
                                            for g in gen.generate(task, n_max, seed=seed)]
            cache_path.write_text(json.dumps(cache))
            print(f"[generate {label} {j + 1}/{len(missing)}] {task.name} seed {seed}", flush=True)
        caches[label] = cache
    if args.generate_only:
        return 0

    def name(m: str, c: str, what: str) -> str:  # one generator: the labels of earlier runs
        return (f"{m}:" if len(models) > 1 else "") + (f"{c}@{what}" if c else what)

    bench = Bench(work, target, MeasureConfig())
    donated: dict[str, list] = {}  # task hash -> (sentence, schedule) of its donors (--donors)
    index = load_index() if args.donors else None  # once: each call hashes the corpus's file list
    try:
        for seed in args.seeds:
            for i, (w, task) in enumerate(picked):
                space = task_space(task, target)
                if args.donors and task.hash not in donated:  # the same for every seed
                    donated[task.hash] = [(sentence, prog.sch) for _, prog, sentence in
                                          donor_programs(task, target, index, args.donors)]
                picks, tops = {}, {}
                for m in models:
                    ok, schs = [], []
                    for g in caches[m][f"{task.hash}/{seed}"]:
                        try:
                            schs.append(parse(g["sentence"], task, target, space=space).sch)
                            ok.append(SimpleNamespace(**g))
                        except Exception:  # noqa: BLE001 - an unparsable sample is never picked
                            continue
                    if ok:
                        picks[name(m, "", "logprob@32")] = max(ok[:32], key=lambda g: g.logprob).sentence
                    for label, cm in cms.items():
                        # one ranking of the largest pool: scores are per program (ties by index), so a
                        # pool of the first n picks the first of this order below n
                        order = cm.rank(task, schs[:n_max], target) if ok else []
                        for n in args.pools:
                            if ok[:n]:
                                picks[name(m, label, str(n))] = ok[next(j for j in order if j < n)].sentence
                        if donated.get(task.hash) and ok:
                            pool = [g.sentence for g in ok[:32]] + [d for d, _ in donated[task.hash]]
                            joint = cm.rank(task, schs[:32] + [sch for _, sch in donated[task.hash]], target)
                            picks[name(m, f"{label}+donors{args.donors}", "32")] = pool[joint[0]]
                        if args.top_k and ok:
                            top = order[: args.top_k]
                            tops[name(m, label, f"{n_max} top {args.top_k}")] = [ok[j].sentence for j in top]
                lat = bench.latencies(task, list(picks.values()) + [s for ss in tops.values() for s in ss])
                best = {c: lat[s] for c, s in picks.items()}
                top = {c: min(lat[s] for s in ss) for c, ss in tops.items()}
                per_task.append({"task": task.name, "hash": task.hash, "workload": w, "kind": task.kind, "seed": seed,
                                 "best": best, "top": top, "ms64": ms64.get(task.hash)})
                print(f"[seed {seed}, {i + 1}/{len(picked)}] {task.name}: "
                      + ", ".join(f"{c} {v * 1e6:.0f}" for c, v in {**best, **top}.items()), flush=True)
    finally:
        bench.close()

    contenders = list(dict.fromkeys(c for t in per_task for c in t["best"]))
    scores = {}
    for c in contenders + list(dict.fromkeys(c for t in per_task for c in t["top"])):
        what = "best" if c in contenders else "top"
        xs = [(t[what][c], min(t["best"].values()), t["ms64"]) for t in per_task if math.isfinite(t[what].get(c, math.inf))]
        both = [(x, m) for x, _, m in xs if m]
        scores[c] = {"geomean_vs_best_pick": _geomean([x / o for x, o, _ in xs]),
                     "ms64_over_pick_summed": sum(m for _, m in both) / sum(x for x, _ in both) if both else None,
                     "ms64_over_pick_geomean": _geomean([m / x for x, m in both]), "tasks": len(xs)}
    res = {"settings": {**vars(args), "models": {k: str(v) for k, v in models.items()}, "hardware": hw,
                        "heldout": str(run), "seconds": round(time.time() - t0)}, "tasks": per_task, "scores": scores}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(res, indent=1, default=str))
    cmd = (f"`.venv/bin/python bench/first_choice.py --pools {' '.join(map(str, args.pools))} "
           f"--seeds {' '.join(map(str, args.seeds))}"
           + (f" --models {' '.join(args.models)}" if args.models else "")
           + (f" --top-k {args.top_k}" if args.top_k else "")
           + (f" --cost-models {' '.join(args.cost_models)}" if args.cost_models else "")
           + (f" --donors {args.donors}" if args.donors else "")
           + (f" --work {args.work}" if args.work else "") + (f" --heldout {args.heldout}" if args.heldout else "")
           + (" --other-hardware" if args.other_hardware else "") + (" --skip-changed" if args.skip_changed else "") + f" --name {args.name}`")
    gens = ", ".join(f"{k} = `{v}`" for k, v in models.items())
    lines = [f"# TLM's first choice on held-out tasks ({hw})", "",
             f"{len(picked)} held-out tasks of `{run}` x seeds {args.seeds} = {len(per_task)} first choices per "
             f"contender; generators {gens}; {n_max} samples per task, seed and generator; "
             f"each contender's pick measured once, a task's picks in one batch; {res['settings']['seconds']} s.", "",
             f"Command: {cmd}", "",
             "`vs best pick`: geometric mean over (task, seed) of the pick's latency over the best first choice of any "
             "contender (lower is better; a `top K` row is the best of K measured programs). `MS@64 / pick`: "
             "MetaSchedule@64's best latency (the eval run's) over the pick's, summed and per-task geomean (higher is "
             "better; the issue's TLM@1 target is >= 0.8 summed).", "",
             "| contender | vs best pick | MS@64 / pick, summed | MS@64 / pick, geomean | tasks |", "|---|---:|---:|---:|---:|"]
    for c, s in scores.items():
        f = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
        lines.append(f"| {c} | {f(s['geomean_vs_best_pick'])} | {f(s['ms64_over_pick_summed'])} | "
                     f"{f(s['ms64_over_pick_geomean'])} | {s['tasks']} |")
    (out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / args.name}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
