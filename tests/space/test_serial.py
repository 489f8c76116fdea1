"""Space builder: a task of little work has no parallel loop (tlm.space.serial)."""

from __future__ import annotations

import random
import re

import pytest


def _without_parallel(trace) -> list[str]:
    """A trace's instructions as Python lines without their sampled decisions, the root block's
    parallel annotation left out."""
    return [re.sub(r", decision=.*\)$", ")", line) for line in str(trace).splitlines()
            if "meta_schedule.parallel" not in line]


@pytest.mark.tvm
def test_work_counts_iteration_points(host):
    import workloads_tir as W

    from tlm.graph.target import resolve_target
    from tlm.graph.tasks import matmul_task
    from tlm.space.serial import SERIAL_WORK, is_serial, task_work

    assert task_work(matmul_task(8, 16, 4).mod) == 8 * 16 * 4
    assert task_work(W.softmax().mod) > 0
    assert is_serial(matmul_task(16), host) and 16**3 < SERIAL_WORK
    assert not is_serial(matmul_task(64), host) and 64**3 >= SERIAL_WORK
    assert not is_serial(matmul_task(16), resolve_target("h100"))  # GPU spaces are TVM's own


@pytest.mark.tvm
def test_a_large_output_keeps_its_parallel_loops_on_several_cores(host):
    """A layer norm of bert_tiny's shape ([128, 128], 64 KB) does little work, but a serial one
    would move half its data between the cores; on one core it is serial."""
    import dataclasses

    import workloads_tir as W

    from tlm.space.serial import SERIAL_OUT_BYTES, SERIAL_WORK, is_serial, output_bytes, task_work

    two, one = (dataclasses.replace(host, cores=n) for n in (2, 1))
    small, large = W.layer_norm(8, 32), W.layer_norm(128, 128)
    assert task_work(large.mod) < SERIAL_WORK
    assert output_bytes(small) == 8 * 32 * 4 < SERIAL_OUT_BYTES <= output_bytes(large) == 128 * 128 * 4
    assert is_serial(small, two) and is_serial(small, one)
    assert not is_serial(large, two) and is_serial(large, one)


@pytest.mark.tvm
def test_small_task_spaces_are_the_default_ones_on_one_thread(host):
    """Same spaces, same decisions, only the parallel annotation gone; programs build serial and
    compute the right answer; MetaSchedule's own spaces (the baseline) are the same."""
    import numpy as np
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from tlm.graph.tasks import matmul_task
    from tlm.search.baselines import tune_context
    from tlm.space.design import random_program, space_generator, task_space
    from tlm.space.inline import space_mod

    task = matmul_task(16)
    space = task_space(task, host)
    default = ms.TuneContext(mod=space_mod(task, host), target=host.tvm(), space_generator=space_generator(host),
                             task_name=task.name, num_threads=1).generate_design_space()
    assert len(default) == len(space.traces)
    for ours, theirs in zip(space.traces, default):
        assert "meta_schedule.parallel" in str(theirs.trace) and "meta_schedule.parallel" not in str(ours)
        assert _without_parallel(ours) == _without_parallel(theirs.trace)
    for trace in (s.trace for s in tune_context(task, host).generate_design_space()):
        assert "meta_schedule.parallel" not in str(trace)
    a, b = (np.random.default_rng(i).standard_normal((16, 16)).astype("float32") for i in range(2))
    for seed in range(3):
        prog = random_program(task, host, random.Random(seed))
        assert prog.ok, prog.error
        assert "T.parallel" not in prog.sch.mod.script()
        lib = tvm.compile(prog.sch.mod, target=host.tvm())
        out = tvm.runtime.tensor(np.zeros((16, 16), "float32"))
        lib["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), out)
        np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-4)
    big = random_program(matmul_task(64), host, random.Random(0))
    assert big.ok and "T.parallel" in big.sch.mod.script()  # larger tasks keep their threads
