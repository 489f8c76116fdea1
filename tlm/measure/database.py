"""The durable record database: every measurement, in SQLite (WAL, synchronous=FULL).

One file, `DIR/records.sqlite`. A record is committed in a transaction before it is reported,
so a run killed at any moment (kill -9) loses nothing that was reported as committed; WAL mode
keeps the file consistent across such kills. Records carry the target key, and every query
filters on it, so records of another target are never applied. Export to and import from
MetaSchedule's `JSONDatabase` (database_workload.json / database_tuning_record.json), and the
MetaSchedule views a compile applies: tlm.measure.ms_views.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from tlm.errors import TlmError
from tlm.graph.tasks import Task
from tlm.measure.ms_views import MetaScheduleViews

DB_FILE = "records.sqlite"
# Proposer of unmeasured records: a task's greedy program from the TLM (`--budget 0`), kept
# without a latency (so `best()` ignores it) for `compile_record` to fall back on.
GREEDY = "tlm-greedy"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS workloads (
    task_hash TEXT PRIMARY KEY, name TEXT, task_json TEXT NOT NULL, mod_json TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    task_hash TEXT NOT NULL, target_key TEXT NOT NULL, trace_json TEXT, sentence TEXT,
    latencies_json TEXT NOT NULL, median_s REAL, error TEXT, proposer TEXT NOT NULL,
    round INTEGER NOT NULL DEFAULT 0, created REAL NOT NULL,
    build_s REAL, run_s REAL);
CREATE INDEX IF NOT EXISTS records_task ON records (task_hash, target_key, proposer);
"""


@dataclass
class Record:
    """One measurement as stored; `median_s` is None for failures."""

    id: int
    task_hash: str
    target_key: str
    trace_json: Any  # trace.as_json() lists
    sentence: str | None
    latencies_s: list[float]
    median_s: float | None
    error: str | None
    proposer: str
    round: int
    created: float


def _row_to_record(row: sqlite3.Row) -> Record:
    return Record(
        id=row["id"], task_hash=row["task_hash"], target_key=row["target_key"],
        trace_json=json.loads(row["trace_json"]) if row["trace_json"] else None,
        sentence=row["sentence"], latencies_s=json.loads(row["latencies_json"]),
        median_s=row["median_s"], error=row["error"], proposer=row["proposer"],
        round=row["round"], created=row["created"],
    )


class Database(MetaScheduleViews):
    """Records of measurements for many tasks and targets, in `directory`."""

    def __init__(self, directory: str, create: bool = True):
        self.directory = directory
        self.path = os.path.join(directory, DB_FILE)
        if not os.path.exists(self.path) and not create:
            raise TlmError(f"no record database in {directory} (expected {DB_FILE})")
        try:
            os.makedirs(directory, exist_ok=True)
            self._conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            self._conn.row_factory = sqlite3.Row
            self._conn.execute("PRAGMA journal_mode=WAL")
            # FULL: a transaction is on disk when COMMIT returns (WAL alone may lose the tail).
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.executescript(_SCHEMA)
        except sqlite3.DatabaseError as err:
            raise TlmError(f"corrupt or unreadable record database {self.path}: {err}") from None
        except OSError as err:
            raise TlmError(f"cannot open record database in {directory}: {err}") from None

    # ------------------------------------------------------------------ writing
    def transaction(self, fn):
        """Run `fn(connection)` in one immediate transaction (tlm.measure.shards writes this way)."""
        return self._tx(fn)

    def query(self, sql: str, args: tuple | list = ()) -> list[sqlite3.Row]:
        """Rows of a read-only SQL query (tlm.measure.shards reads this way)."""
        return self._conn.execute(sql, args).fetchall()

    def _tx(self, fn):
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                out = fn(self._conn)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
            return out
        except sqlite3.DatabaseError as err:
            raise TlmError(f"record database {self.path}: {err}") from None

    def add_task(self, task: Task) -> None:
        self._tx(lambda c: c.execute(
            "INSERT OR IGNORE INTO workloads VALUES (?, ?, ?, ?)",
            (task.hash, task.name, json.dumps(task.to_json()), task.mod_json),
        ))

    def set_meta(self, key: str, value: Any) -> None:
        self._tx(lambda c: c.execute(
            "INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value))))

    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row["value"]) if row else default

    def add_results(self, results: list, target_key: str) -> list[int]:
        """Commit `MeasureResult`s in one transaction; when this returns they are durable."""
        now = time.time()
        rows = []
        for r in results:
            c = r.candidate
            median = None if r.median_s == float("inf") else r.median_s
            rows.append((
                c.task.hash, target_key, json.dumps(r.trace_json) if r.trace_json is not None else None,
                c.sentence, json.dumps(r.latencies_s), median, r.error, c.proposer, int(c.round),
                now, r.build_s, r.run_s,
            ))

        def write(conn):
            for task in {r.candidate.task.hash: r.candidate.task for r in results}.values():
                conn.execute("INSERT OR IGNORE INTO workloads VALUES (?, ?, ?, ?)",
                             (task.hash, task.name, json.dumps(task.to_json()), task.mod_json))
            ids = []
            for row in rows:
                cur = conn.execute(
                    "INSERT INTO records (task_hash, target_key, trace_json, sentence, latencies_json,"
                    " median_s, error, proposer, round, created, build_s, run_s)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
                ids.append(cur.lastrowid)
            return ids

        return self._tx(write)

    def add_record(self, task: Task, target_key: str, trace_json: Any, latencies_s: list[float],
                   error: str | None = None, proposer: str = "import", round: int = 0,
                   sentence: str | None = None) -> int:
        """Commit one record given as plain data (imports, tests)."""
        import statistics

        median = statistics.median(latencies_s) if latencies_s and not error else None
        self.add_task(task)
        return self._tx(lambda c: c.execute(
            "INSERT INTO records (task_hash, target_key, trace_json, sentence, latencies_json,"
            " median_s, error, proposer, round, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (task.hash, target_key, json.dumps(trace_json), sentence, json.dumps(latencies_s),
             median, error, proposer, round, time.time()),
        ).lastrowid)

    # ------------------------------------------------------------------ reading
    def task(self, task_hash: str) -> Task | None:
        row = self._conn.execute("SELECT * FROM workloads WHERE task_hash = ?", (task_hash,)).fetchone()
        if row is None:
            return None
        data = json.loads(row["task_json"])
        data["mod"] = row["mod_json"]
        return Task.from_json(data)

    def records(self, task_hash: str | None = None, target_key: str | None = None,
                proposer: str | None = None) -> list[Record]:
        sql, args = "SELECT * FROM records WHERE 1=1", []
        for col, val in (("task_hash", task_hash), ("target_key", target_key), ("proposer", proposer)):
            if val is not None:
                sql += f" AND {col} = ?"
                args.append(val)
        return [_row_to_record(r) for r in self._conn.execute(sql + " ORDER BY id", args)]

    def count(self, task_hash: str | None = None, target_key: str | None = None,
              proposer: str | None = None) -> int:
        sql, args = "SELECT COUNT(*) FROM records WHERE 1=1", []
        for col, val in (("task_hash", task_hash), ("target_key", target_key), ("proposer", proposer)):
            if val is not None:
                sql += f" AND {col} = ?"
                args.append(val)
        return int(self._conn.execute(sql, args).fetchone()[0])

    # ------------------------------------------------------------------ aggregates (SQL, no record parsing)
    def target_keys(self) -> list[str]:
        """The target keys with records, sorted."""
        return [r[0] for r in self._conn.execute("SELECT DISTINCT target_key FROM records ORDER BY target_key")]

    def counts_by_task(self, target_key: str, proposer: str | None = None) -> dict[str, int]:
        """Records per task hash for this target (optionally one proposer); tasks without any are absent."""
        sql, args = "SELECT task_hash, COUNT(*) FROM records WHERE target_key = ?", [target_key]
        if proposer is not None:
            sql += " AND proposer = ?"
            args.append(proposer)
        return {r[0]: int(r[1]) for r in self._conn.execute(sql + " GROUP BY task_hash", args)}

    def best_by_task(self, target_key: str) -> dict[str, float]:
        """Lowest median latency per task hash among this target's correct records."""
        rows = self._conn.execute(
            "SELECT task_hash, MIN(median_s) FROM records WHERE target_key = ? AND error IS NULL"
            " AND median_s IS NOT NULL GROUP BY task_hash", (target_key,))
        return {r[0]: float(r[1]) for r in rows}

    def best_before_last_round(self, target_key: str, proposer: str) -> dict[str, float]:
        """Per task hash: the lowest correct median latency before its last round of `proposer`
        (records of other proposers count as before); tasks with nothing before are absent."""
        rows = self._conn.execute(
            "SELECT r.task_hash, MIN(r.median_s) FROM records r JOIN (SELECT task_hash, MAX(round) AS last"
            " FROM records WHERE target_key = ? AND proposer = ? GROUP BY task_hash) m ON r.task_hash = m.task_hash"
            " WHERE r.target_key = ? AND r.error IS NULL AND r.median_s IS NOT NULL"
            " AND (r.proposer != ? OR r.round < m.last) GROUP BY r.task_hash",
            (target_key, proposer, target_key, proposer))
        return {r[0]: float(r[1]) for r in rows}

    def counts_by_round(self, task_hash: str, target_key: str, proposer: str) -> dict[int, int]:
        """Records per round of one task, target and proposer; rounds without any are absent."""
        rows = self._conn.execute(
            "SELECT round, COUNT(*) FROM records WHERE task_hash = ? AND target_key = ? AND proposer = ?"
            " GROUP BY round", (task_hash, target_key, proposer))
        return {int(r[0]): int(r[1]) for r in rows}

    def sentences(self, task_hash: str, target_key: str) -> set[str]:
        """The sentences of a task's records for this target (records without one are skipped)."""
        rows = self._conn.execute(
            "SELECT DISTINCT sentence FROM records WHERE task_hash = ? AND target_key = ?"
            " AND sentence IS NOT NULL AND sentence != ''", (task_hash, target_key))
        return {r[0] for r in rows}

    def best(self, task_hash: str, target_key: str) -> Record | None:
        """Fastest correct record of a task for this target (errors and other targets ignored)."""
        row = self._conn.execute(
            "SELECT * FROM records WHERE task_hash = ? AND target_key = ? AND error IS NULL"
            " AND median_s IS NOT NULL ORDER BY median_s LIMIT 1", (task_hash, target_key),
        ).fetchone()
        return _row_to_record(row) if row else None

    def greedy_records(self, task_hash: str, target_key: str) -> list[Record]:
        """Unmeasured greedy records (proposer GREEDY) of a task, newest first."""
        return list(reversed(self.records(task_hash, target_key, GREEDY)))

    def fastest_on(self, task_hash: str, target_key: str, threads: int) -> Record | None:
        """The correct record estimated fastest on `threads` threads: one-thread median over its
        parallel loops' speedup (tlm.space.threads), among the records that could overtake the
        one-thread best (median < threads x its); `best()` when threads <= 1."""
        best = self.best(task_hash, target_key)
        if best is None or threads <= 1:
            return best
        from tlm.space.threads import fastest

        task = self.task(task_hash)
        rows = self._conn.execute(
            "SELECT * FROM records WHERE task_hash = ? AND target_key = ? AND error IS NULL AND median_s < ?"
            " ORDER BY median_s LIMIT 32", (task_hash, target_key, best.median_s * threads)).fetchall()
        recs = [_row_to_record(r) for r in rows]
        return recs[fastest(task.mod, [(r.median_s, self.trace_of(r, task)) for r in recs], threads)]

    def compile_record(self, task_hash: str, target_key: str, threads: int = 1) -> Record | None:
        """The record a whole-model compile applies to a task: its measured record estimated
        fastest on the model's `threads` (`fastest_on`); else its newest greedy record whose
        program was never measured as failing; else None (TVM's default schedule)."""
        best = self.fastest_on(task_hash, target_key, threads)
        if best is not None:
            return best
        failed = {r.sentence for r in self.records(task_hash, target_key) if r.error and r.sentence}
        for rec in self.greedy_records(task_hash, target_key):
            if self.trace_of(rec) is not None and rec.sentence not in failed:
                return rec
        return None

    def trace_of(self, rec: Record, task: Task | None = None) -> Any:
        """A record's trace (trace.as_json() lists): as stored, else recovered from its exact
        sentence (record shards keep a language model's programs as sentences only, so records
        ingested from them have none) and stored beside it for the next reader. None when the
        record has neither, or its sentence no longer names a program of the task's space."""
        if rec.trace_json is not None or not rec.sentence:
            return rec.trace_json
        from tlm.graph.target import resolve_target
        from tlm.space.design import plain_json
        from tlm.space.language import parse

        task = task or self.task(rec.task_hash)
        if task is None:
            return None
        try:
            prog = parse(rec.sentence, task, resolve_target(json.loads(rec.target_key)))
        except Exception:  # noqa: BLE001 - a sentence of another space version: no program
            return None
        rec.trace_json = plain_json(prog.sch.trace.as_json())
        try:
            self._tx(lambda c: c.execute("UPDATE records SET trace_json = ? WHERE id = ?",
                                         (json.dumps(rec.trace_json), rec.id)))
        except TlmError:  # a read-only database: recovered again next time
            pass
        return rec.trace_json

    def last_round(self, task_hash: str, target_key: str, proposer: str) -> int:
        row = self._conn.execute(
            "SELECT MAX(round) AS r FROM records WHERE task_hash = ? AND target_key = ? AND proposer = ?",
            (task_hash, target_key, proposer)).fetchone()
        return -1 if row["r"] is None else int(row["r"])

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_db(directory: str, create: bool = True) -> Database:
    """Open (or create) the record database in `directory`; a TlmError for anything unusable."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise TlmError(f"--db {directory} is a file, not a directory")
    return Database(directory, create=create)
