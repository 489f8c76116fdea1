"""Measurer: a tiny matmul measures, a wrong program is an error, failures are data, RPC works."""

import os
import socket
import subprocess
import sys
import time

import pytest

from tlm.measure.config import MeasureConfig
from tlm.measure.measurer import Candidate, Measurer
from tlm.measure.workers import compare

pytestmark = pytest.mark.tvm

FAST = dict(repeat=3, min_repeat_ms=5, remeasure_top=1)


def _random_schedules(task, target, n, seed=12345):
    from tvm.s_tir import meta_schedule as ms

    from tlm.search.baselines import random_programs
    from tlm.space.intrin import light_tensor_intrin

    light_tensor_intrin()
    ctx = ms.TuneContext(mod=task.mod, target=target.tvm(), space_generator="post-order-apply")
    seeds = [seed * 7919 + i * 104729 for i in range(4 * n)]
    return random_programs(task, ctx, ctx.generate_design_space(), seeds, set())[:n]


def _wrong_matmul(n=32):
    """Same signature as the matmul task, different result (scaled by 1.001)."""
    import tvm
    from tvm import te

    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j] * 1.001, axis=k), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


@pytest.fixture(scope="module")
def measurer(host):
    m = Measurer(host, MeasureConfig(**FAST))
    yield m
    m.close()


def test_compare():
    import numpy as np

    a = np.ones((4, 4), "float32")
    assert compare(a, a, 1e-4, 1e-5) is None
    assert "diff" in compare(a * 1.01, a, 1e-4, 1e-5)
    assert compare(np.zeros(3, "int64"), np.ones(3, "int64"), 0, 0) == "3 elements differ"
    # NaN only where the reference has one; the tolerance scales with the largest magnitude.
    nan = np.array([1.0, np.nan, 1e4], "float32")
    assert compare(nan, nan, 1e-4, 1e-5) is None
    assert "NaN" in compare(np.array([1.0, 2.0, 1e4], "float32"), nan, 1e-4, 1e-5)
    assert compare(nan + np.float32(0.5), nan, 1e-4, 1e-5) is None  # 0.5 <= 1e-4 x 1e4
    assert "diff" in compare(nan + np.float32(2.0), nan, 1e-4, 1e-5)
    assert compare(np.full(2, np.nan, "float32"), np.full(2, np.nan, "float32"), 0, 0) is None
    assert "diff" in compare(np.array([1, 2], "float16"), np.array([1, 3], "float16"), 1e-4, 1e-5)
    assert compare(np.array([1, 2 + 1e-13]), np.array([1.0, 2.0]), 1e-12, 0) is None  # float64 stays
    assert "diff" in compare(np.array([1, 2 + 1e-10]), np.array([1.0, 2.0]), 1e-12, 0)


def test_matmul_measures_and_wrong_program_is_error(measurer, host, matmul32):
    from tvm.s_tir import Schedule

    schs = _random_schedules(matmul32, host, 2)
    cands = [Candidate(matmul32, schedule=s, proposer="random") for s in schs]
    cands.append(Candidate(matmul32, schedule=Schedule(_wrong_matmul()), proposer="test"))
    # A trace given as JSON (as stored in the database) replays onto the task.
    cands.append(Candidate(matmul32, trace=schs[0].trace, proposer="replay"))
    cands.append(Candidate(matmul32, trace=[["NoSuchInstruction"]], proposer="bad"))
    res = measurer.measure(cands)
    assert [r.candidate.proposer for r in res] == ["random", "random", "test", "replay", "bad"]
    for r in (res[0], res[1], res[3]):
        assert r.ok, r.error
        assert 0 < r.median_s < 1 and len(r.latencies_s) >= 3
        assert r.trace_json and isinstance(r.trace_json, list)
    assert res[2].error.startswith("WrongResult") and not res[2].ok
    assert res[2].median_s == float("inf")
    assert res[4].error.startswith("ScheduleError")


def test_start_then_finish_overlaps_the_caller(measurer, host, matmul32):
    """`start` returns while the batch builds (the collector generates the next task meanwhile);
    `finish` times it. A batch started and never finished is dropped by the next `start`."""
    schs = _random_schedules(matmul32, host, 3, seed=777)
    abandoned = measurer.start([Candidate(matmul32, schedule=schs[0], proposer="random")])
    pending = measurer.start([Candidate(matmul32, schedule=s, proposer="random") for s in schs[1:]]
                             + [Candidate(matmul32, trace=[["NoSuchInstruction"]], proposer="bad")])
    assert abandoned.collect is not None and measurer._in_flight is pending.collect
    res = measurer.finish(pending)
    assert [r.ok for r in res] == [True, True, False] and res[2].error.startswith("ScheduleError")
    assert all(r.build_s > 0 and r.run_s > 0 for r in res[:2]) and measurer._in_flight is None
    # nothing to build: finish returns the schedule errors at once
    assert measurer.finish(measurer.start([Candidate(matmul32, trace=[["Nope"]])]))[0].error.startswith("Schedule")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # ~45 s (a tracker and a server start, then a measurer through them): make test-all
def test_rpc_localhost(host, matmul32):
    """A TVM tracker and one server on localhost; the measurer sends its work through them.

    Each runs its loop in a `tvm.exec.popen_worker` child that outlives a killed parent, so each
    starts in its own process group and the whole group is killed (issue 48: a finished
    `make test` had left these two workers behind)."""
    import signal

    from tvm import rpc

    port = _free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1",
                               "--port", str(port), "--port-end", str(port + 50), "--silent"],
                              start_new_session=True)]
    try:
        time.sleep(3)
        server_port = _free_port()
        procs.append(subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1",
                                       "--port", str(server_port), "--port-end", str(server_port + 50),
                                       "--tracker", f"127.0.0.1:{port}", "--key", "tlm-test", "--silent"],
                                      start_new_session=True))
        deadline, ready = time.time() + 120, False
        while time.time() < deadline and not ready:
            time.sleep(1)
            try:
                summary = rpc.connect_tracker("127.0.0.1", port).summary()
                ready = any("tlm-test" in str(q.get("key")) for q in summary.get("server_info", []))
            except Exception:  # the tracker is still starting
                pass
        assert ready, "the RPC server did not register with the tracker"
        cfg = MeasureConfig(**FAST, tracker_host="127.0.0.1", tracker_port=port, tracker_key="tlm-test")
        with Measurer(host, cfg) as m:
            assert m.rpc
            from tvm.s_tir import Schedule

            schs = _random_schedules(matmul32, host, 1, seed=777)
            res = m.measure([Candidate(matmul32, schedule=schs[0], proposer="random"),
                             Candidate(matmul32, schedule=Schedule(_wrong_matmul()), proposer="test")])
        assert res[0].ok, res[0].error
        assert res[1].error.startswith("WrongResult")
    finally:
        for p in reversed(procs):
            try:
                os.killpg(p.pid, signal.SIGKILL)  # the server and its popen_worker
            except ProcessLookupError:
                pass
            p.wait()
    deadline = time.time() + 10
    while (left := _group_members([p.pid for p in procs])) and time.time() < deadline:
        time.sleep(0.2)
    assert not left, f"processes of the tracker or server left running: {left}"


def _group_members(pgids: list[int]) -> list[str]:
    """Live (not zombie) processes whose process group is one of `pgids` (Linux /proc)."""
    out = []
    for d in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[2]) in pgids:
            out.append(f"{d} {cmd}")
    return out


def test_packed_weights_are_measured_and_checked(host):
    """Programs whose weight MetaSchedule's RewriteLayout packed: measured with packed-layout
    arguments, and checked through their packing (a corrupted reference makes them wrong)."""
    import numpy as np
    import torch

    from tlm.graph.extract import extract_tasks
    from tlm.space.design import random_program

    torch.manual_seed(0)
    tasks = extract_tasks(torch.nn.Linear(64, 48).eval(), (torch.randn(1, 16, 64),), target=host)
    (task,) = [t for t in tasks if "matmul" in t.name]
    assert task.mod["main"].attrs.get("layout_free_buffers")
    progs = [p for p in (random_program(task, host, seed) for seed in range(6)) if p.ok]
    packed = [p for p in progs if "TransformLayout" in {i[0] for i in p.sch.trace.as_json()[0]}]
    assert packed
    before = _popen_workers()
    with Measurer(host, MeasureConfig(**FAST)) as m:
        res = m.measure([Candidate(task, schedule=p.sch, proposer="random") for p in packed])
        assert all(r.ok for r in res), [r.error for r in res]
        path = m.reference(task)
        ref = dict(np.load(path))
        out = max(k for k in ref if k.startswith("out"))
        ref[out] = ref[out] + 1.0
        np.savez(path, **ref)
        bad = m.measure([Candidate(task, schedule=packed[0].sch, proposer="random")])
        assert bad[0].error.startswith("WrongResult"), bad[0].error
        assert _popen_workers() - before  # its builder, reference and runner workers
    assert not _popen_workers() - before, "the closed measurer left worker processes running"


def _popen_workers() -> set[int]:
    """This process's live `tvm.exec.popen_worker` children."""
    import psutil

    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if "tvm.exec.popen_worker" in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                out.add(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


def test_packing_that_keeps_the_weight_shape_is_checked_through_it(host):
    """A square weight packed by a plain transpose: the timed function's weight argument has the
    model's shape but not its layout, so the check must still run the program with its packing
    (it once compared the timed function on unpacked weights: a false WrongResult)."""
    import torch
    from tvm.s_tir import Schedule

    from tlm.graph.extract import extract_tasks

    torch.manual_seed(0)
    tasks = extract_tasks(torch.nn.Linear(32, 32).eval(), (torch.randn(1, 16, 32),), target=host)
    (task,) = [t for t in tasks if "matmul" in t.name]
    sch = Schedule(task.mod)
    block = sch.get_sblock("matmul")
    weight = next(i for i, r in enumerate(sch.get(block).reads) if str(r).startswith("param_0["))
    packing = sch.cache_read(block, weight, "global")
    sch.annotate(packing, "meta_schedule.layout_rewrite_preproc", True)
    sch.transform_layout(block, ("read", weight), lambda k, j: (j, k))  # [32, 32] -> [32, 32]^T
    with Measurer(host, MeasureConfig(**FAST)) as m:
        (res,) = m.measure([Candidate(task, schedule=sch, proposer="test")])
    assert res.ok, res.error


def test_timing_budget_cuts_repeats_of_slow_programs(host, matmul32):
    """A program slower than the timing budget gets one reading (its checked run, which told how
    slow it is); without a budget every program gets `repeat`."""
    schs = _random_schedules(matmul32, host, 1)
    for budget, want in ((1e-6, 1), (0.0, 4)):
        cfg = MeasureConfig(repeat=4, min_repeat_ms=1, remeasure_top=0, timing_budget_ms=budget)
        with Measurer(host, cfg) as m:
            (res,) = m.measure([Candidate(matmul32, schedule=schs[0], proposer="random")])
        assert res.ok, res.error
        assert len(res.latencies_s) == want


def test_rounds_time_every_program_in_turn(host, matmul32):
    """With `rounds`, every program of the batch is timed that many times (`repeat` readings
    each), the best few get no extra re-timing, and a wrong program stays an error."""
    from tvm.s_tir import Schedule

    cands = [Candidate(matmul32, schedule=s, proposer="random") for s in _random_schedules(matmul32, host, 2)]
    cands.append(Candidate(matmul32, schedule=Schedule(_wrong_matmul()), proposer="test"))
    with Measurer(host, MeasureConfig(repeat=2, min_repeat_ms=1, remeasure_top=2, rounds=3)) as m:
        got = m.measure(cands)
    assert [len(r.latencies_s) for r in got[:2]] == [6, 6] and got[0].ok and got[1].ok
    assert got[2].error.startswith("WrongResult")


def test_slow_factor_skips_timing_far_from_the_best(host, matmul32):
    """With a slow factor and a task best it is far slower than, a program's checked run is its
    one reading; near the best (or without a known best) it is timed `repeat` times; a wrong
    program is still an error."""
    import numpy as np

    schs = _random_schedules(matmul32, host, 1)
    cfg = MeasureConfig(repeat=4, min_repeat_ms=1, remeasure_top=0, slow_factor=3.0)
    with Measurer(host, cfg) as m:
        cand = Candidate(matmul32, schedule=schs[0], proposer="random")
        (far,) = m.measure([cand], best_s={matmul32.hash: 1e-12})
        (near,) = m.measure([cand], best_s={matmul32.hash: 10.0})
        (unknown,) = m.measure([cand])
        assert far.ok and near.ok and unknown.ok, (far.error, near.error, unknown.error)
        assert len(far.latencies_s) == 1 and len(near.latencies_s) == 4 and len(unknown.latencies_s) == 4
        path = m.reference(matmul32)
        ref = dict(np.load(path))
        ref["out2"] = ref["out2"] + 1.0
        np.savez(path, **ref)
        (bad,) = m.measure([cand], best_s={matmul32.hash: 1e-12})
        assert bad.error.startswith("WrongResult"), bad.error
    # A program still running past its limit (here: no grace at all) is stopped, as a "Slow:" error.
    # It must run for a while (the naive 384^3 matmul: ~0.1 s), or it may finish before it is cut.
    import tlm.measure.workers as workers
    from tvm.s_tir import Schedule

    from tlm.graph.tasks import matmul_task

    big = matmul_task(384)
    naive = Candidate(big, schedule=Schedule(big.mod), proposer="test")
    grace, workers.LIMIT_GRACE_S = workers.LIMIT_GRACE_S, 0.0
    try:
        with Measurer(host, cfg) as m:
            (cut,) = m.measure([naive], best_s={big.hash: 1e-12})
            (after,) = m.measure([cand])  # the stopped worker is replaced
    finally:
        workers.LIMIT_GRACE_S = grace
    assert cut.error and cut.error.startswith("Slow: stopped"), cut.error
    assert after.ok and len(after.latencies_s) == 4, after.error
    # In a batch, the best few are re-timed in full whatever their first reading was.
    with Measurer(host, MeasureConfig(repeat=4, min_repeat_ms=1, remeasure_top=1, slow_factor=3.0)) as m:
        res = m.measure([cand, cand], best_s={matmul32.hash: 1e-12})
        assert sorted(len(r.latencies_s) for r in res) == [1, 5], [r.latencies_s for r in res]


def test_limits_from_the_best_and_from_flops(host, matmul32, monkeypatch):
    """The limit a program runs under: slow_factor x its task's best, capped by the time at
    min_gflops (at least 1 s); none without either."""
    from dataclasses import replace

    import tlm.measure.measurer as measurer

    seen = []
    real = measurer.write_limit
    monkeypatch.setattr(measurer, "write_limit", lambda path, ms: (seen.append(round(ms, 6)), real(path, ms)))
    sch = _random_schedules(matmul32, host, 1)[0]
    big = replace(matmul32, flops=5e9)
    cfg = MeasureConfig(repeat=2, min_repeat_ms=1, remeasure_top=0, slow_factor=3.0, min_gflops=1.0)
    with Measurer(host, cfg) as m:
        m.measure([Candidate(matmul32, schedule=sch)])  # no best: the 1 s floor
        m.measure([Candidate(big, schedule=sch)])  # 5 GFLOP at 1 GFLOPS
        m.measure([Candidate(big, schedule=sch)], best_s={big.hash: 1e-3})  # 3x the best is less
    assert seen == [1000.0, 5000.0, 3.0]
