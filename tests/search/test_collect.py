"""The data engine's collector (tlm.search.collect): records reach the corpus; a new machine resumes
from it without measuring anything twice; one collector per work directory; CLI errors."""

import pytest

from tlm.errors import TlmError
from tlm.graph.target import resolve_target
from tlm.measure.shards import corpus_summary, shard_paths
from tlm.search.collect import (CollectConfig, _locked, _sigterm_stops, collect, read_tasks_archive, tasks_archive,
                                write_tasks_archive)
from tlm.search.loop import LoopConfig


def _config(base, work, corpus, **kw):
    from tlm.measure.config import MeasureConfig

    loop = LoopConfig(base=str(base), work=str(work), kb=1, kp=2, rounds=1, ft_steps=2, ft_lr=3e-3,
                      ft_batch_size=2, pipeline=False,
                      measure=MeasureConfig(repeat=2, min_repeat_ms=1, remeasure_top=0))
    return CollectConfig(corpus=str(corpus), flush_minutes=60, loop=loop, **kw)


@pytest.mark.tvm
def test_collect_flushes_and_a_new_machine_resumes(base_dir, tasks, tmp_path, measurer, host):
    corpus = tmp_path / "corpus"
    res = collect(_config(base_dir, tmp_path / "w1", corpus), tasks, progress=False, log=lambda m: None,
                  measurer=measurer)
    assert res["measured_now"] == 4 and res["flushed_records"] == 4
    assert shard_paths(corpus) and sum(v["records"] for v in corpus_summary(corpus).values()) == 4
    # A fresh work directory (a new session) ingests the corpus: round 0 is already measured.
    res2 = collect(_config(base_dir, tmp_path / "w2", corpus), tasks, progress=False, log=lambda m: None,
                   measurer=measurer)
    assert res2["ingested_records"] == 4 and res2["measured_now"] == 0 and res2["flushed_records"] == 0
    assert len(shard_paths(corpus)) == 1
    # A fresh machine of the same kind loads the training tasks from the corpus' archive instead of
    # extracting its sources (this source name extracts nothing: it would fail).
    cfg = _config(base_dir, tmp_path / "w3", corpus)
    cfg.loop.sources = ["no-such-workload"]
    archive = tasks_archive(corpus, cfg.loop.sources, host)
    write_tasks_archive(archive, tmp_path / "w1" / "tasks.json")
    assert [t.hash for t in read_tasks_archive(archive)] == [t.hash for t in tasks]
    # ... and of any other CPU of the same architecture (extraction does not read the CPU name).
    other = dict(host.config, mcpu="icelake-server" if host.cpu != "icelake-server" else "znver3")
    assert tasks_archive(corpus, cfg.loop.sources, other_target := resolve_target(other)) == archive
    assert other_target.cpu != host.cpu
    assert read_tasks_archive(tmp_path / "none.json.xz") is None
    logs = []
    res3 = collect(cfg, None, progress=False, log=logs.append, measurer=measurer)
    assert res3["measured_now"] == 0 and any("no extraction" in m for m in logs)
    assert len(shard_paths(corpus)) == 1  # the archive is no shard


def test_one_collector_per_work_dir(tmp_path):
    with _locked(tmp_path / "w"):
        with pytest.raises(TlmError, match="another collector"):
            with _locked(tmp_path / "w"):
                pass


def test_cli_collect_errors(tmp_path, capsys):
    from tlm.cli import main

    (tmp_path / "file").write_text("x")
    assert main(["collect", "--corpus", str(tmp_path / "file"), "--work", str(tmp_path / "w"), "--base",
                 str(tmp_path)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a file" in err[0]
    assert main(["collect", "--hours", "-1"]) != 0
    assert main(["corpus", "--corpus", str(tmp_path / "none")]) == 0
    assert "no shards" in capsys.readouterr().out


def test_sigterm_stops_after_the_task_then_interrupts():
    import os
    import signal

    flag: dict = {}
    with _sigterm_stops(flag):
        with pytest.raises(KeyboardInterrupt):  # still loading tasks: nothing to finish, stop at once
            os.kill(os.getpid(), signal.SIGTERM)
    flag = {"started": True}
    with _sigterm_stops(flag):
        os.kill(os.getpid(), signal.SIGTERM)  # measuring: a flag the collector checks after each task
        assert flag == {"started": True, "term": True}
        with pytest.raises(KeyboardInterrupt):  # second: at once
            os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@pytest.mark.tvm
def test_a_work_dir_of_another_extraction_is_refused_and_never_archived(base_dir, tasks, tmp_path, measurer, host):
    """A work directory keeps the extraction its tasks came from: resumed after the extraction
    version changed, it is refused in one line; one of other code of the same version, or without
    the stamp (older), collects but never writes its tasks into the archive of this code's
    extraction (they may not be this code's tasks)."""
    from tlm.graph.extract import EXTRACT_VERSION
    from tlm.search.collect import TASKS_STAMP

    corpus = tmp_path / "corpus"
    work = tmp_path / "w1"
    collect(_config(base_dir, work, corpus), tasks, progress=False, log=lambda m: None, measurer=measurer)
    cfg = _config(base_dir, work, corpus)  # resumed from its tasks.json: nothing is extracted
    archive = tasks_archive(corpus, cfg.loop.sources, host)
    (work / TASKS_STAMP).write_text(f"{EXTRACT_VERSION - 1} {archive.name}\n")
    with pytest.raises(TlmError, match="extraction version") as err:
        collect(cfg, None, progress=False, log=lambda m: None, measurer=measurer)
    assert "\n" not in str(err.value)
    for stamp in (f"{EXTRACT_VERSION} llvm-x86_64-0123456789abcdef.json.xz\n", None):
        if stamp is None:
            (work / TASKS_STAMP).unlink()
        else:
            (work / TASKS_STAMP).write_text(stamp)
        collect(cfg, None, progress=False, log=lambda m: None, measurer=measurer)
        assert not archive.exists()
