"""A learned cost model over measured programs: which of a task's candidate programs are fast.

Trained on the measurement records of other tasks (the corpus), it ranks programs no one has
measured: pick TLM@0's program among N samples, or choose which k of N generated programs to
measure. Features are MetaSchedule's `PerStoreFeature` (164 numbers per store of the lowered
program), summed and maxed over stores, plus the store count; the label is how far a program is
from its task's best, -log(latency / best) (0 for the best), clipped at `CostModelConfig.clip`,
so every task weighs the same whatever its absolute time. Model: XGBoost regression (or learning
to rank within each task, `CostModelConfig.objective`: better on measured programs, worse on raw
samples; bench/costmodel.py and bench/pick.py --cost-models compare them).
Tasks with fewer than 2 correct programs teach nothing about ranking and are left out.

    tlm costmodel [--corpus data/corpus] --out DIR     train one on every record of the corpus

The shipped one, `pretrained/costmodel-KIND-ARCH` (`default_cost_model`), ranks the TLM tuner's
samples (tlm.search.tlm_tuner); its `costmodel-meta.json` lists the CPUs whose records it learned
from, in tlm.json's `targets` form.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tlm.errors import TlmError
from tlm.graph.tasks import Task

MODEL_FILE = "costmodel.json"
OBJECTIVES = {"reg": "reg:squarederror", "pairwise": "rank:pairwise", "ndcg": "rank:ndcg"}
CONFIG_FILE = "costmodel-config.json"
META_FILE = "costmodel-meta.json"


@dataclass
class CostModelConfig:
    trees: int = 300
    depth: int = 6
    eta: float = 0.1
    clip: float = 4.0  # labels below -clip (programs > e^4 = 55x slower than the best) are -clip
    seed: int = 0
    threads: int = 0  # 0: xgboost's default
    # "reg": regression on the label; "pairwise" / "ndcg": XGBoost's learning to rank within each
    # task (a group per task and CPU; ndcg on the label in 1/4 steps of log latency, 0..16).
    # Ranking orders a task's measured programs better (best in the top 2 of unseen tasks: 69% vs
    # 62%, bench/results/costmodel.md) but picks among raw samples far worse (TLM@0 end to end
    # 1.73x slower, bench/results/pick-costmodels.md): the corpus holds mostly good programs, and
    # only the regression's absolute labels learn to reject the bad ones a model also samples.
    objective: str = "reg"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def features(task: Task, schedules: list, target) -> np.ndarray:
    """[len(schedules), 2 x 164 + 1] features of scheduled programs of `task` (a row of NaN for a
    program whose features cannot be extracted)."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

    from tlm.space.intrin import light_tensor_intrin

    light_tensor_intrin()
    fx = ms.feature_extractor.PerStoreFeature()
    ctx = ms.TuneContext(mod=task.mod, target=target.tvm())
    width = 2 * fx.feature_vector_length + 1  # = FEATURES
    out = np.full((len(schedules), width), np.nan, dtype="float32")
    for i, sch in enumerate(schedules):
        try:
            cand = MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True))
            f = fx.extract_from(ctx, [cand])[0].numpy()
        except Exception:  # noqa: BLE001 - one program's failure leaves its row NaN
            continue
        out[i] = np.concatenate([f.sum(0), f.max(0), [f.shape[0]]]) if f.shape[0] else 0.0
    return out


def labels(latencies_s: list[float], clip: float) -> np.ndarray:
    """-log(latency / best of the list), clipped at -clip: 0 for the fastest."""
    lat = np.asarray(latencies_s, dtype="float64")
    return np.maximum(-np.log(lat / lat.min()), -clip)


class CostModel:
    def __init__(self, config: CostModelConfig | None = None, booster=None):
        self.config = config or CostModelConfig()
        self.booster = booster

    def _params(self) -> dict[str, Any]:
        c = self.config
        if c.objective not in OBJECTIVES:
            raise TlmError(f"bad cost model objective {c.objective!r}: use one of {', '.join(OBJECTIVES)}")
        p = {"objective": OBJECTIVES[c.objective], "max_depth": c.depth, "eta": c.eta, "seed": c.seed}
        if c.threads:
            p["nthread"] = c.threads
        return p

    def fit(self, groups: list[tuple[np.ndarray, list[float]]]) -> CostModel:
        """Train on [(features [n, F] of a task's correct programs, their latencies)]."""
        import xgboost as xgb

        params = self._params()  # checks the objective first
        xs, ys = [], []
        for x, lat in groups:
            ok = ~np.isnan(x).any(axis=1)
            if ok.sum() < 2:
                continue
            xs.append(x[ok])
            ys.append(labels([v for v, good in zip(lat, ok) if good], self.config.clip))
        if not xs:
            raise TlmError("no task with two or more correct programs to learn from")
        y = np.concatenate(ys)
        if self.config.objective == "ndcg":  # integer relevance: 0 (clip) .. 4 * clip (the best)
            y = np.round((y + self.config.clip) * 4)
        data = xgb.DMatrix(np.concatenate(xs), label=y)
        if self.config.objective != "reg":
            data.set_group([len(v) for v in ys])  # rows are in group order
        self.booster = xgb.train(params, data, self.config.trees)
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Higher is faster; rows with NaN features get -inf."""
        import xgboost as xgb

        if self.booster is None:
            raise TlmError("the cost model is not trained")
        score = self.booster.predict(xgb.DMatrix(np.nan_to_num(x))).astype("float64")
        score[np.isnan(x).any(axis=1)] = -math.inf
        return score

    def adapted(self, x: np.ndarray, latencies_s: list[float], trees: int) -> CostModel:
        """A copy boosted `trees` more rounds on one task's measured programs (features [n, F],
        their latencies): the tuner's online update, as MetaSchedule's XGBoost model retrains on
        what it measured. Labels as in training (-log latency over the task's best): the new trees
        fit what the model got wrong on this task. Self when there is nothing to learn from (fewer
        than 2 correct programs, trees 0) or the objective ranks (its groups need more than one task)."""
        import xgboost as xgb

        lat = np.asarray(latencies_s, dtype="float64")
        ok = ~np.isnan(x).any(axis=1) & np.isfinite(lat) & (lat > 0)
        if trees <= 0 or ok.sum() < 2 or self.config.objective != "reg" or self.booster is None:
            return self
        data = xgb.DMatrix(x[ok], label=labels(list(lat[ok]), self.config.clip))
        return CostModel(self.config, xgb.train(self._params(), data, trees, xgb_model=self.booster))

    def order(self, x: np.ndarray) -> list[int]:
        """Row indices of features `x`, predicted fastest first (ties: the earlier row first)."""
        score = self.predict(x)
        return sorted(range(len(score)), key=lambda i: (-score[i], i))

    def rank(self, task: Task, schedules: list, target) -> list[int]:
        """Indices of `schedules`, predicted fastest first."""
        return self.order(features(task, schedules, target))

    def save(self, directory: str | Path) -> None:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        self.booster.save_model(str(d / MODEL_FILE))
        (d / CONFIG_FILE).write_text(json.dumps(self.config.to_json(), indent=1))

    @classmethod
    def load(cls, directory: str | Path) -> CostModel:
        import xgboost as xgb

        d = Path(directory)
        if not (d / MODEL_FILE).is_file():
            raise TlmError(f"{d} holds no cost model ({MODEL_FILE})")
        booster = xgb.Booster()
        booster.load_model(str(d / MODEL_FILE))
        return cls(CostModelConfig(**json.loads((d / CONFIG_FILE).read_text())), booster)


def training_groups(db, target, tasks: list[Task], per_task: int = 0,
                    cache: str | Path | None = None) -> list[tuple[np.ndarray, list[float]]]:
    """(features, latencies) of each task's correct records on `target`: `task_groups` without the task."""
    return [(x, lat) for _, x, lat in task_groups(db, target, tasks, per_task, cache)]


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
        recs = sorted((r for r in db.records(task.hash, target.key) if r.error is None and r.median_s),
                      key=lambda r: r.median_s)
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


FEATURES = 2 * 164 + 1  # the width of `features` rows
FEATURE_VERSION = 1  # bump when `features` changes: cached rows are kept per version


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


# ---------------------------------------------------------------- the shipped one

_NOTED: set[tuple[str, str]] = set()


def default_cost_model(target, log=None) -> Path | None:
    """The shipped cost model for a target: `pretrained/costmodel-KIND-*` whose meta lists the
    target's kind, arch and ISA, else one of the same kind and arch (with a one-line note: its
    rankings were learned on another CPU), else None."""
    from tlm.graph.target import resolve_target
    from tlm.model.lm import model_targets, read_meta, repo_root, serves

    info = resolve_target(target)
    root = repo_root() / "pretrained"
    exact, near = [], []
    for path in sorted(root.glob(f"costmodel-{info.kind}-*")) if root.is_dir() else []:
        if not (path / MODEL_FILE).is_file():
            continue
        meta = _read_json(path / META_FILE)
        if serves(meta, info):
            exact.append(path)
        elif any(t.get("arch") == info.arch for t in model_targets(meta)):
            near.append((path, meta))
    if exact:
        return exact[0]
    if not near:
        return None
    path, meta = near[0]
    if (info.key, str(path)) not in _NOTED:
        _NOTED.add((info.key, str(path)))
        cpus = ", ".join(sorted({f"{t.get('isa')} {t.get('cpu')}" for t in model_targets(meta)})) or "another CPU"
        (log or _stderr)(f"tlm: note: no cost model for {info.kind}/{info.isa}; ranking with "
                         f"{path.relative_to(repo_root())} (learned on {cpus})")
    return path


def load_cost_model(spec: str, target) -> CostModel | None:
    """A tuner's cost model: "auto" (the shipped one for `target`, None if there is none), "none"
    (None), or a directory (a TlmError if it holds no cost model)."""
    if spec == "none":
        return None
    if spec == "auto":
        path = default_cost_model(target)
        if path is None and (target.key, "") not in _NOTED:
            _NOTED.add((target.key, ""))
            _stderr(f"tlm: note: no cost model for {target.kind}/{target.isa} ({target.arch}); "
                    "the model's samples are measured unranked (train one: tlm costmodel)")
        return CostModel.load(path) if path else None
    return CostModel.load(spec)


def _stderr(msg: str) -> None:
    import sys

    print(msg, file=sys.stderr)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def train_on_corpus(corpus: str | Path, out: str | Path, work: str | Path, kind: str = "llvm",
                    config: CostModelConfig | None = None, log=print) -> dict[str, Any]:
    """Fit a cost model on every correct record of the corpus on CPUs of `kind` (each task and CPU
    one group: labels compare programs of one task on one CPU), save it with its meta in `out`.
    `work` holds the records database the shards are ingested into and the features cache (both
    kept: a later run ingests only new shards and featurizes only new programs)."""
    import time

    from tlm.graph.target import resolve_target
    from tlm.measure.database import open_db
    from tlm.measure.shards import ingest, require_corpus_dir
    from tlm.model.lm import target_summary

    t0 = time.monotonic()
    corpus = require_corpus_dir(str(corpus))
    if not corpus.is_dir():
        raise TlmError(f"--corpus {corpus}: no such directory")
    config = config or CostModelConfig()
    groups, targets, tasks_n = [], [], 0
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
                targets.append(target_summary(target))
                tasks_n += len(got)
    model = CostModel(config).fit(groups)
    model.save(out)
    meta = {"targets": targets, "tasks": tasks_n, "programs": sum(len(g[1]) for g in groups),
            "corpus": str(corpus), "seconds": round(time.monotonic() - t0, 1)}
    (Path(out) / META_FILE).write_text(json.dumps(meta, indent=1))
    return meta


def _cmd_costmodel(args) -> int:
    if args.trees < 1 or args.depth < 1:
        raise TlmError("--trees and --depth must be at least 1")
    cfg = CostModelConfig(trees=args.trees, depth=args.depth, seed=args.seed, objective=args.objective)
    meta = train_on_corpus(args.corpus, args.out, args.work, args.kind, cfg,
                           log=lambda m: _stderr(m))
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
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--objective", default=CostModelConfig.objective, choices=list(OBJECTIVES),
                   help="reg: regression on -log(latency / task best); pairwise, ndcg: ranking within each task")
    p.set_defaults(func=_cmd_costmodel)
