"""The measurement corpus in git: append-only, compressed, immutable record shards (issue 15).

A record database (tlm.measure.database) is a working copy; the corpus is what survives a
session and travels between machines:

    CORPUS/<hardware>/<db uid>-<first id>-<last id>.jsonl.xz

One shard holds the records of one hardware (target key) that one database measured, ids
first..last, and is never rewritten: a new flush writes a new shard, so git stores each record
once. The name depends only on its content, so a flush killed between writing the file and
noting it in the database rewrites the same file with the same bytes. Lines (JSON):

    {"shard": 1, "target_key": ..., "target": {...}, "host": {...}, "sentence_version": 2,
     "extract_version": 3, "tvm": "0.27.0", "records": N, "last": <created of the last record>}
    {"task": {...}}                           tasks new to this database's shards (with their TIR)
    {"t": hash, "s": sentence, "lat": [seconds...], "err": null, "by": proposer, "r": round,
     "at": unix time, "build_s": ..., "run_s": ...}

A record keeps its exact sentence (`s`), from which the trace is recovered
(tlm.space.language.parse); records without a sentence keep their trace (`trace`). Records of
every hardware are ingested (each keeps its target key; queries filter on it), so a database on
a new machine starts from everything committed.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Iterator, Sequence
from typing import Any

from tlm.errors import TlmError
from tlm.measure import xzlines
from tlm.measure.database import Database, open_db

SHARD_VERSION = 1
SUFFIX = ".jsonl.xz"
_META_UID, _META_UPTO, _META_TASKS, _META_INGESTED = ("corpus.uid", "corpus.exported_upto", "corpus.exported_tasks",
                                                     "corpus.ingested")
_META_PARTIAL = "corpus.partial"  # {shard: records ingested} of damaged shards, read again until repaired
_warned: set[str] = set()  # warnings given by this process (`tlm corpus --curve` reads each shard twice)


@dataclass
class FlushReport:
    shards: list[str] = field(default_factory=list)  # paths written
    records: int = 0
    tasks: int = 0


@dataclass
class IngestReport:
    shards: list[str] = field(default_factory=list)  # paths read
    records: int = 0
    tasks: int = 0
    skipped: list[str] = field(default_factory=list)  # "path: reason" for unreadable or damaged shards


def hardware_slug(target_key: str) -> str:
    """A directory name for a target key: `llvm-znver3-2c`, `cuda-h200`."""
    try:
        cfg = json.loads(target_key)
    except ValueError:
        cfg = {}
    parts = [cfg.get("kind", "target"), cfg.get("mcpu") or cfg.get("model") or cfg.get("arch") or "generic"]
    if cfg.get("num-cores"):
        parts.append(f"{cfg['num-cores']}c")
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(str(p) for p in parts))


def host_description() -> dict[str, Any]:
    """What this machine is, beyond the target: the CPU's model name and core count."""
    import platform

    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu_model": model or platform.processor(), "machine": platform.machine(), "cpus": os.cpu_count()}


def host_label(target=None) -> str:
    """How results files name the machine: `znver3 (AMD EPYC, 2 cores)` (target default: the host)."""
    from tlm.graph.target import resolve_target

    info = resolve_target(target)
    cpu = " ".join(host_description()["cpu_model"].split()) or "unknown CPU"
    return f"{info.cpu} ({cpu}, {info.cores} cores)"


def _uid(db: Database) -> str:
    uid = db.get_meta(_META_UID)
    if uid is None:
        uid = uuid.uuid4().hex[:12]
        db.set_meta(_META_UID, uid)
    return uid


def _versions() -> dict[str, Any]:
    from tlm.graph.extract import EXTRACT_VERSION
    from tlm.graph.target import BUILD_CONFIG
    from tlm.space.language import SENTENCE_VERSION

    try:
        import tvm

        tvm_version = tvm.__version__
    except ImportError:  # pragma: no cover - TVM is a dependency
        tvm_version = None
    # build_config: the PassContext options the programs were built with (none before 2026-12-02,
    # when TIR CSE was left out: tlm.graph.target.BUILD_CONFIG)
    return {"sentence_version": SENTENCE_VERSION, "extract_version": EXTRACT_VERSION, "tvm": tvm_version,
            "build_config": dict(BUILD_CONFIG)}


def pending(db: Database) -> int:
    """Records of `db` not yet in any shard."""
    upto = int(db.get_meta(_META_UPTO, 0))
    return int(db.query("SELECT COUNT(*) FROM records WHERE id > ?", (upto,))[0][0])


def flush(db: Database, corpus: str | os.PathLike) -> FlushReport:
    """Write the records of `db` that are in no shard yet as new shards under `corpus`."""
    corpus = Path(corpus)
    uid = _uid(db)
    upto = int(db.get_meta(_META_UPTO, 0))
    exported = set(db.get_meta(_META_TASKS, []))
    rows = db.query("SELECT * FROM records WHERE id > ? ORDER BY id", (upto,))
    report = FlushReport()
    if not rows:
        return report
    by_target: dict[str, list] = {}
    for row in rows:
        by_target.setdefault(row["target_key"], []).append(row)
    versions, host = _versions(), host_description()
    names = []
    for key, recs in by_target.items():
        new_tasks = sorted({r["task_hash"] for r in recs} - exported)
        tasks = [db.task(h) for h in new_tasks]
        try:
            target = json.loads(key)
        except ValueError:
            target = {}
        header = {"shard": SHARD_VERSION, "target_key": key, "target": target, "host": host, **versions,
                  "records": len(recs), "last": recs[-1]["created"]}
        lines = [json.dumps(header, sort_keys=True)]
        lines += [json.dumps({"task": t.to_json(with_mod=True)}, sort_keys=True) for t in tasks if t is not None]
        for r in recs:
            line = {"t": r["task_hash"], "s": r["sentence"], "lat": json.loads(r["latencies_json"]), "err": r["error"],
                    "by": r["proposer"], "r": r["round"], "at": r["created"], "build_s": r["build_s"],
                    "run_s": r["run_s"]}
            if not r["sentence"]:
                line["trace"] = json.loads(r["trace_json"]) if r["trace_json"] else None
            lines.append(json.dumps(line, sort_keys=True))
        rel = f"{hardware_slug(key)}/{uid}-{recs[0]['id']:08d}-{recs[-1]['id']:08d}{SUFFIX}"
        xzlines.write_atomic(corpus / rel, lines)
        names.append(rel)
        exported |= set(new_tasks)
        report.shards.append(str(corpus / rel))
        report.records += len(recs)
        report.tasks += len(tasks)

    ingested = db.get_meta(_META_INGESTED, [])

    def note(conn):
        for k, v in ((_META_UPTO, rows[-1]["id"]), (_META_TASKS, sorted(exported)),
                     (_META_INGESTED, sorted(set(ingested) | set(names)))):
            conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (k, json.dumps(v)))

    db.transaction(note)
    return report


def forget_shards(db: Database) -> None:
    """Make `db` new to every shard folder: a copy of another database (an sqlite backup) must not
    share its uid or its notes of what was exported and ingested, or its first flush would skip
    the records the original had flushed."""
    keys = (_META_UID, _META_UPTO, _META_TASKS, _META_INGESTED, _META_PARTIAL)
    db.transaction(lambda c: c.execute(f"DELETE FROM meta WHERE key IN ({', '.join('?' * len(keys))})", keys))


@contextmanager
def kept_in_git(db_root: str | os.PathLike, shards: str | os.PathLike, names: Sequence[str]) -> Iterator[None]:
    """Record databases DB_ROOT/NAME kept in git as shard folders SHARDS/NAME (the corpus' format):
    each database first takes in the shards it lacks (a fresh clone resumes where the committed
    shards end), and writes its new records as new shards on the way out, also when interrupted."""
    for name in names:
        if (Path(shards) / name).is_dir():
            with open_db(os.path.join(db_root, name)) as db:
                ingest(db, Path(shards) / name)
    try:
        yield
    finally:
        for name in names:
            if os.path.isfile(os.path.join(db_root, name, "records.sqlite")):
                with open_db(os.path.join(db_root, name)) as db:
                    flush(db, Path(shards) / name)


def shard_paths(corpus: str | os.PathLike) -> list[Path]:
    """Every shard under `corpus`, in a stable order."""
    corpus = Path(corpus)
    return sorted(corpus.glob(f"*/*{SUFFIX}")) if corpus.is_dir() else []


def _warn(message: str) -> None:  # once per message and process: no reader drops data silently
    if message not in _warned:
        _warned.add(message)
        print(f"tlm: warning: {message}", file=sys.stderr, flush=True)


def _line_ok(i: int, obj: Any) -> bool:  # the header, a task or a record, with what ingest reads
    return isinstance(obj, dict) and (("shard" in obj and "target_key" in obj) if i == 0 else (
        isinstance(obj["task"], dict) and "hash" in obj["task"]) if "task" in obj else (
        isinstance(obj.get("t"), str) and isinstance(obj.get("lat"), list) and "by" in obj))


def load_shard(path: str | os.PathLike) -> tuple[dict, list[dict[str, Any]], list[dict[str, Any]], str | None]:
    """(header, tasks, records, damage) of one shard, warning nobody: `damage` is None for a whole
    shard, else "path: damaged (what); N of M records read, the rest lost", with every complete
    line before the damage (not the half line at the cut, nor any line from the first that is not a
    shard line; of a corrupt xz stream none: `tlm.measure.xzlines`).
    A TlmError if not even the header is readable, or the file is not a shard."""
    raw, damage = xzlines.decompress(path)
    lines = raw.split(b"\n")
    if damage or not lines[-1]:
        lines.pop()  # the half line at the cut, or the empty one after the last newline
    header, tasks, records = None, [], []
    for i, line in enumerate(lines):
        try:
            obj = json.loads(line)
        except ValueError:
            obj = None
        if not _line_ok(i, obj):
            if i == 0 and isinstance(obj, dict):
                raise TlmError(f"{path}: not a record shard (no header)")
            damage = damage or f"line {i + 1} is not a shard line"
            break
        if i == 0:
            header = obj
            if obj["shard"] > SHARD_VERSION:
                raise TlmError(f"{path}: shard version {obj['shard']} is newer than this tlm's {SHARD_VERSION}")
        elif "task" in obj:
            tasks.append(obj["task"])
        else:
            records.append(obj)
    if header is None:
        raise TlmError(f"{path}: unreadable shard: {damage}" if damage else f"{path}: empty shard")
    if not damage and isinstance(header.get("records"), int) and header["records"] != len(records):
        damage = f"{len(records)} records where its header says {header['records']}"
    if damage:
        n, k = header.get("records"), len(records)
        damage = f"{path}: damaged ({damage}); " + (f"all {n} records read" if n == k else
                                                    f"{k}{f' of {n}' if n else ''} records read, the rest lost")
    return header, tasks, records, damage


def read_shard(path: str | os.PathLike) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """(header, tasks, records) of one shard; a TlmError if it is not one. A damaged one gives
    what precedes the damage and a warning on stderr naming it (load_shard)."""
    header, tasks, records, damage = load_shard(path)
    if damage:
        _warn(damage)
    return header, tasks, records


def ingest(db: Database, corpus: str | os.PathLike) -> IngestReport:
    """Add the records of every shard under `corpus` that `db` has not seen to `db`.

    Records `db` measured and did not flush yet are flushed first (their ids would otherwise mix
    with ingested ones). Each shard goes in with the note that it was read, in one transaction.
    Unreadable and damaged shards are named on stderr and in `skipped`. A damaged shard's records
    before the damage go in, and it is noted as partly read (N records), not as ingested: a repaired
    file keeps its (content-derived) name, so were it noted as ingested its lost records would never
    be read. Each reading adds the records past those N; once whole, it is noted as ingested."""
    from tlm.graph.tasks import Task

    corpus = Path(corpus)
    if pending(db):
        flush(db, corpus)
    seen = set(db.get_meta(_META_INGESTED, []))
    partial: dict[str, int] = dict(db.get_meta(_META_PARTIAL, {}))
    report = IngestReport()
    arrived: set[str] = set()
    for path in shard_paths(corpus):
        rel = path.relative_to(corpus).as_posix()
        if rel in seen:
            continue
        try:
            header, tasks, records, damage = load_shard(path)
        except TlmError as err:
            header, damage = None, f"{err}; skipped"
        if damage:
            report.skipped.append(damage)
            _warn(damage)
        key, done = header and header["target_key"], partial.get(rel, 0)
        if header is None or damage and len(records) <= done:
            continue  # unreadable, or damaged with nothing more than last time
        if damage:
            partial[rel] = len(records)
        else:
            seen.add(rel)
            partial.pop(rel, None)
        records = records[done:]

        def write(conn, tasks=tasks, records=records, key=key):
            for t in tasks:
                task = Task.from_json(t)
                conn.execute("INSERT OR IGNORE INTO workloads VALUES (?, ?, ?, ?)",
                             (task.hash, task.name, json.dumps(task.to_json()), task.mod_json))
            for r in records:
                median = statistics.median(r["lat"]) if r["lat"] and not r.get("err") else None
                trace = r.get("trace")
                conn.execute(
                    "INSERT INTO records (task_hash, target_key, trace_json, sentence, latencies_json, median_s,"
                    " error, proposer, round, created, build_s, run_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (r["t"], key, json.dumps(trace) if trace is not None else None, r.get("s"), json.dumps(r["lat"]),
                     median, r.get("err"), r["by"], int(r.get("r", 0)), float(r.get("at", time.time())),
                     r.get("build_s"), r.get("run_s")))
            last = conn.execute("SELECT MAX(id) FROM records").fetchone()[0] or 0
            for k, v in ((_META_INGESTED, sorted(seen)), (_META_PARTIAL, partial), (_META_UPTO, last)):
                conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (k, json.dumps(v)))

        db.transaction(write)
        report.shards.append(str(path))
        report.records += len(records)
        report.tasks += len(tasks)
        arrived |= {t["hash"] for t in tasks}
    if arrived:  # tasks that are in shards already need not be written again
        db.set_meta(_META_TASKS, sorted(set(db.get_meta(_META_TASKS, [])) | arrived))
    return report


def readable_shards(corpus: str | os.PathLike) -> Iterator[tuple[Path, list[dict[str, Any]], list[dict[str, Any]]]]:
    """(path, tasks, records) of every readable shard under `corpus`: a damaged one with its records
    before the damage; an unreadable one is skipped. Either is named on stderr."""
    for path in shard_paths(corpus):
        try:
            _, tasks, records = read_shard(path)
        except TlmError as err:
            _warn(f"{err}; skipped")
            continue
        yield path, tasks, records


def corpus_summary(corpus: str | os.PathLike) -> dict[str, Any]:
    """Counts per hardware, from the shard headers and lines: shards, records, correct records, tasks."""
    out: dict[str, Any] = {}
    for path, _, records in readable_shards(corpus):
        hw = out.setdefault(path.parent.name, {"shards": 0, "records": 0, "ok": 0, "tasks": set()})
        hw["shards"] += 1
        hw["records"] += len(records)
        hw["ok"] += sum(1 for r in records if not r.get("err"))
        hw["tasks"] |= {r["t"] for r in records}
    return {k: dict(v, tasks=len(v["tasks"])) for k, v in out.items()}


def corpus_task_hashes(corpus: str | os.PathLike) -> set[str]:
    """Every task hash with a record in the corpus, any hardware (the tasks trained on)."""
    return {r["t"] for _, _, records in readable_shards(corpus) for r in records}


def require_corpus_dir(corpus: str) -> Path:
    p = Path(corpus)
    if p.exists() and not p.is_dir():
        raise TlmError(f"--corpus {corpus} is a file, not a directory")
    return p
