"""bench/serial_bytes.py: its kernels compute the copy, and its table splits the rounds by where
the CPUs sat (made-up timings: tests never assert on wall-clock time)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import serial_bytes  # noqa: E402
import xcore  # noqa: E402


def test_rows_split_the_rounds_by_placement(tmp_path, monkeypatch):
    monkeypatch.setattr(xcore, "core_complexes", lambda *a: True)  # AMD rows
    result = {"threads": 2, "trips": [70.0, 340.0, 80.0],
              "cells": {"pool_trip_us": [0.6, 0.9, 0.7], "8:parallel": [0.1, 0.3, 0.2], "8:serial": [1.0, 5.0, 2.0]}}
    stamp = {"date": "2026-12-06 20:30", "hardware": "znver4 (AMD EPYC, 2 cores)", "commit": "abc1234"}
    rows = serial_bytes.rows_of(result, [8], stamp)
    assert rows[0]["kb"] == 4 and rows[0]["serial_all_us"] == 2.0
    assert rows[0]["serial_near_us"] == 1.5 and rows[0]["serial_far_us"] == 5.0
    assert (rows[0]["near_rounds"], rows[0]["far_rounds"]) == (2, 1)
    serial_bytes.write_table(tmp_path / "sb", "t", "i", serial_bytes.HEADER, serial_bytes._cells, rows)
    assert "| 4 | 2.00 | 0.20 | 1.50 / 5.00 | 0.15 / 0.30 | 0.70 | 2 / 1 |" in (tmp_path / "sb.md").read_text()


@pytest.mark.tvm
def test_the_kernels_copy_serial_and_split():
    import numpy as np
    import tvm

    x = np.arange(16 * 128, dtype="float32").reshape(16, 128)
    for parallel in (True, False):
        out = tvm.runtime.tensor(np.zeros_like(x))
        serial_bytes._copy(16, 128, parallel)(tvm.runtime.tensor(x), out)
        np.testing.assert_allclose(out.numpy(), x * 1.5 + 1.0)


def test_model_rows_give_the_speedup_and_the_ratio_near_and_far(monkeypatch):
    monkeypatch.setattr(xcore, "core_complexes", lambda *a: True)  # AMD rows
    per = {"trip": [70.0, 340.0, 60.0], "before": [1.0, 1.5, 1.1], "after": [0.9, 1.2, 1.0],
           "before_alone": [0.9, 0.9, 0.9], "after_alone": [0.85, 0.85, 0.85]}
    stamp = {"date": "2026-12-06 20:30", "hardware": "znver4 (AMD EPYC, 2 cores)", "commit": "abc1234"}
    (row,) = serial_bytes.model_rows({"bert_tiny": {"libraries": ["a.so", "b.so"], "max_abs_diff": 0.0,
                                                    "per_round": per}}, stamp)
    assert (row["near_rounds"], row["far_rounds"]) == (2, 1)
    assert row["speedup_far"] == 1.25 and row["before_far_ratio"] == round(1.5 / 0.9, 3)
    assert row["after_near_ms"] == 0.95
    assert "(1.250x; whole / alone 1.67 / 1.41, 1)" in " | ".join(serial_bytes._model_cells(row))
