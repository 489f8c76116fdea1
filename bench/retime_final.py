"""The final CPU run's end-to-end table timed again with today's interleaved timer.

`tlm eval --suite full` (results/full-llvm-znver4-2c, 2026-11-26/27, report at 42263bf) timed its
end-to-end contenders in a fixed order, MetaSchedule first, with no untimed settling; that timer put
1.15-1.39x on the first of two identical builds (bench/results/interleave_aa.md, znver3), so the
README's "TLM@10g 1.05-1.19x MetaSchedule@64g" waited for a re-timing. Its task definitions
(extraction version 4) are not today's, so its records cannot be built by today's code: the
libraries are built by the run's own code from its committed record shards, then timed here.

    git worktree add /tmp/old 42263bf
    PYTHONPATH=/tmp/old python bench/retime_final.py build LIBS [WORKLOAD ...]   # the run's code
    python bench/retime_final.py time LIBS [--rounds 9] [--tvm-threads N] [--out bench/results/final-retimed]

`build` (runs only on the run's code: its EvalConfig, Runner and compile_imported) rebuilds each
workload's contenders (MetaSchedule@64g, TLM@0/1g/10g/32g) from RUN/records as the run's e2e step
did, exports LIBS/W@METHOD.so, and saves the example inputs and PyTorch's outputs of the run's zoo
models (their weights are in the libraries) in LIBS/W.npz. `time` checks every library's output
against that reference, then times all of a workload's libraries, PyTorch eager and ONNX Runtime in
interleaved rounds (each contender 50 ms untimed, then calls back to back for >= 200 ms, the
order rotated each round; as tlm.eval.timing.interleaved), the cross-core round trip first in
each round (bench/xcore.py). `--tvm-threads 1` times the TVM builds on one thread, as the run did
(TVM's thread pinning off, so that PyTorch and ONNX Runtime keep the host's cores). Appends rows to OUT.json, rewrites OUT.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "results" / "full-llvm-znver4-2c"


def build(libs: Path, workloads: list[str], run: Path) -> None:
    """The run's e2e builds, on the run's code (PYTHONPATH at 42263bf)."""
    import tempfile

    import numpy as np
    import torch

    from tlm.compiler.build import CompileConfig, compile_imported
    from tlm.eval.run import Runner
    from tlm.eval.suites import EvalConfig, db_dir, workload_dbs
    from tlm.graph.importer import import_source

    libs.mkdir(parents=True, exist_ok=True)
    raw = json.loads((run / "config.json").read_text())
    cfg = EvalConfig(**{k: v for k, v in raw.items() if k in EvalConfig.__dataclass_fields__})
    # The databases are rebuilt from the committed shards in a scratch folder: RUN stays as committed.
    cfg.out = tempfile.mkdtemp(prefix="tlm-retime-")
    os.symlink((run / "records").resolve(), Path(cfg.out) / "records")
    runner = Runner(cfg)
    for w in workloads or cfg.workloads:
        imported = import_source(w)
        with torch.no_grad():
            out = imported.torch_module.eval()(*imported.example_inputs)
        outs = [o for o in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(o, torch.Tensor)]
        np.savez(libs / f"{w}.npz", **{f"in{i}": x.numpy() for i, x in enumerate(imported.example_inputs)},
                 **{f"out{i}": o.numpy() for i, o in enumerate(outs)})
        with workload_dbs(cfg, w):
            for label in [f"metaschedule@{cfg.ms_budget}"] + [f"tlm@{b}" for b in cfg.tlm_budgets]:
                lib = libs / f"{w}@{label}.so"
                if lib.exists():
                    continue
                db = db_dir(cfg, w, "metaschedule" if label.startswith("metaschedule") else label)
                t0 = time.time()
                m = compile_imported(imported, db, target=runner.target, tasks=runner.tasks(w), output=str(lib),
                                     config=CompileConfig(repeat=3, min_repeat_ms=50, compare=False))
                info = {"workload": w, "method": label, "tuned_tasks": m.tuned_tasks, "greedy_tasks": m.greedy_tasks,
                        "tasks": m.tasks, "measurements": m.measurements, "build_s": round(time.time() - t0, 1)}
                (libs / f"{w}@{label}.json").write_text(json.dumps(info))
                print(info, flush=True)


def _methods(libs: Path, w: str) -> list[str]:
    order = ["metaschedule@64g", "tlm@0", "tlm@1g", "tlm@10g", "tlm@32g"]
    found = [p.name[len(w) + 1:-3] for p in libs.glob(f"{w}@*.so")]
    return sorted(found, key=lambda m: order.index(m) if m in order else len(order))


def time_workload(libs: Path, w: str, rounds: int) -> dict:
    """Check every library of `w` against the run's PyTorch outputs, then one interleaved run."""
    from types import SimpleNamespace

    import numpy as np
    import torch
    import tvm
    from tvm import relax

    from tlm.compiler.build import CompileConfig
    from tlm.compiler.check import max_abs_diff, tolerance_for
    from tlm.compiler.contenders import onnxruntime_runner
    from tlm.eval.timing import interleaved
    from tlm.graph.target import resolve_target
    from tlm.graph.zoo import get_workload
    from xcore import median_trip, round_trip_ns, split_by_placement

    ref = np.load(libs / f"{w}.npz")
    arrays = [ref[f"in{i}"] for i in range(sum(k.startswith("in") for k in ref.files))]
    want = ref["out0"]
    args = [tvm.runtime.tensor(np.ascontiguousarray(a), tvm.cpu()) for a in arrays]
    fns, checks = {}, {}
    for m in _methods(libs, w):
        vm = relax.VirtualMachine(tvm.runtime.load_module(str(libs / f"{w}@{m}.so")), tvm.cpu())
        got = vm["main"](*args)
        got = (got[0] if not hasattr(got, "numpy") else got).numpy()
        diff = max_abs_diff(got, want)  # against the whole-model tolerance of a compile
        checks[m] = {"max_abs_diff": diff, "matches": bool(diff <= tolerance_for(want, CompileConfig()))}
        fns[m] = lambda vm=vm: vm["main"](*args)
    # PyTorch and ONNX Runtime on today's zoo model of the same architecture (its weights differ from
    # the run's: speed, not output, is what they contribute here).
    threads = resolve_target(None).cores  # the host's cores, whatever TVM's threads
    torch.set_num_threads(threads)
    module, inputs = get_workload(w).build()
    fns["pytorch"] = lambda: module(*inputs)
    plain = SimpleNamespace(onnx_path=None, torch_module=module, example_inputs=inputs,
                            inputs=[np.ascontiguousarray(x.numpy()) for x in inputs])
    run, note = onnxruntime_runner(plain, threads)
    if run is not None:
        fns["onnxruntime"] = run
    keys, trips = list(fns), []
    times = interleaved(fns, rounds, before_round=lambda: trips.append(round_trip_ns(samples=1)))
    med = {k: round(statistics.median(v), 4) for k, v in times.items()}
    ms = times.get("metaschedule@64g")
    vs_ms = {}
    for k in keys:
        if ms and k.startswith("tlm@"):
            ratios = [a / b for a, b in zip(ms, times[k])]  # MetaSchedule's time over TLM's, round by round
            near, far = split_by_placement(trips, ratios)
            vs_ms[k] = {"all": round(statistics.median(ratios), 3), "near": (round(statistics.median(near), 3) if near else None, len(near)),
                        "far": (round(statistics.median(far), 3) if far else None, len(far))}
    return {"workload": w, "median_ms": med, "ms_over_tlm": vs_ms, "checks": checks, "onnxruntime_note": note,
            "round_trip_ns": median_trip(trips), "rounds": rounds, "per_round": {"round_trip_ns": trips, **times}}


def _hardware() -> str:
    from tlm.graph.target import resolve_target
    from tlm.measure.shards import host_label

    return host_label(resolve_target(None))


INTRO = ("`python bench/retime_final.py time LIBS --rounds R [--tvm-threads N]` (see its docstring): the libraries "
         "of `results/full-llvm-znver4-2c` (2026-11-26/27, commit 42263bf) rebuilt by that commit's code from "
         "its committed records, then timed with today's interleaved timer (50 ms untimed before each "
         "contender, the order rotated each round) beside PyTorch eager and ONNX Runtime. Medians of the rounds "
         "in ms; `MS / TLM@10g`: the median over the rounds of MetaSchedule@64g's time over TLM@10g's (above 1: "
         "TLM faster), then with the CPUs near (round trip < 150 ns) and far, with their counts. `run`: the "
         "run's own figures (fixed order, MetaSchedule first). Every library's output checked against the "
         "run's PyTorch model.")
HEADER = ("date | hardware | commit | TVM threads | workload | MetaSchedule@64g | TLM@0 | TLM@1g | TLM@10g | TLM@32g "
          "| PyTorch | ONNX Runtime | MS / TLM@10g (near, far) | MS / TLM@10g, run | MS / TLM@0 | MS / TLM@0, run "
          "| round trip ns | all match")


def _fmt(x) -> str:
    return f"{x:.3g}" if isinstance(x, (int, float)) else "-"


def _cells(r: dict) -> list:
    med, v, run = r["median_ms"], r["ms_over_tlm"], r.get("run", {})
    ten = v.get("tlm@10g", {})
    near, far = ten.get("near", (None, 0)), ten.get("far", (None, 0))
    return [r["date"], r["hardware"], r["commit"], r["tvm_threads"], r["workload"],
            *(_fmt(med.get(k)) for k in ("metaschedule@64g", "tlm@0", "tlm@1g", "tlm@10g", "tlm@32g", "pytorch", "onnxruntime")),
            f"{ten['all']:.2f}x ({_fmt(near[0])}x in {near[1]}, {_fmt(far[0])}x in {far[1]})" if ten else "-",
            f"{run['tlm@10g']:.2f}x" if "tlm@10g" in run else "-",
            f"{v['tlm@0']['all']:.2f}x" if "tlm@0" in v else "-", f"{run['tlm@0']:.2f}x" if "tlm@0" in run else "-",
            _fmt(r["round_trip_ns"]), all(c["matches"] for c in r["checks"].values())]


def write(rows: list[dict], out: Path) -> None:
    from xcore import write_table

    write_table(out, "The final CPU run's end-to-end builds, timed again", INTRO, HEADER, _cells, rows)


def _run_ratios(w: str) -> dict:
    """The run's own MetaSchedule@64g time over each TLM contender's (its e2e/W.json)."""
    path = RUN / "e2e" / f"{w}.json"
    if not path.is_file():
        return {}
    rows = {r["method"]: r.get("e2e_ms") for r in json.loads(path.read_text())["rows"]}
    ms = rows.get("metaschedule@64g")
    return {k: ms / t for k, t in rows.items() if k.startswith("tlm@") and ms and t}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="on the run's code (PYTHONPATH at 42263bf): rebuild and export its libraries")
    b.add_argument("libs", type=Path)
    b.add_argument("workloads", nargs="*")
    b.add_argument("--run", type=Path, default=RUN)
    t = sub.add_parser("time", help="on today's code: check and time the libraries")
    t.add_argument("libs", type=Path)
    t.add_argument("workloads", nargs="*")
    t.add_argument("--rounds", type=int, default=9)
    t.add_argument("--tvm-threads", type=int, default=0, help="TVM's threads for the libraries (0: the host's cores)")
    t.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "final-retimed")
    a = p.parse_args(argv)
    if a.cmd == "build":
        build(a.libs, a.workloads, a.run)
        return 0
    if not a.libs.is_dir():
        print(f"retime_final: no folder {a.libs}", file=sys.stderr)
        return 2
    if a.tvm_threads:
        os.environ["TVM_NUM_THREADS"] = str(a.tvm_threads)  # read when TVM's pool starts (before tlm sets it)
        # TVM's pool pins the calling thread to one CPU, and the threads ONNX Runtime starts after it
        # inherit that: on one TVM thread they would all share CPU 0.
        os.environ["TVM_BIND_THREADS"] = "0"
    import subprocess

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    rows = json.loads(a.out.with_suffix(".json").read_text()) if a.out.with_suffix(".json").is_file() else []
    workloads = a.workloads or sorted({p.stem for p in a.libs.glob("*.npz")})
    for w in workloads:
        if not any(a.libs.glob(f"{w}@*.so")):
            print(f"retime_final: no library of {w} in {a.libs}", file=sys.stderr)
            return 2
    from tlm.graph.target import runtime_threads

    for w in workloads:
        r = time_workload(a.libs, w, a.rounds)
        r.update(date=time.strftime("%Y-%m-%d %H:%M"), hardware=_hardware(), commit=commit,
                 tvm_threads=runtime_threads(), run=_run_ratios(w))
        rows.append(r)
        write(rows, a.out)
        print(w, r["median_ms"], r["ms_over_tlm"].get("tlm@10g"), flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
