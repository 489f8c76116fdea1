"""Corpus shards: append-only, immutable, content-named; flush/ingest round trips, kills, bad files."""

import json
import lzma

import pytest

from tlm.errors import TlmError
from tlm.graph.tasks import Task
from tlm.measure import shards, xzlines
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


def _whole_shard(tmp_path, n: int = 120):
    """A corpus with one shard of n + 1 records; (corpus, its path, its bytes, its records)."""
    corpus = tmp_path / "corpus"
    with open_db(str(tmp_path / "w")) as db:
        _fill(db, n)
        flush(db, corpus)
    (path,) = shard_paths(corpus)
    return corpus, path, path.read_bytes(), read_shard(path)[2]


def _warnings(capsys) -> list[str]:
    return [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("tlm: warning:")]


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    monkeypatch.setattr(shards, "_warned", set())  # each test sees its own warnings


def test_truncated_shard_gives_a_prefix_and_names_itself(tmp_path, capsys):
    """Cut at many byte offsets (as a killed copy leaves it): the complete lines before the cut
    come back, never an exception other than 'unreadable' for a header cut short, always named."""
    import lzma

    corpus, path, data, whole = _whole_shard(tmp_path)
    dec = lzma.LZMADecompressor()
    dec.decompress(data)
    boundary = len(data) - len(dec.unused_data)  # where the header's own stream ends: a cut there is whole streams
    offsets = sorted({*range(0, len(data), max(1, len(data) // 50)), len(data) - 1, len(data) - 12, boundary})
    got = set()
    for cut in offsets:
        shards._warned.clear()
        path.write_bytes(data[:cut])
        try:
            _, _, records = read_shard(path)
        except TlmError as err:  # not even the header decompressed
            assert str(path) in str(err) and ("unreadable" in str(err) or "empty" in str(err)), cut
            assert not corpus_summary(corpus)
            assert any(str(path) in w and "skipped" in w for w in _warnings(capsys)), cut
            continue
        assert records == whole[:len(records)], cut
        (warning,) = _warnings(capsys)
        what = f"{len(records)} records where its header says" if cut == boundary else "truncated xz stream"
        assert str(path) in warning and f"damaged ({what}" in warning, cut
        assert (f"{len(records)} of {len(whole)} records read, the rest lost" in warning if len(records) < len(whole)
                else f"all {len(whole)} records read" in warning), cut
        assert corpus_summary(corpus)[path.parent.name]["records"] == len(records), cut
        got.add(len(records))
    assert len(got) > 10 and min(got) < len(whole) // 4  # the cuts fell all along the shard


def test_corrupt_shard_gives_only_checked_streams_and_names_itself(tmp_path, capsys, monkeypatch):
    """Eight flipped bytes anywhere after the header: the records of the xz streams before the
    damage come back, exactly, and none decoded after it (which used to pass for records: lines
    copied from earlier ones); named every time."""
    monkeypatch.setattr(xzlines, "STREAM_BYTES", 4000)
    corpus, path, data, whole = _whole_shard(tmp_path, n=400)
    dec = lzma.LZMADecompressor()
    dec.decompress(data)
    header_end = len(data) - len(dec.unused_data)  # the header is its own stream
    counts = set()
    for at in range(header_end + 200, len(data) - 8, max(1, (len(data) - header_end) // 60)):
        shards._warned.clear()
        path.write_bytes(data[:at] + bytes(b ^ 0x5A for b in data[at:at + 8]) + data[at + 8:])
        _, _, records = read_shard(path)
        assert records == whole[:len(records)] and len(records) < len(whole), at
        counts.add(len(records))
        (warning,) = _warnings(capsys)
        assert warning.startswith(f"tlm: warning: {path}: damaged (") and "the rest lost" in warning, at
        assert corpus_summary(corpus)[path.parent.name]["records"] == len(records)
    assert len(counts) > 5  # many streams, each kept whole or not at all


def test_shard_is_many_checked_streams_that_xz_reads_as_one(tmp_path, monkeypatch):
    monkeypatch.setattr(xzlines, "STREAM_BYTES", 4000)
    _, path, data, whole = _whole_shard(tmp_path, n=400)
    assert data.count(b"\xfd7zXZ\x00") > 10  # the xz stream magic, once per stream
    lines = [json.loads(ln) for ln in lzma.decompress(data).decode().splitlines()]
    assert lines[0]["records"] == len(whole) and [ln for ln in lines if "lat" in ln] == whole


def test_corrupt_one_stream_shard_loses_what_its_check_covers(tmp_path, capsys):
    """A shard written as one xz stream (before 2026-12-02): damage after its header is named and
    nothing of that stream is read, rather than what the decoder made of it."""
    corpus, path, data, whole = _whole_shard(tmp_path, n=400)
    raw = lzma.decompress(data)
    path.write_bytes(lzma.compress(raw, preset=9))
    one = path.read_bytes()
    path.write_bytes(one[:len(one) // 2] + bytes(b ^ 0x5A for b in one[len(one) // 2:len(one) // 2 + 8])
                     + one[len(one) // 2 + 8:])
    with pytest.raises(TlmError, match="unreadable shard: corrupt xz data"):
        read_shard(path)


def test_damaged_shard_ingested_in_part_then_whole_once_repaired(tmp_path, capsys):
    corpus, path, data, whole = _whole_shard(tmp_path, n=200)
    path.write_bytes(data[:len(data) // 2])
    part = len(read_shard(path)[2])
    shards._warned.clear()
    with open_db(str(tmp_path / "b")) as db:
        rep = ingest(db, corpus)
        assert rep.records == db.count() == part > 0
        assert len(rep.skipped) == 1 and str(path) in rep.skipped[0] and "damaged" in rep.skipped[0]
        assert any(str(path) in w for w in _warnings(capsys))
        assert ingest(db, corpus).records == 0 and db.count() == part  # read again, nothing twice
        path.write_bytes(data)  # repaired: the rest comes in, and then it is done with
        rep = ingest(db, corpus)
        assert rep.records == len(whole) - part and not rep.skipped and db.count() == len(whole)
        assert ingest(db, corpus).records == 0 and db.count() == len(whole)
        assert sorted(r.sentence for r in db.records()) == sorted(r["s"] for r in whole)


def test_shard_without_a_readable_header_is_named_and_skipped(tmp_path, capsys):
    corpus, path, data, _ = _whole_shard(tmp_path)
    path.write_bytes(data[:40])
    with open_db(str(tmp_path / "b")) as db:
        rep = ingest(db, corpus)
    assert rep.records == 0 and rep.skipped == [f"{path}: unreadable shard: truncated xz stream; skipped"]
    assert _warnings(capsys) == [f"tlm: warning: {rep.skipped[0]}"]
    shards._warned.clear()
    assert corpus_summary(corpus) == {}
    assert _warnings(capsys) == [f"tlm: warning: {rep.skipped[0]}"]  # readers name it too
