"""Corpus shards: append-only, immutable, content-named; flush/ingest round trips, kills, bad files."""

import json
import lzma

import pytest

from tlm.errors import TlmError
from tlm.graph.tasks import Task
from tlm.measure.database import open_db
from tlm.measure.shards import (corpus_summary, flush, hardware_slug, ingest, pending, read_shard,
                                shard_paths)

A = '{"kind": "llvm", "mcpu": "znver3", "num-cores": 2}'
B = '{"kind": "llvm", "mcpu": "icelake-server", "num-cores": 2}'


def _task(h: str) -> Task:
    return Task(name=f"t{h}", hash=h, weight=2, flops=10.0, kind="matmul", args=[], mod_json='{"m": 1}')


def _fill(db, n: int, target: str = A, start: int = 0) -> None:
    for i in range(start, start + n):
        db.add_record(_task(f"{i % 3:016x}"), target, None, [1e-6 * (i + 1)] * 3, proposer="tlm", round=i % 2,
                      sentence=f"sentence {i}")
    db.add_record(_task("0" * 15 + "f"), target, None, [], error="WrongResult: x", proposer="tlm",
                  sentence=f"bad {start}")


def _rows(db):
    return sorted((r.task_hash, r.target_key, r.sentence, tuple(r.latencies_s), r.error, r.proposer, r.round)
                  for r in db.records())


def test_slug():
    assert hardware_slug(A) == "llvm-znver3-2c"
    assert hardware_slug("not json") == "target-generic"


def test_flush_then_ingest_round_trip(tmp_path):
    corpus = tmp_path / "corpus"
    with open_db(str(tmp_path / "a")) as db:
        _fill(db, 5)
        _fill(db, 2, target=B, start=10)
        assert pending(db) == 9
        rep = flush(db, corpus)
        assert rep.records == 9 and len(rep.shards) == 2 and pending(db) == 0
        assert flush(db, corpus).records == 0  # nothing new: no new shard
        original = _rows(db)
    header, tasks, records = read_shard(shard_paths(corpus)[-1])
    assert header["target_key"] in (A, B) and header["records"] == len(records)
    assert {d.name for d in corpus.iterdir()} == {"llvm-znver3-2c", "llvm-icelake-server-2c"}
    with open_db(str(tmp_path / "b")) as db:  # a new machine: everything comes back, once
        assert ingest(db, corpus).records == 9
        assert ingest(db, corpus).records == 0
        assert _rows(db) == original
        assert db.task("0" * 16).name == "t" + "0" * 16
        assert db.best("0" * 16, A).median_s == pytest.approx(1e-6)
        # Its own new records go into a new shard; the ingested ones are not written again.
        _fill(db, 1, start=20)
        assert flush(db, corpus).records == 2
    with open_db(str(tmp_path / "a")) as db:  # the first machine picks up the second's shard only
        assert ingest(db, corpus).records == 2
        assert db.count() == 11
    summary = corpus_summary(corpus)
    assert summary["llvm-znver3-2c"]["records"] == 8 and summary["llvm-znver3-2c"]["ok"] == 6


def test_flush_killed_before_note_rewrites_same_shard(tmp_path):
    corpus = tmp_path / "corpus"
    with open_db(str(tmp_path / "a")) as db:
        _fill(db, 4)
        flush(db, corpus)
        first = {p.name: p.read_bytes() for p in shard_paths(corpus)}
        # As if killed after the file was written but before the database noted it.
        db._tx(lambda c: c.execute("DELETE FROM meta WHERE key LIKE 'corpus.%' AND key != 'corpus.uid'"))
        flush(db, corpus)
        assert {p.name: p.read_bytes() for p in shard_paths(corpus)} == first  # same name, same bytes


def test_pending_records_flushed_before_ingest(tmp_path):
    corpus = tmp_path / "corpus"
    with open_db(str(tmp_path / "b")) as other:
        _fill(other, 3)
        flush(other, corpus)
    with open_db(str(tmp_path / "a")) as db:
        _fill(db, 2, start=50)  # measured, not flushed (e.g. the collector was killed -9)
        ingest(db, corpus)
        assert pending(db) == 0
        assert len(shard_paths(corpus)) == 2
    with open_db(str(tmp_path / "c")) as db:
        ingest(db, corpus)
        assert db.count() == 4 + 3  # each record exactly once


def test_bad_shard_is_skipped_with_a_reason(tmp_path):
    corpus = tmp_path / "corpus"
    (corpus / "llvm-x-2c").mkdir(parents=True)
    (corpus / "llvm-x-2c" / "junk.jsonl.xz").write_bytes(b"not xz")
    with lzma.open(corpus / "llvm-x-2c" / "noheader.jsonl.xz", "wt") as f:
        f.write(json.dumps({"t": "x"}) + "\n")
    with open_db(str(tmp_path / "a")) as db:
        rep = ingest(db, corpus)
        assert rep.records == 0 and len(rep.skipped) == 2
        assert any("unreadable" in s for s in rep.skipped) and any("not a record shard" in s for s in rep.skipped)
    with pytest.raises(TlmError):
        read_shard(corpus / "llvm-x-2c" / "junk.jsonl.xz")
