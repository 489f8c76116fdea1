"""A program's speedup on a model's threads (tlm.space.threads) and the compile pick that uses it
(Database.fastest_on): exact on hand-made schedules of a tiny matmul; the loop rule property-tested."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tlm.space.threads import loop_speedup


@given(st.integers(1, 10_000), st.integers(1, 64))
def test_loop_speedup_bounds(extent, threads):
    s = loop_speedup(extent, threads)
    assert 1.0 <= s <= min(extent, threads) + 1e-9
    assert s == pytest.approx(extent / math.ceil(extent / threads))
    if extent % threads == 0:
        assert s == pytest.approx(threads)


def test_loop_speedup_cases():
    assert loop_speedup(7, 2) == pytest.approx(1.75)  # 4 chunks on one thread, 3 on the other
    assert loop_speedup(1, 8) == 1.0
    assert loop_speedup(100, 1) == 1.0


def _schedule(task, parallel: int | None):
    """The matmul with its outer loop split by `parallel` and that part run in parallel, or serial (None)."""
    from tvm.s_tir import Schedule

    sch = Schedule(task.mod)
    block = sch.get_sblock("C")
    i, _j, _k = sch.get_loops(block)
    if parallel:
        outer, _ = sch.split(i, [parallel, None])
        sch.parallel(outer)
    return sch


@pytest.mark.tvm
def test_speedup_of_schedules():
    from workloads_tir import matmul

    from tlm.space.threads import speedup

    task = matmul(32)
    assert speedup(_schedule(task, None).mod, 2) == 1.0
    assert speedup(_schedule(task, 8).mod, 2) == pytest.approx(2.0)
    assert speedup(_schedule(task, 8).mod, 1) == 1.0
    assert speedup(_schedule(task, 2).mod, 4) == pytest.approx(2.0)
    # a parallel loop of 4 on 3 threads: two rounds of chunks, 4 / 2
    assert speedup(_schedule(task, 4).mod, 3) == pytest.approx(2.0)


@pytest.mark.tvm
def test_coarse_speedup_demotes_only_poorly_parallel_programs():
    from workloads_tir import matmul

    from tlm.space.threads import coarse_speedup

    task = matmul(32)
    assert coarse_speedup(_schedule(task, None).mod, 2) == 1.0
    assert coarse_speedup(_schedule(task, 8).mod, 2) == 2.0
    assert coarse_speedup(_schedule(task, 8).mod, 3) == 3.0  # 8 / 3 >= 3/4 of 3: full
    assert coarse_speedup(_schedule(task, 4).mod, 3) == pytest.approx(2.0)  # 4 / 2 < 3/4 of 3
    assert coarse_speedup(_schedule(task, 2).mod, 8) == pytest.approx(2.0)  # far from 8


@pytest.mark.tvm
def test_fastest_on_prefers_a_parallel_record(tmp_path, host):
    from workloads_tir import matmul

    from tlm.measure.database import open_db
    from tlm.space.design import plain_json

    task = matmul(128)  # 2M points: above PARALLEL_WORK
    with open_db(str(tmp_path / "db")) as db:
        serial = db.add_record(task, host.key, plain_json(_schedule(task, None).trace.as_json()), [1.0e-4])
        par = db.add_record(task, host.key, plain_json(_schedule(task, 8).trace.as_json()), [1.2e-4])  # 60 + 8 us
        db.add_record(task, host.key, plain_json(_schedule(task, 8).trace.as_json()), [3.0e-4])  # can't overtake
        assert db.best(task.hash, host.key).id == serial
        assert db.fastest_on(task.hash, host.key, 1).id == serial
        assert db.fastest_on(task.hash, host.key, 2).id == par
        assert db.compile_record(task.hash, host.key, 2).id == par
        assert db.compile_record(task.hash, host.key).id == serial  # one thread: the measured best
        # a record added later is seen
        new = db.add_record(task, host.key, plain_json(_schedule(task, 16).trace.as_json()), [0.9e-4])
        assert db.fastest_on(task.hash, host.key, 2).id == new


@pytest.mark.tvm
def test_a_small_task_keeps_its_one_thread_best(tmp_path, host):
    """Under PARALLEL_WORK points a pool trip is about the task's whole time: no re-pick, no
    ranking gains (32^3 points)."""
    from workloads_tir import matmul

    from tlm.measure.database import open_db
    from tlm.space.design import plain_json
    from tlm.space.threads import ranking_gains

    task = matmul(32)
    with open_db(str(tmp_path / "db")) as db:
        serial = db.add_record(task, host.key, plain_json(_schedule(task, None).trace.as_json()), [1.0e-5])
        db.add_record(task, host.key, plain_json(_schedule(task, 8).trace.as_json()), [1.2e-5])
        assert db.fastest_on(task.hash, host.key, 2).id == serial
    schs = [_schedule(task, None), _schedule(task, 8)]
    assert ranking_gains(task.mod, schs, 2) is None
    big = matmul(128)
    assert ranking_gains(big.mod, [_schedule(big, None), _schedule(big, 8)], 2) == [1.0, 2.0]
    assert ranking_gains(big.mod, [_schedule(big, 8)], 1) is None


@pytest.mark.tvm
def test_the_pool_trip_keeps_a_near_serial_record(tmp_path, host):
    """A parallel record pays one pool trip (POOL_TRIP_S) in the estimate: 40 us serial against 70
    us parallel on one thread is 40 against 35 + 8 on two threads."""
    from workloads_tir import matmul

    from tlm.space.design import plain_json
    from tlm.space.threads import POOL_TRIP_S, fastest

    task = matmul(128)
    cands = [(40e-6, plain_json(_schedule(task, None).trace.as_json())),
             (70e-6, plain_json(_schedule(task, 8).trace.as_json()))]
    assert POOL_TRIP_S == pytest.approx(8e-6)
    assert fastest(task.mod, cands, 2) == 0
    assert fastest(task.mod, [(40e-6, cands[0][1]), (60e-6, cands[1][1])], 2) == 1  # 30 + 8 < 40
    # a best under REPICK_S (5 pool trips) is applied as it is, whatever the estimate
    assert fastest(task.mod, [(30e-6, cands[0][1]), (40e-6, cands[1][1])], 2) == 0
