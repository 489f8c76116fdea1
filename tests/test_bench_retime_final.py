"""bench/retime_final.py's table and the run's own ratios (fast; a made-up row, no TVM)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import retime_final  # noqa: E402


def test_the_runs_own_ratios_come_from_its_e2e_files():
    run = retime_final._run_ratios("bert_tiny")  # results/full-llvm-znver4-2c/e2e/bert_tiny.json
    assert round(run["tlm@10g"], 2) == 1.11 and round(run["tlm@0"], 2) == 0.93
    assert retime_final._run_ratios("no_such_workload") == {}


def test_the_table_puts_the_retimed_ratio_beside_the_runs(tmp_path):
    row = {"date": "2026-12-06 18:00", "hardware": "znver4 (AMD EPYC, 2 cores)", "commit": "abc1234", "tvm_threads": 1,
           "workload": "bert_tiny", "round_trip_ns": 90.0, "rounds": 9,
           "median_ms": {"metaschedule@64g": 1.7, "tlm@0": 1.9, "tlm@10g": 1.5, "pytorch": 2.4, "onnxruntime": 1.1},
           "ms_over_tlm": {"tlm@10g": {"all": 1.13, "near": (1.14, 6), "far": (1.1, 3)}, "tlm@0": {"all": 0.9}},
           "checks": {"tlm@10g": {"matches": True}, "metaschedule@64g": {"matches": True}},
           "run": {"tlm@10g": 1.109, "tlm@0": 0.93}}
    retime_final.write([row], tmp_path / "t")
    text = (tmp_path / "t.md").read_text()
    assert "| 1 | bert_tiny | 1.7 | 1.9 | - | 1.5 | - | 2.4 | 1.1 | 1.13x (1.14x in 6, 1.1x in 3) | 1.11x | 0.90x | 0.93x | 90 | True |" in text
