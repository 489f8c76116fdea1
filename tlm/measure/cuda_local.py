"""The CUDA measurer of a machine with an NVIDIA GPU: `tlm tune --target h100` on that machine.

The path a bundle takes to the GPU machine, in one process tree: each batch's candidates are
lowered to CUDA C here by TVM and written as a one-batch bundle (tlm.measure.gpu_bundle) with each
task's reference (dlight's program, itself checked against this CPU's run of the untuned task);
tlm.measure.cuda_runner compiles them with nvcc and its child process runs, checks (every element
against the reference, the CPU measurer's tolerance) and times them on the GPU with CuPy and CUDA
events. A kernel that faults or hangs costs only its own result. Needs CuPy, the CUDA toolkit (the
`cuda` install extra) and the GPU the target names; `local_gpu` says which is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tlm.errors import TlmError, first_line
from tlm.graph.target import TargetInfo, resolve_target
from tlm.measure.config import MeasureConfig
from tlm.measure.measurer import Candidate, MeasureResult, short_error, prepare

SEED = 0  # the inputs every batch draws (the bundles' default)


def local_gpu(target: TargetInfo) -> str | None:
    """None when this machine can measure `target`'s programs; else why not, in one line."""
    try:
        import cupy as cp

        count = cp.cuda.runtime.getDeviceCount()
    except Exception as err:  # noqa: BLE001 - no CuPy, no driver, no device: all say the same
        return f"no usable CuPy with an NVIDIA driver: {first_line(err)} (pip install -e '.[gpu]')"
    if count == 0:
        return "no NVIDIA GPU"
    from tlm.measure.nvcc import find_toolkit

    if find_toolkit() is None:
        return "no CUDA toolkit (nvcc: pip install -e '.[cuda]')"
    from tlm.measure.cuda_runner import device_info
    from tlm.measure.gpu_ingest import card_matches

    name, card = device_info()["name"], target.config.get("model", "")
    if not card_matches(card, name):
        return f"the GPU here is {name!r}, not the target's {card or target.cpu!r}"
    return None


@dataclass
class CudaBatch:
    """A batch `CudaMeasurer.start` lowered and wrote; `finish` compiles, runs and reads it."""

    results: list[MeasureResult]  # schedule and lowering errors already filled in
    where: dict[tuple[str, int], int]  # (task hash, program id in the bundle) -> index into results
    bundle: Path | None  # None: nothing to run


class CudaMeasurer:
    """`tlm.measure.measurer.Measurer`'s interface (measure, start/finish, close) for CUDA targets."""

    def __init__(self, target: str | dict | TargetInfo, config: MeasureConfig | None = None, runner=None):
        self.target = resolve_target(target)
        if self.target.kind != "cuda":
            raise TlmError(f"a CUDA measurer needs a CUDA target, not {self.target.kind}")
        self.config = config or MeasureConfig()
        self._work = Path(tempfile.mkdtemp(prefix="tlm-cuda-"))
        self._refs: dict[str, dict[str, Any]] = {}  # task hash -> its entry's reference fields (files in refs/)
        self._batches = 0
        self._run = runner  # tlm.measure.cuda_runner.run unless a test gives another (said there)
        self.measured = 0

    def measure(self, candidates: list[Candidate], best_s: dict[str, float] | None = None) -> list[MeasureResult]:
        """Lower, compile, check and time a batch on the GPU; results in the candidates' order."""
        return self.finish(self.start(candidates), best_s)

    def start(self, candidates: list[Candidate]) -> CudaBatch:
        from tlm.measure.cuda_build import lower_cuda
        from tlm.measure.gpu_bundle import write_entry, write_manifest

        if self._run is None and self._batches == 0 and (why := local_gpu(self.target)):
            raise TlmError(f"cannot measure {self.target.config.get('model') or 'CUDA'} programs here: {why}")
        self._batches += 1
        bundle = self._work / f"batch-{self._batches}"
        for sub in ("src", "checks", "tasks"):
            (bundle / sub).mkdir(parents=True, exist_ok=True)
        results, where, by_task = [], {}, {}
        for cand in candidates:
            res = MeasureResult(cand, trace_json=None)
            results.append(res)
            try:
                mod, res.trace_json = prepare(cand)
            except Exception as err:  # an invalid trace is a failed candidate, not a crash
                res.error = "ScheduleError: " + short_error(err)
                continue
            t0 = time.perf_counter()
            cuda = lower_cuda(mod, self.target)
            res.build_s = time.perf_counter() - t0
            if cuda.error:
                res.error = "BuildError: " + short_error(cuda.error)
                continue
            by_task.setdefault(cand.task.hash, (cand.task, []))[1].append((len(results) - 1, cuda))
        entries = []
        for h, (task, progs) in by_task.items():
            ref = self._reference(task, bundle)
            if "error" in ref:  # no reference and no CPU check: nothing could say a program is right
                for i, _ in progs:
                    results[i].error = "ReferenceError: " + ref["error"]
                continue
            entry = write_entry(task, [(None, results[i].candidate.sentence, cuda, results[i].candidate.proposer)
                                       for i, cuda in progs], self.target, SEED, bundle, {}, time.perf_counter(), ref)
            where.update({(h, k): i for k, (i, _) in enumerate(progs)})
            entries.append(entry)
        if not entries:
            shutil.rmtree(bundle, ignore_errors=True)
            return CudaBatch(results, where, None)
        for e in entries:
            (bundle / "tasks" / f"{e['hash']}.json").write_text(json.dumps(e))
        write_manifest(bundle, [e["hash"] for e in entries], self.target)
        return CudaBatch(results, where, bundle)

    def finish(self, batch: CudaBatch, best_s: dict[str, float] | None = None) -> list[MeasureResult]:
        """Compile (nvcc), check and time the batch's programs on the GPU (`best_s` is unused:
        the runner gives a slow program one reading by itself)."""
        from tlm.measure.cuda_measure import read_lines

        results = batch.results
        if batch.bundle is None:
            return results
        run = self._run
        if run is None:
            from tlm.measure.cuda_runner import run
        out = batch.bundle / "out"
        n = len(batch.where)
        t0 = time.perf_counter()
        cfg = self.config
        summary = run(batch.bundle, out, seconds=60.0 + (cfg.build_timeout_s + cfg.run_timeout_s) * n,
                      jobs=cfg.builder_workers or max(1, (os.cpu_count() or 2) - 1),
                      hang_seconds=cfg.run_timeout_s, log=lambda *_: None)
        run_s = (time.perf_counter() - t0) / max(1, n)
        got = {(r["t"], r["k"]): r for r in read_lines(out / "results.jsonl") if r.get("k") != "ref"}
        for key, i in batch.where.items():
            r = got.get(key)
            res = results[i]
            res.run_s = run_s
            if r is None:
                res.error = "RunError: not measured before the batch's deadline" + (
                    f" (the measuring process died {summary.get('child_restarts')} times)" if summary.get("child_restarts") else "")
            elif r.get("err"):
                res.error = r["err"] if r["err"].startswith(("WrongResult", "fault")) else "RunError: " + r["err"]
            else:
                res.latencies_s = [float(x) for x in r.get("lat") or []]
        self.measured += n
        shutil.rmtree(batch.bundle, ignore_errors=True)
        return results

    def _reference(self, task, bundle: Path) -> dict[str, Any]:
        """The task's reference fields, made once (in refs/) and their files copied into `bundle`."""
        from tlm.measure.gpu_bundle import reference_files

        refs = self._work / "refs"
        if task.hash not in self._refs:
            for sub in ("src", "checks"):
                (refs / sub).mkdir(parents=True, exist_ok=True)
            try:
                self._refs[task.hash] = reference_files(task, self.target, SEED, refs)
            except Exception as err:  # noqa: BLE001 - the task's candidates say why
                self._refs[task.hash] = {"error": first_line(err)}
        fields = self._refs[task.hash]
        for rel in (fields.get("check"), (fields.get("ref") or {}).get("src")):
            if rel:
                shutil.copyfile(refs / rel, bundle / rel)
        return fields

    def close(self) -> None:
        shutil.rmtree(self._work, ignore_errors=True)

    def __enter__(self) -> CudaMeasurer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def measurer_for(target, config: MeasureConfig | None = None):
    """The measurer of a target: the CPU's (tlm.measure.measurer) or, for CUDA, this GPU one."""
    from tlm.measure.measurer import Measurer

    info = resolve_target(target)
    return CudaMeasurer(info, config) if info.kind == "cuda" else Measurer(info, config)
