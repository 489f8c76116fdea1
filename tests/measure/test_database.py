"""Record database: durability settings, target-awareness, errors, MetaSchedule JSON round trip."""

import os
import sqlite3

import pytest

from tlm.errors import TlmError
from tlm.graph.tasks import Task
from tlm.measure.database import Database, open_db

TARGET = '{"kind": "llvm", "mcpu": "a"}'
OTHER = '{"kind": "llvm", "mcpu": "b"}'


def _task(h="00000000000000aa"):
    return Task(name="t", hash=h, weight=1, flops=1.0, kind="matmul", args=[], mod_json="{}")


def test_wal_and_full_sync(tmp_path):
    db = open_db(str(tmp_path / "db"))
    assert db._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    db.close()


def test_best_ignores_errors_and_other_targets(tmp_path):
    with open_db(str(tmp_path / "db")) as db:
        t = _task()
        db.add_record(t, TARGET, [], [3e-6, 3e-6])
        db.add_record(t, TARGET, [], [], error="WrongResult: x")
        db.add_record(t, OTHER, [], [1e-6])
        assert db.best(t.hash, TARGET).median_s == pytest.approx(3e-6)
        assert db.best(t.hash, OTHER).median_s == pytest.approx(1e-6)
        assert db.best(t.hash, '{"kind": "llvm"}') is None
        assert db.count(t.hash, TARGET) == 2
        assert db.task(t.hash).name == "t"
    # Reopening sees everything (records persist across connections).
    with open_db(str(tmp_path / "db")) as db:
        assert db.count() == 3


def test_missing_and_corrupt_db(tmp_path):
    with pytest.raises(TlmError, match="no record database"):
        Database(str(tmp_path / "none"), create=False)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "records.sqlite").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(TlmError, match="corrupt"):
        open_db(str(bad))
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(TlmError, match="not a directory"):
        open_db(str(f))


@pytest.mark.tvm
def test_metaschedule_json_round_trip(tmp_path, host, matmul32):
    from tvm.s_tir import meta_schedule as ms

    from tlm.space.design import plain_json
    from tlm.space.intrin import light_tensor_intrin

    light_tensor_intrin()
    ctx = ms.TuneContext(mod=matmul32.mod, target=host.tvm(), space_generator="post-order-apply")
    trace = plain_json(ctx.generate_design_space()[0].trace.as_json())
    db = open_db(str(tmp_path / "db"))
    db.add_record(matmul32, host.key, trace, [2e-6, 2e-6])
    db.add_record(matmul32, OTHER, trace, [1e-9])  # another target: never exported for host
    assert db.export_json(str(tmp_path / "json"), host) == 1
    assert len(db.to_metaschedule(host)) == 1
    other = open_db(str(tmp_path / "db2"))
    assert other.import_json(str(tmp_path / "json")) == 1
    best = other.best(matmul32.hash, host.key)
    assert best is not None and best.median_s == pytest.approx(2e-6)
    with pytest.raises(TlmError):
        other.import_json(str(tmp_path / "missing"))


def test_aggregates(tmp_path):
    with open_db(str(tmp_path / "db")) as db:
        a, b = _task("00000000000000aa"), _task("00000000000000bb")
        db.add_record(a, TARGET, [], [3e-6], proposer="tlm", round=0, sentence="s1")
        db.add_record(a, TARGET, [], [2e-6], proposer="tlm", round=1, sentence="s2")
        db.add_record(a, TARGET, [], [1e-9], error="WrongResult: x", proposer="tlm", round=1, sentence="s3")
        db.add_record(a, TARGET, [], [5e-6], proposer="ms")  # no sentence
        db.add_record(b, TARGET, [], [], error="BuildError: x", proposer="tlm", round=1, sentence="s1")
        db.add_record(b, OTHER, [], [1e-9], proposer="tlm", round=1, sentence="o")
        assert db.counts_by_task(TARGET) == {a.hash: 4, b.hash: 1}
        assert db.counts_by_task(TARGET, proposer="ms") == {a.hash: 1}
        assert db.counts_by_task('{"kind": "cuda"}') == {}
        best = db.best_by_task(TARGET)
        assert best.keys() == {a.hash} and best[a.hash] == pytest.approx(2e-6)  # errors never count
        assert db.best_by_task(OTHER) == {b.hash: pytest.approx(1e-9)}
        assert db.counts_by_round(a.hash, TARGET, "tlm") == {0: 1, 1: 2}
        assert db.counts_by_round(b.hash, OTHER, "tlm") == {1: 1}
        assert db.counts_by_round(a.hash, TARGET, "ms") == {0: 1}
        assert db.sentences(a.hash, TARGET) == {"s1", "s2", "s3"}
        assert db.sentences(b.hash, TARGET) == {"s1"} and db.sentences(b.hash, '{"kind": "cuda"}') == set()
        assert db.count(a.hash, TARGET, "tlm") == 3 and db.count(target_key=OTHER) == 1 and db.count() == 6


def test_best_before_last_round(tmp_path):
    with open_db(str(tmp_path / "db")) as db:
        t, u = _task("00000000000000aa"), _task("00000000000000bb")
        db.add_record(t, TARGET, [], [5e-6], proposer="tlm", round=0)
        db.add_record(t, TARGET, [], [2e-6], proposer="tlm", round=3)
        db.add_record(t, TARGET, [], [4e-6], proposer="random", round=7)
        db.add_record(u, TARGET, [], [1e-6], proposer="tlm", round=1)  # nothing before its last round
        got = db.best_before_last_round(TARGET, "tlm")
        assert got == {t.hash: pytest.approx(4e-6)}


@pytest.mark.tvm
def test_trace_recovered_from_sentence(tmp_path, host, matmul32):
    """Records from corpus shards carry a language model's program as its sentence only: the
    trace comes back from it (and is stored), so such a record compiles, never TVM's default."""
    from tlm.space.design import plain_json, random_program
    from tlm.space.language import render

    prog = random_program(matmul32, host, rng=3)
    with open_db(str(tmp_path / "db")) as db:
        rec = db.add_record(matmul32, host.key, None, [2e-6], proposer="tlm", sentence=render(prog, matmul32, host))
        rec = db.best(matmul32.hash, host.key)
        assert rec.trace_json is None
        assert db.trace_of(rec, matmul32) == plain_json(prog.sch.trace.as_json())
        assert len(db.to_metaschedule(host)) == 1
    with open_db(str(tmp_path / "db")) as db:  # stored beside the record for the next reader
        assert db.best(matmul32.hash, host.key).trace_json == plain_json(prog.sch.trace.as_json())
        db.add_record(matmul32, host.key, None, [1e-6], proposer="tlm", sentence="not a program")
        assert db.trace_of(db.best(matmul32.hash, host.key), matmul32) is None
