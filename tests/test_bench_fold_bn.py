"""bench/fold_bn.py's table: one row per workload and budget with kept / folded (fast; made-up
rows, no TVM)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import fold_bn  # noqa: E402


def test_the_table_gives_kept_over_folded(tmp_path):
    row = {"date": "2026-12-02 05:21", "hardware": "znver3 (2 threads)", "commit": "abc1234", "workload": "resnet_50",
           "budget": "0", "rounds": 9, "ms": {"kept": 105.0, "folded": 95.4}, "pytorch_ms": 131.0,
           "onnxruntime_ms": None, "measured": {"kept": 0, "folded": 0}, "matches": True}
    fold_bn.write([row], tmp_path / "fold")
    text = (tmp_path / "fold.md").read_text()
    assert "| resnet_50 | 0 | 105 | 95.4 | 1.10x | 131 | - | 0, 0 | True | 9 |" in text
