"""The cost model's training data: features of measured records (cached per program), and a cost
model fit on the whole corpus (tlm.search.costmodel):

    tlm costmodel [--corpus data/corpus] --out DIR     train one on every record of the corpus
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from tlm.errors import TlmError
from tlm.graph.tasks import Task
from tlm.search.costmodel import FEATURE_VERSION, FEATURES, META_FILE, OBJECTIVES, CostModel, CostModelConfig, features


def training_groups(db, target, tasks: list[Task], per_task: int = 0,
                    cache: str | Path | None = None) -> list[tuple[np.ndarray, list[float]]]:
    """(features, latencies) of each task's correct records on `target`: `task_groups` without the task."""
    return [(x, lat) for _, x, lat in task_groups(db, target, tasks, per_task, cache)]


def correct_records(db, task_hash: str, target) -> list:
    """A task's correct records on `target` (a TargetInfo, or its key: the database's target column),
    fastest first, equal medians in record order: the rows of `task_groups`, in its order."""
    key = target if isinstance(target, str) else target.key
    return sorted((r for r in db.records(task_hash, key) if r.error is None and r.median_s),
                  key=lambda r: r.median_s)


def task_groups(db, target, tasks: list[Task], per_task: int = 0,
                cache: str | Path | None = None) -> list[tuple[Task, np.ndarray, list[float]]]:
    """(task, features, latencies) of each task's correct records on `target` (at most `per_task`, the
    fastest first; 0: all). A record without a stored trace is rebuilt from its sentence; one that
    no longer parses (its task's space changed since) gets a row of NaN (`CostModel.fit` leaves
    it out). `cache`: a directory keeping every program's features (per hardware and task, keyed
    by sentence), so that a retraining featurizes only the records it has not seen (~55 ms each)."""
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    from tlm.space.design import task_space
    from tlm.space.language import parse

    store = _FeatureCache(Path(cache), target) if cache else None
    groups = []
    for task in tasks:
        recs = correct_records(db, task.hash, target)
        recs = recs[:per_task] if per_task else recs
        if len(recs) < 2:
            continue
        keys = [r.sentence or json.dumps(r.trace_json, sort_keys=True) for r in recs]
        known = store.load(task.hash) if store else {}
        todo, schs = [], []
        for key, r in zip(keys, recs):
            if key in known:
                continue
            try:
                if r.trace_json:
                    sch = Schedule(task.mod)
                    Trace.apply_json_to_schedule(r.trace_json, sch)
                elif r.sentence:
                    sch = parse(r.sentence, task, target, space=task_space(task, target)).sch
                else:
                    sch = None
            except Exception:  # noqa: BLE001 - a record that no longer replays gets a NaN row
                sch = None
            todo.append(key)
            schs.append(sch)
        if todo:
            ok = [i for i, sch in enumerate(schs) if sch is not None]
            x = np.full((len(todo), FEATURES), np.nan, dtype="float32")
            if ok:
                x[ok] = features(task, [schs[i] for i in ok], target)
            known.update(zip(todo, x))
            if store:
                store.save(task.hash, known)
        x = np.stack([known[k] for k in keys])
        if (~np.isnan(x).any(axis=1)).sum() >= 2:
            groups.append((task, x, [r.median_s for r in recs]))
    return groups



class _FeatureCache:
    """Features of programs already featurized: DIR/v<version>-<hardware>/<task hash>.npz."""

    def __init__(self, root: Path, target):
        from tlm.measure.shards import hardware_slug

        self.dir = root / f"v{FEATURE_VERSION}-{hardware_slug(target.key)}"

    def load(self, task_hash: str) -> dict[str, np.ndarray]:
        try:
            with np.load(self.dir / f"{task_hash}.npz") as f:
                return dict(zip(f["keys"].tolist(), f["x"]))
        except (OSError, KeyError, ValueError):
            return {}

    def save(self, task_hash: str, rows: dict[str, np.ndarray]) -> None:
        import os

        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / f"{task_hash}.tmp-{os.getpid()}.npz"
        np.savez(tmp, keys=np.array(list(rows), dtype=object).astype(str), x=np.stack(list(rows.values())))
        os.replace(tmp, self.dir / f"{task_hash}.npz")


def corpus_groups(corpus: str | Path, work: str | Path, kind: str = "llvm", log=print):
    """(groups, the target of each group, the summary of each CPU) of every correct record of the
    corpus on CPUs of `kind`: each task and CPU one group (`training_groups`), the shards ingested
    into WORK/db and the features cached in WORK/features."""
    import time

    from tlm.graph.target import resolve_target
    from tlm.measure.database import open_db
    from tlm.measure.shards import ingest, require_corpus_dir
    from tlm.model.lm import target_summary

    t0 = time.monotonic()
    corpus = require_corpus_dir(str(corpus))
    if not corpus.is_dir():
        raise TlmError(f"--corpus {corpus}: no such directory")
    groups, group_targets, targets = [], [], []
    with open_db(str(Path(work) / "db")) as db:
        ingest(db, corpus)
        for key in db.target_keys():
            try:
                target = resolve_target(json.loads(key))
            except (TlmError, ValueError):
                log(f"tlm: warning: records of target {key} skipped (this LLVM cannot resolve it)")
                continue
            if target.kind != kind:
                continue
            tasks = [t for h in sorted(db.best_by_task(target.key)) if (t := db.task(h)) is not None]
            got = training_groups(db, target, tasks, cache=Path(work) / "features")
            log(f"{target.cpu}: {len(got)} tasks, {sum(len(g[1]) for g in got)} programs "
                f"({time.monotonic() - t0:.0f} s)")
            if got:
                groups += got
                group_targets += [target] * len(got)
                targets.append(target_summary(target))
    return groups, group_targets, targets


def train_on_corpus(corpus: str | Path, out: str | Path, work: str | Path, kind: str = "llvm",
                    config: CostModelConfig | None = None, log=print) -> dict[str, Any]:
    """Fit a cost model on every correct record of the corpus on CPUs of `kind` (each task and CPU
    one group: labels compare programs of one task on one CPU), save it with its meta in `out`.
    `work` holds the records database the shards are ingested into and the features cache (both
    kept: a later run ingests only new shards and featurizes only new programs)."""
    import time

    t0 = time.monotonic()
    config = config or CostModelConfig()
    groups, group_targets, targets = corpus_groups(corpus, work, kind, log)
    tasks_n = len(groups)
    model = CostModel(config).fit(groups, group_targets)
    model.save(out)
    meta = {"targets": targets, "tasks": tasks_n, "programs": sum(len(g[1]) for g in groups),
            "corpus": str(corpus), "seconds": round(time.monotonic() - t0, 1)}
    (Path(out) / META_FILE).write_text(json.dumps(meta, indent=1))
    return meta


def _cmd_costmodel(args) -> int:
    if args.trees < 1 or args.depth < 1 or not 0 < args.eta <= 1:
        raise TlmError("--trees and --depth must be at least 1, --eta in (0, 1]")
    if not (0 < args.subsample <= 1 and 0 < args.colsample <= 1):
        raise TlmError("--subsample and --colsample must be in (0, 1]")
    cfg = CostModelConfig(trees=args.trees, depth=args.depth, eta=args.eta, seed=args.seed, objective=args.objective,
                          cpu_columns=args.cpu_columns, task_weight=args.task_weight, cpu_balance=args.cpu_balance,
                          subsample=args.subsample,
                          colsample=args.colsample)
    meta = train_on_corpus(args.corpus, args.out, args.work, args.kind, cfg,
                           log=lambda m: print(m, file=sys.stderr))
    print(f"cost model in {args.out}: {meta['programs']} programs of {meta['tasks']} tasks on "
          f"{', '.join(t['cpu'] for t in meta['targets'])}, {meta['seconds']:.0f} s")
    return 0


def register_cli(sub) -> None:
    p = sub.add_parser("costmodel", help="train the cost model that ranks the TLM tuner's samples, on the corpus")
    p.add_argument("--corpus", default="data/corpus", help="shard directory (default data/corpus)")
    p.add_argument("--out", required=True, help="output directory (the shipped one: pretrained/costmodel-llvm-x86_64)")
    p.add_argument("--work", default="work/costmodel", help="where the corpus is ingested (default work/costmodel)")
    p.add_argument("--kind", default="llvm", help="records of CPUs of this target kind (default llvm)")
    p.add_argument("--trees", type=int, default=CostModelConfig.trees)
    p.add_argument("--depth", type=int, default=CostModelConfig.depth)
    p.add_argument("--eta", type=float, default=CostModelConfig.eta, help="XGBoost's learning rate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--objective", default=CostModelConfig.objective, choices=list(OBJECTIVES),
                   help="reg: regression on -log(latency / task best); pairwise, ndcg: ranking within each task")
    p.add_argument("--task-weight", type=float, default=CostModelConfig.task_weight,
                   help="each task's programs weigh (its best latency)^P (default 0: all the same; 1: as a "
                        "summed latency weighs the tasks)")
    p.add_argument("--cpu-balance", action="store_true",
                   help="each CPU's records weigh the same in total, whatever its share of the corpus "
                        "(CostModelConfig.cpu_balance; default: every record the same)")
    p.add_argument("--subsample", type=float, default=CostModelConfig.subsample,
                   help="fraction of the rows each tree learns from (default 1: all)")
    p.add_argument("--colsample", type=float, default=CostModelConfig.colsample,
                   help="fraction of the feature columns each tree learns from (default 1: all)")
    p.add_argument("--cpu-columns", action=argparse.BooleanOptionalAction, default=True,
                   help="describe each record's CPU in its features (default; CostModelConfig.cpu_columns)")
    p.set_defaults(func=_cmd_costmodel)
