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


def test_ptxas_table_joins_a_runs_report_to_programs_of_either_card(tmp_path):
    """A bundle's candidate (launch) and a run's results line (ptxas) make a program's columns; the
    program is found by its sentence without the hardware words (a bundle built for the H100
    filed under the H200)."""
    import gzip
    import json

    from gpu_costmodel_cv import ptxas_table, with_ptxas

    from tlm.graph.target import resolve_target
    from tlm.measure.nvcc import PTXAS_COLUMNS

    h100 = "matmul float32 8 8 cuda sm_90a 1024 sms 132 l2 50 space 3 2 tile matmul 0 8 1"
    h200 = h100.replace("l2 50", "l2 60")
    bundle = tmp_path / "bundle-x"
    bundle.mkdir()
    cand = {"id": 0, "sentence": h100, "kernels": [{"grid": [264, 1, 1], "block": [128, 2, 1], "smem": 0}]}
    with gzip.open(bundle / "manifest.json.gz", "wt") as f:
        json.dump({"tasks": [{"hash": "t1", "candidates": [cand]}]}, f)
    run = tmp_path / "run"
    run.mkdir()
    (run / "bundle-x-results.jsonl").write_text(
        json.dumps({"t": "t1", "k": 0, "lat": [1e-5], "err": None, "regs": [32], "smem": [0], "spill": 0}) + "\n"
        + json.dumps({"t": "t1", "k": "ref", "lat": [2e-5], "err": None, "regs": [40], "smem": [0], "spill": 0}) + "\n")
    table = ptxas_table([bundle], [run / "bundle-x-results.jsonl"])
    assert len(table) == 1
    x = with_ptxas(np.zeros((2, 3), dtype="float32"), [("t1", h200), ("t1", "other")], table, resolve_target("h200"))
    cols = dict(zip(PTXAS_COLUMNS, x[0, 3:]))
    assert x.shape == (2, 3 + len(PTXAS_COLUMNS)) and np.isnan(x[1, 3:]).all()
    assert (cols["threads"], cols["blocks"], cols["registers"], cols["resident_blocks"], cols["waves"]) == (256, 264, 32, 8, 0.25)
