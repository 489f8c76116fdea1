"""Can a cost model trained on other tasks pick a task's fast programs? (issue 15, offline)

    .venv/bin/python bench/costmodel.py [--corpus data/corpus] [--work DIR] [--folds 5] [--out bench/results]

Every committed shard is ingested into WORK/corpus-db (the learning bench's); each task with two
or more correct programs on this hardware is featurized (tlm.search.costmodel.training_groups).
Tasks are split into --folds folds (seeded); for each fold a cost model is trained on the other
folds and ranks the test tasks' measured programs. Per test task with at least 4 programs: the
latency of the model's top pick over the task's best (geometric mean; a random pick: the mean of
latency / best), and how often the best is among its top 2 and top 4 (random: k / n).
Caveat: tasks of one operator at several batch sizes or image sizes fall in different folds, so
this is easier than a new model's tasks; bench/learning.py --cost-model measures held-out ones.
Writes OUT/costmodel.{json,md}.
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", default=str(ROOT / "data" / "corpus"))
    p.add_argument("--work", default=None, help="default work/learning-<hardware> (its corpus-db)")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = p.parse_args(argv)

    import numpy as np

    from tlm.graph.target import resolve_target
    from tlm.measure.database import open_db
    from tlm.measure.shards import hardware_slug, ingest
    from tlm.search.costmodel import CostModel, CostModelConfig, training_groups

    target = resolve_target(None)
    work = Path(args.work or ROOT / "work" / f"learning-{hardware_slug(target.key)}")
    t0 = time.time()
    with open_db(str(work / "corpus-db")) as db:
        ingest(db, args.corpus)
        tasks = [t for h in sorted(db.best_by_task(target.key)) if (t := db.task(h)) is not None]
        groups = training_groups(db, target, tasks)
        records = db.count(target_key=target.key)
    feat_s = time.time() - t0
    order = list(range(len(groups)))
    random.Random(args.seed).shuffle(order)
    fold = {g: i % args.folds for i, g in enumerate(order)}
    pick, rand, hit2, hit4, exp2, exp4 = [], [], 0, 0, 0.0, 0.0
    for k in range(args.folds):
        train = [groups[g] for g in order if fold[g] != k]
        model = CostModel(CostModelConfig(seed=args.seed, threads=target.cores)).fit(train)
        for g in (g for g in order if fold[g] == k):
            x, lat = groups[g]
            if len(lat) < 4:
                continue
            lat = np.asarray(lat)
            best = lat.min()
            ranked = np.argsort(-model.predict(x), kind="stable")
            pick.append(float(lat[ranked[0]] / best))
            rand.append(float(np.mean(lat / best)))
            hit2 += bool(lat[ranked[:2]].min() == best)
            hit4 += bool(lat[ranked[:4]].min() == best)
            exp2 += min(1.0, 2 / len(lat))
            exp4 += min(1.0, 4 / len(lat))
    n = len(pick)
    res = {"command": ("python bench/costmodel.py " + " ".join(sys.argv[1:] if argv is None else argv)).strip(),
           "hardware": hardware_slug(target.key), "records": records, "tasks": len(groups),
           "programs": sum(len(lat) for _, lat in groups), "test_tasks": n, "featurize_s": round(feat_s),
           "seconds": round(time.time() - t0),
           "top1_vs_best": {"model": _geomean(pick), "random": _geomean(rand)},
           "best_in_top2": {"model": hit2 / n, "random": exp2 / n},
           "best_in_top4": {"model": hit4 / n, "random": exp4 / n}}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "costmodel.json").write_text(json.dumps(res, indent=1))
    lines = ["# Cost model: picking a task's fast programs, trained on other tasks", "",
             f"`{res['command']}` on {res['hardware']}: {res['programs']} correct programs of {res['tasks']} tasks "
             f"(corpus: {records} records), {args.folds} folds by task; {n} test tasks with at least 4 programs. "
             f"{res['seconds']} s ({res['featurize_s']} s featurizing).", "",
             "| | cost model | random pick |", "|---|---:|---:|",
             f"| top pick's latency / task best (geomean) | {res['top1_vs_best']['model']:.3f} | "
             f"{res['top1_vs_best']['random']:.3f} |",
             f"| best among the top 2 | {res['best_in_top2']['model']:.2f} | {res['best_in_top2']['random']:.2f} |",
             f"| best among the top 4 | {res['best_in_top4']['model']:.2f} | {res['best_in_top4']['random']:.2f} |", "",
             "Tasks of one operator at other batch or image sizes can fall in other folds: easier than a new "
             "model's tasks (`bench/learning.py --cost-model` measures those)."]
    (out / "costmodel.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
