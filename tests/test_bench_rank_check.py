"""bench/rank_check.py: the rank correlation it reports (fast, no TVM)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from rank_check import merge, spearman  # noqa: E402


def test_spearman_extremes_and_ties():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 1], [1, 2, 3]) == 0.0  # a constant score orders nothing
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9486832980505138)  # average ranks for ties


def test_a_new_run_replaces_only_the_rows_it_redoes():
    def run(models, rows, date="2026-12-07"):
        return {"date": date, "hardware": "cpu", "commit": "c", "cost_models": models,
                "rows": [{"db": db, "cost_model": m} for db, m in rows]}

    first = run({"shipped": "S"}, [("a", "shipped"), ("b", "shipped")])
    second = run({"shipped": "S", "new": "N"}, [("a", "shipped"), ("a", "new")])
    got = merge([first], second)
    assert got[0]["rows"] == [{"db": "b", "cost_model": "shipped"}]  # db b was not redone
    assert got[1] is second
    assert merge(got, run({"shipped": "S"}, [("b", "shipped")]))[0] == second  # the first run emptied, dropped
    other = run({"shipped": "OTHER"}, [("a", "shipped")])  # another directory under the same label stays
    assert len(merge([first], other)) == 2
