"""TVM's worker processes (builders, runners, references) started without PyTorch.

Every worker of TVM's `PopenPoolExecutor` is a new `python -m tvm.exec.popen_worker`, and
`import tvm` imports PyTorch first when it is installed (tvm_ffi does, for DLPack interop with
torch tensors): 4.1-4.6 s a start on a Zen 4 core against 1.45 s without it (2026-12-02,
`python -c "import tvm; import tvm.s_tir.meta_schedule"`). A measurer starts several (a builder
pool, a runner, a reference worker, and again after a timeout kills one), and nothing they run
touches a torch tensor. `lean_popen_workers()` makes TVM start them with PyTorch hidden while
`tvm` is imported (`import torch` still works afterwards in the worker; only tvm_ffi's torch
interop is off there).
"""

from __future__ import annotations

import subprocess

TVM_WORKER = ["-m", "tvm.exec.popen_worker"]
LEAN_WORKER = ("import sys; sys.modules['torch'] = None; import tvm; del sys.modules['torch']; "
               "from tvm.exec.popen_worker import main; main()")


class _LeanSubprocess:
    """`subprocess` as TVM's popen_pool sees it: its worker command runs LEAN_WORKER (the same
    `main`, the same pipe arguments), anything else as asked."""

    def __getattr__(self, name: str):
        return getattr(subprocess, name)

    @staticmethod
    def Popen(cmd, *args, **kwargs):  # noqa: N802 - subprocess's name
        if isinstance(cmd, list) and cmd[1:3] == TVM_WORKER:
            cmd = [cmd[0], "-c", LEAN_WORKER, *cmd[3:]]
        return subprocess.Popen(cmd, *args, **kwargs)


def lean_popen_workers() -> None:
    """From now on, TVM's popen workers in this process start without importing PyTorch."""
    from tvm.support import popen_pool

    if not isinstance(popen_pool.subprocess, _LeanSubprocess):
        popen_pool.subprocess = _LeanSubprocess()
