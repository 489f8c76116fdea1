"""A learned cost model over measured programs: which of a task's candidate programs are fast.

Trained on the measurement records of other tasks (the corpus), it ranks programs no one has
measured: pick TLM@0's program among N samples, or choose which k of N generated programs to
measure. Features are MetaSchedule's `PerStoreFeature` (164 numbers per store of the lowered
program), summed and maxed over stores, plus the store count; the label is how far a program is
from its task's best, -log(latency / best) (0 for the best), clipped at `CostModelConfig.clip`,
so every task weighs the same whatever its absolute time. Model: XGBoost regression.
Tasks with fewer than 2 correct programs teach nothing about ranking and are left out.
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
CONFIG_FILE = "costmodel-config.json"


@dataclass
class CostModelConfig:
    trees: int = 300
    depth: int = 6
    eta: float = 0.1
    clip: float = 4.0  # labels below -clip (programs > e^4 = 55x slower than the best) are -clip
    seed: int = 0
    threads: int = 0  # 0: xgboost's default

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
    width = 2 * fx.feature_vector_length + 1
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
        p = {"objective": "reg:squarederror", "max_depth": c.depth, "eta": c.eta, "seed": c.seed}
        if c.threads:
            p["nthread"] = c.threads
        return p

    def fit(self, groups: list[tuple[np.ndarray, list[float]]]) -> CostModel:
        """Train on [(features [n, F] of a task's correct programs, their latencies)]."""
        import xgboost as xgb

        xs, ys = [], []
        for x, lat in groups:
            ok = ~np.isnan(x).any(axis=1)
            if ok.sum() < 2:
                continue
            xs.append(x[ok])
            ys.append(labels([v for v, good in zip(lat, ok) if good], self.config.clip))
        if not xs:
            raise TlmError("no task with two or more correct programs to learn from")
        data = xgb.DMatrix(np.concatenate(xs), label=np.concatenate(ys))
        self.booster = xgb.train(self._params(), data, self.config.trees)
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Higher is faster; rows with NaN features get -inf."""
        import xgboost as xgb

        if self.booster is None:
            raise TlmError("the cost model is not trained")
        score = self.booster.predict(xgb.DMatrix(np.nan_to_num(x))).astype("float64")
        score[np.isnan(x).any(axis=1)] = -math.inf
        return score

    def rank(self, task: Task, schedules: list, target) -> list[int]:
        """Indices of `schedules`, predicted fastest first."""
        score = self.predict(features(task, schedules, target))
        return sorted(range(len(schedules)), key=lambda i: (-score[i], i))

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


def training_groups(db, target, tasks: list[Task], per_task: int = 0) -> list[tuple[np.ndarray, list[float]]]:
    """(features, latencies) of each task's correct records on `target` (at most `per_task`, the
    fastest first; 0: all). A record without a stored trace is rebuilt from its sentence; one that
    no longer parses (its task's space changed since) is left out."""
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    from tlm.space.design import task_space
    from tlm.space.language import parse

    groups = []
    for task in tasks:
        recs = sorted((r for r in db.records(task.hash, target.key) if r.error is None and r.median_s),
                      key=lambda r: r.median_s)
        recs = recs[:per_task] if per_task else recs
        if len(recs) < 2:
            continue
        schs, lat = [], []
        for r in recs:
            try:
                if r.trace_json:
                    sch = Schedule(task.mod)
                    Trace.apply_json_to_schedule(r.trace_json, sch)
                elif r.sentence:
                    sch = parse(r.sentence, task, target, space=task_space(task, target)).sch
                else:
                    continue
            except Exception:  # noqa: BLE001 - a record that no longer replays is left out
                continue
            schs.append(sch)
            lat.append(r.median_s)
        if len(schs) >= 2:
            groups.append((features(task, schs, target), lat))
    return groups
