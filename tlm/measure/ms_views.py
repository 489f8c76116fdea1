"""The record database's MetaSchedule side (a mixin of tlm.measure.database.Database): a record
committed into a MetaSchedule database, this target's records as a MetaSchedule database (in memory,
or a JSONDatabase on disk: export), and a JSONDatabase's records read in (import)."""

from __future__ import annotations

import json
import os

from tlm.errors import TlmError
from tlm.graph.tasks import Task

GREEDY_PLACEHOLDER_S = 1.0  # a greedy record's run_secs in a MetaSchedule view (its task's only record)


class MetaScheduleViews:
    """Methods of Database that read or write MetaSchedule databases (uses its task, best, records,
    trace_of, add_record and _conn)."""

    def commit_record(self, msdb, rec, task: Task, target) -> bool:
        """Commit `rec`'s program for `task` into the MetaSchedule database `msdb` (TVM `target`),
        an unmeasured one at `GREEDY_PLACEHOLDER_S`; False when it does not replay. Block names
        follow a model's variable numbering (`lv57_sum`) and the task hash ignores them, so a record
        written for another import of the task replays on the IR stored here instead; MetaSchedule
        applies it to the IR it replayed on (its lookup ignores names too)."""
        from tvm.s_tir import Schedule
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo
        from tvm.s_tir.meta_schedule.database import TuningRecord
        from tvm.s_tir.schedule import Trace

        for ir in (task, None):
            if ir is None and ((ir := self.task(task.hash)) is None or ir.mod_json == task.mod_json):
                return False
            try:
                sch = Schedule(ir.mod)
                Trace.apply_json_to_schedule(self.trace_of(rec, ir), sch)
            except Exception:  # noqa: BLE001 - no trace, names of another IR, or another space version
                continue
            latencies = [float(x) for x in rec.latencies_s] or [GREEDY_PLACEHOLDER_S]
            msdb.commit_tuning_record(TuningRecord(sch.trace, msdb.commit_workload(ir.mod), latencies, target,
                                                   ArgInfo.from_prim_func(ir.mod["main"])))
            return True
        return False

    def to_metaschedule(self, target, work_dir: str | None = None, best_only: bool = True,
                        records: dict | None = None):
        """A MetaSchedule database (JSONDatabase in `work_dir`, else in memory) of this target's
        correct records: the best per task, or all of them; or `records` (task hash -> record:
        what a whole-model compile applies, tlm.compiler.apply.compile_database)."""
        from tlm.graph.target import resolve_target
        from tlm.space.intrin import light_tensor_intrin
        from tvm.s_tir import meta_schedule as ms

        light_tensor_intrin()
        info = resolve_target(target)
        tvm_target = info.tvm()
        if work_dir is not None:
            os.makedirs(work_dir, exist_ok=True)
            msdb = ms.database.JSONDatabase(work_dir=work_dir)
        else:
            msdb = ms.database.MemoryDatabase()
        hashes = list(records) if records is not None else [
            r["task_hash"] for r in self._conn.execute("SELECT task_hash FROM workloads")]
        for h in hashes:
            task = self.task(h)
            if records is not None:
                recs = [records[h]]
            elif best_only:
                best = self.best(h, info.key)
                recs = [best] if best else []
            else:
                recs = [r for r in self.records(h, info.key) if r.error is None and r.median_s]
            if not recs:
                continue
            for rec in recs:  # a trace that no longer replays is skipped, not fatal
                self.commit_record(msdb, rec, task, tvm_target)
        return msdb

    def export_json(self, work_dir: str, target) -> int:
        """Write this target's correct records as a MetaSchedule JSONDatabase; returns the count."""
        msdb = self.to_metaschedule(target, work_dir=work_dir, best_only=False)
        return len(msdb)

    def import_json(self, work_dir: str, proposer: str = "import") -> int:
        """Read a MetaSchedule JSONDatabase's records (each keeps its own target)."""
        from tlm.graph.target import resolve_target
        from tlm.graph.tasks import task_from_mod
        from tlm.space.design import plain_json
        from tlm.space.intrin import light_tensor_intrin
        from tvm.s_tir import meta_schedule as ms

        light_tensor_intrin()
        paths = [os.path.join(work_dir, f) for f in ("database_workload.json", "database_tuning_record.json")]
        if not all(os.path.exists(p) for p in paths):
            raise TlmError(f"{work_dir} is not a MetaSchedule JSONDatabase (missing {os.path.basename(paths[0])})")
        msdb = ms.database.JSONDatabase(path_workload=paths[0], path_tuning_record=paths[1])
        n = 0
        keys: dict[str, str] = {}
        for rec in msdb.get_all_tuning_records():
            task = task_from_mod(rec.workload.mod)
            tjson = json.dumps(dict(rec.target.export()), sort_keys=True, default=str)
            if tjson not in keys:
                keys[tjson] = resolve_target({k: v for k, v in dict(rec.target.export()).items()
                                              if k not in ("keys", "tag")}).key
            secs = [float(x) for x in rec.run_secs] if rec.run_secs is not None else []
            self.add_record(task, keys[tjson], plain_json(rec.trace.as_json()), secs,
                            error=None if secs else "imported without latencies", proposer=proposer)
            n += 1
        return n
