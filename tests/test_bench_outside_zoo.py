"""bench/outside_zoo.py's command line: budgets repeated or comma-separated, a bad one refused in
one line before any cell is written.

Fast: the refusal comes before TVM, models or cells."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import outside_zoo  # noqa: E402


@pytest.mark.parametrize("argv", [["--budget", "0,ten"], ["--budget", "0", "--budget", "onnxx"], ["--budget", "-1"]])
def test_a_bad_budget_is_one_line_and_writes_nothing(tmp_path, capsys, argv):
    run = tmp_path / "run"
    assert outside_zoo.main([*argv, "--models", "lstm", "--run", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("outside_zoo: bad budget") and "\n" not in err
    assert not run.exists()


def test_comma_separated_budgets_are_cells_of_their_own(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(outside_zoo, "run_battery", lambda names, budgets, *a: seen.update(budgets=budgets))
    monkeypatch.setattr(outside_zoo, "time_battery", lambda *a: None)
    monkeypatch.setattr(outside_zoo, "RESULTS", tmp_path / "results")  # the report goes here, not to bench/results
    (tmp_path / "results").mkdir()
    outside_zoo.main(["--budget", "0,10g", "--budget", "onnx0", "--models", "lstm", "--run", str(tmp_path / "run")])
    assert seen["budgets"] == ["0", "10g", "onnx0"]
