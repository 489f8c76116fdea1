"""The outside-zoo battery (issue 48): models from outside tlm's zoo, compiled as a user would
(`tlm.compile(module, inputs, budget=B)`), each output checked against PyTorch, timed against
PyTorch eager and ONNX Runtime in one interleaved run.

    python bench/outside_zoo.py                       # budgets 0, 10g and onnx0, every model
    python bench/outside_zoo.py --budget 0 --models unet,swin_tiny
    python bench/outside_zoo.py --budget 0 --models op --no-time  # the one-operator entries (bench/outside_ops.py)
    python bench/outside_zoo.py --report              # only rewrite the results file

The results file keeps every machine's cells (bench/outside_report.py merges this host's run into
it), so a battery spans sessions: cells in work/ are lost with the checkout, the committed JSON is not.

Each (model, budget) cell compiles and checks in its own process with a time limit and is
written to `--run/CELL.json` when it ends, so a killed battery resumes where it stopped (`--redo`
runs cells again from an empty database). Then, per model, one process times every budget's library, PyTorch eager and
ONNX Runtime in one interleaved run (`--no-time` skips this step, `--time-only` runs only it,
for a quiet host; the host's load average is recorded with the figures). A cell ends as `ok` (output matches), `mismatch` (the worst outcome: wrong output),
`refused` (a one-line `TlmError`, the operator named), `crash` (any other exception: a bug, the
traceback's last lines kept), `timeout`, or for `onnx0` (budget 0 from the model's ONNX export,
the other door) `no-onnx` when PyTorch cannot export it. The models are in bench/outside_models.py.
Results: bench/results/outside-zoo.{md,json}, keyed by the host's hardware.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
RESULTS = ROOT / "bench" / "results"


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


# ---------------------------------------------------------------------- one cell (child process)
def run_cell(name: str, budget: str, db: str, rounds: int) -> dict:
    """Compile one model at one budget and check its output (the library is kept for `time_model`)."""
    import warnings

    import torch

    from outside_models import get
    from tlm.compiler.build import CompileConfig
    from tlm.compiler.job import tune_and_compile
    from tlm.errors import TlmError
    from tlm.graph.extract import load
    from tlm.graph.target import resolve_target
    from tlm.measure.shards import host_label

    info = resolve_target(None)
    entry = get(name)
    cell = {"model": name, "family": entry.family, "budget": budget, "hardware": host_label(info),
            "commit": _commit(), "date": time.strftime("%Y-%m-%d"), "threads": info.cores}
    module, inputs = entry.make()
    source = module
    artifact = os.path.abspath(db + ".so")
    if budget.startswith("onnx"):  # the ONNX door: the model's ONNX export, compiled from the file
        budget_value = budget[len("onnx"):]
        source = os.path.join(db + "-onnx", "model.onnx")
        os.makedirs(os.path.dirname(source), exist_ok=True)
        try:
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(module, inputs, source, dynamo=False, opset_version=17)
        except Exception as err:  # noqa: BLE001 - not tlm's failure: there is no ONNX file to compile
            cell.update(status="no-onnx", error=f"torch.onnx.export failed: {type(err).__name__}: "
                        + (str(err).strip().splitlines() or [""])[0][:200])
            return cell
    else:
        budget_value = budget
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            imported, tasks = load(source, None if budget.startswith("onnx") else inputs, info)
            compiled = tune_and_compile(imported, tasks, info, db=db,
                                        budget=int(budget_value) if budget_value.isdigit() else budget_value,
                                        config=CompileConfig(compare=False), output=artifact)
    except TlmError as err:
        lines = str(err).strip().splitlines() or [""]
        cell.update(status="refused", error=lines[0], error_lines=len(lines),
                    compile_s=round(time.perf_counter() - t0, 1))
        return cell
    except Exception as err:  # noqa: BLE001 - any other exception reaching the caller is a bug
        tb = traceback.format_exception(err)
        cell.update(status="crash", error=f"{type(err).__name__}: {str(err).strip()[:300]}",
                    traceback="".join(tb)[-3000:], compile_s=round(time.perf_counter() - t0, 1))
        return cell
    cell.update(compile_s=round(time.perf_counter() - t0, 1), tasks=compiled.tasks,
                tuned=compiled.tuned_tasks, greedy=compiled.greedy_tasks, untuned=len(compiled.untuned_tasks),
                measurements=compiled.measurements, max_abs_diff=compiled.max_abs_diff,
                tolerance=compiled.tolerance, warnings=sorted({str(w.message).splitlines()[0][:200] for w in caught}),
                status="ok" if compiled.matches else "mismatch", artifact=artifact)
    return cell


def time_model(name: str, cells: dict[str, dict], rounds: int) -> dict:
    """One interleaved run for a model: each round times every budget's compiled library,
    PyTorch eager and ONNX Runtime back to back, on the same inputs and threads."""
    from types import SimpleNamespace

    import numpy as np
    import torch
    import tvm
    from tvm import relax

    from ort_gap import one_thread_timer
    from outside_models import get
    from tlm.compiler.apply import to_tvm
    from tlm.compiler.contenders import median_ms, onnxruntime_runner
    from tlm.graph.target import resolve_target, runtime_threads

    info = resolve_target(None)
    torch.set_num_threads(info.cores)
    module, inputs = get(name).make()
    args = to_tvm(inputs)
    runners, out = {}, {"onnxruntime_note": None}
    closers = []
    for budget, cell in cells.items():
        vm = relax.VirtualMachine(tvm.runtime.load_module(cell["artifact"]), tvm.cpu())
        runners[budget] = lambda f=vm["main"]: f(*args)
        if budget == "0":  # the same library on one TVM thread: how tlm ran here before 2026-11-28
            runners["0_1thread"], close = one_thread_timer(cell["artifact"], [np.ascontiguousarray(x.numpy()) for x in inputs], 50)
            closers.append(close)
    with torch.no_grad():
        runners["pytorch"] = lambda: module(*inputs)
        try:  # the compiler's own ONNX Runtime runner (export, session on the same threads)
            plain = SimpleNamespace(onnx_path=None, torch_module=module, example_inputs=inputs,
                                    inputs=[np.ascontiguousarray(x.numpy()) for x in inputs])
            run, out["onnxruntime_note"] = onnxruntime_runner(plain, info.cores)
            if run is not None:
                runners["onnxruntime"] = run
        except Exception as err:  # noqa: BLE001 - a comparison that cannot run is reported
            out["onnxruntime_note"] = f"{type(err).__name__}: " + (str(err).strip().splitlines() or [""])[0][:200]
        times: dict[str, list[float]] = {k: [] for k in runners}
        for _ in range(rounds):
            for key, fn in runners.items():
                times[key].append(fn() if key.endswith("_1thread") else median_ms(fn, repeat=3, min_repeat_ms=50))
    for close in closers:
        close()
    for key, values in times.items():
        out[f"{key}_ms"] = round(statistics.median(values), 4)
    out.update(rounds=rounds, load=round(os.getloadavg()[0], 2), timed=time.strftime("%Y-%m-%d %H:%M"),
               threads=runtime_threads())  # what TVM ran with (tlm's import: the host's cores)
    return out


# ---------------------------------------------------------------------- the battery (parent)
def _cell_path(run: Path, name: str, budget: str) -> Path:
    return run / f"{name}@{budget}.json"


def run_battery(names: list[str], budgets: list[str], run: Path, timeout: int, rounds: int, redo: bool) -> None:
    run.mkdir(parents=True, exist_ok=True)
    for budget in budgets:
        for name in names:
            path = _cell_path(run, name, budget)
            if path.exists() and not redo:
                continue
            db = run / "dbs" / f"{name}@{budget}"
            if path.exists():  # a redo starts from nothing: the old database's picks would be reused
                for old in (db, Path(f"{db}-onnx")):
                    shutil.rmtree(old, ignore_errors=True)
                Path(f"{db}.so").unlink(missing_ok=True)
            print(f"[{time.strftime('%H:%M:%S')}] {name} @ {budget}", flush=True)
            cmd = [sys.executable, __file__, "--cell", name, "--budget", budget, "--rounds", str(rounds),
                   "--db", str(db), "--out", str(path)]
            t0 = time.perf_counter()
            try:
                proc = subprocess.run(cmd, timeout=timeout, capture_output=True, text=True, start_new_session=True)
                if not path.exists():  # the child died without writing (a segfault, out of memory)
                    tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
                    _write(path, {"model": name, "budget": budget, "status": "crash",
                                  "error": f"exit {proc.returncode}: " + " | ".join(tail)[-300:]})
            except subprocess.TimeoutExpired:
                _write(path, {"model": name, "budget": budget, "status": "timeout",
                              "error": f"over {timeout} s", "compile_s": round(time.perf_counter() - t0, 1)})
            cell = json.loads(path.read_text())
            print(f"    {cell['status']}: {cell.get('error') or _summary(cell)}", flush=True)


def time_battery(names: list[str], run: Path, timeout: int, rounds: int, retime: bool) -> None:
    """The timing step: per model whose compiled cells lack timings (all with `retime`), one
    child process runs `time_model` and writes the figures into those cells."""
    for name in names:
        paths = sorted(run.glob(f"{name}@*.json"))
        cells = {p: json.loads(p.read_text()) for p in paths}
        ok = {p: c for p, c in cells.items() if c["status"] == "ok" and os.path.exists(c.get("artifact", ""))}
        if not ok or (not retime and all("tlm_ms" in c for c in ok.values())):
            continue
        print(f"[{time.strftime('%H:%M:%S')}] timing {name} ({', '.join(c['budget'] for c in ok.values())})", flush=True)
        out = run / f"{name}.timing.tmp"
        cmd = [sys.executable, __file__, "--time-model", name, "--rounds", str(rounds), "--out", str(out),
               "--run", str(run)]
        try:
            proc = subprocess.run(cmd, timeout=timeout, capture_output=True, text=True, start_new_session=True)
        except subprocess.TimeoutExpired:
            print(f"    timing over {timeout} s", flush=True)
            continue
        if not out.exists():
            print("    timing failed: " + " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])[-300:], flush=True)
            continue
        times = json.loads(out.read_text())
        out.unlink()
        for path, cell in ok.items():
            cell.update({k: v for k, v in times.items() if not k.endswith("_ms")})
            cell.update(tlm_ms=times.get(f"{cell['budget']}_ms"), pytorch_ms=times.get("pytorch_ms"),
                        onnxruntime_ms=times.get("onnxruntime_ms"), tlm_1thread_ms=times.get(f"{cell['budget']}_1thread_ms"))
            _write(path, cell)
        print(f"    {_summary(next(iter(ok.values())))}", flush=True)


def _write(path: Path, cell: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(cell, indent=1))
    os.replace(tmp, path)  # a killed battery never leaves half a cell


def _summary(cell: dict) -> str:
    if "tlm_ms" not in cell:
        return f"{cell.get('tasks')} tasks, compiled in {cell.get('compile_s')} s, max abs diff {cell.get('max_abs_diff'):.2g}"
    parts = [f"tlm {cell.get('tlm_ms')} ms", f"pytorch {cell.get('pytorch_ms')} ms"]
    if cell.get("onnxruntime_ms"):
        parts.append(f"ort {cell['onnxruntime_ms']} ms")
    return ", ".join(parts) + f" (load {cell.get('load')})"


def main(argv: list[str] | None = None) -> int:
    from outside_models import entries

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--budget", action="append",
                   help="budgets to run, repeated or comma-separated (default: 0,10g,onnx0; onnxB: budget B "
                        "through the model's ONNX export)")
    p.add_argument("--models", help="comma-separated model names or families (vision, audio, text, plain, op: "
                                    "one operator each); default: every model but the op entries")
    p.add_argument("--run", default=None, help="cell folder (default: work/outside-zoo/CPU-CORESc, e.g. znver3-2c)")
    p.add_argument("--timeout", type=int, default=3600, help="seconds per cell")
    p.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    p.add_argument("--redo", action="store_true", help="run cells again that have a result")
    p.add_argument("--report", action="store_true", help="only write the results file")
    p.add_argument("--no-time", action="store_true", help="compile and check only (time later)")
    p.add_argument("--time-only", action="store_true", help="only time compiled cells that lack timings")
    p.add_argument("--retime", action="store_true", help="time every compiled cell again")
    p.add_argument("--cell", help=argparse.SUPPRESS)
    p.add_argument("--time-model", help=argparse.SUPPRESS)
    p.add_argument("--db", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    budgets = [b.strip() for text in (args.budget or ["0,10g,onnx0"]) for b in text.split(",") if b.strip()]
    from tlm.errors import TlmError
    from tlm.search.base import parse_budget

    try:  # a bad budget fails here, in one line, before any cell is written
        for b in budgets:
            parse_budget(b[len("onnx"):] if b.startswith("onnx") else b, 1, allow_zero=True)
    except TlmError as err:
        print(f"outside_zoo: {err}", file=sys.stderr)
        return 2
    if args.cell:
        _write(Path(args.out), run_cell(args.cell, budgets[0], args.db, args.rounds))
        return 0
    if args.time_model:
        cells = [json.loads(p.read_text()) for p in sorted(Path(args.run).glob(f"{args.time_model}@*.json"))]
        ok = {c["budget"]: c for c in cells if c["status"] == "ok" and os.path.exists(c.get("artifact", ""))}
        _write(Path(args.out), time_model(args.time_model, ok, args.rounds))
        return 0
    from tlm.graph.target import resolve_target

    known = [e.name for e in entries()]
    families = {e.family for e in entries()}
    # no --models: the models (not the one-operator entries); a family name stands for its entries
    names = ([e.name for e in entries() if e.family != "op"] if not args.models else
             [n for m in args.models.split(",") for n in ([e.name for e in entries() if e.family == m]
                                                        if m in families else [m])])
    if unknown := sorted(set(names) - set(known)):
        print(f"outside_zoo: unknown model(s) {', '.join(unknown)}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    info = resolve_target(None)
    run = Path(args.run) if args.run else ROOT / "work" / "outside-zoo" / f"{info.cpu}-{info.cores}c"
    if not args.report and not args.time_only:
        run_battery(names, budgets, run, args.timeout, args.rounds, args.redo)
    if not args.report and not args.no_time:
        time_battery(names, run, args.timeout, args.rounds, args.retime or args.redo)
    from outside_report import write_report
    from tlm.measure.shards import host_label

    write_report(run, known, RESULTS / "outside-zoo", host_label(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
