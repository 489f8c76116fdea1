"""The measurer: candidate programs -> LLVM build -> timed run, with an output check.

Built on MetaSchedule's `LocalBuilder` and `LocalRunner`/`RPCRunner` (their worker pools,
timeouts and futures). Two things are ours:
- the build function calls `light_tensor_intrin()` in the worker instead of the 25-30 s
  `import tvm.s_tir.tensor_intrin`;
- the run worker first runs the program once on fixed inputs and compares every buffer with the
  untuned task's output on the same inputs (a `tlm_ref.npz` placed beside the artifact), so a
  wrong program becomes an error and is never timed or counted as fast. Integer inputs are
  zeros, which are valid indices for gather/take tasks.
A build or run failure is data (`MeasureResult.error`), never an exception that stops a batch.

Throughput (the collector's measurements per second; `bench/measure_rate.py`): a task's reference
is computed in its own worker while the task's programs build; local builds export shared
libraries, linked in the parallel build workers rather than at load in the one run worker; the
reference is hard-linked beside each artifact, not copied.
"""

from __future__ import annotations

import functools
import math
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from tlm.errors import check_interrupt
from tlm.graph.target import TargetInfo, resolve_target, tvm_default_threads
from tlm.graph.tasks import Task
from tlm.measure.config import MeasureConfig
from tlm.measure.popen import lean_popen_workers
from tlm.measure.workers import (CheckConfig, builder_class, build_in_worker, export_shared_in_worker, ref_beside,
                                 reference_in_worker, runner_classes, warm_worker, write_limit)
from tlm.space.design import plain_json


@dataclass
class Candidate:
    """A program to measure: a scheduled `tvm.s_tir.Schedule` or a trace for `task.mod`."""

    task: Task
    schedule: Any = None  # tvm.s_tir.Schedule
    trace: Any = None  # tvm.s_tir.schedule.Trace, or its JSON (list) as stored in the database
    proposer: str = "unknown"  # tlm, metaschedule, random, ...
    round: int = 0
    sentence: str | None = None  # the tensor-language sentence, when a language model wrote it


@dataclass
class PendingBatch:
    """A batch whose builds `Measurer.start` started: `Measurer.finish` completes it."""

    results: list  # [MeasureResult], schedule errors already filled in
    todo: list  # [(index into results, scheduled IRModule)] being built
    collect: Any  # () -> [BuilderResult] for todo, waiting for the builds; None: nothing to build
    started: float  # time.perf_counter() at the builds' start


@dataclass
class MeasureResult:
    candidate: Candidate
    trace_json: Any  # trace.as_json(): plain lists, JSON-serializable
    latencies_s: list[float] = field(default_factory=list)
    error: str | None = None
    build_s: float = 0.0
    run_s: float = 0.0

    @property
    def median_s(self) -> float:
        if self.error or not self.latencies_s:
            return float("inf")
        return float(statistics.median(self.latencies_s))

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.latencies_s)


def short_error(msg: str, limit: int = 1500) -> str:
    """Keep the informative tail of TVM's long error texts."""
    msg = str(msg)
    if "WrongResult:" in msg:  # the worker's own message says it all; drop the traceback
        return msg[msg.rindex("WrongResult:") + len("WrongResult:"):].strip().splitlines()[0]
    lines = [ln for ln in msg.strip().splitlines() if ln.strip()]
    text = "\n".join(lines[-8:])
    return text[-limit:] if text else "unknown error"


def _place(src: str, dst: str) -> None:
    """Put the reference beside an artifact: a hard link (references of batch-8 convs are tens of
    MB, once per program), a copy across file systems."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy(src, dst)


def prepare(cand: Candidate):
    """(scheduled IRModule, trace JSON) of a candidate; raises on an invalid trace."""
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    if cand.schedule is not None:
        return cand.schedule.mod, plain_json(cand.schedule.trace.as_json())
    if cand.trace is None:
        raise ValueError("candidate has neither a schedule nor a trace")
    sch = Schedule(cand.task.mod)
    if isinstance(cand.trace, Trace):
        cand.trace.apply_to_schedule(sch, remove_postproc=False)
    else:
        Trace.apply_json_to_schedule(cand.trace, sch)
    return sch.mod, plain_json(sch.trace.as_json())


# ---------------------------------------------------------------- the measurer
class Measurer:
    """Builds and times candidates for one target; reusable across batches and tasks."""

    def __init__(self, target: str | dict | TargetInfo | None = None, config: MeasureConfig | None = None):
        self.target = resolve_target(target)
        self.config = config or MeasureConfig()
        self._refdir = tempfile.mkdtemp(prefix="tlm-ref-")
        self._refs: dict[str, str] = {}
        self._pending: dict[str, Any] = {}  # task hash -> Future of its reference, being computed
        self._builder = None
        self._runner = None
        self._ref_pool = None
        self._in_flight = None  # the collect function of a started batch whose builds are not collected
        self.measured = 0

    @property
    def rpc(self) -> bool:
        return bool(self.config.tracker_host)

    def _setup(self) -> None:
        if self._runner is not None:
            return
        from tvm.s_tir.meta_schedule.runner import EvaluatorConfig, RPCConfig

        lean_popen_workers()  # its workers start in a third of the time (tlm.measure.popen)
        cfg = self.config
        self._builder = builder_class()(
            max_workers=cfg.builder_workers or max(1, self.target.cores if self.target.kind == "llvm" else (os.cpu_count() or 1)),
            timeout_sec=cfg.build_timeout_s,
            f_build=build_in_worker,
            f_export=None if self.rpc else export_shared_in_worker,
        )
        from tvm.support.popen_pool import PopenPoolExecutor

        # References are computed beside the builds (one process: a naive run is single-threaded).
        # The parent's TVM_NUM_THREADS (tlm sets the host's cores) would leak into the timed runs.
        warm = functools.partial(warm_worker, threads=cfg.threads or tvm_default_threads())
        self._ref_pool = PopenPoolExecutor(max_workers=1, timeout=cfg.reference_timeout_s, initializer=warm)
        ev = EvaluatorConfig(cfg.number, cfg.repeat, cfg.min_repeat_ms, cfg.enable_cpu_cache_flush)
        local_cls, rpc_cls = runner_classes()
        check = CheckConfig(cfg.rtol, cfg.atol, cfg.timing_budget_ms)
        if self.rpc:
            rpc_cfg = RPCConfig(
                tracker_host=cfg.tracker_host, tracker_port=int(cfg.tracker_port or 9190),
                tracker_key=cfg.tracker_key or "tlm", session_timeout_sec=cfg.rpc_session_timeout_s,
            )
            self._runner = rpc_cls(
                check=check, timeout_sec=cfg.rpc_session_timeout_s + cfg.run_timeout_s,
                rpc_config=rpc_cfg, evaluator_config=ev, max_workers=cfg.rpc_workers,
            )
        else:
            self._runner = local_cls(
                check=check, timeout_sec=cfg.run_timeout_s, evaluator_config=ev, initializer=warm
            )

    def _start_reference(self, task: Task) -> None:
        """Start computing `task`'s reference in the reference worker, unless known or under way."""
        if task.hash in self._refs or task.hash in self._pending:
            return
        self._setup()
        args_info = [["TENSOR", a["dtype"], a["shape"]] for a in task.args]
        path = os.path.join(self._refdir, f"{task.hash}.npz")
        self._pending[task.hash] = self._ref_pool.submit(reference_in_worker, task.mod, args_info, path)

    def reference(self, task: Task) -> str:
        """Path of the untuned task's inputs and outputs (built once per task, run on this host);
        raises when the untuned program cannot be built or run here."""
        if task.hash in self._refs:
            return self._refs[task.hash]
        self._start_reference(task)
        fut = self._pending.pop(task.hash)
        try:
            self._refs[task.hash] = fut.result()
        except TimeoutError:
            raise RuntimeError(f"the untuned program ran past {self.config.reference_timeout_s:g} s") from None
        return self._refs[task.hash]

    def measure(self, candidates: list[Candidate], best_s: dict[str, float] | None = None) -> list[MeasureResult]:
        """Build and time a batch; results are in the same order as `candidates`.

        `best_s`: the best known latency per task hash, for `MeasureConfig.slow_factor`."""
        return self.finish(self.start(candidates), best_s)

    def start(self, candidates: list[Candidate]) -> PendingBatch:
        """The untimed half of `measure`: replay the candidates' traces and start their builds (and
        their tasks' references) in the worker processes, returning at once, so the caller can
        prepare the next batch while they build; `finish` waits for the builds and times the
        programs. One batch at a time: a batch started and never finished (its caller failed) is
        waited for and dropped here."""
        from tvm.s_tir.meta_schedule.builder import BuilderInput

        self._setup()
        self._drop_in_flight()
        results: list[MeasureResult] = []
        todo: list[tuple[int, Any]] = []
        for cand in candidates:
            res = MeasureResult(cand, trace_json=None)
            try:
                mod, res.trace_json = prepare(cand)
                todo.append((len(results), mod))
            except Exception as err:  # an invalid trace is a failed candidate, not a crash
                res.error = "ScheduleError: " + short_error(err)
            results.append(res)
        collect = None
        if todo:
            for i, _ in todo:  # computed while the programs build
                self._start_reference(results[i].candidate.task)
            target = self.target.tvm()
            collect = self._builder.submit([BuilderInput(mod, target) for _, mod in todo])
            self._in_flight = collect
        return PendingBatch(results, todo, collect, time.perf_counter())

    def finish(self, pending: PendingBatch, best_s: dict[str, float] | None = None) -> list[MeasureResult]:
        """Wait for a started batch's builds, time its programs; its results, in order."""
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo
        from tvm.s_tir.meta_schedule.runner import RunnerInput

        results, todo = pending.results, pending.todo
        if pending.collect is None:
            check_interrupt()
            return results
        try:
            built = pending.collect()
        finally:
            self._in_flight = None
        # wall time from the start of the builds, over the programs (with `start`'s overlap, it
        # includes what the caller did meanwhile)
        build_s = (time.perf_counter() - pending.started) / len(todo)
        run_idx, run_inputs, dirs = [], [], []
        for (i, mod), b in zip(todo, built):
            results[i].build_s = build_s
            if b.error_msg:
                results[i].error = "BuildError: " + short_error(b.error_msg)
                continue
            path = str(b.artifact_path)
            dirs.append(os.path.dirname(path))
            try:
                _place(self.reference(results[i].candidate.task), ref_beside(path))
            except Exception as err:  # no reference: the program cannot be trusted
                results[i].error = "ReferenceError: " + short_error(err)
                continue
            run_idx.append(i)
            # The timed function's arguments: packed weights have their packed shapes.
            run_inputs.append(RunnerInput(path, "cpu", ArgInfo.from_entry_func(mod, remove_preproc=True)))
        try:
            if (self.config.slow_factor > 0 or self.config.min_gflops > 0) and not self.rpc:
                self._run_limited(results, run_idx, run_inputs, dict(best_s or {}))
            else:
                self._run(results, run_idx, run_inputs)
            for r in range(1, self.config.rounds):  # each round starts one program later
                ok = [k for k in range(len(run_idx)) if results[run_idx[k]].ok]
                ok = ok[r % len(ok):] + ok[:r % len(ok)] if ok else ok
                self._run(results, [run_idx[k] for k in ok], [run_inputs[k] for k in ok], extend=True)
            # Re-time the best few: one noisy low reading should not decide the winner.
            ok = sorted((k for k in range(len(run_idx)) if results[run_idx[k]].ok),
                        key=lambda k: results[run_idx[k]].median_s)[: self.config.remeasure_top]
            ok = ok if self.config.rounds <= 1 else []
            if ok:
                for k in ok:
                    write_limit(str(run_inputs[k].artifact_path), 0.0)  # the best are always timed
                self._run(results, [run_idx[k] for k in ok], [run_inputs[k] for k in ok], extend=True)
        finally:
            for d in dirs:
                shutil.rmtree(d, ignore_errors=True)
        check_interrupt()  # errors an interrupt caused are no candidate's: the batch is not kept
        self.measured += len(results)
        return results

    def _drop_in_flight(self) -> None:
        collect, self._in_flight = self._in_flight, None
        if collect is not None:
            for b in collect():
                if not b.error_msg:
                    shutil.rmtree(os.path.dirname(str(b.artifact_path)), ignore_errors=True)

    def _run_limited(self, results, idx, inputs, best: dict[str, float]) -> None:
        """One program at a time, each with the slow-factor limit of its task's best so far (the
        best known before the batch, or measured earlier in it)."""
        cfg = self.config
        for i, inp in zip(idx, inputs):
            task = results[i].candidate.task
            h = task.hash
            limits = [cfg.slow_factor * best[h]] if cfg.slow_factor > 0 and best.get(h) else []
            if cfg.min_gflops > 0 and task.flops:
                limits.append(max(1.0, task.flops / (cfg.min_gflops * 1e9)))
            write_limit(str(inp.artifact_path), min(limits) * 1e3 if limits else 0.0)
            self._run(results, [i], [inp])
            if results[i].ok:
                best[h] = min(best.get(h) or math.inf, results[i].median_s)

    def _run(self, results, idx, inputs, extend: bool = False) -> None:
        if not inputs:
            return
        t0 = time.perf_counter()
        futures = self._runner.run(inputs)
        for i, fut in zip(idx, futures):
            r = fut.result()
            if r.error_msg:
                msg = str(r.error_msg)
                kind = "WrongResult: " if "WrongResult:" in msg else "" if msg.startswith("Slow:") else "RunError: "
                results[i].error = kind + short_error(msg)
            else:
                secs = [float(x) for x in r.run_secs]
                results[i].latencies_s = results[i].latencies_s + secs if extend else secs
        per = (time.perf_counter() - t0) / len(inputs)
        for i in idx:
            results[i].run_s += per

    def close(self) -> None:
        shutil.rmtree(self._refdir, ignore_errors=True)
        self._in_flight = None  # its builds die with the pool
        self._pending.clear()
        for obj in (self._builder, self._runner, self._ref_pool):
            try:
                if obj is not None:
                    obj.shutdown() if hasattr(obj, "shutdown") else obj.pool.shutdown()
            except Exception:  # shutting down a dead pool is harmless
                pass
        self._builder = self._runner = self._ref_pool = None

    def __enter__(self) -> Measurer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
