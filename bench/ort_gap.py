"""The gap to ONNX Runtime on CPU (issue 46): each zoo workload compiled by tlm, timed in one
interleaved run against PyTorch eager and ONNX Runtime on the same inputs and threads, and the
same library on ONE TVM thread (what tlm ran with on 2-core hosts before 2026-11-28: TVM gives
its pool half the logical CPUs on x86).

    python bench/ort_gap.py [--workloads bert_tiny,...] [--budget 0] [--db-root DIR] [--rounds 5]

Budget 0 compiles with the shipped model's first choices; `--db-root DIR` compiles from the
records in DIR/<workload>/<method> instead (e.g. results/full-llvm-znver3-2c/records, method
tlm@10g), skipping workloads without them. Libraries go to work/ort-gap/<cpu>-<cores>c/; the
table to bench/results/ort-gap.md (rows appended per run) and .json. The one-thread variant runs
in a child process (TVM sizes its pool once per process), round by round with the others.
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

    from tlm.compiler.build import median_ms, to_tvm

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
    import tlm
    from tlm.compiler.build import CompileConfig

    t0 = time.perf_counter()
    model = tlm.compile(name, db=db, budget=None if db else budget, output=str(out),
                        config=CompileConfig(compare=False, repeat=3))
    return {"artifact": str(out), "matches": model.matches, "max_abs_diff": model.max_abs_diff,
            "tasks": model.tasks, "tuned_tasks": model.tuned_tasks, "greedy_tasks": model.greedy_tasks,
            "measurements": model.measurements, "compile_s": round(time.perf_counter() - t0, 1)}


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


def time_workload(name: str, artifact: str, rounds: int) -> dict:
    """One interleaved run: tlm (host threads), tlm (1 thread, child), PyTorch, ONNX Runtime."""
    from types import SimpleNamespace

    import numpy as np
    import torch
    import tvm
    from tvm import relax

    from tlm.compiler.build import median_ms, onnxruntime_runner, to_tvm
    from tlm.graph.target import runtime_threads
    from tlm.graph.zoo import get_workload

    threads = runtime_threads()
    torch.set_num_threads(threads)
    module, inputs = get_workload(name).build()
    arrays = [np.ascontiguousarray(x.numpy()) for x in inputs]
    vm = relax.VirtualMachine(tvm.runtime.load_module(artifact), tvm.cpu())
    args = to_tvm(arrays)
    one_thread, close = one_thread_timer(artifact, arrays)
    runners = {"tlm": lambda: median_ms(lambda: vm["main"](*args), repeat=3, min_repeat_ms=200), "tlm_1thread": one_thread}
    out: dict = {"threads": threads, "onnxruntime_note": None}
    with torch.no_grad():
        runners["pytorch"] = lambda: median_ms(lambda: module(*inputs), repeat=3, min_repeat_ms=200)
        plain = SimpleNamespace(onnx_path=None, torch_module=module, example_inputs=inputs, inputs=arrays)
        run, out["onnxruntime_note"] = onnxruntime_runner(plain, threads)
        if run is not None:
            runners["onnxruntime"] = lambda: median_ms(run, repeat=3, min_repeat_ms=200)
        times: dict[str, list[float]] = {k: [] for k in runners}
        for _ in range(rounds):
            for key, fn in runners.items():
                times[key].append(fn())
    close()
    for key, values in times.items():
        out[f"{key}_ms"] = round(statistics.median(values), 4)
    out.update(rounds=rounds, load=round(os.getloadavg()[0], 2), timed=time.strftime("%Y-%m-%d %H:%M"))
    return out


def _hardware() -> tuple[str, str]:
    from tlm.graph.target import resolve_target
    from tlm.measure.shards import host_label

    info = resolve_target(None)
    return f"{info.cpu}-{info.cores}c", host_label(info)


def write(rows: list[dict], stem: Path) -> None:
    old = json.loads(stem.with_suffix(".json").read_text()) if stem.with_suffix(".json").exists() else []
    rows = old + rows
    stem.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = ["# The gap to ONNX Runtime on CPU (issue 46)", "",
             "`python bench/ort_gap.py` (one row per workload and run; newest last). Each row: one interleaved run "
             "(median of the rounds, each the median of 3 repeats of >= 200 ms) of the tlm library on the host's "
             "threads, the same library on one TVM thread (a child process: what tlm ran with on 2-core hosts "
             "before 2026-11-28), PyTorch eager and ONNX Runtime on as many threads as tlm. Ratios: the other's "
             "time over tlm's (above 1: tlm faster).", "",
             "| date | hardware | commit | workload | build | tlm ms | tlm 1-thread ms | PyTorch ms | ORT ms | "
             "ORT/tlm | ORT/tlm 1-thread | PyTorch/tlm | threads | load | matches |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ort, t, t1, pt = r.get("onnxruntime_ms"), r["tlm_ms"], r["tlm_1thread_ms"], r["pytorch_ms"]
        ratio = (lambda a, b: f"{a / b:.2f}x" if a and b else "-")
        lines.append(f"| {r['date']} | {r['hardware']} | {r['commit']} | {r['workload']} | {r['build']} | {t:.3g} | "
                     f"{t1:.3g} | {pt:.3g} | {ort and f'{ort:.3g}' or '-'} | {ratio(ort, t)} | {ratio(ort, t1)} | "
                     f"{ratio(pt, t)} | {r['threads']} | {r['load']} | {r['matches']} |")
    notes = [f"- {r['workload']}: ONNX Runtime did not run: {r['onnxruntime_note']}" for r in rows if r.get("onnxruntime_note")]
    notes += sorted({f"- `{r['build']}` of {r['date']} ({r['hardware']}): the records in `{r['records']}/WORKLOAD/`"
                     for r in rows if r.get("records")})
    stem.with_suffix(".md").write_text("\n".join(lines + ([""] + notes if notes else [])) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--budget", default="0")
    parser.add_argument("--db-root", help="compile from DIR/<workload>/<method> records instead of a budget")
    parser.add_argument("--method", default="tlm@10g")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--compile-only", action="store_true", help="compile (and check) only; time later")
    parser.add_argument("--out", default=str(ROOT / "bench/results/ort-gap"))
    args = parser.parse_args(argv)
    import tlm  # noqa: F401 - TVM's pool gets the host's cores before anything runs

    slug, hardware = _hardware()
    build = f"{args.method} records" if args.db_root else f"budget {args.budget}"
    folder = ROOT / "work/ort-gap" / slug
    folder.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    rows = []
    for name in args.workloads.split(","):
        db = os.path.join(args.db_root, name, args.method) if args.db_root else None
        if db and not os.path.isdir(db):
            print(f"{name}: no records at {db}, skipped", file=sys.stderr)
            continue
        tag = args.method if db else f"b{args.budget}"
        if db and not os.path.exists(os.path.join(db, "records.sqlite")):  # a run's committed shards
            db = _db_from_shards(db, folder / "dbs" / f"{name}@{tag}")
        cell = folder / f"{name}@{tag}.json"
        info = json.loads(cell.read_text()) if cell.exists() else None
        if info is None:
            print(f"[{time.strftime('%H:%M:%S')}] compiling {name} ({build})", flush=True)
            info = compile_workload(name, args.budget, db, folder / f"{name}@{tag}.so")
            cell.write_text(json.dumps(info) + "\n")
        if not info["matches"]:
            print(f"{name}: output does NOT match PyTorch (max abs diff {info['max_abs_diff']})", file=sys.stderr)
        if args.compile_only:
            continue
        print(f"[{time.strftime('%H:%M:%S')}] timing {name}", flush=True)
        row = time_workload(name, info["artifact"], args.rounds)
        row.update(workload=name, build=build, matches=info["matches"], hardware=hardware, commit=commit,
                   date=time.strftime("%Y-%m-%d"), records=args.db_root)
        print(json.dumps(row), flush=True)
        rows.append(row)
    if rows:
        write(rows, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
