"""The TLM tuner's cost-model ranking of one tuning run (tlm.search.tlm_tuner).

The n programs a task gets are the n the cost model ranks first among `cm_pool` x n samples
(`TuneConfig.cost_model`: by default the shipped one for the target, tlm.search.costmodel; none
for a CPU it has not learned). Once two of a task's ranked programs are measured, the task's
ranking uses the model boosted on them (`TuneConfig.cm_adapt_trees` more trees, refit as
measurements come in). On a CPU the ranking counts each program's parallel loops on the target's
cores (the model learned one-thread latencies; tlm.space.threads.ranking_gains).
"""

from __future__ import annotations

import json
from typing import Any

from tlm.errors import TlmError
from tlm.graph.tasks import Task
from tlm.space.design import plain_json

_UNSET = object()


class CostRanking:
    """Orders a task's candidate programs by the cost model, the task's own boosted copy once
    two of them are measured in `db`."""

    def __init__(self, db, target, config):
        self.db, self.target, self.config = db, target, config
        self._cm: Any = _UNSET
        self._features: dict[str, dict[str, Any]] = {}  # task hash -> trace JSON -> cost model features
        self._adapted: dict[str, tuple[int, Any]] = {}  # task hash -> (programs learned from, cost model)

    @property
    def model(self):
        """The cost model (TuneConfig.cost_model), or None; loaded on first use."""
        if self._cm is _UNSET:
            from tlm.search.costmodel import load_cost_model

            self._cm = load_cost_model(self.config.cost_model, self.target)
        return self._cm

    def ranked(self, task: Task, items: list, schedule) -> list:
        """`items` ordered by the cost model, predicted fastest first (`schedule(item)` gives the
        program; an item whose program cannot be built goes last). The model is the task's
        (`task_model`); every ranked program's features are kept for its update."""
        from tlm.search.costmodel import features

        schs, ok, bad = [], [], []
        for it in items:
            try:
                schs.append(schedule(it))
                ok.append(it)
            except TlmError:
                bad.append(it)
        if not ok:
            return bad
        x = features(task, schs, self.target)
        if self.config.cm_adapt_trees > 0:
            rows = self._features.setdefault(task.hash, {})
            for sch, row in zip(schs, x):
                rows[json.dumps(plain_json(sch.trace.as_json()))] = row
        gains = None  # timed on one thread, a compiled model runs on all the cores
        if self.target.kind == "llvm":
            from tlm.space.threads import ranking_gains

            gains = ranking_gains(task.mod, schs, self.target.cores)
        return [ok[i] for i in self.task_model(task).order(x, gains=gains)] + bad

    def task_model(self, task: Task):
        """The cost model boosted on the task's programs measured in this run (TuneConfig.cm_adapt_trees;
        refit when a measurement has come in since)."""
        import numpy as np

        rows = self._features.get(task.hash)
        if not rows:  # the update is off, or nothing of this task ranked yet
            return self.model
        got = [(row, r.median_s) for r in self.db.records(task.hash, self.target.key)
               if r.error is None and r.median_s and r.trace_json is not None
               and (row := rows.get(json.dumps(r.trace_json))) is not None]  # stored traces are plain JSON
        cached = self._adapted.get(task.hash)
        if cached is None or cached[0] != len(got):
            model = self.model
            if len(got) >= 2:
                model = model.adapted(np.stack([g[0] for g in got]), [g[1] for g in got], self.config.cm_adapt_trees)
            self._adapted[task.hash] = cached = (len(got), model)
        return cached[1]
