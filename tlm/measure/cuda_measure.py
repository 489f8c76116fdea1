"""The GPU runner's measuring process (tlm.measure.cuda_runner starts it): CuPy, numpy, no TVM.

Task by task, as the parent lists them compiled in WORK/ready.jsonl: inputs drawn as the CPU
measurer draws them, the reference program run first and checked against the CPU's outputs, each
candidate run once and checked against the reference on every element of every buffer (the CPU
measurer's tolerance), then timed with CUDA events, the L2 flushed before each repeat. A CUDA
error is recorded as the candidate's fault and ends the process (its context may be lost); the
parent starts another that goes on after it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from tlm.errors import TlmError, first_line

RTOL, ATOL = 1e-4, 1e-5  # tlm.measure.config.MeasureConfig's defaults
SLOW_MS = 50.0  # a checked run this slow is the program's one reading
TIMING_BUDGET_MS = 60.0  # GPU time for one program's repeats
MIN_REPEAT, MAX_REPEAT = 3, 20
MANIFEST = "manifest.json.gz"  # a bundle's (tlm.measure.gpu_bundle)
SAMPLE_ELEMENTS = 2048  # a written buffer is checked against the CPU on this many elements


def sample_index(size: int, n: int = SAMPLE_ELEMENTS):
    """The flat indices of a buffer checked against the CPU: all, or n spread evenly (first and
    last included), in integer arithmetic so that any numpy on any machine picks the same."""
    import numpy as np

    if size <= n:
        return np.arange(size, dtype=np.int64)
    return np.arange(n, dtype=np.int64) * (size - 1) // (n - 1)


def read_manifest(bundle: str | Path) -> dict[str, Any]:
    import gzip

    path = Path(bundle) / MANIFEST
    if not path.exists():
        raise TlmError(f"{bundle} is not a GPU bundle (no {MANIFEST})")
    with gzip.open(path, "rt") as f:
        return json.load(f)




# ---------------------------------------------------------------- files
def read_candidates(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    """Proposed programs per task hash, in file order: JSON lines {task, proposer, sentence}
    (`tlm gpu bundle --candidates`, `tlm gpu-heldout candidates`). Here rather than in
    tlm.measure.gpu_bundle, which needs TVM, because the GPU machine reads them too (`--only`)."""
    out: dict[str, list[dict[str, Any]]] = {}
    try:
        for line in Path(path).read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                out.setdefault(r["task"], []).append({"proposer": r["proposer"], "sentence": r["sentence"]})
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise TlmError(f"unreadable candidates file {path}: {first_line(err)}") from None
    return out


def named_programs(path: str | Path) -> set[tuple[str, str]]:
    """(task hash, sentence) of each program a candidates file names: what an `--only FILE` keeps."""
    out = {(task, c["sentence"]) for task, cands in read_candidates(path).items() for c in cands}
    if not out:
        raise TlmError(f"{path} names no program")
    return out


def append_line(path: Path, obj: dict[str, Any]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(obj) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:  # a line cut by a kill
            continue
    return out


# ---------------------------------------------------------------- measurement (child)
def make_inputs(args: list[dict[str, Any]], seed: int) -> list:
    """Inputs of a task that any numpy draws alike (the GPU machine's numpy is not this one's):
    floats uniform in [-1, 1) from a counter hash (splitmix64) of (seed, buffer, element),
    integers and booleans zero (valid indices of gather/take tasks), as the CPU measurer's."""
    import numpy as np

    out = []
    for i, a in enumerate(args):
        shape = [int(s) for s in a["shape"]]
        if not str(a["dtype"]).startswith(("float", "bfloat")):
            out.append(np.zeros(shape, dtype=a["dtype"]))
            continue
        n = int(np.prod(shape, dtype=np.int64))
        with np.errstate(over="ignore"):  # uint64 arithmetic wraps, as the hash wants
            x = np.arange(n, dtype=np.uint64) + np.uint64((seed * 1000003 + i * 7919 + 1) & (2**64 - 1))
            x *= np.uint64(0x9E3779B97F4A7C15)
            x ^= x >> np.uint64(30)
            x *= np.uint64(0xBF58476D1CE4E5B9)
            x ^= x >> np.uint64(27)
            x *= np.uint64(0x94D049BB133111EB)
            x ^= x >> np.uint64(31)
        u = (x >> np.uint64(40)).astype(np.float64) * (1.0 / (1 << 24))
        out.append((2.0 * u - 1.0).astype(a["dtype"]).reshape(shape))
    return out


def compare(got, want) -> str | None:
    """tlm.measure.workers.compare on the GPU (CuPy arrays): None when they match."""
    import cupy as cp

    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    if want.dtype.kind != "f":
        bad = int(cp.count_nonzero(got != want))
        return f"{bad} elements differ" if bad else None
    g = got.astype(cp.float32 if want.dtype.itemsize <= 4 else cp.float64, copy=False)
    w = want.astype(g.dtype, copy=False)
    gn, wn = cp.isnan(g), cp.isnan(w)
    if bool(cp.any(gn != wn)):
        return "NaN where the reference has none (or the reverse)"
    if not w.size:
        return None
    diff = float(cp.max(cp.where(wn, 0, cp.abs(g - w))))
    scale = float(cp.max(cp.where(wn, 0, cp.abs(w))))
    limit = ATOL + RTOL * max(scale, 1.0)
    return f"max abs diff {diff:.3g} > {limit:.3g}" if not diff <= limit else None


class Measurer:
    """Runs and times programs of one task at a time on GPU 0 (one CUDA context)."""

    def __init__(self):
        import cupy as cp

        self.cp = cp
        props = cp.cuda.runtime.getDeviceProperties(0)
        self.flush = cp.empty(2 * int(props["l2CacheSize"]) or 1 << 27, dtype=cp.uint8)
        self.stream = cp.cuda.Stream.null  # one stream: copies, kernels, flushes and events in order
        self.modules: dict[str, Any] = {}

    def function(self, cubin: str, name: str):
        if cubin not in self.modules:
            self.modules[cubin] = self.cp.RawModule(path=cubin)
        return self.modules[cubin].get_function(name)

    def launcher(self, cubin: str, prefix: str, plan: dict[str, Any]):
        """A function that launches the program's kernels on given buffers, in order."""
        import numpy as np

        cp = self.cp
        kernels = [(self.function(cubin, prefix + k["name"]), k) for k in plan["kernels"]]
        workspaces = [cp.empty(max(1, int(n)), dtype=cp.uint8) for n in plan["workspaces"]]

        def launch(buffers):
            for fn, k in kernels:
                args = []
                for a in k["args"]:
                    if "buf" in a:
                        args.append(buffers[a["buf"]])
                    elif "ws" in a:
                        args.append(workspaces[a["ws"]])
                    else:
                        args.append(np.int32(a["int"]))
                fn(tuple(k["grid"]), tuple(k["block"]), tuple(args), shared_mem=int(k.get("smem", 0)),
                   stream=self.stream)

        return launch

    def _flush(self) -> None:
        self.cp.cuda.runtime.memsetAsync(self.flush.data.ptr, 0, self.flush.nbytes, self.stream.ptr)

    def run_checked(self, launch, pristine) -> tuple[list, float]:
        """One run on fresh copies of the inputs: (buffers after it, its time in ms)."""
        cp = self.cp
        bufs = [p.copy() for p in pristine]
        start, end = cp.cuda.Event(), cp.cuda.Event()
        self.stream.synchronize()
        self._flush()
        start.record(self.stream)
        launch(bufs)
        end.record(self.stream)
        end.synchronize()
        return bufs, cp.cuda.get_elapsed_time(start, end)

    def time(self, launch, bufs, first_ms: float) -> list[float]:
        """Latencies in seconds: the checked run alone when slow, else a warm-up and repeats."""
        cp = self.cp
        if first_ms >= SLOW_MS:
            return [first_ms / 1e3]
        launch(bufs)  # warm-up (instruction cache, TLB)
        n = int(min(MAX_REPEAT, max(MIN_REPEAT, TIMING_BUDGET_MS // max(first_ms, 1e-3))))
        events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(n)]
        for start, end in events:
            self._flush()
            start.record(self.stream)
            launch(bufs)
            end.record(self.stream)
        events[-1][1].synchronize()
        return [cp.cuda.get_elapsed_time(s, e) / 1e3 for s, e in events]


def _task_inputs(entry: dict[str, Any], bundle: Path):
    """(inputs, CPU check arrays, error): inputs as the CPU drew them, or why not."""
    import numpy as np

    inputs = make_inputs(entry["args"], int(entry["seed"]))
    check = dict(np.load(bundle / entry["check"]))
    for i, x in enumerate(inputs):
        head = check.get(f"head{i}")
        if head is not None and not np.array_equal(x.reshape(-1)[: head.size], head):
            return None, None, f"the inputs drawn here differ from the CPU's (buffer {i})"
    return inputs, check, None


def _cpu_mismatch(bufs, pristine, check: dict[str, Any], written: list[int]) -> str | None:
    """Compare buffers with the CPU's outputs at the sampled elements."""
    import cupy as cp

    for i, b in enumerate(bufs):
        flat = b.reshape(-1)
        if i in written:
            idx = cp.asarray(sample_index(flat.size))
            reason = compare(flat[idx], cp.asarray(check[f"val{i}"]))
        else:
            reason = compare(flat, pristine[i].reshape(-1))
        if reason:
            return f"buffer {i}: {reason}"
    return None


def measure_task(m: Measurer, entry: dict[str, Any], compiled: dict[str, Any], bundle: Path, results: Path,
                 done: set, progress: Path, arch_limits: dict[str, int], stop=lambda: False) -> None:
    """Measure the task's reference and candidates not in `done`; a line per result."""
    import cupy as cp

    from tlm.measure.cuda_build import CudaProgram, Kernel
    from tlm.measure.nvcc import KernelResources, launch_error

    h = entry["hash"]

    def record(line: dict[str, Any]) -> None:
        append_line(results, line)
        done.add((line["t"], line["k"]))

    inputs, check, err = _task_inputs(entry, bundle)
    if err:
        for c in entry.get("candidates", []):
            if (h, c["id"]) not in done:
                record({"t": h, "k": c["id"], "lat": [], "err": err})
        return
    pristine = [cp.asarray(x) for x in inputs]
    written = list(entry.get("written", []))

    def plan_error(plan: dict[str, Any], file: dict[str, Any] | None) -> str | None:
        if file is None or "error" in file:
            return (file or {}).get("error", "not compiled")
        res = {k: KernelResources(**v) for k, v in file["resources"].items()}
        prog = CudaProgram("", [Kernel(**k) for k in plan["kernels"]], plan["workspaces"])
        return launch_error(prog, plan["prefix"], res, **arch_limits)

    def resources(plan: dict[str, Any], file: dict[str, Any]) -> dict[str, Any]:
        res = [file["resources"].get(plan["prefix"] + k["name"], {}) for k in plan["kernels"]]
        return {"regs": [r.get("registers") for r in res], "smem": [r.get("smem") for r in res],
                "spill": sum(r.get("spill_bytes", 0) for r in res)}

    def measure(k, plan: dict[str, Any], file: dict[str, Any] | None, judge, keep: bool = False):
        """Run program k once, `judge(buffers)` -> (error, how it was checked), time it if right;
        its line recorded. With `keep`, the buffers of its checked run are returned (if right)."""
        write_progress(progress, h, k)
        line: dict[str, Any] = {"t": h, "k": k, "lat": [], "err": plan_error(plan, file)}
        kept = None
        try:
            if not line["err"]:
                launch = m.launcher(file["cubin"], plan["prefix"], plan)
                bufs, first = m.run_checked(launch, pristine)
                line["err"], how = judge(bufs)
                if how:
                    line["check"] = how
                if not line["err"]:
                    kept = [b.copy() for b in bufs] if keep else None
                    line["lat"] = m.time(launch, bufs, first)
                line.update(resources(plan, file))
        except Exception as err:  # a CUDA error may have taken the context: record it, start anew
            record(dict(line, err=f"fault: {type(err).__name__}: {first_line(err)}", lat=[]))
            if _is_cuda_error(err):
                raise SystemExit(3) from None
            return None
        record(line)
        return kept

    def against_cpu(bufs, what: str = "WrongResult") -> str | None:
        reason = _cpu_mismatch(bufs, pristine, check, written)
        return f"{what}: {reason}" if reason else None

    expected = None  # the reference's buffers, once checked against the CPU
    ref, ref_file = entry.get("ref"), compiled.get("ref")
    if ref and (h, "ref") not in done:
        expected = measure("ref", ref, ref_file, lambda bufs: (against_cpu(bufs, "WrongResult against the CPU"), None),
                           keep=True)
    elif ref and ref_file and "cubin" in ref_file:  # resumed: run it again for the expected outputs
        bufs, _ = m.run_checked(m.launcher(ref_file["cubin"], ref["prefix"], ref), pristine)
        if against_cpu(bufs) is None:
            expected = bufs

    def against_reference(bufs) -> tuple[str | None, str]:
        if expected is None:  # no checked reference: the CPU's sampled elements decide
            return against_cpu(bufs), "cpu-sample"
        bad = [f"buffer {i}: {r}" for i, (b, e) in enumerate(zip(bufs, expected)) if (r := compare(b, e))]
        return (f"WrongResult: {bad[0]}" if bad else None), "reference"

    for c in entry.get("candidates", []):
        if (h, c["id"]) in done:
            continue
        if stop():
            return
        measure(c["id"], c, compiled["files"].get(str(c["id"])), against_reference)


def _is_cuda_error(err: BaseException) -> bool:
    return "cuda" in type(err).__module__.lower() or "CUDA" in type(err).__name__


def write_progress(path: Path, task: str, k) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"t": task, "k": k, "at": time.time()}))
    os.replace(tmp, path)


def child_main(bundle: Path, work: Path, out: Path) -> int:
    """Measure tasks as the parent lists them in work/ready.jsonl, until END or STOP."""
    manifest = read_manifest(bundle)
    entries = {e["hash"]: e for e in manifest["tasks"]}
    results = out / "results.jsonl"
    done = {(r["t"], r["k"]) for r in read_lines(results)}
    m = Measurer()
    limits = {"max_smem": int(manifest["target"].get("max_shared_memory_per_block", 49152)),
              "registers_per_sm": int(manifest["target"].get("registers_per_block", 65536)),
              "max_threads": int(manifest["target"].get("max_threads_per_block", 1024))}
    offset = 0
    measured: set[str] = set()
    ready_path = work / "ready.jsonl"
    while True:
        if (work / "STOP").exists():
            return 0
        lines = []
        if ready_path.exists():
            with open(ready_path, "rb") as f:
                f.seek(offset)
                chunk = f.read()
            complete = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written waits
            offset += len(complete)
            lines = [json.loads(x) for x in complete.decode().splitlines() if x.strip()]
        for ready in lines:
            if ready.get("end"):
                return 0
            h = ready["t"]
            if h in measured:
                continue
            try:
                measure_task(m, entries[h], ready, bundle, results, done, work / "progress.json", limits,
                             stop=lambda: (work / "STOP").exists())
            except SystemExit:
                raise
            except Exception as err:  # a task-level failure: its programs' records say why
                why = f"task failed on the GPU machine: {type(err).__name__}: {first_line(err)}"
                for c in entries[h].get("candidates", []):
                    if (h, c["id"]) not in done:
                        append_line(results, {"t": h, "k": c["id"], "lat": [], "err": why})
                        done.add((h, c["id"]))
                if _is_cuda_error(err):
                    raise SystemExit(3) from None
            measured.add(h)
            if (work / "STOP").exists():
                return 0
        time.sleep(0.05)
