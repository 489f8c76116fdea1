"""Cost models that weigh heavy tasks more, judged on fully measured pools of samples (issue 15).

    .venv/bin/python bench/costmodel_weights.py --pools bench/results/pick_rules-znver3-s28.json [MORE.json]
        [--weights 0 0.5 1] [--models NAME=DIR ...] [--work work/cm-bench] [--models-dir work/cm-weights] [--name NAME]

TLM's first choice is the cost model's top pick of 32 samples. bench/pick_rules.py measured every
sample of those pools on the held-out tasks, so a new cost model's pick there is known without
measuring anything. Each --weights value P fits the shipped recipe (`tlm costmodel`: 1000 trees of
depth 8, eta 0.05, CPU columns) on the whole corpus with each task's rows weighing (its best
latency)^P (CostModelConfig.task_weight; 0: today's), and every model (and the shipped one) picks
in every pool, and (exploratory, when there are several) their ensemble: the best mean rank over
the models. Scores as bench/pick_rules.py's: MetaSchedule@64 over the pick, summed and per-task
geomean, and the pick over the pool's best. `--models` judges cost models fitted by `tlm costmodel`
with other settings (e.g. `--subsample 0.8 --colsample 0.8`); `--weights` with no value fits none.
Writes OUT/NAME.json and OUT/NAME.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pools", required=True, nargs="+", help="bench/pick_rules.py results (JSON; same held-out run)")
    p.add_argument("--weights", type=float, nargs="*", default=[0.0, 0.5, 1.0],
                   help="task weights to fit and judge (models cached in --models-dir)")
    p.add_argument("--models", nargs="*", default=[], metavar="NAME=DIR",
                   help="cost models fitted elsewhere (`tlm costmodel --out DIR ...`), judged after the shipped one")
    p.add_argument("--corpus", default=str(ROOT / "data" / "corpus"))
    p.add_argument("--work", default=str(ROOT / "work" / "cm-bench"), help="records db and features cache")
    p.add_argument("--models-dir", default=str(ROOT / "work" / "cm-weights"))
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    p.add_argument("--name", default="costmodel_weights")
    args = p.parse_args(argv)

    from bench.learning import _geomean
    from tlm.eval.heldout import read_tasks
    from tlm.graph.extract import tasks_for_source
    from tlm.graph.target import resolve_target
    from tlm.measure.shards import hardware_slug
    import numpy as np

    from tlm.search.costmodel import CostModel, CostModelConfig, default_cost_model, features
    from tlm.search.costmodel_data import corpus_groups
    from tlm.space.design import task_space
    from tlm.space.language import parse

    t0 = time.time()
    runs = [json.loads(Path(f).read_text()) for f in args.pools]
    st = runs[0]["settings"]
    if any((r["settings"]["heldout"], r["settings"]["samples"], r["settings"]["pool"])
           != (st["heldout"], st["samples"], st["pool"]) for r in runs):
        sys.exit("bench/costmodel_weights.py: the --pools files come from different held-out runs or samples")
    pools = {"tasks": [t for r in runs for t in r["tasks"]]}
    target = resolve_target(None)
    if st["hardware"] != hardware_slug(target.key):
        sys.exit(f"bench/costmodel_weights.py: {args.pools[0]} was measured on {st['hardware']}")
    run = Path(st["heldout"])
    cfg = json.loads((run / "config.json").read_text())
    tbw = {w: tasks_for_source(w, target=target).tasks for w in cfg["workloads"]}
    by_hash = {t.hash: t for _, t in read_tasks(run / "heldout" / "tasks.json", tbw)}
    cache = json.loads(Path(st["samples"]).read_text())

    # Every pool's parsed schedules, in the order bench/pick_rules.py measured them.
    pool_schs = []
    for rec in pools["tasks"]:
        task, space, schs = by_hash[rec["hash"]], None, []
        space = task_space(task, target)
        for g in cache[f"{rec['hash']}/{rec['seed']}"][: st["pool"]]:
            try:
                schs.append(parse(g["sentence"], task, target, space=space).sch)
            except Exception:  # noqa: BLE001 - as in bench/pick_rules.py: unparsable samples left out
                continue
        assert len(schs) == len(rec["all_s"]), rec["task"]
        pool_schs.append((task, schs, rec))

    models, scores, picks = {"shipped": CostModel.load(default_cost_model(target), target)}, {}, {}

    feats = {}  # the pools' features, computed once

    def top(cm, task, schs):
        if task.hash + str(len(schs)) not in feats:
            feats[task.hash + str(len(schs))] = features(task, schs, target)
        x = feats[task.hash + str(len(schs))]
        if isinstance(cm, list):  # an ensemble: the best mean rank over its models
            rank = np.zeros(len(schs))
            for m in cm:
                rank[m.order(x, target)] += np.arange(len(schs))
            return int(np.argmin(rank))
        return cm.order(x, target)[0]

    def judge(name, cm):
        xs = []
        for task, schs, rec in pool_schs:
            j = top(cm, task, schs)
            xs.append((rec["all_s"][j], min(rec["all_s"]), rec["ms64"]))
            picks.setdefault(rec["task"] + f"/{rec['seed']}", {})[name] = rec["all_s"][j]
        both = [(x, m) for x, _, m in xs if m and math.isfinite(x)]
        scores[name] = {"ms64_over_pick_summed": sum(m for _, m in both) / sum(x for x, _ in both),
                        "ms64_over_pick_geomean": _geomean([m / x for x, m in both]),
                        "pick_over_oracle_geomean": _geomean([x / o for x, o, _ in xs]), "tasks": len(xs)}
        print(name, scores[name], flush=True)
        write(scores, picks)

    def write(scores, picks):
        res = {"settings": {**vars(args), "seconds": round(time.time() - t0)}, "scores": scores, "picks_s": picks}
        out = Path(args.out)
        (out / f"{args.name}.json").write_text(json.dumps(res, indent=1))
        f = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
        lines = [f"# Cost models weighing heavy tasks: first choice in fully measured pools ({st['hardware']})", "",
                 f"The {len(pool_schs)} pools of `{' '.join(args.pools)}` (every sample measured); each model's top pick, "
                 "no new measurement.", "",
                 f"Command: `.venv/bin/python bench/costmodel_weights.py --pools {' '.join(args.pools)} --weights "
                 f"{' '.join(f'{w:g}' for w in args.weights)}"
                 + (f" --models {' '.join(args.models)}" if args.models else "") + f" --name {args.name}`", "",
                 "| cost model | MS@64 / pick, summed | MS@64 / pick, geomean | pick / pool's best, geomean | pools |",
                 "|---|---:|---:|---:|---:|"]
        lines += [f"| {n} | {f(s['ms64_over_pick_summed'])} | {f(s['ms64_over_pick_geomean'])} | "
                  f"{f(s['pick_over_oracle_geomean'])} | {s['tasks']} |" for n, s in scores.items()]
        (out / f"{args.name}.md").write_text("\n".join(lines) + "\n")

    judge("shipped", models["shipped"])
    for spec in args.models:
        name, _, path = spec.partition("=")
        models[name] = CostModel.load(path, target)
        judge(name, models[name])
    groups, group_targets = None, None
    for w in args.weights:
        path = Path(args.models_dir) / f"w{w:g}"
        if not (path / "costmodel-config.json").is_file():
            if groups is None:  # the corpus as `tlm costmodel` reads it
                groups, group_targets, _ = corpus_groups(args.corpus, args.work, "llvm", print)
            CostModel(CostModelConfig(task_weight=w, cpu_columns=True, threads=2)).fit(groups, group_targets).save(path)
            print(f"fitted task_weight {w:g} ({time.time() - t0:.0f} s)", flush=True)
        models[f"weight {w:g}"] = CostModel.load(path, target)
        judge(f"weight {w:g}", models[f"weight {w:g}"])
    if len(models) > 2:  # exploratory: the models' mean rank (a refit's picks swing on heavy tasks)
        judge("ensemble of all (mean rank)", list(models.values()))
    print(f"wrote {Path(args.out) / args.name}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
