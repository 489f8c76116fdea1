"""bench/lean_pick.py's report: per model and CPU the changed tasks' weighted times, then one row per
task (fast; made-up rows, no TVM)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import lean_pick  # noqa: E402


def test_report_sums_the_changed_tasks_by_weight():
    rows = [{"model": "poolformer", "cpu": "znver5", "task": "group_norm2", "kind": "group_norm", "weight": 4,
             "old_ratio": 28.4, "new_ratio": 1.0, "new_rank": 2, "old_us": 280.0, "new_us": 2.5, "max_abs_diff": 2e-6}]
    done = [{"model": "poolformer", "cpu": "znver5", "tasks": 26}, {"model": "poolformer", "cpu": "host", "tasks": 26}]
    text = lean_pick.report(rows, done, "znver3 (AMD EPYC, 2 cores)", "abc1234", "python bench/lean_pick.py")
    assert "| poolformer | znver5 | 26 | 1 | 1120.00 | 10.00 | 112.00x |" in text
    assert "| poolformer | host | 26 | 0 | 0.00 | 0.00 | - |" in text
    assert "| poolformer | znver5 | group_norm2 | 4 | 28.4 | 1.0 | 2 | 280.0 | 2.5 | 112.00x | 2.0e-06 |" in text


def test_pick_times_each_contender_without_the_check_then_with_it():
    """bench/pick.py --lean-check both: the unchecked twin first, so the table's last-two ratio is
    checked over unchecked; a bad mode is one line."""
    import pytest

    import pick

    runs = pick.contenders({"shipped": None}, ["cost"], {"shipped": "auto"})
    assert pick.with_lean(runs, "on") == [("cost", "cost", None, "auto", True)]
    assert pick.with_lean(runs, "both") == [("cost no-lean", "cost", None, "auto", False), ("cost", "cost", None, "auto", True)]
    assert [r[0] for r in pick.with_lean(runs, "off")] == ["cost no-lean"]
    with pytest.raises(SystemExit, match="on, off or both"):
        pick.with_lean(runs, "maybe")
