"""A/A check of the interleaved timing (tlm.eval.timing.interleaved): one compiled library loaded
twice (`a`, `b`), timed beside PyTorch eager and ONNX Runtime in the fixed order the timer kept
before 2026-12-02 (`old`: every contender once per round in one order, timed at once), then as it
times now (`new`: each contender first runs untimed for 50 ms, the order rotates each round).
Identical builds should time alike: b / a is the position's bias.

    python bench/interleave_aa.py WORKLOAD LIBRARY.so [--rounds 7] [--out bench/results/interleave_aa]

Appends a row per timing to OUT.json and rewrites OUT.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from xcore import write_table  # noqa: E402 - bench/ is on the path when a bench script runs


def old_interleaved(fns: dict, rounds: int, min_ms: float = 200.0) -> dict[str, list[float]]:
    """The timer before 2026-12-02: a fixed order, no settling."""
    import torch

    from tlm.eval.timing import run_for

    times: dict[str, list[float]] = {k: [] for k in fns}
    with torch.no_grad():
        [fn() for fn in fns.values()]
        for _ in range(rounds):
            for k, fn in fns.items():
                n, el = run_for(fn, min_ms)
                times[k].append(el * 1e3 / n)
    return times


HEADER = "date | hardware | commit | workload | library | timer | a ms | b ms | b / a | PyTorch ms | ONNX Runtime ms | rounds"


def _cells(r: dict) -> list:
    return [r["date"], r["hardware"], r["commit"], r["workload"], r["library"], r["timer"], f"{r['a']:.3g}",
            f"{r['b']:.3g}", f"{r['b'] / r['a']:.2f}", f"{r.get('pytorch', 0):.3g}", f"{r.get('onnxruntime', 0):.3g}",
            r["rounds"]]


def write(rows: list[dict], out: Path) -> None:
    write_table(out, "A/A: the position bias of the interleaved timer",
                "`python bench/interleave_aa.py WORKLOAD LIB --rounds R`: one tlm library loaded twice (a, b) and timed "
                "beside PyTorch eager and ONNX Runtime (2 threads each), medians of the rounds in ms. `old`: the fixed "
                "order a, b, PyTorch, ONNX Runtime, each timed at once (tlm.eval.timing before 2026-12-02: `tlm eval`'s "
                "end-to-end step, bench/pick.py, bench/ceiling*.py); `new`: 50 ms untimed before each contender and the "
                "order rotated each round. b / a of identical builds should be 1.", HEADER, _cells, rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("workload")
    p.add_argument("library")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--out", default=str(ROOT / "bench/results/interleave_aa"))
    args = p.parse_args(argv)
    import subprocess

    import numpy as np
    import torch
    import tvm
    from tvm import relax

    from tlm.eval.timing import interleaved, reference_runners
    from tlm.graph.importer import import_source
    from tlm.graph.target import host_target, runtime_threads

    target, threads = host_target(), runtime_threads()
    torch.set_num_threads(threads)
    imported = import_source(args.workload)
    inputs = [tvm.runtime.tensor(np.ascontiguousarray(x), tvm.cpu()) for x in imported.inputs]
    fns = {}
    for k in ("a", "b"):
        vm = relax.VirtualMachine(tvm.runtime.load_module(args.library), tvm.cpu())
        fns[k] = lambda vm=vm: vm["main"](*inputs)
    refs, _ = reference_runners(imported, threads)
    fns.update(refs)
    out = Path(args.out)
    path = out.with_suffix(".json")
    rows = json.loads(path.read_text()) if path.is_file() else []
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    for name, timer in (("old", old_interleaved), ("new", interleaved)):
        ms = {k: statistics.median(v) for k, v in timer(fns, args.rounds).items()}
        rows.append({"date": time.strftime("%Y-%m-%d %H:%M"), "hardware": f"{target.cpu} ({threads} threads)",
                     "commit": commit, "workload": args.workload, "library": Path(args.library).name,
                     "timer": name, "rounds": args.rounds, **ms})
        print(args.workload, name, {k: round(v, 3) for k, v in ms.items()}, f"b/a {ms['b'] / ms['a']:.2f}", flush=True)
    write(rows, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
