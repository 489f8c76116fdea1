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
