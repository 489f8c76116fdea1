"""bench/gpu_costmodel_cv.py's scores: cross-validation over unseen tasks and the held-out pick.

Fast: synthetic features (latency readable from column 0), small XGBoost fits, no TVM, no GPU."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from gpu_costmodel_cv import cross_validate, fit, heldout_score  # noqa: E402

from tlm.search.costmodel import CostModelConfig  # noqa: E402

CFG = CostModelConfig(trees=30, depth=3, eta=0.3, threads=1)


def _rows(n_tasks=20, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for t in range(n_tasks):
        lat = rng.uniform(1.0, 10.0, 8) * (t + 1)
        x = np.stack([lat / lat.min(), rng.normal(size=8)], axis=1).astype("float32")
        rows.append((f"task{t}", None, x, lat))
    return rows


def test_cross_validation_learns_a_readable_signal():
    summed, geo = cross_validate(CFG, _rows(), folds=4)
    assert 0.9 < summed <= 1.0 and 1.0 <= geo < 1.1


def test_a_refused_pick_is_charged_dlight():
    model = fit(CFG, _rows())
    x = np.array([[1.0, 0.0], [5.0, 0.0]], dtype="float32")
    assert heldout_score(model, [(x, [None, 2.0], 4.0, None)]) == 1.0  # picks row 0: refused, dlight's 4.0
    assert heldout_score(model, [(x, [1.0, 2.0], 4.0, None)]) == 4.0
