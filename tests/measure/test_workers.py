"""The measurer's worker processes (tlm.measure.workers) die with the process that owns their pool,
even when it is killed with SIGKILL while a worker is busy (issue 48, item 8)."""

import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.tvm

PARENT = """
import os, sys, time
from tvm.support.popen_pool import PopenPoolExecutor
from tlm.measure.workers import warm_worker

pool = PopenPoolExecutor(max_workers=1, timeout=None, initializer=warm_worker)
print(pool.submit(os.getpid).result(), flush=True)
pool.submit(time.sleep, 600)  # busy: TVM's popen_worker only sees its pipe close between jobs
time.sleep(600)
"""


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, ended but not yet reaped by its new parent, does not)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.time() + seconds
    while alive(pid) and time.time() < deadline:
        time.sleep(0.1)
    return not alive(pid)


def test_a_busy_worker_dies_with_its_killed_parent():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    worker = None
    try:
        worker = int(parent.stdout.readline())
        time.sleep(0.5)  # the sleep job has reached the worker
        assert alive(worker)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert wait_gone(worker, 10), "the pool's worker outlived its killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if worker is not None and alive(worker):
            os.kill(worker, signal.SIGKILL)


def test_timed_runs_use_the_measurement_threads_not_the_parents():
    """tlm gives its own process the host's cores (TVM_NUM_THREADS); a measurement worker runs
    with MeasureConfig.threads (1 on a 2-core host by default), whatever the parent says."""
    import functools

    from tvm.runtime import num_threads
    from tvm.support.popen_pool import PopenPoolExecutor

    from tlm.measure.workers import warm_worker

    assert os.environ.get("TVM_NUM_THREADS")  # set by `import tlm` (or by the user)
    for threads in {1, len(os.sched_getaffinity(0))}:  # TVM runs at most as many as there are CPUs
        pool = PopenPoolExecutor(max_workers=1, timeout=60, initializer=functools.partial(warm_worker, threads=threads))
        try:
            assert pool.submit(num_threads).result() == threads
        finally:
            pool.shutdown()


def test_workers_start_without_pytorch_and_can_still_import_it():
    """tlm.measure.popen: TVM's workers start without importing PyTorch (a third of the start),
    run tlm's functions, and import torch when one asks."""
    from tvm.support.popen_pool import PopenPoolExecutor

    from tlm.measure.popen import lean_popen_workers

    def torch_state() -> tuple[bool, bool]:  # a local function: pickled by value, run in the worker
        import sys

        started_with = "torch" in sys.modules
        import torch

        return started_with, torch.zeros(2).sum().item() == 0.0

    lean_popen_workers()
    lean_popen_workers()  # twice: no shim around the shim
    pool = PopenPoolExecutor(max_workers=1, timeout=60)
    try:
        assert pool.submit(torch_state).result() == (False, True)
        assert pool.submit(os.getpid).result() != os.getpid()
    finally:
        pool.shutdown()
