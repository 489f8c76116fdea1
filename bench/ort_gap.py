"""The gap to ONNX Runtime on CPU (issue 46): each zoo workload compiled by tlm at one or more
budgets, every library timed in one interleaved run against PyTorch eager, torch.compile and
ONNX Runtime on the same inputs and threads. The README's headline table is its newest run.

    python bench/ort_gap.py --budget 0,10g [--workloads bert_tiny,...] [--rounds 5] [--readme [BLOCK]]

Each budget is a build (`tlm.compile(workload, budget=B)` with the shipped models, output checked
against PyTorch); `--db-root DIR` compiles from the records in DIR/<workload>/<method> instead
(e.g. results/full-llvm-znver3-2c/records, method tlm@10g), skipping workloads without them;
with `--budget` too, the records' build is timed beside the budgets' (e.g. MetaSchedule@64g).
Libraries and their compile records go to work/ort-gap/<cpu>-<cores>c/ (a killed run resumes
from the builds done); rows are appended to bench/results/ort-gap.json and the table rewritten
in .md; `--readme` puts this run's table between README.md's ort-gap markers (`--readme znver3`:
between the `ort-gap:znver3` markers, a second CPU's table).
`--one-thread` also times the first build on ONE TVM thread in a child process (what tlm ran
with on 2-core hosts before 2026-11-28: TVM gives its pool half the logical CPUs on x86).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from vm_profile import kernels_alone  # bench/ is on the path when a bench script runs
from xcore import median_trip, round_trip_ns, split_by_placement

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = ["bert_tiny", "bert_base", "gpt2", "resnet_50", "mobilenet_v2", "dcgan"]


def _on_one_thread(server, conn, *args) -> None:
    """Child process: TVM's pool on one thread (set before it starts), then `server(conn, *args)`."""
    os.environ["TVM_NUM_THREADS"] = "1"
    from tlm.graph.target import runtime_threads

    conn.send(runtime_threads())
    server(conn, *args)


def one_thread_child(server, *args):
    """(conn, close): `server(conn, *args)` runs in a child process whose TVM pool has one thread
    (TVM sizes its pool once per process); it serves requests from `conn` until it reads None."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_on_one_thread, args=(server, child, *args), daemon=True)
    proc.start()
    if parent.recv() != 1:
        raise RuntimeError("the one-thread child did not get a one-thread pool")

    def close() -> None:
        parent.send(None)
        proc.join(30)

    return parent, close


def _vm_server(conn, artifact: str, inputs: list, min_repeat_ms: int) -> None:
    """Times the model `artifact` (ms) whenever asked."""
    import tvm
    from tvm import relax

    from tlm.compiler.apply import to_tvm
    from tlm.compiler.contenders import median_ms

    vm = relax.VirtualMachine(tvm.runtime.load_module(artifact), tvm.cpu())
    args = to_tvm(inputs)
    while conn.recv() is not None:
        conn.send(median_ms(lambda: vm["main"](*args), repeat=3, min_repeat_ms=min_repeat_ms))


def one_thread_timer(artifact: str, arrays: list, min_repeat_ms: int = 200):
    """(timer, close): `timer()` times the model `artifact` on one TVM thread in a child process
    and returns ms; `close()` ends the child."""
    conn, close = one_thread_child(_vm_server, artifact, arrays, min_repeat_ms)
    return (lambda: (conn.send(True), conn.recv())[1]), close


def compile_workload(name: str, budget: str | None, db: str | None, out: Path) -> dict:
    """The workload tuned to `budget` into `db` and compiled, or (`budget` None) compiled from
    `db`'s records. "10g@t2": 10g with every program measured on 2 TVM threads (default: the
    measurer's, TVM's default pool, on which the corpus was measured)."""
    import tlm
    from tlm.compiler.build import CompileConfig
    from tlm.measure.config import MeasureConfig
    from tlm.search.base import TuneConfig

    budget, _, threads = budget.partition("@t") if budget else (None, "", "")
    tune_config = TuneConfig(measure=MeasureConfig(threads=int(threads))) if threads else None
    t0 = time.perf_counter()
    model = tlm.compile(name, db=db, budget=budget, output=str(out), tune_config=tune_config,
                        config=CompileConfig(compare=False, repeat=3))
    return {"artifact": str(out), "matches": model.matches, "max_abs_diff": model.max_abs_diff,
            "tasks": model.tasks, "tuned_tasks": model.tuned_tasks, "greedy_tasks": model.greedy_tasks,
            "measurements": model.measurements, "compile_s": round(time.perf_counter() - t0, 1),
            # the final pick (tlm.compiler.cold_pick): kept or not, both builds' whole-model ms
            "cold_measurements": model.cold_measurements,
            "final_pick": model.final_pick}


def _db_from_shards(shards: str, db_dir: Path) -> str:
    """A record database of the shards under `shards` (a run's `records/WORKLOAD/METHOD`)."""
    from tlm.measure.database import open_db
    from tlm.measure.shards import ingest

    if not (db_dir / "records.sqlite").exists():
        db = open_db(str(db_dir), create=True)
        try:
            ingest(db, shards)
        finally:
            db.close()
    return str(db_dir)


def _torch_compiled(module, inputs) -> tuple:
    """(callable, note): the module under `torch.compile` (inductor, default mode), compiled by a
    first call and checked against eager; (None, reason) when it cannot be had."""
    import torch

    from tlm.graph.importer import _first_tensor

    try:
        compiled = torch.compile(module)
        got, want = _first_tensor(compiled(*inputs)), _first_tensor(module(*inputs))
        if not torch.allclose(got, want, rtol=1e-3, atol=1e-3):
            return None, f"torch.compile's output differs from eager (max abs {float((got - want).abs().max()):.3g})"
        return (lambda: compiled(*inputs)), None
    except Exception as err:  # noqa: BLE001 - a contender that fails is a note, not the run's end
        return None, "torch.compile failed: " + (str(err).strip().splitlines() or [type(err).__name__])[0][:200]


def time_workload(name: str, artifacts: dict[str, str], rounds: int, one_thread: bool = False,
                  torch_compile: bool = True) -> dict:
    """One interleaved run: every tlm library of `artifacts` (build -> .so, host threads), the first
    one on one TVM thread too (child process) when `one_thread`, PyTorch eager, torch.compile and
    ONNX Runtime, all on the same inputs and threads. Returns the medians (ms), and each round's
    times and cross-core round trip under `per_round`."""
    from types import SimpleNamespace

    import numpy as np
    import torch
    import tvm
    from tvm import relax

    from tlm.compiler.apply import to_tvm
    from tlm.compiler.contenders import median_ms, onnxruntime_runner
    from tlm.graph.target import runtime_threads
    from tlm.graph.zoo import get_workload

    threads = runtime_threads()
    torch.set_num_threads(threads)
    module, inputs = get_workload(name).build()
    arrays = [np.ascontiguousarray(x.numpy()) for x in inputs]
    args = to_tvm(arrays)

    def timer(fn):
        return lambda: median_ms(fn, repeat=3, min_repeat_ms=200)

    runners, close = {}, None
    for build, artifact in artifacts.items():
        lib = tvm.runtime.load_module(artifact)
        vm = relax.VirtualMachine(lib, tvm.cpu())
        runners[f"tlm:{build}"] = timer(lambda vm=vm: vm["main"](*args))
        runners[f"alone:{build}"] = kernels_alone(lib, args)
    if one_thread:
        runners["tlm_1thread"], close = one_thread_timer(next(iter(artifacts.values())), arrays)
    out: dict = {"threads": threads, "onnxruntime_note": None, "torch_compile_note": None}
    with torch.no_grad():
        runners["pytorch"] = timer(lambda: module(*inputs))
        if torch_compile:
            run, out["torch_compile_note"] = _torch_compiled(module, inputs)
            if run is not None:
                runners["torch_compile"] = timer(run)
        plain = SimpleNamespace(onnx_path=None, torch_module=module, example_inputs=inputs, inputs=arrays)
        run, out["onnxruntime_note"] = onnxruntime_runner(plain, threads)
        if run is not None:
            runners["onnxruntime"] = timer(run)
        times: dict[str, list[float]] = {k: [] for k in runners}
        trips = []
        for _ in range(rounds):
            trips.append(round_trip_ns(samples=1))  # where the host has put the two CPUs (bench/xcore.py)
            for key, fn in runners.items():
                times[key].append(fn())
    if close:
        close()
    out["tlm_ms"] = {k.split(":", 1)[1]: round(statistics.median(v), 4) for k, v in times.items() if k.startswith("tlm:")}
    out["alone_ms"] = {k.split(":", 1)[1]: round(statistics.median(v), 4) for k, v in times.items() if k.startswith("alone:")}
    out["whole_over_alone"] = {}  # per build: the median of each round's whole / alone, all rounds, CPUs near, far
    for build in artifacts:
        ratios = [w / a for w, a in zip(times[f"tlm:{build}"], times[f"alone:{build}"])]
        near, far = split_by_placement(trips, ratios)
        out["whole_over_alone"][build] = {k: (round(statistics.median(v), 3) if v else None, len(v))
                                          for k, v in (("all", ratios), ("near", near), ("far", far))}
    for key, values in times.items():
        if not key.startswith(("tlm:", "alone:")):
            out[f"{key}_ms"] = round(statistics.median(values), 4)
    out.update(rounds=rounds, load=round(os.getloadavg()[0], 2), timed=time.strftime("%Y-%m-%d %H:%M"),
               round_trip_ns=median_trip(trips),
               per_round={"round_trip_ns": trips, **times})  # for bench/xcore.py --beside; not in the rows
    return out


def _hardware() -> tuple[str, str]:
    from tlm.graph.target import resolve_target
    from tlm.measure.shards import host_label

    info = resolve_target(None)
    return f"{info.cpu}-{info.cores}c", host_label(info)


def _fmt(x) -> str:
    return f"{x:.3g}" if x else "-"


def _ratio(a, b) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def _over_alone(w: dict | None) -> str:
    """`1.08x (1.05x in 7, 1.40x in 2)`: whole / kernels alone over all rounds (median of the
    rounds' ratios), then over the rounds with the two CPUs near and far (how many; `-` in none)."""
    if not w or w["all"][0] is None:
        return "-"
    part = lambda k: f"{w[k][0]:.2f}x in {w[k][1]}" if w[k][0] is not None else "-"  # noqa: E731
    return f"{w['all'][0]:.2f}x ({part('near')}, {part('far')})"


def headline(rows: list[dict]) -> list[str]:
    """The newest `--readme` run's rows as one table (a column per tlm build): the README's headline."""
    runs = [r for r in rows if r.get("run")]
    runs = [r for r in runs if r.get("readme")] or runs
    if not runs:
        return []
    last = max(r["run"] for r in runs)
    rows = [r for r in runs if r["run"] == last]
    builds = list(dict.fromkeys(r["build"] for r in rows))
    best = builds[-1]  # the last build named is the one compared (e.g. budget 10g)
    names = list(dict.fromkeys(r["workload"] for r in rows))
    label = (lambda b: "TLM@" + b.split(" ", 1)[1] if b.startswith("budget ") else b)
    alone = any(r.get("whole_over_alone") for r in rows)  # runs before 2026-12-06 14:00 did not time it
    lines = [f"| workload | {' | '.join(label(b) + ' ms' for b in builds)} | PyTorch ms | torch.compile ms | "
             f"ONNX Runtime ms | {label(best)} vs ONNX Runtime | vs PyTorch | vs torch.compile | "
             + (f"{label(best)} whole / kernels alone (CPUs near, far) | " if alone else "") + "matches |",
             "|" + "---|" * (len(builds) + 8 + alone)]
    for name in names:
        by = {r["build"]: r for r in rows if r["workload"] == name}
        r = by.get(best) or next(iter(by.values()))
        t = by[best]["tlm_ms"] if best in by else None
        lines.append(f"| {name} | {' | '.join(_fmt(by[b]['tlm_ms']) if b in by else '-' for b in builds)} | "
                     f"{_fmt(r['pytorch_ms'])} | {_fmt(r.get('torch_compile_ms'))} | {_fmt(r.get('onnxruntime_ms'))} | "
                     f"{_ratio(r.get('onnxruntime_ms'), t)} | {_ratio(r['pytorch_ms'], t)} | "
                     f"{_ratio(r.get('torch_compile_ms'), t)} | "
                     + (f"{_over_alone(by[best].get('whole_over_alone') if best in by else None)} | " if alone else "")
                     + f"{all(x['matches'] for x in by.values())} |")
    r0 = rows[0]
    return [f"{r0['date']}, {r0['hardware']}, commit {r0['commit']}, {r0['threads']} threads for every contender, "
            f"median of {r0.get('rounds', 5)} interleaved rounds; speeds as the other's time over tlm's (above 1x: "
            f"tlm faster). Command: `{r0.get('command', 'python bench/ort_gap.py')}`.", ""] + lines


def write(rows: list[dict], stem: Path, readme: Path | None = None, block: str = "") -> None:
    new = headline(rows)  # this run's table
    old = json.loads(stem.with_suffix(".json").read_text()) if stem.with_suffix(".json").exists() else []
    rows = old + rows
    stem.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    head = headline(rows)
    lines = ["# The gap to ONNX Runtime on CPU (issue 46)", ""]
    if head:
        lines += ["## The newest run", ""] + head + ["", "## Every run", ""]
    lines += ["`python bench/ort_gap.py` (one row per workload, build and run; newest last). Each run: one interleaved "
              "run per workload (median of the rounds, each the median of 3 repeats of >= 200 ms) of every tlm "
              "library built (host threads), PyTorch eager, torch.compile (inductor; the rows that show it) and ONNX "
              "Runtime on as many threads as tlm; the earliest rows also time the library on one TVM thread (a "
              "child process: what tlm ran with on 2-core hosts before 2026-11-28). Ratios: the other's time over "
              "tlm's (above 1: tlm faster). `round trip ns` (rows from 2026-11-29 03:40 on): the median over the rounds "
              "of the cache-line round trip between CPU 0 and CPU 1 (`bench/xcore.py`; ~70 ns with both on one "
              "core complex, ~350 across, which slows every multi-threaded contender's whole call). `kernels alone` (rows "
              "from 2026-12-06 14:00 on): each kernel call of the library timed alone by TVM's timer on its arguments "
              "in the model (>= 5 ms each, as the tuner times a task), summed, in the same rounds; `whole / kernels "
              "alone`: the median of the rounds' ratios, then over the rounds with the CPUs near (round trip < 150 ns) "
              "and far, with their counts, on AMD hosts (from 2026-12-07 07:00; an Intel Xeon's round trips spread "
              "with no two placements to tell apart: `-`) (issue 46 asks at most 1.1x).", "",
              "| date | hardware | commit | workload | build | tlm ms | tlm 1-thread ms | PyTorch ms | torch.compile ms | "
              "ORT ms | ORT/tlm | ORT/tlm 1-thread | PyTorch/tlm | threads | load | round trip ns | matches | "
              "kernels alone ms | whole / kernels alone (CPUs near, far) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ort, t, t1, pt = r.get("onnxruntime_ms"), r["tlm_ms"], r.get("tlm_1thread_ms"), r["pytorch_ms"]
        lines.append(f"| {r['date']} | {r['hardware']} | {r['commit']} | {r['workload']} | {r['build']} | {_fmt(t)} | "
                     f"{_fmt(t1)} | {_fmt(pt)} | {_fmt(r.get('torch_compile_ms'))} | {_fmt(ort)} | {_ratio(ort, t)} | "
                     f"{_ratio(ort, t1)} | {_ratio(pt, t)} | {r['threads']} | {r['load']} | {_fmt(r.get('round_trip_ns'))} | "
                     f"{r['matches']} | {_fmt(r.get('kernels_alone_ms'))} | {_over_alone(r.get('whole_over_alone'))} |")
    notes = [f"- {r['workload']} ({r['date']}): ONNX Runtime did not run: {r['onnxruntime_note']}"
             for r in rows if r.get("onnxruntime_note")]
    notes += sorted({f"- {r['workload']} ({r['date']}): {r['torch_compile_note']}" for r in rows if r.get("torch_compile_note")})
    notes += sorted({f"- `{r['build']}` of {r['date']} ({r['hardware']}): the records in `{r['records']}/WORKLOAD/`"
                     for r in rows if r.get("records")})
    stem.with_suffix(".md").write_text("\n".join(lines + ([""] + notes if notes else [])) + "\n")
    if readme and new:
        _into_readme(readme, new, block)


def markers(block: str = "") -> tuple[str, str]:
    """The README's begin and end markers of the headline table (`block` "") or of a named one."""
    name = f"ort-gap:{block}" if block else "ort-gap"
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def _into_readme(readme: Path, head: list[str], block: str = "") -> None:
    """Replaces the README's text between the block's markers with this run's table."""
    BEGIN, END = markers(block)
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        print(f"ort_gap: {readme} has no {BEGIN} ... {END} markers; not updated", file=sys.stderr)
        return
    before, rest = text.split(BEGIN, 1)
    after = rest.split(END, 1)[1]
    readme.write_text(before + BEGIN + "\n" + "\n".join(head) + "\n" + END + after)


def _without_readme(argv: list[str]) -> list[str]:
    """The command line as the results name it: `--readme [BLOCK]` left out (it only writes files)."""
    out, skip = [], False
    for a in argv:
        if skip and not a.startswith("-"):
            skip = False
            continue
        skip = a == "--readme"
        if not (skip or a.startswith("--readme=")):
            out.append(a)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--budget", help="comma-separated budgets, each a build timed beside the others (e.g. 0,10g; "
                        "default 0, none with --db-root)")
    parser.add_argument("--db-root", help="compile from DIR/<workload>/<method> records instead of a budget")
    parser.add_argument("--method", default="tlm@10g")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--one-thread", action="store_true", help="also time the first build on one TVM thread")
    parser.add_argument("--no-torch-compile", action="store_true", help="do not time torch.compile")
    parser.add_argument("--compile-only", action="store_true", help="compile (and check) only; time later")
    parser.add_argument("--readme", nargs="?", const="", default=None, metavar="BLOCK",
                        help="write this run's table into README.md (between the ort-gap markers, or those "
                             "named ort-gap:BLOCK)")
    parser.add_argument("--out", default=str(ROOT / "bench/results/ort-gap"))
    args = parser.parse_args(argv)
    import tlm  # noqa: F401 - TVM's pool gets the host's cores before anything runs

    slug, hardware = _hardware()
    folder = ROOT / "work/ort-gap" / slug
    folder.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    run_id = time.strftime("%Y-%m-%dT%H:%M:%S")
    command = "python bench/ort_gap.py " + " ".join(_without_readme(argv if argv is not None else sys.argv[1:]))
    rows = []
    for name in args.workloads.split(","):
        builds: dict[str, tuple[str, str | None, str]] = {}  # build label -> (tag, db, budget)
        for budget in (args.budget or ("" if args.db_root else "0")).split(","):
            if budget:
                builds[f"budget {budget}"] = (f"b{budget}", None, budget)
        if args.db_root:
            db = os.path.join(args.db_root, name, args.method)
            if not os.path.isdir(db):
                print(f"{name}: no records at {db}, skipped", file=sys.stderr)
                continue
            if not os.path.exists(os.path.join(db, "records.sqlite")):  # a run's committed shards
                db = _db_from_shards(db, folder / "dbs" / f"{name}@{args.method}")
            builds[f"{args.method} records"] = (args.method, db, None)
        infos = {}
        for build, (tag, db, budget) in builds.items():
            cell = folder / f"{name}@{tag}.json"
            info = json.loads(cell.read_text()) if cell.exists() else None
            if info is None:
                print(f"[{time.strftime('%H:%M:%S')}] compiling {name} ({build})", flush=True)
                # a budget build tunes into its own database: tlm.compile's default one is shared by
                # every budget of a workload (budget 0 would take an earlier 10g run's records)
                info = compile_workload(name, budget, db or str(folder / "dbs" / f"{name}@{tag}"),
                                        folder / f"{name}@{tag}.so")
                cell.write_text(json.dumps(info) + "\n")
            if not info["matches"]:
                print(f"{name} ({build}): output does NOT match PyTorch (max abs diff {info['max_abs_diff']})", file=sys.stderr)
            infos[build] = info
        if args.compile_only:
            continue
        print(f"[{time.strftime('%H:%M:%S')}] timing {name}", flush=True)
        timing = time_workload(name, {b: i["artifact"] for b, i in infos.items()}, args.rounds,
                               args.one_thread, not args.no_torch_compile)
        for build, info in infos.items():
            row = {k: v for k, v in timing.items() if k not in ("tlm_ms", "alone_ms", "whole_over_alone", "per_round")}
            row.update(tlm_ms=timing["tlm_ms"][build], kernels_alone_ms=timing["alone_ms"].get(build),
                       whole_over_alone=timing["whole_over_alone"].get(build), workload=name, build=build, matches=info["matches"],
                       tasks=info.get("tasks"), measurements=info.get("measurements"), hardware=hardware,
                       commit=commit, date=time.strftime("%Y-%m-%d"), records=args.db_root if build.endswith(" records") else None, run=run_id,
                       command=command, readme=args.readme is not None)
            print(json.dumps(row), flush=True)
            rows.append(row)
    if rows:
        write(rows, Path(args.out), ROOT / "README.md" if args.readme is not None else None, args.readme or "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
