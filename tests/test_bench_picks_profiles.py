"""bench/parallel_pick.py: `one_thread_picks` restores the one-thread best (every gain 1) and puts
the estimate back after; its table, bench/final_pick.py's, bench/ort_profile.py's and bench/cold_gemm.py's list what
each row holds (fast, no TVM build); cold_gemm's ONNX Runtime kernel is checked against numpy and timed both ways."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))


def test_one_thread_picks_is_undone():
    import parallel_pick
    import tlm.space.threads as threads

    real = threads.speedup
    with parallel_pick.one_thread_picks():
        assert threads.speedup(None, 8) == 1.0
    assert threads.speedup is real


def test_write_lists_the_repicked_tasks(tmp_path):
    import parallel_pick

    row = {"date": "d", "hardware": "h", "commit": "c", "records": "budget 0", "workload": "w", "one_thread_ms": 2.0,
           "threads_ms": 1.6, "repicked": ["fused_matmul"], "round_trip_ns": 70.0, "rounds": 3}
    out = tmp_path / "pp"
    parallel_pick.write([row, {**row, "repicked": []}], out)
    text = out.with_suffix(".md").read_text()
    assert "| w | 2.000 | 1.600 | 1.250x | `fused_matmul` | 70.0 | 3 |" in text
    assert "| w | 2.000 | 1.600 | 1.250x | - | 70.0 | 3 |" in text


def test_ort_profile_table(tmp_path):
    import ort_profile

    row = {"date": "d", "hardware": "h", "commit": "c", "workload": "w", "nodes": 3, "threads": 2, "whole_ms": 2.2,
           "inside_ms": 2.3, "alone_ms": 2.0, "rounds": 5,
           "top": [{"node": "/conv", "op": "Conv", "inside_ms": 0.5, "alone_ms": 0.3}]}
    out = tmp_path / "op"
    ort_profile.write([row], out)
    text = out.with_suffix(".md").read_text()
    assert "| d | h | c | w | 3 | 2 | 2.200 | 2.300 | 2.000 | 1.10 | 5 |" in text
    assert "| `/conv` | Conv | 0.500 | 0.300 |" in text


def test_final_pick_table(tmp_path):
    import final_pick

    row = {"date": "d", "hardware": "h", "commit": "c", "records": "r", "workload": "w", "records_ms": 2.1,
           "final_ms": 2.0, "verdict": "applied", "compile_whole_ms": [2.05, 1.98], "timed_tasks": 9,
           "changed": ["a", "b"], "retimings": 36, "compile_s": [10.0, 30.5], "round_trip_ns": 80.0, "rounds": 5}
    out = tmp_path / "fp"
    final_pick.write([row, {**row, "verdict": "no task changed", "compile_whole_ms": None, "changed": []}], out)
    text = out.with_suffix(".md").read_text()
    assert "| w | 2.100 | 2.000 | 1.050x | applied | 2.050 / 1.980 | 2 of 9 | 36 | 10.0 / 30.5 | 80.0 | 5 |" in text
    assert "| no task changed | - | 0 of 9 |" in text


def test_cold_gemm_contender_and_table(tmp_path):
    import cold_gemm

    call, x = cold_gemm._ort_kernel(4, 8, 3, 1)  # raises where ONNX Runtime's result differs from numpy's
    for cold in (False, True):
        assert cold_gemm._time(call, lambda: x.__iadd__(0), lambda: None, cold, calls=3) > 0
    row = {"date": "d", "hardware": "h", "commit": "c", "db": "dbs/w", "task": "fused_matmul", "calls_per_model": 12, "m": 128,
           "k": 3072, "n": 768, "weights_mib": 9.0, "tlm_warm_ms": 1.25, "tlm_cold_ms": 1.35, "ort_warm_ms": 1.3,
           "ort_cold_ms": 1.5, "rounds": 5}
    out = tmp_path / "cg"
    cold_gemm.write([row], out)
    assert "| `dbs/w` | `fused_matmul` (x12) | 128 x 3072 x 768 | 9.0 | 1.250 | 1.350 | +0.100 | 1.300 | 1.500 | +0.200 | 5 |" \
        in out.with_suffix(".md").read_text()
