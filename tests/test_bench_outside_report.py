"""The outside-zoo battery's results file keeps every machine's cells (bench/outside_report.py).

Fast: plain JSON cells, no TVM, no models."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from outside_report import load_cells, write_report  # noqa: E402

OLD, NEW = "znver3 (AMD EPYC, 2 cores)", "znver4 (AMD EPYC, 2 cores)"


def _cell(model, budget, hw=None, tlm=None, status="ok", date="2026-11-27"):
    cell = {"model": model, "family": "plain", "budget": budget, "status": status, "date": date,
            "commit": "abc1234", "tasks": 3}
    if hw:
        cell["hardware"] = hw
    if tlm is not None:
        cell.update(tlm_ms=tlm, pytorch_ms=2.0, onnxruntime_ms=1.0, load=0.5, threads=2)
    return cell


def test_a_run_merges_into_the_committed_cells(tmp_path):
    stem = tmp_path / "outside-zoo"
    committed = [_cell("a", "0", OLD, 1.0), _cell("b", "0", OLD, 4.0), _cell("a", "0", NEW, 9.0)]
    stem.with_suffix(".json").write_text(json.dumps(committed))
    run = tmp_path / "run"
    run.mkdir()
    (run / "a@0.json").write_text(json.dumps(_cell("a", "0", NEW, 1.5, date="2026-11-28")))  # redone here
    (run / "a@10g.json").write_text(json.dumps(_cell("a", "10g", NEW, 1.0, date="2026-11-28")))
    # written by the battery's parent for a child that died: no hardware of its own
    (run / "b@10g.json").write_text(json.dumps({"model": "b", "budget": "10g", "status": "timeout",
                                                 "error": "over 60 s"}))
    cells = load_cells(run, stem, NEW)
    assert cells[(OLD, "a", "0")]["tlm_ms"] == 1.0  # another machine's cell stays as it was
    assert cells[(NEW, "a", "0")]["tlm_ms"] == 1.5  # this host's run replaces its old figure
    assert cells[(NEW, "b", "10g")]["status"] == "timeout"

    write_report(run, ["a", "b"], stem, NEW)
    assert len(json.loads(stem.with_suffix(".json").read_text())) == 5
    md = stem.with_suffix(".md").read_text()
    assert md.index(f"## {NEW}") < md.index(f"## {OLD}")  # newest machine first
    new_part = md[md.index(f"## {NEW}"):md.index(f"## {OLD}")]
    assert "| a | plain | 3 | 1.5 | 1 |" in new_part and "@10g timeout" in new_part
    assert "b` @10g **timeout**" in new_part

    write_report(None, ["a", "b"], stem, NEW)  # a fresh checkout: the committed file alone
    assert stem.with_suffix(".md").read_text() == md


def test_no_committed_file_and_no_run(tmp_path):
    write_report(None, ["a"], tmp_path / "outside-zoo", NEW)
    assert json.loads((tmp_path / "outside-zoo.json").read_text()) == []
    assert (tmp_path / "outside-zoo.md").read_text().startswith("# Outside the zoo")


def test_an_untimed_cell_keeps_the_timed_one_but_a_failure_replaces_it(tmp_path):
    stem = tmp_path / "outside-zoo"
    stem.with_suffix(".json").write_text(json.dumps([_cell("a", "0", NEW, 1.0), _cell("b", "0", NEW, 2.0)]))
    run = tmp_path / "run"
    run.mkdir()
    (run / "a@0.json").write_text(json.dumps(_cell("a", "0", NEW, date="2026-12-06")))  # --no-time
    (run / "b@0.json").write_text(json.dumps(_cell("b", "0", NEW, status="mismatch", date="2026-12-06")))
    cells = load_cells(run, stem, NEW)
    assert cells[(NEW, "a", "0")]["tlm_ms"] == 1.0
    assert cells[(NEW, "b", "0")]["status"] == "mismatch"
