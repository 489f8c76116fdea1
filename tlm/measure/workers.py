"""Worker side of the measurer: MetaSchedule builder/runner subclasses and the functions their
worker processes run (pickled by reference, so they live at module level here).

The run worker first runs the program once on fixed inputs and compares every buffer with the
untuned task's output on the same inputs (`tlm_ref.npz` beside the artifact); a mismatch raises
`WrongResult`, which the runner turns into the candidate's error, so it is never timed.

Pre-packed weights: a program whose weights MetaSchedule's RewriteLayout packed takes them in
the packed layout (the whole-model compile folds the packing into the constants). Its artifact
holds two functions: the timed one (packing removed, packed-layout arguments) and `CHECK_FUNC`,
the same program with its packing blocks, which takes the reference inputs as they are; the
check runs that one, so the packing and the compute are both checked.

A program whose checked run is slower than the limit in `LIMIT_NAME` beside its artifact (if
any; never a pre-packed one) is not timed again: that run's time is its one latency reading; one
still running LIMIT_GRACE_S past the limit is stopped (its error says "Slow: ...").
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

REF_NAME = "tlm_ref.npz"
LIMIT_NAME = "tlm_untimed_above_ms.txt"  # beside an artifact: MeasureConfig.slow_factor's limit
LIMIT_GRACE_S = 3.0  # beyond a limit, time to load the module and inputs before a run is stopped
CHECK_FUNC = "tlm_check"
WARM_RUN_BELOW_MS = 20.0  # a program left untimed after a shorter checked run gets warm reruns (1-3)


# ---------------------------------------------------------------- worker-side functions
def build_in_worker(mod, target, _params):
    """MetaSchedule's default build, minus the slow import of every tensor intrinsic."""
    from tlm.graph.target import build_context
    from tlm.space.intrin import light_tensor_intrin

    light_tensor_intrin()
    import tvm
    import tvm_ffi
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    timed = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    # Packed weights (the pass removed packing blocks): keep the packing for the check. Not a
    # shape test: a square weight packed by a plain transpose keeps its shape, not its layout.
    if not tvm_ffi.structural_equal(timed, mod):
        check = mod["main"].with_attr("global_symbol", CHECK_FUNC)
        timed = tvm.IRModule({"main": timed["main"], CHECK_FUNC: check})
    with build_context():  # without TVM's TIR CSE (tlm.graph.target.BUILD_CONFIG)
        return tvm_build(timed, target=target)


def export_shared_in_worker(rt_mod) -> str:
    """Export a built program as a shared library, linked in the (parallel) build worker rather
    than by `load_module` in the one serial run worker (MetaSchedule's default exports a tar,
    which every load links again). Local runs only: an RPC device links its own."""
    import tempfile

    path = os.path.join(tempfile.mkdtemp(prefix="tlm-build-"), "tlm_mod.so")
    rt_mod.export_library(path)
    return path


def reference_in_worker(mod, args_info: list, path: str) -> str:
    """Run the untuned program `mod` (naive but correct; its loops reordered by
    `tlm.measure.reference`, bitwise the same outputs) on `make_inputs(args_info)`, built for
    this host, and save its inputs and outputs to `path` (`in{i}`, `out{i}`)."""
    import numpy as np
    import tvm

    from tlm.graph.target import build_context, host_target
    from tlm.measure.reference import fast_reference

    inputs = make_inputs(args_info)
    with build_context():
        lib = tvm.compile(fast_reference(mod), target=host_target().tvm())
    dev = tvm.cpu()
    tensors = [tvm.runtime.tensor(x, dev) for x in inputs]
    lib["main"](*tensors)
    arrays = {f"in{i}": x for i, x in enumerate(inputs)}
    arrays.update({f"out{i}": t.numpy() for i, t in enumerate(tensors)})
    np.savez(path, **arrays)
    return path


def _function(rt_mod, name: str):
    """The module's function `name`, or None (an RPC module may not answer implements_function)."""
    try:
        return rt_mod.get_function(name)
    except Exception:
        return None


def make_inputs(args_info: list, seed: int = 0) -> list:
    """Fixed inputs for a task: floats uniform in [-1, 1], integers and booleans zero."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for info in args_info:
        _, dtype, shape = info
        shape = [int(s) for s in shape]
        if str(dtype).startswith(("float", "bfloat")):
            out.append(rng.uniform(-1.0, 1.0, size=shape).astype(str(dtype)))
        else:
            out.append(np.zeros(shape, dtype=str(dtype)))
    return out


def compare(got, want, rtol: float, atol: float) -> str | None:
    """None when `got` matches `want`, else a one-line reason."""
    import numpy as np

    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    if not np.issubdtype(want.dtype, np.floating):
        bad = int(np.count_nonzero(got != want))
        return f"{bad} elements differ" if bad else None
    # float32 arithmetic for float32 and narrower outputs: the difference of two float32 numbers
    # is within a few ulps of its float64 value, far below any tolerance, at a third of the cost.
    ftype = "float64" if want.dtype.itemsize > 4 else "float32"
    g = got.astype(ftype, copy=False)
    w = want.astype(ftype, copy=False)
    nan = np.isnan(w)
    if not np.array_equal(np.isnan(g), nan):
        return "NaN where the reference has none (or the reverse)"
    if nan.any():
        g, w = g[~nan], w[~nan]
    if not w.size:
        return None
    diff = float(np.max(np.abs(g - w)))
    scale = float(np.max(np.abs(w)))
    limit = atol + rtol * max(scale, 1.0)
    return f"max abs diff {diff:.3g} > {limit:.3g}" if not diff <= limit else None


@dataclass(frozen=True)
class CheckConfig:
    """What the run worker needs beyond MetaSchedule's EvaluatorConfig: the output check's
    tolerances, and the timing budget (> 0: a program whose checked run took t ms gets
    floor(budget / t) timed repeats, at most the evaluator's `repeat`, and none when t >= budget:
    its checked run is its one reading)."""

    rtol: float = 1e-4
    atol: float = 1e-5
    timing_budget_ms: float = 0.0


def _check_and_time(rt_mod, device, cfg, args_info, ref_path, check_cfg: CheckConfig) -> list[float]:
    import numpy as np
    import tvm

    def tensors(arrays):
        out = []
        for arr in arrays:
            t = tvm.runtime.empty(arr.shape, str(arr.dtype), device)
            t.copyfrom(arr)
            out.append(t)
        return out

    ref = np.load(ref_path) if ref_path and os.path.exists(ref_path) else None
    limit_ms = read_limit(ref_path)
    n = len(args_info)
    budget_ms = check_cfg.timing_budget_ms
    repeat = cfg.repeat
    if ref is not None:
        packed = _function(rt_mod, CHECK_FUNC)
        check = packed or rt_mod.get_function(rt_mod.entry_name)
        got = tensors([ref[f"in{i}"] for i in range(n)])
        t0 = time.perf_counter()
        check(*got)
        device.sync()
        first_ms = (time.perf_counter() - t0) * 1e3
        if budget_ms and first_ms > 0:
            repeat = max(1, min(cfg.repeat, int(budget_ms // first_ms)))
        for i, t in enumerate(got):
            reason = compare(t.numpy(), ref[f"out{i}"], check_cfg.rtol, check_cfg.atol)
            if reason:
                raise RuntimeError(f"WrongResult: buffer {i}: {reason}")
        def untimed() -> bool:
            return bool((limit_ms and first_ms > limit_ms) or (budget_ms and first_ms >= budget_ms))

        if packed is None and untimed():
            # A short program's first (cold) run can read several times its time (thread wake-up,
            # lazy symbol binding: 130-200 us for a 15-30 us program, and up to 90 us the second
            # time): the fastest of a few warm runs decides, and is its reading.
            for _ in range(0 if first_ms >= WARM_RUN_BELOW_MS else 3 if first_ms < 1.0 else 1):
                t0 = time.perf_counter()
                check(*got)
                device.sync()
                first_ms = min(first_ms, (time.perf_counter() - t0) * 1e3)
            if untimed():
                # far from the task's best, or one run already spends the timing budget (one
                # timed repeat would be a single reading too): the checked run is its reading
                return [first_ms / 1e3]
    # Timed on the reference inputs where the shapes agree; packed weights get inputs of their own
    # shape (values do not change the time of these programs).
    def timed_input(i: int):
        shape = tuple(int(d) for d in args_info[i][2])
        if ref is not None and ref[f"in{i}"].shape == shape:
            return ref[f"in{i}"]
        return make_inputs([args_info[i]], seed=i)[0]

    # Unpacked programs are timed on the checked run's tensors (same inputs; programs never
    # write their inputs): no second copy of every argument.
    args = got if ref is not None and packed is None else tensors([timed_input(i) for i in range(n)])
    evaluator = rt_mod.time_evaluator(
        func_name=rt_mod.entry_name,
        dev=device,
        number=cfg.number,
        repeat=repeat,
        min_repeat_ms=cfg.min_repeat_ms,
        f_preproc="cache_flush_cpu_non_first_arg" if cfg.enable_cpu_cache_flush else "",
    )
    device.sync()
    return [float(x) for x in evaluator(*args).results]


def ref_beside(artifact_path: str) -> str:
    return os.path.join(os.path.dirname(artifact_path), REF_NAME)


def write_limit(artifact_path: str, ms: float) -> None:
    with open(os.path.join(os.path.dirname(artifact_path), LIMIT_NAME), "w") as f:
        f.write(repr(float(ms)))


def read_limit(ref_path: str | None) -> float:
    """The untimed-above limit (ms) beside a reference, or 0 (none)."""
    path = os.path.join(os.path.dirname(ref_path), LIMIT_NAME) if ref_path else ""
    try:
        with open(path) as f:
            return float(f.read())
    except (OSError, ValueError):
        return 0.0


def local_run_worker(cfg, check_cfg, artifact_path, device_type, args_info) -> list[float]:
    import tvm

    rt_mod = tvm.runtime.load_module(artifact_path)
    device = tvm.runtime.device(device_type, 0)
    return _check_and_time(rt_mod, device, cfg, args_info, ref_beside(artifact_path), check_cfg)


def rpc_run_worker(rpc_config, cfg, check_cfg, artifact_path, device_type, args_info) -> list[float]:
    from tvm.s_tir.meta_schedule.runner import rpc_runner

    session = rpc_config.connect_server()
    remote_path = os.path.basename(artifact_path)
    try:
        device = session.device(device_type, 0)
        rt_mod = rpc_runner.default_upload_module(session, artifact_path, remote_path)
        return _check_and_time(rt_mod, device, cfg, args_info, ref_beside(artifact_path), check_cfg)
    finally:
        rpc_runner.default_cleanup(session, remote_path)


def warm_worker(threads: int | None = None) -> None:
    """Pool initializer: pay for the TVM import and intrinsics once per worker process, and end
    the worker when the process that owns its pool dies (TVM's popen_worker only notices that
    between jobs, when its pipe closes; one running a long job, or serving, would outlive it).
    `threads`: the TVM threads this worker's kernels run with (set before its pool starts)."""
    import signal

    from tlm.errors import die_with_parent
    from tlm.graph.target import THREADS_ENV
    from tlm.space.intrin import light_tensor_intrin

    if threads:
        os.environ[THREADS_ENV] = str(threads)

    die_with_parent(sig=signal.SIGKILL)  # the pool's threads that start workers live as long as the pool

    light_tensor_intrin()


def builder_class():
    """A LocalBuilder whose worker pool lives across batches.

    MetaSchedule's LocalBuilder starts a new pool per batch (against a worker memory leak);
    each start re-imports TVM (4-10 s here), more than building a batch. We keep the pool and
    recycle it every `recycle` batches instead.
    """
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, LocalBuilder
    from tvm.s_tir.meta_schedule.builder.local_builder import _worker_func
    from tvm.support.popen_pool import PopenPoolExecutor, StatusKind

    @derived_object
    class PersistentLocalBuilder(LocalBuilder._cls):
        recycle = 25

        def _sanity_check(self) -> None:  # the parent's check starts (and drops) a whole pool
            self._pool, self._uses = None, 0

        def build(self, build_inputs):
            return self.submit(build_inputs)()

        def submit(self, build_inputs):
            """Start building `build_inputs` in the pool and return at once a function that waits
            for them and returns their BuilderResults (in order). One batch at a time: call the
            returned function before the next submit (a recycle shuts the pool down)."""
            if self._pool is None or self._uses >= self.recycle:
                if self._pool is not None:
                    self._pool.shutdown()
                self._pool = PopenPoolExecutor(
                    max_workers=self.max_workers, timeout=self.timeout_sec, initializer=warm_worker
                )
                self._uses = 0
            self._uses += 1
            args = [(self.f_build, self.f_export, b.mod, b.target, None) for b in build_inputs]
            # Executor.map submits every input now; iterating waits for them in order.
            mapped = self._pool.map_with_error_catching(lambda x: _worker_func(*x), args)
            timeout = self.timeout_sec

            def collect():
                results = []
                for res in mapped:
                    if res.status == StatusKind.COMPLETE:
                        results.append(BuilderResult(res.value, None))
                    elif res.status == StatusKind.TIMEOUT:
                        results.append(BuilderResult(None, f"LocalBuilder: Timeout after {timeout} s"))
                    else:
                        results.append(BuilderResult(None, f"LocalBuilder: {res.value}"))
                return results

            return collect

        def shutdown(self) -> None:
            if self._pool is not None:
                self._pool.shutdown()
                self._pool = None

    return PersistentLocalBuilder


def runner_classes():
    """LocalRunner/RPCRunner subclasses that submit our worker (which checks outputs)."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.runner import LocalRunner, RPCRunner
    from tvm.s_tir.meta_schedule.runner.local_runner import LocalRunnerFuture
    from tvm.s_tir.meta_schedule.runner.rpc_runner import RPCRunnerFuture
    from tvm.support.popen_pool import PopenPoolExecutor

    @derived_object
    class CheckingLocalRunner(LocalRunner._cls):
        def __init__(self, check: CheckConfig = CheckConfig(), **kwargs):
            super().__init__(**kwargs)
            self.check = check

        def run(self, runner_inputs):
            futures = []
            for inp in runner_inputs:
                # One input at a time, so the pool's timeout can be this input's: a program with a
                # slow-factor limit is stopped (its worker killed) once it is surely past it.
                limit_s = read_limit(ref_beside(str(inp.artifact_path))) / 1e3
                timeout = min(self.timeout_sec, limit_s + LIMIT_GRACE_S) if limit_s else self.timeout_sec
                self.pool._timeout = timeout
                fut = self.pool.submit(
                    local_run_worker, self.evaluator_config, self.check, str(inp.artifact_path),
                    str(inp.device_type), tuple(a.as_json() for a in inp.args_info),
                )
                try:
                    futures.append(LocalRunnerFuture(res=fut.result(), error_message=None))
                except TimeoutError:
                    msg = (f"Slow: stopped after {timeout:.3g} s, past its limit of {limit_s:.3g} s"
                           if timeout < self.timeout_sec else f"LocalRunner: Timeout, killed after {timeout:g} seconds")
                    futures.append(LocalRunnerFuture(res=None, error_message=msg))
                except Exception as err:  # the worker's failure is the candidate's error
                    futures.append(LocalRunnerFuture(res=None, error_message=f"LocalRunner: {err}"))
            return futures

    @derived_object
    class CheckingRPCRunner(RPCRunner._cls):
        def __init__(self, check: CheckConfig = CheckConfig(), timeout_sec: float = 120, **kwargs):
            super().__init__(**kwargs)
            self.check = check
            # RPCRunner's pool has no timeout: with no free server the tracker request would
            # block forever. A timed-out session becomes the candidate's error instead.
            self.pool.shutdown()
            self.pool = PopenPoolExecutor(max_workers=kwargs.get("max_workers") or 1,
                                          timeout=timeout_sec, initializer=warm_worker)

        def run(self, runner_inputs):
            return [
                RPCRunnerFuture(
                    self.pool.submit(
                        rpc_run_worker, self.rpc_config, self.evaluator_config, self.check,
                        str(inp.artifact_path), str(inp.device_type),
                        tuple(a.as_json() for a in inp.args_info),
                    ),
                    timeout_sec=self.rpc_config.session_timeout_sec,
                )
                for inp in runner_inputs
            ]

    return CheckingLocalRunner, CheckingRPCRunner
