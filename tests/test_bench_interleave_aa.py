"""bench/interleave_aa.py's table: one row per timing with b / a (fast; made-up rows, no TVM)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import interleave_aa  # noqa: E402


def test_the_table_gives_the_position_bias(tmp_path):
    row = {"date": "2026-12-02 03:00", "hardware": "znver3 (2 threads)", "commit": "abc1234", "workload": "bert_tiny",
           "library": "bert_tiny@b10g.so", "rounds": 7, "pytorch": 8.0, "onnxruntime": 2.5}
    interleave_aa.write([{**row, "timer": "old", "a": 2.12, "b": 1.72}, {**row, "timer": "new", "a": 1.68, "b": 1.64}],
                        tmp_path / "aa")
    text = (tmp_path / "aa.md").read_text()
    assert "| bert_tiny | bert_tiny@b10g.so | old | 2.12 | 1.72 | 0.81 |" in text
    assert "| new | 1.68 | 1.64 | 0.98 |" in text
