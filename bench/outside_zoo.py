"""The outside-zoo battery (issue 48): models from outside tlm's zoo, compiled as a user would
(`tlm.compile(module, inputs, budget=B)`), each output checked against PyTorch, timed against
PyTorch eager and ONNX Runtime in one interleaved run.

    python bench/outside_zoo.py                       # budgets 0, 10g and onnx0, every model
    python bench/outside_zoo.py --budget 0 --models unet,swin_tiny
    python bench/outside_zoo.py --report              # only rewrite the results file

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
    from tlm.compiler.build import median_ms, onnxruntime_runner, to_tvm
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


# ---------------------------------------------------------------------- the results file
def _geomean(values: list[float]) -> float | None:
    return statistics.geometric_mean(values) if values else None


def _ms(value) -> str:
    return "-" if value is None else (f"{value:.3g}" if value < 100 else f"{value:.0f}")


def cells_cores(cells: dict) -> str:
    return ", ".join(sorted({str(c["threads"]) for c in cells.values() if c.get("threads")})) or "?"


def _ok(cell: dict | None) -> bool:
    return bool(cell) and cell["status"] == "ok" and bool(cell.get("tlm_ms")) and bool(cell.get("pytorch_ms"))


def write_report(run: Path, names: list[str], stem: Path) -> None:
    """`stem`.json (every cell) and `stem`.md (the table, the failures, the targets)."""
    cells = {}
    for path in sorted(run.glob("*@*.json")):
        cell = json.loads(path.read_text())
        cells[(cell["model"], cell["budget"])] = cell
    budgets = sorted({b for _, b in cells}, key=lambda b: (b != "0", b))
    stem.with_suffix(".json").write_text(json.dumps(list(cells.values()), indent=1))
    hw = sorted({c["hardware"] for c in cells.values() if c.get("hardware")})
    commits = sorted({c["commit"] for c in cells.values() if c.get("commit")})
    dates = sorted({c["date"] for c in cells.values() if c.get("date")})
    lines = ["# Outside the zoo: compile, check, time (issue 48)", "",
             f"Hardware: {', '.join(hw) or '-'}; dates {', '.join(dates) or '-'}; commits {', '.join(commits) or '-'}.",
             "Command: `python bench/outside_zoo.py` (cells in `work/outside-zoo/CPU-CORESc/`; models in "
             "`bench/outside_models.py`). Each cell: `tlm.compile(module, inputs, budget=B)` with the shipped "
             "model, output checked against PyTorch, then tlm, PyTorch eager and ONNX Runtime timed in one "
             "interleaved run (median of 5 rounds, each the median of 3 repeats of >= 50 ms), same threads.", "",
             "| model | family | tasks | " + " | ".join(f"TLM@{b} ms" for b in budgets)
             + " | PyTorch ms | ONNX Runtime ms | " + " | ".join(f"@{b} / PyTorch" for b in budgets) + " | status |",
             "|" + "---|" * (5 + 2 * len(budgets)) + "---|"]
    ratios: dict[str, list[float]] = {b: [] for b in budgets}
    problems, slower, doors = [], [], []
    for name in names:
        row = {b: cells.get((name, b)) for b in budgets}
        if not any(row.values()):
            continue
        first = next(c for c in row.values() if c)
        status = []
        for b, c in row.items():
            if c is None:
                status.append(f"@{b} not run")
            elif c["status"] != "ok":
                status.append(f"@{b} {c['status']}")
                problems.append(f"- `{name}` @{b} **{c['status']}**: {c.get('error') or ''}"
                                + (f" (max abs diff {c.get('max_abs_diff'):.3g}, tolerance {c.get('tolerance'):.3g})"
                                   if c["status"] == "mismatch" else ""))
            if c and c["status"] == "ok" and c.get("tlm_ms") and c.get("pytorch_ms"):
                ratios[b].append(c["tlm_ms"] / c["pytorch_ms"])
        oks = [c for c in row.values() if c and c["status"] == "ok"]
        base = oks[0] if oks else first
        tlm = [_ms(c.get("tlm_ms")) if c and c["status"] == "ok" else "-" for c in row.values()]
        rel = [f"{c['tlm_ms'] / c['pytorch_ms']:.2f}x" if c and c["status"] == "ok" and c.get("tlm_ms") else "-"
               for c in row.values()]
        lines.append(f"| {name} | {first.get('family', '-')} | {base.get('tasks', '-')} | " + " | ".join(tlm)
                     + f" | {_ms(base.get('pytorch_ms'))} | {_ms(base.get('onnxruntime_ms'))} | " + " | ".join(rel)
                     + f" | {'; '.join(status) or 'ok'} |")
        zero, tuned, door = (row.get(b) for b in ("0", "10g", "onnx0"))
        if _ok(zero) and _ok(tuned) and tuned["tlm_ms"] > zero["tlm_ms"] * 1.05:
            slower.append(f"`{name}` ({zero['tlm_ms']:.3g} -> {tuned['tlm_ms']:.3g} ms)")
        if _ok(zero) and _ok(door):
            doors.append((door["tlm_ms"] / door["pytorch_ms"]) / (zero["tlm_ms"] / zero["pytorch_ms"]))
    run_names = [n for n in names if any((n, b) in cells for b in budgets)]
    loads = [c["load"] for c in cells.values() if c.get("load") is not None]
    lines += ["", "Time ratios are TLM / PyTorch eager from the same cell's interleaved run (below 1: tlm faster)."
              + (f" Host load average during the timings: {min(loads):.1f}-{max(loads):.1f}; threads "
                 f"{cells_cores(cells)} (TVM's pool, PyTorch and ONNX Runtime alike; before 2026-11-28 TVM ran one thread "
                 "on 2-core hosts: half the logical CPUs, its default)." if loads else ""), ""]
    for b in budgets:
        done = [n for n in run_names if (n, b) in cells]
        ok = sum(1 for n in done if cells[(n, b)]["status"] == "ok")
        refused = sum(1 for n in done if cells[(n, b)]["status"] == "refused")
        g = _geomean(ratios[b])
        lines.append(f"- Budget {b}: {len(done)} models run, {ok} compiled and matched, {refused} refused in one line, "
                     f"{len(done) - ok - refused} failed otherwise; geomean TLM/PyTorch over the {len(ratios[b])} "
                     f"that matched: {'-' if g is None else f'{g:.2f}x'}.")
    for b in budgets:
        vs_ort = [c["tlm_ms"] / c["onnxruntime_ms"] for (n, bb), c in cells.items()
                  if bb == b and _ok(c) and c.get("onnxruntime_ms")]
        if vs_ort:
            lines.append(f"- Budget {b}: geomean TLM/ONNX Runtime over the {len(vs_ort)} with both: "
                         f"{statistics.geometric_mean(vs_ort):.2f}x.")
    odd = sorted({n for (n, _), c in cells.items() if _ok(c) and c.get("onnxruntime_ms")
                  and c["pytorch_ms"] > 5 * max(c["onnxruntime_ms"], c["tlm_ms"])})
    if odd:
        lines.append(f"- PyTorch eager ran over 5x slower than both tlm and ONNX Runtime on {', '.join(odd)}: "
                     "small models, where eager's per-operator overhead dominates; or timings taken beside other "
                     "jobs (see the load): `--time-only --retime` on a quiet host times them again.")
    one = {n: c for (n, b), c in cells.items() if b == "0" and _ok(c) and c.get("tlm_1thread_ms")}
    if one:
        gain = {n: c["tlm_1thread_ms"] / c["tlm_ms"] for n, c in one.items()}
        lines.append(f"- Budget 0 on ONE TVM thread, the same libraries in the same rounds (how tlm ran on 2-core hosts "
                     f"before 2026-11-28): geomean TLM/PyTorch {_geomean([c['tlm_1thread_ms'] / c['pytorch_ms'] for c in one.values()]):.2f}x; "
                     f"the host's threads are {_geomean(list(gain.values())):.2f}x faster (geomean over {len(one)} models; "
                     f"least {min(gain.values()):.2f}x on {min(gain, key=gain.get)}, most {max(gain.values()):.2f}x on "
                     f"{max(gain, key=gain.get)}).")
    if "10g" in budgets:
        lines.append(f"- Slower at 10g than at 0 (by > 5%): {', '.join(slower) or 'none'}.")
    else:
        lines.append("- Budget 10g: no cell run yet on this host.")
    if doors:
        lines.append(f"- The ONNX door against the PyTorch door at budget 0 (each against PyTorch in its own cell): "
                     f"geomean {statistics.geometric_mean(doors):.2f}x, worst {max(doors):.2f}x over {len(doors)} models.")
    lines += ["", "## Failures", ""] + (problems or ["None."])
    notes = sorted({f"- `{c['model']}`: {c['onnxruntime_note']}" for c in cells.values() if c.get("onnxruntime_note")})
    if notes:
        lines += ["", "## ONNX Runtime could not run", ""] + notes
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")


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
                   help="budgets to run (default: 0, 10g and onnx0: budget 0 through the model's ONNX export)")
    p.add_argument("--models", help="comma-separated model names (default: all)")
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
    budgets = args.budget or ["0", "10g", "onnx0"]
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
    names = known if not args.models else args.models.split(",")
    if unknown := sorted(set(names) - set(known)):
        print(f"outside_zoo: unknown model(s) {', '.join(unknown)}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    info = resolve_target(None)
    run = Path(args.run) if args.run else ROOT / "work" / "outside-zoo" / f"{info.cpu}-{info.cores}c"
    if not args.report and not args.time_only:
        run_battery(names, budgets, run, args.timeout, args.rounds, args.redo)
    if not args.report and not args.no_time:
        time_battery(names, run, args.timeout, args.rounds, args.retime or args.redo)
    write_report(run, known, RESULTS / "outside-zoo")
    return 0


if __name__ == "__main__":
    sys.exit(main())
