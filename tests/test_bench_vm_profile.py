"""bench/vm_profile.py: its table holds rows from before and after the steady-state `whole` (fast; TVM tensors only for the footprint)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import vm_profile  # noqa: E402
from vm_profile import write  # noqa: E402

OLD = {"date": "2026-11-28 18:50", "hardware": "znver4", "name": "old.so", "whole_ms": 4.87, "kernels_inside_ms": 4.48,
       "kernels_alone_ms": 3.77, "kernels_cold_ms": 7.08, "builtins_ms": 0.24, "builtin_calls": 131, "load": 1.6,
       "top": [{"kernel": "k", "calls": 1, "inside_ms": 0.4, "alone_ms": 0.3, "cold_ms": 0.5}]}
NEW = dict(OLD, name="new.so", whole_ms=4.0, whole_one_call_ms=5.0, kernels_alone_timer_ms=3.2)
PLACED = dict(NEW, name="placed.so", round_trip_ns=71.0, whole_near_ms=3.4, near_rounds=7, whole_far_ms=4.8, far_rounds=3)


def test_rows_before_and_after_the_steady_whole(tmp_path):
    write([OLD, NEW, PLACED], tmp_path / "t")
    rows = [line for line in (tmp_path / "t.md").read_text().splitlines() if line.startswith("| 2026")]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    assert len({len(c) for c in cells}) == 1  # every row as wide as the header
    assert cells[0][4] == "-" and cells[0][7] == "-"  # the old row has neither new column
    assert cells[0][10] == f"{4.87 / 3.77:.2f}"  # ... and divides by its own kernels alone
    assert cells[1][4] == "5.00" and cells[1][10] == f"{4.0 / 3.2:.2f}"  # the new row divides by TVM's timer
    assert cells[1][13:] == ["-", "-", "-", "-"]  # no round trip measured, no footprint
    assert cells[2][13:] == ["71", f"3.40 ({3.4 / 3.2:.2f}x, 7)", f"4.80 ({4.8 / 3.2:.2f}x, 3)", "-"]


def test_by_placement_splits_rounds_at_the_threshold():
    from vm_profile import NEAR_NS, _by_placement

    got = _by_placement([70.0, None, NEAR_NS + 200.0, 72.0], [0.001, 0.005, 0.002, 0.003], complexes=True)
    assert got["near_rounds"] == 2 and got["far_rounds"] == 1  # the unmeasured round counts in neither
    assert got["whole_near_ms"] == 2.0 and got["whole_far_ms"] == 2.0
    assert _by_placement([None, None], [0.001, 0.002], complexes=True) == {}


def test_no_near_or_far_without_core_complexes(tmp_path):
    from xcore import core_complexes
    from vm_profile import NEAR_NS, _by_placement

    got = _by_placement([70.0, NEAR_NS + 200.0], [0.001, 0.002], complexes=False)
    assert got["round_trip_ns"] and got["near_rounds"] == got["far_rounds"] == 0  # the trip is still reported
    assert got["whole_near_ms"] is None and got["whole_far_ms"] is None
    for vendor, want in (("AuthenticAMD", True), ("GenuineIntel", False)):
        (tmp_path / vendor).write_text(f"processor\t: 0\nvendor_id\t: {vendor}\n")
        assert core_complexes(str(tmp_path / vendor)) is want
    assert core_complexes(str(tmp_path / "missing")) is False


def test_a_library_profiled_again_keeps_both_rows_and_one_kernel_table(tmp_path):
    again = dict(NEW, date="2026-11-29 06:04", whole_ms=3.9, top=[dict(NEW["top"][0], kernel="k2")])
    write([NEW, again], tmp_path / "t")
    text = (tmp_path / "t.md").read_text()
    assert len([line for line in text.splitlines() if line.startswith("| 2026")]) == 2
    assert text.count("## new.so") == 1 and "| k2 |" in text and "| k |" not in text


def test_footprint_counts_shared_storage_once():
    """Two views of one storage and a weight: the union of their byte ranges (TVM tensors, tiny)."""
    import numpy as np
    import tvm

    w = tvm.runtime.tensor(np.zeros((256, 1024), "float32"))  # 1 MiB
    a = tvm.runtime.tensor(np.zeros((512, 1024), "float32"))  # 2 MiB
    half = a._create_view((256, 1024))  # the first half of a's storage
    assert vm_profile.footprint_mib([("k1", None, (a, w)), ("k2", None, (half, w, 3))]) == 3.0
