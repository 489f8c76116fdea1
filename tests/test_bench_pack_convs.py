"""bench/pack_convs.py: a tuned conv task's program timed as tuned and with its weights packed, both
checked against the reference by the measurer; the table lists what was measured (TVM, tiny)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

pytestmark = pytest.mark.tvm


def test_tasks_part_times_plain_and_packed(tmp_path, host):
    import torch

    import pack_convs
    from tlm.graph.extract import extract_tasks
    from tlm.measure.config import MeasureConfig
    from tlm.search.base import TuneConfig
    from tlm.search.tune import tune

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU()).eval()
    tasks = [t for t in extract_tasks(net, (torch.randn(1, 3, 16, 16),), target=host) if t.kind == "conv2d"]
    db = str(tmp_path / "db")
    cfg = TuneConfig(batch_size=2, measure=MeasureConfig(repeat=2, min_repeat_ms=5, remeasure_top=1))
    tune(tasks, "random", "2g", db, target=host, config=cfg, progress=False)
    rows = pack_convs.tasks_part("tiny", db, top=1, alternations=1)
    assert len(rows) == 1 and rows[0]["calls"] == 1
    assert all(rows[0][k] > 0 for k in ("warm_plain", "warm_packed", "cold_plain", "cold_packed"))
    out = tmp_path / "pack"
    pack_convs.write([{"part": "tasks", "date": "d", "hardware": "h", **rows[0]},
                      {"part": "whole", "date": "d", "hardware": "h", "commit": "c", "records": db, "workload": "tiny",
                       "packed_ms": 1.0, "plain_ms": 1.2, "round_trip_ns": 70.0, "rounds": 3}], out)
    text = out.with_suffix(".md").read_text()
    assert "| tiny | 1.00 | 1.20 | 1.200x | 70.0 | 3 |" in text and rows[0]["task"] in text
