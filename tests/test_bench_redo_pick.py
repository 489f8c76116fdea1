"""bench/redo_pick.py: the flop-ratio-only choice it compares against, and its report (fast; stand-in
tuner and made-up rows, no TVM)."""

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import redo_pick  # noqa: E402


def test_the_flops_choice_judges_the_flop_ratio_alone(monkeypatch):
    import tlm.space.build_cost as bc

    flops = {"redone": 2.1, "hidden": 1.0, "lean": 1.2, "wasteful": 30.0}
    tuner = SimpleNamespace(schedule=lambda task, g: SimpleNamespace(mod=g), _build_cost=lambda task, g: 0,
                            target=SimpleNamespace(kind="llvm"))
    monkeypatch.setattr(bc, "flops_ratio", lambda mod, f: flops[mod])
    task = SimpleNamespace(name="group_norm2", flops=1.0)
    assert redo_pick.choice_by(bc.flops_ratio, tuner, task, ["redone", "lean"]) == ["redone"]  # 2.1x passes the flop check
    assert redo_pick.choice_by(bc.flops_ratio, tuner, task, ["wasteful", "hidden"]) == ["hidden"]


def test_report_lists_each_run_and_its_changed_tasks():
    run = {"date": "2026-12-06 02:40", "hardware": "znver4 (AMD EPYC, 2 cores)", "commit": "abc1234",
           "command": "python bench/redo_pick.py --models gn_decoder",
           "models": [{"model": "gn_decoder", "tasks": 11, "changed": 1}],
           "rows": [{"model": "gn_decoder", "task": "fused_group_norm2_tir_sigmoid2_multiply2", "weight": 1,
                     "changed": True, "rank": 1, "old_redo": 32.0, "new_redo": 1.0, "old_us": 626.7, "new_us": 26.43, "max_abs_diff": 1e-5}]}
    text = redo_pick.report([run])
    assert "Models (tasks, changed): gn_decoder (11, 1)" in text
    assert "| gn_decoder | fused_group_norm2_tir_sigmoid2_multiply2 | 1 | yes | 1 | 32 | 1 | 626.7 | 26.43 | 23.71x | 1.0e-05 |" in text
