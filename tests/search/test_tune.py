"""`tlm tune` and the baselines (tlm.search.tune, base, baselines): budget parsing, a tiny
MetaSchedule run, and kill -9 / resume of a tuning process."""

import os
import signal
import subprocess
import sys
import time

import pytest

from tlm.errors import TlmError
from tlm.search.base import TuneConfig, parse_budget
from tlm.search.tune import tune


def test_parse_budget():
    assert parse_budget("4g", 3) == [4, 4, 4]
    assert parse_budget("10", 3) == [4, 3, 3]
    assert parse_budget(6, 2) == [3, 3]
    for bad in ("", "abc", "0", "4x", "-3", "g"):
        with pytest.raises(TlmError, match="bad budget"):
            parse_budget(bad, 2)


def test_cli_bad_budget(tmp_path):
    from tlm.cli import main

    assert main(["tune", "mobilenet_v2", "--budget", "lots", "--db", str(tmp_path / "d")]) == 2


@pytest.mark.tvm
def test_metaschedule_baseline_tiny(tmp_path, host, matmul32):
    from tlm.measure.database import open_db
    from tlm.measure.config import MeasureConfig

    cfg = TuneConfig(batch_size=4, measure=MeasureConfig(repeat=3, min_repeat_ms=5, remeasure_top=1))
    rows = tune([matmul32], "metaschedule", "4", str(tmp_path / "db"), target=host, config=cfg, progress=False)
    assert rows[0]["measured"] == 4 and rows[0]["best_us"] > 0
    with open_db(str(tmp_path / "db")) as db:
        recs = db.records(matmul32.hash, host.key, "metaschedule")
        assert len(recs) == 4 and all(r.round == 0 for r in recs)
        assert db.get_meta("tune_config/metaschedule")["budget"] == "4"


_SCRIPT = """
import sys
from tlm.graph.tasks import matmul_task
from tlm.measure.config import MeasureConfig
from tlm.search.base import TuneConfig
from tlm.search.tune import tune
cfg = TuneConfig(batch_size=3, measure=MeasureConfig(repeat=3, min_repeat_ms=5, remeasure_top=1))
tune([matmul_task(32), matmul_task(40)], "random", "9g", sys.argv[1], config=cfg, progress=False)
"""


@pytest.mark.tvm
def test_kill_and_resume(tmp_path, host):
    """kill -9 mid-run loses no committed record; the same command then resumes to the budget."""
    from tlm.measure.database import open_db

    db_dir = str(tmp_path / "db")
    script = tmp_path / "run.py"
    script.write_text(_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), db_dir], start_new_session=True)
    seen = 0
    deadline = time.time() + 240
    try:
        while time.time() < deadline and proc.poll() is None:
            time.sleep(0.5)
            if os.path.exists(os.path.join(db_dir, "records.sqlite")):
                with open_db(db_dir) as db:
                    seen = db.count()
                if seen >= 3:
                    break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert 3 <= seen < 18, "the run should be killed mid-way"
    with open_db(db_dir) as db:
        assert db.count() >= seen  # every committed record survived kill -9
        assert db._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    subprocess.run([sys.executable, str(script), db_dir], check=True, timeout=300)
    with open_db(db_dir) as db:
        assert db.count() == 18  # resumed to exactly the budget, nothing measured twice
        traces = [str(r.trace_json) for r in db.records()]
        assert len(set(traces)) == len(traces)


def test_a_task_without_a_design_space_is_said_and_left_untuned(monkeypatch, capsys, host, matmul32):
    """Failures travel as data: a task whose design space cannot be generated (simulated here by
    a task_space that raises, a stand-in for TVM) is named on stderr and left to TVM's default
    schedule; the other tasks are still tuned."""
    import dataclasses

    import tlm.space.design as design
    from tlm.search.tune import tunable

    other = dataclasses.replace(matmul32, name="no_space", hash="0" * 16)
    real = design.task_space

    def fake(task, target=None):
        if task.name == "no_space":
            raise TlmError("no design space for task no_space: Cannot find a block with the name: root")
        return real(task, target)

    monkeypatch.setattr(design, "task_space", fake)
    assert [t.name for t in tunable([matmul32, other], host)] == [matmul32.name]
    err = capsys.readouterr().err
    assert "no design space for task no_space" in err and "TVM's default schedule, untuned" in err


@pytest.mark.tvm
def test_no_task_with_a_space_still_gives_a_database(host, matmul32, monkeypatch, tmp_path):
    """When no task has a design space, tuning writes an empty record database (the compile then
    builds every task untuned, said out loud) instead of none: `tlm compile` said "no record
    database directory" for such a model."""
    from tlm.errors import TlmError
    import tlm.space.design as design
    from tlm.measure.database import open_db
    from tlm.search.tune import tune

    def fake(task, target=None):
        raise TlmError(f"no design space for task {task.name}")

    monkeypatch.setattr(design, "task_space", fake)
    assert tune([matmul32], "tlm", 0, str(tmp_path / "db"), target=host) == []
    with open_db(str(tmp_path / "db"), create=False) as db:
        assert db.count() == 0
