"""The final pick (tlm.compiler.cold_pick): a task's best records re-timed cold on the model's
threads by the real measurer, the rule that applies the fastest, and the times kept for the next
compile. The candidate list is checked on a stand-in record database (records only, no timing)."""

from dataclasses import dataclass

import pytest


@dataclass
class _Rec:
    id: int
    median_s: float | None
    sentence: str | None
    error: str | None = None
    trace_json: object = None
    proposer: str = "tlm"


class _Records:
    """Stand-in for tlm.measure.database.Database.records (this test times nothing)."""

    def __init__(self, recs):
        self.recs = recs

    def records(self, task_hash, key):
        return list(self.recs)


@dataclass
class _Task:
    hash: str = "t"


def test_candidates_are_the_applied_record_and_the_fastest_distinct_programs():
    from tlm.compiler.cold_pick import candidates

    recs = [_Rec(1, 3e-5, "a"), _Rec(2, 1e-5, "b"), _Rec(3, 1.1e-5, "b"), _Rec(4, 2e-5, "c"),
            _Rec(5, None, "d", error="RuntimeError"), _Rec(6, 2.5e-5, "e")]
    applied = recs[0]
    got = candidates(_Records(recs), _Task(), "k", applied, 3)
    assert [r.id for r in got] == [1, 2, 4]  # applied first; "b" once; failures never
    assert [r.id for r in candidates(_Records(recs), _Task(), "k", recs[1], 2)] == [2, 4]
    assert [r.id for r in candidates(_Records(recs), _Task(), "k", applied, 10)] == [1, 2, 4, 6]


def _schedule(task, parallel):
    from tvm.s_tir import Schedule

    sch = Schedule(task.mod)
    i, _j, _k = sch.get_loops(sch.get_sblock("C"))
    if parallel:
        outer, _ = sch.split(i, [parallel, None])
        sch.parallel(outer)
    return sch


def _final_build(db, task, host, cfg):
    """The final pick's MetaSchedule view and rows, as tlm.compiler.build.compile_imported makes them."""
    from tlm.compiler.apply import compile_database, task_picks
    from tlm.compiler.cold_pick import cold_pick

    picks = task_picks(db, [task], host)
    final = cold_pick(db, [task], host, picks, host.cores, cfg)
    return compile_database(db, [task], host, {**picks, **{h: p.record for h, p in final.items()}}, final)


@pytest.mark.tvm
def test_final_pick_times_cold_applies_the_fastest_and_keeps_the_times(tmp_path, host):
    from workloads_tir import matmul

    from tlm.compiler.apply import compile_database
    from tlm.compiler.cold_pick import ColdPickConfig
    from tlm.measure.database import open_db
    from tlm.space.design import plain_json

    task = matmul(128)
    cfg = ColdPickConfig(top=3, min_share=0.0, repeat=3, rounds=1)
    with open_db(str(tmp_path / "db")) as db:
        # one-thread medians as stored: the first is what the records alone would apply
        ids = [db.add_record(task, host.key, plain_json(_schedule(task, p).trace.as_json()), [s])
               for p, s in ((None, 1.0e-3), (8, 1.1e-3), (4, 1.2e-3))]
        before = db.compile_record(task.hash, host.key, host.cores if host.kind == "llvm" else 1).id
        _, rows = _final_build(db, task, host, cfg)
        row = rows[0]
        assert row["cold_measured"] == 3 and row["status"] == "tuned"
        cold = {r["record_id"]: r["median_s"] for r in db.query("SELECT * FROM cold_times")}
        assert set(cold) == set(ids) and all(v and v > 0 for v in cold.values())  # all checked and timed
        fastest = min(cold, key=cold.get)
        applied = fastest if cold[fastest] < cold[before] * (1 - cfg.margin) else before
        assert row["cold_picked"] == (applied != before)
        assert row["cold_us"] == pytest.approx(cold[applied] * 1e6)
        # the next compile of the same records measures nothing and applies the same record
        _, again = _final_build(db, task, host, cfg)
        assert again[0]["cold_measured"] == 0 and again[0]["cold_us"] == pytest.approx(row["cold_us"])
        # without the final pick: the records' own choice, no cold columns
        _, plain = compile_database(db, [task], host)
        assert "cold_us" not in plain[0]


@pytest.mark.tvm
def test_small_tasks_and_single_programs_keep_their_record(tmp_path, host):
    from workloads_tir import matmul

    from tlm.compiler.cold_pick import ColdPickConfig, cold_pick
    from tlm.measure.database import open_db
    from tlm.space.design import plain_json

    big, small = matmul(128), matmul(32)
    with open_db(str(tmp_path / "db")) as db:
        db.add_record(big, host.key, plain_json(_schedule(big, None).trace.as_json()), [1e-3])
        for p, s in ((None, 1e-6), (8, 2e-6)):
            db.add_record(small, host.key, plain_json(_schedule(small, p).trace.as_json()), [s])
        picks = {t.hash: db.compile_record(t.hash, host.key) for t in (big, small)}
        # big: one program only; small: 0.1% of the model's time
        assert cold_pick(db, [big, small], host, picks, 2, ColdPickConfig(top=4)) == {}
        assert cold_pick(db, [big, small], host, picks, 2, ColdPickConfig(top=1, min_share=0)) == {}


@pytest.mark.tvm
def test_the_whole_model_decides_and_a_wrong_build_never_wins():
    import numpy as np
    import tvm
    from tvm import relax
    from tvm.script import relax as R

    from tlm.compiler.cold_pick import faster_whole

    @tvm.script.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor((64, 64), "float32")):
            return R.matmul(x, x)

    vms = [relax.VirtualMachine(tvm.compile(Mod, target="llvm"), tvm.cpu()) for _ in range(2)]
    args = [tvm.runtime.tensor(np.ones((64, 64), "float32"))]
    verdict = faster_whole(vms, args, [True, True], rounds=3, min_repeat_ms=1)
    assert len(verdict["whole_ms"]) == 2 and all(m > 0 for m in verdict["whole_ms"])
    assert verdict["rounds"] == 3 and 0 <= verdict["wins"] <= 3
    # kept only when faster by the median and in every round (6 of 7 by default; 3 of 3 here)
    assert verdict["applied"] == (verdict["whole_ms"][1] < verdict["whole_ms"][0] and verdict["wins"] == 3)
    assert not faster_whole(vms, args, [True, False], rounds=1, min_repeat_ms=1)["applied"]
    assert faster_whole(vms, args, [False, True], rounds=1, min_repeat_ms=1)["applied"]
