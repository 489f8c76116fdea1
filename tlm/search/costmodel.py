"""A learned cost model over measured programs: which of a task's candidate programs are fast.

Trained on the measurement records of other tasks (the corpus), it ranks programs no one has
measured: pick TLM@0's program among N samples, or choose which k of N generated programs to
measure. Features are MetaSchedule's `PerStoreFeature` (164 numbers per store of the lowered
program), summed and maxed over stores, plus the store count; the label is how far a program is
from its task's best, -log(latency / best) (0 for the best), clipped at `CostModelConfig.clip`,
so every task weighs the same whatever its absolute time. Model: XGBoost regression (or learning
to rank within each task, `CostModelConfig.objective`: better on measured programs, worse on raw
samples; bench/costmodel.py and bench/pick.py --cost-models compare them).
Tasks with fewer than 2 correct programs teach nothing about ranking and are left out. Its
training data (features of measured records, cached) and `tlm costmodel`, which trains one on
the whole corpus, are in tlm.search.costmodel_data.

The shipped one, `pretrained/costmodel-KIND-ARCH` (`default_cost_model`), ranks the TLM tuner's
samples (tlm.search.tlm_tuner); its `costmodel-meta.json` lists the CPUs whose records it learned
from, in tlm.json's `targets` form.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tlm.errors import TlmError
from tlm.graph.tasks import Task

# XGBoost's binary JSON (UBJSON), xz-compressed: a 1000-tree model is 3.7 MB instead of 21 MB of
# JSON (what git keeps of each refit, and what travels to a device machine with the tree).
MODEL_FILE = "costmodel.ubj.xz"
LEGACY_MODEL_FILE = "costmodel.json"  # plain XGBoost JSON: models saved before 2026-11-26, still loaded
OBJECTIVES = {"reg": "reg:squarederror", "pairwise": "rank:pairwise", "ndcg": "rank:ndcg"}
CONFIG_FILE = "costmodel-config.json"
META_FILE = "costmodel-meta.json"


@dataclass
class CostModelConfig:
    # 1000 trees of depth 8 at eta 0.05 (shipped since 2026-11-26, commit aa20030): on 80,450
    # corpus programs, TLM@0 end to end 0.78x the latency of 300 trees of depth 6 at eta 0.1
    # (geomean of three workloads; bench/results/pick-costmodels.md); 600 x 8 at 0.1 and 1000 x 6
    # at 0.05 picked worse (bench/results/first_choice-costmodels.md). Small fits (tests) set
    # fewer trees.
    trees: int = 1000
    depth: int = 8
    eta: float = 0.05
    clip: float = 4.0  # labels below -clip (programs > e^4 = 55x slower than the best) are -clip
    seed: int = 0
    threads: int = 0  # 0: xgboost's default
    # "reg": regression on the label; "pairwise" / "ndcg": XGBoost's learning to rank within each
    # task (a group per task and CPU; ndcg on the label in 1/4 steps of log latency, 0..16).
    # Ranking orders a task's measured programs better (best in the top 2 of unseen tasks: 69% vs
    # 62%, bench/results/costmodel.md) but picks among raw samples far worse (TLM@0 end to end
    # 1.73x slower, `git show f88a6df:bench/results/pick-costmodels.md`): the corpus holds mostly
    # good programs, and only the regression's absolute labels learn to reject the bad ones a
    # model also samples.
    # On GPUs the other way round: the shipped CUDA model is pairwise (unseen corpus tasks: picks
    # 0.743x the best summed vs 0.692x; held-out H200 samples 1.45x dlight vs 1.24x;
    # bench/gpu_costmodel_cv.py).
    objective: str = "reg"
    # Every row also describes its CPU (`cpu_columns`: vector width, feature flags), so that one
    # model trained on several CPUs' records ranks each CPU's programs its own way; the model is
    # then bound to the CPU it ranks for (`CostModel.load(dir, target)`). Off for models saved
    # before it existed; on for `tlm costmodel`: on 5 folds of unseen tasks of three CPUs, top
    # pick / best 1.324 vs 1.452 on znver3, 1.343 vs 1.355 on znver5, 1.271 vs 1.271 on rocketlake,
    # best in the top 2 more often on all three (bench/results/costmodel-mixing.md).
    cpu_columns: bool = False
    # Each task's rows weigh (its best latency)^task_weight, scaled so that a row weighs 1 on
    # average (0: every row the same). A ranking error costs a program's time in proportion to its
    # task's: 1 weighs the tasks as a summed latency does.
    task_weight: float = 0.0
    # Each CPU's rows weigh the same in total, whatever its share of the corpus (regression
    # only; off: every row the same, the shipped model). The refit of 2026-12-06 added only
    # AVX-512 records and picked worse whole models at budget 0 on Zen 3 on four of six
    # (bench/results/costmodel-znver3-2026-12-07.md).
    cpu_balance: bool = False
    # Stochastic gradient boosting: each tree sees this fraction of the rows (`subsample`) and of
    # the feature columns (`colsample`, XGBoost's colsample_bytree); 1.0: all (the shipped model;
    # 0.8 / 0.8 picked worse in measured pools: `costmodel_weights` in bench/README.md).
    subsample: float = 1.0
    colsample: float = 1.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def features(task: Task, schedules: list, target) -> np.ndarray:
    """[len(schedules), 2 x 164 + 1] features of scheduled programs of `task` (a row of NaN for a
    program whose features cannot be extracted)."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate
    from tvm.s_tir.schedule import Schedule

    from tlm.space.intrin import light_tensor_intrin

    light_tensor_intrin()
    fx = ms.feature_extractor.PerStoreFeature()
    ctx = ms.TuneContext(mod=task.mod, target=target.tvm())
    width = 2 * fx.feature_vector_length + 1  # = FEATURES
    out = np.full((len(schedules), width), np.nan, dtype="float32")
    for i, sch in enumerate(schedules):
        try:
            mod = unique_buffer_names(sch.mod)
            if mod is not sch.mod:
                sch = Schedule(mod)
            cand = MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True))
            f = fx.extract_from(ctx, [cand])[0].numpy()
        except Exception:  # noqa: BLE001 - one program's failure leaves its row NaN
            continue
        out[i] = np.concatenate([f.sum(0), f.max(0), [f.shape[0]]]) if f.shape[0] else 0.0
    return out


def unique_buffer_names(mod):
    """`mod`, or a copy whose buffers are named apart where two shared a name: each later one gets
    the first free `_1`, `_2`, ... suffix. Why: `PerStoreFeature` orders a store's buffers by
    (cache lines, bytes, name), and buffers tied on all three (TE names every reshape `T_reshape`)
    came out in hash-map order, which differs between processes: the same program had other
    features, hence another rank, in each run of a budget-0 compile."""
    from tvm import tirx
    from tvm.s_tir.stmt import SBlockRealize
    from tvm_ffi import serialization

    # First the cheap look (a program's buffers are its parameters and its root block's; TE's and the
    # schedule's alike): the JSON graph below costs about half of the features' own time.
    names = []
    for func in mod.functions.values():
        if isinstance(func, tirx.PrimFunc):
            names += [p.name for p in func.params]  # buffers are variables typed by their shape
            if isinstance(func.body, SBlockRealize):
                names += [b.name for b in func.body.block.alloc_buffers]
    if len(set(names)) == len(names):
        return mod
    graph = json.loads(serialization.to_json_graph_str(mod))
    nodes = graph["nodes"]
    # A buffer is a Var typed by a BufferType; the graph holds each object once, in a fixed order.
    buffers = [n["data"] for n in nodes
               if n.get("type") == "ir.Var" and nodes[n["data"]["ty"]].get("type") == "tirx.BufferType"]
    names = [nodes[b["name"]]["data"] for b in buffers]
    if len(set(names)) == len(names):
        return mod
    taken, seen = set(names), set()
    for b, name in zip(buffers, names):
        if name in seen:
            k = 1
            while f"{name}_{k}" in taken:
                k += 1
            taken.add(f"{name}_{k}")
            nodes.append({"type": nodes[b["name"]]["type"], "data": f"{name}_{k}"})
            b["name"] = len(nodes) - 1
        seen.add(name)
    return serialization.from_json_graph_str(json.dumps(graph))


# What a CPU is to a cost model that learns several (CostModelConfig.cpu_columns): its vector width
# in 32-bit lanes, then 0/1 for each of these LLVM feature flags (tlm.graph.target.FEATURES).
CPU_FLAGS = ("fma", "avx2", "avx512f", "avx512vnni", "avx512bf16", "avx512fp16", "amx-tile")


def cpu_columns(target) -> np.ndarray:
    """[1 + len(CPU_FLAGS)] numbers describing `target`'s CPU, the same on any machine."""
    return np.array([target.vector_bits / 32] + [float(f in target.features) for f in CPU_FLAGS], dtype="float32")


def with_cpu(x: np.ndarray, target) -> np.ndarray:
    """Features [n, F] with `cpu_columns(target)` appended to every row: [n, F + 1 + len(CPU_FLAGS)]."""
    return np.concatenate([x, np.broadcast_to(cpu_columns(target), (len(x), 1 + len(CPU_FLAGS)))], axis=1)


def labels(latencies_s: list[float], clip: float) -> np.ndarray:
    """-log(latency / best of the list), clipped at -clip: 0 for the fastest."""
    lat = np.asarray(latencies_s, dtype="float64")
    return np.maximum(-np.log(lat / lat.min()), -clip)


class CostModel:
    def __init__(self, config: CostModelConfig | None = None, booster=None, target=None):
        self.config = config or CostModelConfig()
        self.booster = booster
        self.target = target  # the CPU it ranks for (needed with config.cpu_columns)

    def for_target(self, target) -> CostModel:
        """The same model, ranking for `target`'s CPU."""
        return CostModel(self.config, self.booster, target)

    def _rows(self, x: np.ndarray, target=None) -> np.ndarray:
        """Features as the booster reads them: with the CPU's columns if the model has them."""
        if not self.config.cpu_columns:
            return x
        target = target if target is not None else self.target
        if target is None:
            raise TlmError("this cost model ranks per CPU: load it for a target (CostModel.load(dir, target))")
        return with_cpu(x, target)

    def _params(self) -> dict[str, Any]:
        c = self.config
        if c.objective not in OBJECTIVES:
            raise TlmError(f"bad cost model objective {c.objective!r}: use one of {', '.join(OBJECTIVES)}")
        p = {"objective": OBJECTIVES[c.objective], "max_depth": c.depth, "eta": c.eta, "seed": c.seed}
        if c.threads:
            p["nthread"] = c.threads
        if c.subsample < 1:
            p["subsample"] = c.subsample
        if c.colsample < 1:
            p["colsample_bytree"] = c.colsample
        return p

    def fit(self, groups: list[tuple[np.ndarray, list[float]]], targets: list | None = None) -> CostModel:
        """Train on [(features [n, F] of a task's correct programs, their latencies)] measured on
        `targets` (one per group; needed with config.cpu_columns)."""
        import xgboost as xgb

        params = self._params()  # checks the objective first
        if self.config.cpu_columns and (targets is None or len(targets) != len(groups)):
            raise TlmError("a cost model with CPU columns learns from groups of known CPUs (one target per group)")
        if self.config.cpu_balance and (targets is None or self.config.objective != "reg"):
            raise TlmError("cpu_balance weighs a regression's rows by CPU (objective reg, one target per group)")
        xs, ys, ws, cpus = [], [], [], []
        for i, (x, lat) in enumerate(groups):
            ok = ~np.isnan(x).any(axis=1)
            if ok.sum() < 2:
                continue
            cpus.append(getattr(targets[i], "key", targets[i]) if targets else "")
            xs.append(self._rows(x[ok], targets[i] if targets else None))
            ys.append(labels([v for v, good in zip(lat, ok) if good], self.config.clip))
            best = min(v for v, good in zip(lat, ok) if good and v and math.isfinite(v))
            ws.append(np.full(len(ys[-1]), best ** self.config.task_weight))
        if not xs:
            raise TlmError("no task with two or more correct programs to learn from")
        y = np.concatenate(ys)
        if self.config.objective == "ndcg":  # integer relevance: 0 (clip) .. 4 * clip (the best)
            y = np.round((y + self.config.clip) * 4)
        data = xgb.DMatrix(np.concatenate(xs), label=y)
        if self.config.cpu_balance:  # each CPU's rows in total: all rows / number of CPUs
            rows = Counter()
            for cpu, w in zip(cpus, ws):
                rows[cpu] += len(w)
            ws = [w * sum(rows.values()) / (len(rows) * rows[cpu]) for cpu, w in zip(cpus, ws)]
        if (self.config.task_weight or self.config.cpu_balance) and self.config.objective == "reg":
            w = np.concatenate(ws)  # ranking objectives weigh groups, not rows
            data.set_weight(w * (len(w) / w.sum()))
        if self.config.objective != "reg":
            data.set_group([len(v) for v in ys])  # rows are in group order
        self.booster = xgb.train(params, data, self.config.trees)
        return self

    def predict(self, x: np.ndarray, target=None) -> np.ndarray:
        """Higher is faster; rows with NaN features get -inf. `target`: the CPU to rank for, if
        not the one the model is bound to (a model with CPU columns needs one of the two)."""
        import xgboost as xgb

        if self.booster is None:
            raise TlmError("the cost model is not trained")
        score = self.booster.predict(xgb.DMatrix(self._rows(np.nan_to_num(x), target))).astype("float64")
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
        data = xgb.DMatrix(self._rows(x[ok]), label=labels(list(lat[ok]), self.config.clip))
        return CostModel(self.config, xgb.train(self._params(), data, trees, xgb_model=self.booster), self.target)

    def order(self, x: np.ndarray, target=None, gains: list[float] | None = None) -> list[int]:
        """Row indices of features `x`, predicted fastest first (ties: the earlier row first).
        `gains`: each program's speedup on the threads it will run on over the one thread the
        labels were timed on (tlm.space.threads); the score is -log(latency) up to a constant."""
        score = self.predict(x, target)
        if gains is not None:
            score = score + np.log(np.asarray(gains, dtype="float64"))
        return sorted(range(len(score)), key=lambda i: (-score[i], i))

    def rank(self, task: Task, schedules: list, target) -> list[int]:
        """Indices of `schedules`, predicted fastest first."""
        return self.order(features(task, schedules, target), target)

    def save(self, directory: str | Path) -> None:
        import lzma
        import os

        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f"{MODEL_FILE}.tmp-{os.getpid()}"
        tmp.write_bytes(lzma.compress(bytes(self.booster.save_raw("ubj"))))
        os.replace(tmp, d / MODEL_FILE)
        (d / LEGACY_MODEL_FILE).unlink(missing_ok=True)  # an older model of this directory
        (d / CONFIG_FILE).write_text(json.dumps(self.config.to_json(), indent=1))

    @classmethod
    def load(cls, directory: str | Path, target=None) -> CostModel:
        """The cost model saved in `directory`, ranking for `target` (needed if it has CPU columns)."""
        import lzma

        import xgboost as xgb

        d = Path(directory)
        path = model_file(d)
        if path is None:
            raise TlmError(f"{d} holds no cost model ({MODEL_FILE})")
        booster = xgb.Booster()
        try:
            booster.load_model(bytearray(lzma.decompress(path.read_bytes())) if path.name == MODEL_FILE
                               else str(path))
        except (lzma.LZMAError, xgb.core.XGBoostError) as err:
            raise TlmError(f"unreadable cost model {path}: {str(err).splitlines()[0] if str(err) else err}") from None
        saved = json.loads((d / CONFIG_FILE).read_text())
        return cls(CostModelConfig(**{"cpu_columns": False, **saved}), booster, target)


def model_file(directory: str | Path) -> Path | None:
    """The booster file of a cost model directory (MODEL_FILE, else LEGACY_MODEL_FILE), or None."""
    d = Path(directory)
    return next((d / n for n in (MODEL_FILE, LEGACY_MODEL_FILE) if (d / n).is_file()), None)


FEATURES = 2 * 164 + 1  # the width of `features` rows
FEATURE_VERSION = 1  # bump when `features` changes: cached rows are kept per version


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
        if model_file(path) is None:
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
        return CostModel.load(path, target) if path else None
    return CostModel.load(spec, target)


def _stderr(msg: str) -> None:
    import sys

    print(msg, file=sys.stderr)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
