"""bench/gpu_fill.py's rule: the cost model's first program that launches enough thread blocks.

Fast: synthetic rows, no TVM, no GPU."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from gpu_fill import pick, report  # noqa: E402

ROW = {"lat": [3.0, 1.0, 2.0], "fill": [8, 264, 100], "order": [0, 2, 1]}


def test_the_cost_models_first_without_a_rule():
    assert pick(ROW, None, 0) == 3.0


def test_the_first_in_the_cost_models_order_that_fills_enough():
    assert pick(ROW, 0.5, 132) == 2.0  # needs 66 blocks: the second in order has 100
    assert pick(ROW, 1.0, 132) == 1.0  # needs 132: only the third
    assert pick({**ROW, "fill": [8, 8, 8]}, 1.0, 132) == 3.0  # none fills the card: all alike, the first


def test_the_report_counts_worse_and_better_picks():
    text = report({"toy": [ROW]}, 132, "python bench/gpu_fill.py")
    assert "| toy | 1 | 1000.00 | 3000.00 (3.00) | 2000.00 (2.00; worse 0, better 1) |" in text
