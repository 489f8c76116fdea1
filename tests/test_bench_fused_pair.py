"""bench/fused_pair.py on a tiny pair: both forms compute the pair exactly (TVM CPU test)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))


@pytest.mark.parametrize("stride", [1, 2])
def test_two_stages_and_fused_match_numpy(stride):
    import fused_pair

    from tlm.graph.target import resolve_target

    target = resolve_target(None).tvm()
    for fused, tile in [(False, 1), (True, 1), (True, 2)]:
        err, warm, cold = fused_pair.run_pair(8, 4, 16, stride, fused, tile, target, time=False)
        assert err < 1e-4, (fused, tile, err)
        assert warm is None and cold is None


def test_a_bad_pair_is_one_line_and_exit_2(capsys, tmp_path):
    import fused_pair

    assert fused_pair.main(["--pairs", "7,4,16,2", "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --pairs") and err.count("\n") == 1
    assert not (tmp_path / "t.md").exists()
