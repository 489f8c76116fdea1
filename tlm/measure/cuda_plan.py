"""A whole-model GPU plan (tlm.compiler.gpu_plan), run on a machine with a GPU: numpy, CuPy, nvcc.

    python -m tlm.measure.cuda_plan PLAN --out DIR [--seconds S] [--compile-only]

Why: task latencies summed over a model are only an estimate (no launch gaps, no cache effects
between kernels); a plan is the whole model's kernels in order, so its time is the model's. No
TVM is needed here: the plan lists every buffer and every kernel launch.

1. compile: one `nvcc -cubin` per function's CUDA C (tlm.measure.nvcc, in parallel); ptxas's
   report refuses a kernel that could not launch (nvcc.launch_error);
2. in a child process (a fault or a hang there becomes an error in the result, not a
   traceback): the buffers allocated, the inputs and constants uploaded (the large ones
   regenerated from their seeds by `regenerate`, as the builder did), the steps run once and
   the output compared with the CPU's expected one (tolerance: cuda_measure's RTOL/ATOL scaled
   by the output's magnitude, as tlm.compiler.build scales its own); then timed: CUDA events
   around all steps, a warm-up, the median of repeats (no L2 flush: one model run warms the
   next, as in serving); the same steps captured in a CUDA graph, timed the same way; and a
   second pass with events around each step for per-step medians.
DIR/plan-result.json says all of it (device, median ms, checked/wrong with the max abs diff,
per-step times, compile seconds, error).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Mapping

from tlm.errors import TlmError, first_line
from tlm.measure.cuda_runner import last_line, runner_parser

PLAN_VERSION = 1
PLAN_FILE, DATA_FILE, EXPECTED_FILE = "plan.json", "data.npz", "expected.npz"
RESULT_FILE = "plan-result.json"
TIMING_BUDGET_MS = 2000.0  # GPU time for the whole-plan repeats
MIN_REPEAT, MAX_REPEAT, STEP_REPEAT = 5, 100, 20
NO_CUPY = "CuPy is not installed here (pip install cupy-cuda13x): a plan runs only where CuPy and a GPU are"


# ---------------------------------------------------------------- the plan's files (no GPU)
def read_plan(plan_dir: str | Path) -> dict[str, Any]:
    path = Path(plan_dir) / PLAN_FILE
    try:
        plan = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise TlmError(f"{plan_dir} is not a GPU plan ({PLAN_FILE}: {first_line(err)})") from None
    if plan.get("version") != PLAN_VERSION:
        raise TlmError(f"{plan_dir}: plan version {plan.get('version')}, this runner reads {PLAN_VERSION}")
    return plan


def regenerate(shape: list[int], dtype: str, seed: int, mean: float, std: float, **_: Any):
    """A large constant's stand-in, the same on any numpy (cuda_measure.make_inputs' counter
    hash, uniform in [-1, 1)), scaled to the original's mean and standard deviation so that
    activations keep their magnitude."""
    import numpy as np

    from tlm.measure.cuda_measure import make_inputs

    n = int(np.prod(shape, dtype=np.int64))
    (u,) = make_inputs([{"shape": [n], "dtype": "float64"}], int(seed))
    return (mean + (std * 3.0 ** 0.5) * u).astype(dtype).reshape(shape)


def host_array(buf: Mapping[str, Any], exact: Mapping[str, Any]):
    """An input's or constant's data: carried exactly (data.npz) or regenerated from its seed."""
    if "regen" in buf:
        return regenerate(buf["shape"], buf["dtype"], **buf["regen"])
    return exact[buf["exact"]]


def host_arrays(plan: Mapping[str, Any], plan_dir: str | Path) -> dict[int, Any]:
    """Every input's and constant's data by buffer id."""
    import numpy as np

    with np.load(Path(plan_dir) / DATA_FILE) as data:
        exact = {k: data[k] for k in data.files}
    return {b["id"]: host_array(b, exact) for b in plan["buffers"] if b["kind"] in ("input", "constant")}


def read_expected(plan: Mapping[str, Any], plan_dir: str | Path):
    """The CPU's output: whole, or at `sample_index` when it was too large to carry."""
    import numpy as np

    with np.load(Path(plan_dir) / EXPECTED_FILE) as data:
        return data["out"]


def check_output(got, plan: Mapping[str, Any], expected) -> dict[str, Any]:
    """Compare the plan's output (numpy) with the expected one: diff, limit, verdict."""
    import numpy as np

    from tlm.measure.cuda_measure import sample_index

    exp = plan["expected"]
    got = np.asarray(got).reshape(-1)
    if exp.get("sampled"):
        got = got[sample_index(got.size)]
    want = np.asarray(expected).reshape(-1)
    if got.shape != want.shape:
        return {"checked": False, "wrong": True, "why": f"output of {got.size} elements, expected {want.size}"}
    g, w = got.astype(np.float64), want.astype(np.float64)
    if bool(np.any(np.isnan(g) != np.isnan(w))):
        return {"checked": False, "wrong": True, "why": "NaN where the expected output has none (or the reverse)"}
    diff = float(np.max(np.where(np.isnan(w), 0.0, np.abs(g - w)))) if w.size else 0.0
    tol = plan["tolerance"]
    limit = tol["atol"] + tol["rtol"] * float(exp["scale"])
    loose = tol["model_atol"] + tol["model_rtol"] * float(exp["scale"])
    ok = diff <= limit
    return {"checked": ok, "wrong": not ok, "max_abs_diff": diff, "limit": limit, "within_model_tolerance": diff <= loose}


# ---------------------------------------------------------------- compilation (no GPU)
def compile_plan(plan: Mapping[str, Any], plan_dir: Path, work: Path, jobs: int) -> dict[str, Any]:
    """Each function's CUDA C -> cubin (nvcc processes in parallel): per function the cubin and
    ptxas's resources, or an error; and why a kernel could not launch."""
    from tlm.measure.cuda_build import CudaProgram, Kernel
    from tlm.measure.cuda_runner import compile_file
    from tlm.measure.nvcc import KernelResources, launch_error

    (work / "cubin").mkdir(parents=True, exist_ok=True)
    funcs = plan["functions"]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {name: pool.submit(compile_file, str(plan_dir / f["src"]), str(work / "cubin" / f"{name}.cubin"),
                                     plan["arch"]) for name, f in funcs.items()}
        out = {name: fut.result() for name, fut in futures.items()}
    tgt = plan["target"]
    limits = {"max_smem": int(tgt.get("max_shared_memory_per_block", 49152)),
              "registers_per_sm": int(tgt.get("registers_per_block", 65536)),
              "max_threads": int(tgt.get("max_threads_per_block", 1024))}
    for name, res in out.items():
        if "error" not in res:
            prog = CudaProgram("", [Kernel(**k) for k in funcs[name]["kernels"]], funcs[name]["workspaces"])
            why = launch_error(prog, "", {k: KernelResources(**v) for k, v in res["resources"].items()}, **limits)
            if why:
                res["error"] = f"cannot launch: {why}"
    return out


# ---------------------------------------------------------------- on the GPU (child process)
class PlanRunner:
    """The plan's buffers on GPU 0 and its launches, prebuilt (argument tuples included) so that
    timing sees the kernels, not Python."""

    def __init__(self, plan: dict[str, Any], plan_dir: Path, cubins: dict[str, str]):
        import cupy as cp
        import numpy as np

        self.cp, self.plan = cp, plan
        self.stream = cp.cuda.Stream(non_blocking=True)  # graph capture needs a stream of its own
        host = host_arrays(plan, plan_dir)
        self.bufs: dict[int, Any] = {}
        for b in plan["buffers"]:
            if b["kind"] == "view":
                self.bufs[b["id"]] = self.bufs[b["base"]].reshape(b["shape"])  # the base is listed first
            elif b["id"] in host:
                self.bufs[b["id"]] = cp.asarray(np.ascontiguousarray(host[b["id"]]))
            else:
                self.bufs[b["id"]] = cp.empty(b["shape"], dtype=b["dtype"])
        del host
        funcs, modules = {}, {}
        for name, f in plan["functions"].items():
            modules[name] = cp.RawModule(path=cubins[name])
            ws = [cp.empty(max(1, int(n)), dtype=cp.uint8) for n in f["workspaces"]]
            funcs[name] = (f, ws)
        self.modules = modules
        self.steps = []
        for step in plan["steps"]:
            f, ws = funcs[step["func"]]
            calls = []
            for k in f["kernels"]:
                fn = modules[step["func"]].get_function(k["name"])
                if int(k.get("smem", 0)) > 48 * 1024:
                    fn.max_dynamic_shared_size_bytes = int(k["smem"])
                args = tuple(self.bufs[step["args"][a["buf"]]] if "buf" in a else ws[a["ws"]] if "ws" in a
                             else np.int32(a["int"]) for a in k["args"])
                calls.append((fn, tuple(k["grid"]), tuple(k["block"]), args, int(k.get("smem", 0))))
            self.steps.append(calls)
        cp.cuda.Device(0).synchronize()

    def launch(self, steps=None) -> None:
        for calls in self.steps if steps is None else steps:
            for fn, grid, block, args, smem in calls:
                fn(grid, block, args, shared_mem=smem, stream=self.stream)

    def output(self):
        self.stream.synchronize()
        return self.cp.asnumpy(self.bufs[self.plan["output"]])

    def _timed(self, run, n: int) -> list[float]:
        cp = self.cp
        events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(n)]
        for start, end in events:
            start.record(self.stream)
            run()
            end.record(self.stream)
        events[-1][1].synchronize()
        return [cp.cuda.get_elapsed_time(s, e) for s, e in events]

    def repeats(self, run) -> list[float]:
        """ms per run: a warm-up, a first reading, then as many as the budget holds."""
        run()
        (first,) = self._timed(run, 1)
        n = int(min(MAX_REPEAT, max(MIN_REPEAT, TIMING_BUDGET_MS // max(first, 1e-3))))
        return self._timed(run, n)

    def graph(self):
        """The steps captured once in a CUDA graph (one launch replays them all)."""
        self.stream.synchronize()
        self.stream.begin_capture()
        try:
            self.launch()
        finally:
            g = self.stream.end_capture()
        return g

    def step_times(self, n: int = STEP_REPEAT) -> list[float]:
        """Median ms of each step: events between consecutive steps, over n runs."""
        import statistics

        cp = self.cp
        per: list[list[float]] = [[] for _ in self.steps]
        self.launch()
        for _ in range(n):
            events = [cp.cuda.Event() for _ in range(len(self.steps) + 1)]
            events[0].record(self.stream)
            for i, calls in enumerate(self.steps):
                self.launch([calls])
                events[i + 1].record(self.stream)
            events[-1].synchronize()
            for i in range(len(self.steps)):
                per[i].append(cp.cuda.get_elapsed_time(events[i], events[i + 1]))
        return [statistics.median(x) for x in per]


def _write_json(path: Path, obj: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


def child_main(plan_dir: Path, work: Path) -> int:
    """Run, check and time the plan; work/run.json holds what is known after each phase."""
    import statistics

    plan = read_plan(plan_dir)
    compiled = json.loads((work / "compiled.json").read_text())
    res: dict[str, Any] = {"phase": "device"}
    path = work / "run.json"

    def phase(name: str, **kw: Any) -> None:
        res.update(kw, phase=name)
        _write_json(path, res)

    try:
        from tlm.measure.cuda_runner import device_info

        phase("upload", device=device_info())
        runner = PlanRunner(plan, plan_dir, {n: c["cubin"] for n, c in compiled.items()})
        phase("run")
        runner.launch()
        phase("check", **check_output(runner.output(), plan, read_expected(plan, plan_dir)))
        times = runner.repeats(runner.launch)
        phase("graph", median_ms=statistics.median(times), repeats=len(times), min_ms=min(times))
        try:
            g = runner.graph()
            gt = runner.repeats(lambda: g.launch(stream=runner.stream))
            phase("steps", graph_median_ms=statistics.median(gt), graph_repeats=len(gt))
        except Exception as err:  # a graph that will not capture: the plain timing stands (a broken
            # context shows in the per-step pass, as a fault after the timings above)
            phase("steps", graph_error=f"{type(err).__name__}: {first_line(err)}")
        steps = runner.step_times()
        phase("done", steps=[{"step": i, "func": s["func"], "ms": t} for i, (s, t) in enumerate(zip(plan["steps"], steps))],
              sum_step_ms=sum(steps))
    except Exception as err:  # a CUDA fault takes the context: recorded, the process ends
        phase(res["phase"], error=f"fault in {res['phase']}: {type(err).__name__}: {first_line(err)}")
        return 3
    return 0


# ---------------------------------------------------------------- the parent
def cupy_missing() -> str | None:
    """One line when CuPy cannot be imported here, else None."""
    try:
        import cupy  # noqa: F401
    except Exception:  # ImportError, or a CuPy without its CUDA libraries
        return NO_CUPY
    return None


def run(plan_dir: Path, out: Path, seconds: float = 420.0, jobs: int = 4, measure: bool = True,
        work: Path | None = None, log=print) -> dict[str, Any]:
    """Compile the plan, then (measure) run it in a child process; DIR/plan-result.json."""
    start = time.time()
    out.mkdir(parents=True, exist_ok=True)
    work = Path(work or out / "work")
    work.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"plan": str(plan_dir), "error": None}
    try:
        plan = read_plan(plan_dir)
    except TlmError as err:
        return write_result(out, dict(result, error=str(err)))
    result.update(source=plan["source"], card=plan.get("card"), steps_n=len(plan["steps"]),
                  functions=len(plan["functions"]), schedules=plan.get("schedules"))
    if measure and (why := cupy_missing()):
        return write_result(out, dict(result, error=why))
    t0 = time.perf_counter()
    compiled = compile_plan(plan, plan_dir, work, jobs)
    result["compile_s"] = round(time.perf_counter() - t0, 2)
    result["compile_cpu_s"] = round(sum(c["seconds"] for c in compiled.values()), 2)
    result["compiled_ahead"] = sum(bool(c.get("ahead")) for c in compiled.values())  # tlm gpu precompile
    bad = {n: c["error"] for n, c in compiled.items() if "error" in c}
    result["compile_errors"] = bad
    if bad:
        name = sorted(bad)[0]
        return write_result(out, dict(result, error=f"{len(bad)} functions did not compile, e.g. {name}: {bad[name]}"))
    if not measure:
        return write_result(out, result)
    _write_json(work / "compiled.json", compiled)
    (work / "run.json").unlink(missing_ok=True)
    root = str(Path(__file__).resolve().parents[2])  # the folder that holds the tlm package
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    with open(out / "child.log", "a") as logf:
        child = subprocess.Popen([sys.executable, "-m", "tlm.measure.cuda_plan", str(plan_dir), "--out", str(out),
                                  "--work", str(work), "--child"], stdout=logf, stderr=subprocess.STDOUT, env=env)
        try:
            code = child.wait(timeout=max(10.0, seconds - (time.time() - start)))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            code = None
    try:
        ran = json.loads((work / "run.json").read_text())
    except (OSError, ValueError):
        ran = {"phase": "start"}
    result.update({k: v for k, v in ran.items() if k != "error"})
    result["error"] = ran.get("error")
    if code is None:
        result["error"] = result["error"] or f"hung: still in phase {ran.get('phase')} after {seconds:.0f} s"
    elif code != 0 and not result["error"]:
        result["error"] = f"fault: the runner died (exit {code}) in phase {ran.get('phase')}: {last_line(out / 'child.log')}"
    result["seconds"] = round(time.time() - start, 1)
    return write_result(out, result, log)


def write_result(out: Path, result: dict[str, Any], log=None) -> dict[str, Any]:
    _write_json(out / RESULT_FILE, result)
    if log is not None:
        log(json.dumps({k: v for k, v in result.items() if k != "steps"}))
    return result


def main(argv: list[str] | None = None) -> int:
    p = runner_parser("python -m tlm.measure.cuda_plan", __doc__.splitlines()[0], "plan",
                      "compile + run at most this long (a hang is an error)")
    args = p.parse_args(argv)
    plan, out = Path(args.plan), Path(args.out)
    if args.child:
        return child_main(plan, Path(args.work or out / "work"))
    try:
        res = run(plan, out, args.seconds, args.jobs, measure=not args.compile_only,
                  work=Path(args.work) if args.work else None, log=lambda *_: None)
    except Exception as err:  # never a traceback: one line, and the result file says it too
        res = write_result(out, {"plan": str(plan), "error": f"{type(err).__name__}: {first_line(err)}"})
    if res.get("error"):
        print(f"error: {res['error']}", file=sys.stderr)
        return 1
    print(f"{plan}: {res.get('median_ms', float('nan')):.3f} ms, checked {res.get('checked')}"
          if "median_ms" in res else f"{plan}: compiled ({res.get('compile_s')} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
