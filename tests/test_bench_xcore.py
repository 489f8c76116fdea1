"""bench/xcore.py: the cross-core round trip is a number where it can be measured, else None (fast; builds a
small C program with the system's compiler, when there is one)."""

import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import xcore  # noqa: E402


def test_round_trip_is_positive_or_none(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    ns = xcore.round_trip_ns(samples=1, bounces=2000)
    measurable = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if measurable and {0, 1} <= os.sched_getaffinity(0):
        assert ns is not None and 0 < ns < 1e6
    else:
        assert ns is None


def test_no_compiler_is_none_and_said(monkeypatch, capsys):
    monkeypatch.setattr(xcore.shutil, "which", lambda _name: None)
    monkeypatch.setattr(xcore, "_said", False)
    assert xcore.round_trip_ns(samples=1) is None
    assert "not recorded" in capsys.readouterr().err


def test_summary_splits_contenders_by_placement(monkeypatch):
    monkeypatch.setattr(xcore, "core_complexes", lambda *a: True)  # AMD rows
    rows = [(70.0, 0.7, 1.0, 1.6), (80.0, 0.72, 1.1, 1.7), (390.0, 1.0, 1.45, 2.1), (None, 9.0, 9.0, 9.0)]
    lines = xcore.summary(rows)
    assert lines[2].startswith("| near") and "| 2 | 75 | 0.710 | 1.050 | 1.650 |" in lines[2]
    assert lines[3].startswith("| far") and "| 1 | 390 | 1.000 | 1.450 | 2.100 |" in lines[3]
    assert len(lines) == 4  # a round without a round trip is in neither
    monkeypatch.setattr(xcore, "core_complexes", lambda *a: False)  # an Intel Xeon: one row of every measured round
    lines = xcore.summary(rows)
    assert len(lines) == 3 and lines[2].startswith("| all") and "| 3 | 80 | 0.720 | 1.100 | 1.700 |" in lines[2]


def test_median_trip_skips_unmeasured_rounds():
    assert xcore.median_trip([70.0, None, 90.0]) == 80.0
    assert xcore.median_trip([None, None]) is None and xcore.median_trip([]) is None


def test_read_rates_are_one_rate_per_size():
    rates = xcore.read_rates(sizes=(0.25, 1), rounds=1)
    assert [mb for mb, _ in rates] == [0.25, 1] and all(r > 0 for _, r in rates)
