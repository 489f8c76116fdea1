"""Can a cost model trained on other tasks pick a task's fast programs? (issue 15, offline)

    .venv/bin/python bench/costmodel.py [--corpus data/corpus] [--work DIR] [--folds 5]
        [--objectives reg pairwise ndcg] [--cpus znver3 znver5] [--out bench/results]

Every committed shard is ingested into WORK/corpus-db; on every CPU of the corpus (or --cpus),
each task with two or more correct programs is featurized (tlm.search.costmodel_data.training_groups;
the features are cached in --cache, shared with `tlm costmodel`). Tasks are split into --folds
folds by task hash (seeded), so a test task is unseen on every CPU. For each fold and objective a
cost model is trained on the other folds' tasks of every CPU and ranks the test tasks' measured
programs; "transfer" rows train on the other CPUs' records only (a CPU the model has never seen).
Per test task with at least 4 programs: the latency of the model's top pick over the task's best
(geometric mean; a random pick: the mean of latency / best), and how often the best is among its
top 2 and top 4 (random: k / n).
Caveat: tasks of one operator at several batch sizes or image sizes fall in different folds, so
this is easier than a new model's tasks; bench/learning.py --cost-model measures held-out ones.
Writes OUT/costmodel.{json,md} (or --name). `--mixing` adds two ways of learning several CPUs
at once: each CPU alone, and every CPU with its description as features; `--max-tasks` samples tasks.

    .venv/bin/python bench/costmodel.py --heldout results/heldout-llvm-znver5-2c \
        --models shipped=pretrained/costmodel-llvm-x86_64 new=work/cm [--out bench/results]

The held-out mode trains nothing: each --models cost model ranks the programs measured by the
held-out benchmark (`tlm eval --suite heldout`; tasks that no corpus record has, so unseen by every
cost model), read from its committed shards (DIR/heldout/records). Two pools per task: every
program measured by any contender (MetaSchedule, random, TLM), and the random programs alone (an
unbiased sample of the space, as a model's raw samples are closer to than the tuned ones).
Writes OUT/costmodel-heldout.{json,md}. DIR may also be a full eval's (`tlm eval --suite full`,
shards in DIR/records/WORKLOAD): one pool per workload, every program its contenders measured (the
test workloads' tasks, unseen by the corpus); that writes OUT/costmodel-e2e-tasks.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _geomean(xs: list[float]) -> float:
    return math.exp(statistics.mean(math.log(x) for x in xs))


class Score:
    """Top-1 / top-2 / top-4 statistics of one contender over test tasks."""

    def __init__(self) -> None:
        self.pick: list[float] = []
        self.hit2 = self.hit4 = 0.0
        self.w_pick = self.w_best = 0.0  # sum of weight x latency: what a whole model would run

    def add(self, lat, order, weight: float = 1.0) -> None:
        best = lat.min()
        self.pick.append(float(lat[order[0]] / best))
        self.hit2 += bool(lat[order[:2]].min() == best)
        self.hit4 += bool(lat[order[:4]].min() == best)
        self.w_pick += weight * float(lat[order[0]])
        self.w_best += weight * float(best)

    def add_random(self, lat, weight: float = 1.0) -> None:
        self.pick.append(float((lat / lat.min()).mean()))
        self.hit2 += min(1.0, 2 / len(lat))
        self.hit4 += min(1.0, 4 / len(lat))
        self.w_pick += weight * float(lat.mean())
        self.w_best += weight * float(lat.min())

    def summary(self) -> dict:
        n = len(self.pick)
        return {"tasks": n, "top1_vs_best": _geomean(self.pick) if n else None,
                "weighted_vs_best": self.w_pick / self.w_best if n else None,
                "best_in_top2": self.hit2 / n if n else None, "best_in_top4": self.hit4 / n if n else None}


def _write(out: Path, name: str, res: dict, lines: list[str]) -> int:
    """OUT/NAME.json (the results) and OUT/NAME.md (the report, also printed)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(res, indent=1))
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", default=str(ROOT / "data" / "corpus"))
    p.add_argument("--work", default=str(ROOT / "work" / "costmodel"),
                   help="its corpus-db and features (default work/costmodel, shared with `tlm costmodel`)")
    p.add_argument("--cpus", nargs="*", default=None, help="CPUs whose records are used (default: all)")
    p.add_argument("--objectives", nargs="+", default=["reg"], choices=["reg", "pairwise", "ndcg"])
    p.add_argument("--no-transfer", dest="transfer", action="store_false",
                   help="skip the rows trained on the other CPUs only")
    p.add_argument("--mixing", action="store_true",
                   help="also: trained on the test CPU's records only, and on every CPU with the CPU's "
                        "description as features (tlm.search.costmodel.cpu_columns)")
    p.add_argument("--max-tasks", type=int, default=0,
                   help="a seeded sample of this many task hashes (the same on every CPU; 0: all)")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="xgboost threads (0: its default)")
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    p.add_argument("--name", default=None,
                   help="results file name (default costmodel, costmodel-heldout or costmodel-e2e-tasks)")
    p.add_argument("--heldout", default=None, metavar="EVAL_DIR",
                   help="rank the held-out benchmark's measured programs of this `tlm eval` folder instead")
    p.add_argument("--models", nargs="+", default=[], metavar="LABEL=DIR", help="the cost models (--heldout)")
    args = p.parse_args(argv)
    if args.heldout:
        return heldout(args, argv)

    import numpy as np

    from tlm.graph.target import resolve_target
    from tlm.measure.database import open_db
    from tlm.measure.shards import hardware_slug, ingest
    from tlm.search.costmodel import CostModel, CostModelConfig, with_cpu
    from tlm.search.costmodel_data import task_groups

    work = Path(args.work)
    t0 = time.time()
    groups: list[tuple[str, str, np.ndarray, list[float]]] = []  # (task hash, cpu, features, latencies)
    targets: dict[str, object] = {}  # cpu -> its target (the CPU columns of --mixing)
    sample = None
    records: dict[str, int] = {}
    with open_db(str(work / "db")) as db:
        ingest(db, args.corpus)
        for key in [r[0] for r in db.query("SELECT DISTINCT target_key FROM records ORDER BY target_key")]:
            target = resolve_target(json.loads(key))
            if target.kind != "llvm" or (args.cpus and target.cpu not in args.cpus):
                continue
            if args.max_tasks and sample is None:
                every = sorted({r[0] for r in db.query("SELECT DISTINCT task_hash FROM records")})
                sample = set(random.Random(args.seed).sample(every, min(args.max_tasks, len(every))))
            tasks = [t for h in sorted(db.best_by_task(target.key))
                     if (sample is None or h in sample) and (t := db.task(h)) is not None]
            for task, x, lat in task_groups(db, target, tasks, cache=work / "features"):
                groups.append((task.hash, target.cpu, x, lat))
            targets[target.cpu] = target
            records[hardware_slug(target.key)] = db.count(target_key=target.key)
            print(f"{target.cpu}: {sum(1 for g in groups if g[1] == target.cpu)} tasks ({time.time() - t0:.0f} s)",
                  flush=True)
    feat_s = time.time() - t0
    cpus = sorted({g[1] for g in groups})
    hashes = sorted({g[0] for g in groups})
    random.Random(args.seed).shuffle(hashes)
    fold = {h: i % args.folds for i, h in enumerate(hashes)}

    contenders = [(obj, "all") for obj in args.objectives]
    if args.transfer and len(cpus) > 1:
        contenders.append((args.objectives[0], "others"))
    if args.mixing and len(cpus) > 1:
        contenders += [(args.objectives[0], "own"), (args.objectives[0], "described")]
    feats = lambda x, cpu, train_on: with_cpu(x, targets[cpu]) if train_on == "described" else x  # noqa: E731
    scores = {(c, cpu): Score() for c in contenders + [("random", "")] for cpu in cpus}
    for k in range(args.folds):
        test = [g for g in groups if fold[g[0]] == k and len(g[3]) >= 4]
        for _, cpu, _, lat in test:
            scores[(("random", ""), cpu)].add_random(np.asarray(lat))
        for obj, train_on in contenders:
            # the trees of the results recorded so far (the shipped model's defaults grew on 2026-11-26)
            cfg = CostModelConfig(trees=300, depth=6, eta=0.1, seed=args.seed, threads=args.threads, objective=obj)
            # one model for every test CPU ("all", "described"), or one per test CPU: trained without
            # its records ("others") or on its records alone ("own")
            fits = {"": None} if train_on in ("all", "described") else {cpu: None for cpu in cpus}
            for held in fits:
                train = [(feats(x, cpu, train_on), lat) for h, cpu, x, lat in groups if fold[h] != k
                         and (cpu != held if train_on != "own" else cpu == held)]
                fits[held] = CostModel(cfg).fit(train)
            for _, cpu, x, lat in test:
                model = fits[""] if train_on in ("all", "described") else fits[cpu]
                scores[((obj, train_on), cpu)].add(np.asarray(lat), model.order(feats(x, cpu, train_on)))
            print(f"fold {k}: {obj} ({train_on}) done ({time.time() - t0:.0f} s)", flush=True)

    label = lambda c: "random pick" if c[0] == "random" else c[0] + {  # noqa: E731
        "others": ", other CPUs only", "own": ", this CPU only", "described": ", every CPU + CPU columns"}.get(c[1], "")
    rows = [{"cpu": cpu, "contender": label(c), **scores[(c, cpu)].summary()}
            for cpu in cpus for c in [("random", "")] + contenders]
    res = {"command": ("python bench/costmodel.py " + " ".join(sys.argv[1:] if argv is None else argv)).strip(),
           "host": hardware_slug(resolve_target(None).key), "records": records,
           "tasks": {cpu: sum(1 for g in groups if g[1] == cpu) for cpu in cpus},
           "programs": {cpu: sum(len(g[3]) for g in groups if g[1] == cpu) for cpu in cpus},
           "folds": args.folds, "featurize_s": round(feat_s), "seconds": round(time.time() - t0), "rows": rows}
    fmt = lambda v, d: "-" if v is None else f"{v:.{d}f}"  # noqa: E731
    lines = ["# Cost model: picking a task's fast programs, trained on other tasks", "",
             f"`{res['command']}` (run on {res['host']}, {time.strftime('%Y-%m-%d')}): "
             + "; ".join(f"{cpu}: {res['programs'][cpu]} correct programs of {res['tasks'][cpu]} tasks"
                         for cpu in cpus)
             + f" (corpus records: {', '.join(f'{k} {v}' for k, v in records.items())}). {args.folds} folds by "
             f"task hash, the same on every CPU; test tasks: those with at least 4 programs"
             + (f"; a seeded sample of {args.max_tasks} task hashes" if args.max_tasks else "")
             + f". {res['seconds']} s "
             f"({res['featurize_s']} s reading and featurizing).", "",
             "Rows: the cost model's objective (`tlm.search.costmodel.OBJECTIVES`), trained on the training folds "
             "of every CPU; `other CPUs only`: trained without any record of the test CPU (how a cost model "
             "serves a CPU it has never measured on); `this CPU only`: trained on the test CPU's records alone; "
             "`every CPU + CPU columns`: every CPU's records, each row with its CPU's vector width and feature "
             "flags (`tlm.search.costmodel.cpu_columns`), so that one model can rank differently per CPU.", "",
             "| test CPU | contender | test tasks | top pick / task best (geomean) | best in top 2 | best in top 4 |",
             "|---|---|---:|---:|---:|---:|"]
    lines += [f"| {r['cpu']} | {r['contender']} | {r['tasks']} | {fmt(r['top1_vs_best'], 3)} | "
              f"{fmt(r['best_in_top2'], 2)} | {fmt(r['best_in_top4'], 2)} |" for r in rows]
    lines += ["", "Tasks of one operator at other batch or image sizes can fall in other folds: easier than a new "
              "model's tasks (`bench/learning.py --cost-model` measures those)."]
    return _write(Path(args.out), args.name or "costmodel", res, lines)


def heldout(args, argv) -> int:
    """Rank the held-out benchmark's measured programs with each of --models (module doc)."""
    import numpy as np

    from tlm.graph.target import resolve_target
    from tlm.measure.database import open_db
    from tlm.measure.shards import SUFFIX, hardware_slug, ingest
    from tlm.search.costmodel import CostModel
    from tlm.search.costmodel_data import task_groups

    t0 = time.time()
    models = {}
    for spec in args.models:
        label, _, path = spec.partition("=")
        if not path or not Path(path).is_dir():
            raise SystemExit(f"--models {spec}: want LABEL=DIR with a cost model in DIR")
        models[label] = CostModel.load(path)
    if not models:
        raise SystemExit("--heldout needs --models LABEL=DIR ...")
    # The held-out benchmark's shards: DIR/heldout/records/<contender>[/<k>]/<hardware>/*.jsonl.xz;
    # a full eval's: DIR/records/<workload>/<contender>/<hardware>/*.jsonl.xz. ingest() reads <dir>/*/*.
    full_eval = not (Path(args.heldout) / "heldout" / "records").is_dir()
    root = Path(args.heldout) / ("records" if full_eval else "heldout/records")
    dirs = sorted({p.parent.parent for p in root.rglob(f"*{SUFFIX}")}) if root.is_dir() else []
    workloads = sorted({d.parent.name for d in dirs})
    pools = ({f"{w} all measured": [d for d in dirs if d.parent.name == w] for w in workloads} if full_eval
             else {"all measured": dirs, "random only": [d for d in dirs if d.name == "random"]})
    if not dirs:
        raise SystemExit(f"--heldout {args.heldout}: no record shards under {root}")
    scores: dict[tuple[str, str, str], Score] = {}
    counts: dict[tuple[str, str], tuple[int, int]] = {}
    for pool, pool_dirs in pools.items():
        db_dir = Path(args.work) / "heldout-db" / Path(args.heldout).resolve().name / pool.split()[0]
        with open_db(str(db_dir)) as db:
            for d in pool_dirs:
                ingest(db, d)
            for key in [r[0] for r in db.query("SELECT DISTINCT target_key FROM records ORDER BY target_key")]:
                target = resolve_target(json.loads(key))
                tasks = [t for h in sorted(db.best_by_task(target.key)) if (t := db.task(h)) is not None]
                groups = [g for g in task_groups(db, target, tasks, cache=Path(args.work) / "features")
                          if len(g[2]) >= 4]
                counts[(pool, target.cpu)] = (len(groups), sum(len(g[2]) for g in groups))
                for label in ["random pick", *models]:
                    sc = scores.setdefault((pool, target.cpu, label), Score())
                    for task, x, lat in groups:
                        ok = ~np.isnan(x).any(axis=1)  # programs whose features exist (all of them, in practice)
                        x, lat = x[ok], np.asarray(lat)[ok]
                        if label == "random pick":
                            sc.add_random(lat, task.weight)
                        else:
                            sc.add(lat, models[label].for_target(target).order(x), task.weight)
        print(f"{pool}: done ({time.time() - t0:.0f} s)", flush=True)
    rows = [{"pool": pool, "cpu": cpu, "contender": label, "programs": counts[(pool, cpu)][1], **sc.summary()}
            for (pool, cpu, label), sc in scores.items()]
    res = {"command": ("python bench/costmodel.py " + " ".join(sys.argv[1:] if argv is None else argv)).strip(),
           "host": hardware_slug(resolve_target(None).key), "models": dict(m.partition("=")[::2] for m in args.models),
           "seconds": round(time.time() - t0), "rows": rows}
    fmt = lambda v, d: "-" if v is None else f"{v:.{d}f}"  # noqa: E731
    name, what = (("costmodel-e2e-tasks", "the full eval's measured programs (the test workloads' tasks)")
                  if full_eval else ("costmodel-heldout", "the held-out benchmark's measured programs"))
    lines = [f"# Cost models on {what}", "",
             f"`{res['command']}` (run on {res['host']}, {time.strftime('%Y-%m-%d')}, {res['seconds']} s; nothing "
             "measured). Models: " + ", ".join(f"{k} = `{v}`" for k, v in res["models"].items()) + ".", "",
             f"Tasks: {'the test workloads' if full_eval else 'the held-out benchmark'}'s (no corpus record has "
             "them), those with at least 4 correct programs "
             "in the pool. Per task the model ranks the pool; lower top pick / best is better. Weighted: "
             "the sum over tasks of weight x the top pick's latency over the same sum of each task's best "
             "(what a whole model built from the top picks would run, task time only).", "",
             "| pool | CPU | contender | tasks | programs | top pick / task best (geomean) | weighted | "
             "best in top 2 | best in top 4 |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['pool']} | {r['cpu']} | {r['contender']} | {r['tasks']} | {r['programs']} | "
              f"{fmt(r['top1_vs_best'], 3)} | {fmt(r['weighted_vs_best'], 3)} | {fmt(r['best_in_top2'], 2)} | "
              f"{fmt(r['best_in_top4'], 2)} |" for r in rows]
    return _write(Path(args.out), args.name or name, res, lines)


if __name__ == "__main__":
    sys.exit(main())
