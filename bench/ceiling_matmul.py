"""The matmul ceiling (issue 46 item 3): how fast can a program of the design space run a
Linear layer's matmul, how close does the TLM tuner get, against ONNX Runtime's and PyTorch's GEMM.

    python bench/ceiling_matmul.py [--shape 128,768,768 --shape 128,768,3072] [--tlm 10] [--trials 0]

Per shape (M, K, N: `Linear(K, N)` on (1, M, K), weights pre-packed as tlm compiles them):
- `grid`: the register-blocked programs of MetaSchedule's own CPU space (SSRSRS tiling): for rows
  and columns, the third tile level 1 and the innermost tile a register block of `mr` rows (4, 6
  or 8) by `nr` columns (whole vectors, at most 64), the reduction between them, explicit unroll
  of 64 or 512, a few outer splits for the threads. This is the micro-kernel a GEMM library
  writes by hand (a C tile in registers, each k step one broadcast and `nr / lanes` FMAs per
  row), found in the space without a new rule: the space's best reachable program, approximately.
- `tlm@B`: the TLM tuner with B measurements on the task (the shipped model).
- `metaschedule@T`: MetaSchedule's search with T measurements (off by default: 7-10 min a shape).
Each variant's records are measured by the checked measurer (one thread, as tuning measures),
compiled into a whole one-layer model (the reshapes around it get 4 random programs each) whose
output is checked against PyTorch, and timed interleaved with `torch.addmm`, `nn.Linear` and
ONNX Runtime on the host's threads (medians). Writes bench/results/ceiling-matmul.{md,json}
(rows appended, keyed by hardware).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "ceiling-matmul"


def grid_programs(task, target, cap: int = 120, seed: int = 0) -> list:
    """The register-blocked programs of the task's design spaces (see the module docstring),
    at most `cap` of them (a seeded subsample when there are more)."""
    from tlm.space.design import task_space, walk

    space = task_space(task, target)
    lanes = 16 if target.isa == "avx512" else 8  # float32 lanes per vector register

    def keep(point, c) -> bool:
        axis = point.context["axis"]
        if point.context["n"] == 4 and axis in ("0", "1"):
            inner = c[3]
            if c[2] != 1:
                return False
            if axis == "0":  # rows: the register block's height, the outer split for threads
                return inner in (4, 6, 8) and c[0] in (1, 2, 4)
            return inner % lanes == 0 and inner <= 64 and c[0] in (1, 2)  # columns: whole vectors
        if point.context["n"] == 2:  # the reduction's inner tile: long enough to amortize the C tile
            return c[1] in (16, 32, 64)
        return False

    progs = []
    for si in range(len(space)):
        found: list = []  # the tile and unroll points of this space, with the kept choices

        def record(point, found=found, si=si):
            if point.kind == "space":
                return si
            if point.kind == "tile":
                found.append((point.context, [c for c in point.choices if keep(point, c)]))
                return point.choices[0]
            if point.kind == "cat":
                use = [i for i, v in enumerate(point.context["candidates"]) if v in (64, 512)]
                found.append((point.context, use))
                return point.choices[0]
            return None

        walk(space, record, postproc=False)
        if not found or any(not kept for _, kept in found):
            continue
        for combo in itertools.product(*(kept for _, kept in found)):
            progs.append((si, combo))
    random.Random(seed).shuffle(progs)
    out = []
    for si, combo in progs:
        if len(out) >= cap:
            break
        it = iter(combo)

        def policy(point, si=si, it=it):
            if point.kind == "space":
                return si
            return next(it) if point.kind in ("tile", "cat") else None

        prog = walk(space, policy)
        if prog.ok:
            out.append(prog)
    return out


def time_with_references(fns: dict, module, x, imported, target, rounds: int, out: dict) -> dict:
    """`fns` (the TVM builds) timed interleaved with `torch.addmm`, the `nn.Linear` itself and ONNX
    Runtime on `imported`'s inputs (ms per call, per round); a missing ORT is noted in `out`."""
    import torch

    from tlm.compiler.contenders import onnxruntime_runner
    from tlm.eval.timing import interleaved

    w, b = module.weight.detach(), module.bias.detach()
    x2 = x.reshape(-1, x.shape[-1])
    fns["pytorch addmm"] = lambda: torch.addmm(b, x2, w.t())
    fns["pytorch Linear"] = lambda: module(x)
    ort, note = onnxruntime_runner(imported, target.cores)
    if ort is not None:
        fns["onnxruntime"] = ort
    else:
        out["onnxruntime_note"] = note
    return interleaved(fns, rounds, min_ms=100)


def run_shape(shape: tuple[int, int, int], tlm_budget: int, trials: int, rounds: int, target) -> dict:
    import numpy as np
    import torch
    import tvm

    from tlm.compiler.build import CompileConfig, compile_imported
    from tlm.graph.extract import extract_from_relax
    from tlm.graph.importer import import_torch
    from tlm.measure.database import GREEDY, open_db
    from tlm.measure.config import MeasureConfig
    from tlm.measure.measurer import Candidate, Measurer
    from tlm.search.base import TuneConfig
    from tlm.search.tune import tune

    m, k, n = shape
    torch.set_num_threads(target.cores)
    torch.manual_seed(0)
    module, x = torch.nn.Linear(k, n).eval(), torch.randn(1, m, k)
    imported = import_torch(module, (x,))
    args = [tvm.runtime.tensor(np.ascontiguousarray(v), tvm.cpu()) for v in imported.inputs]
    tasks = extract_from_relax(imported.mod, target)
    task = max(tasks, key=lambda t: t.flops)  # the matmul (+ bias); the rest are reshapes
    rest = [t for t in tasks if t is not task]
    out: dict = {"shape_mkn": list(shape), "task": task.name, "flops": task.flops, "variants": {}}
    fns = {}
    variants = ["grid"] + ([f"tlm@{tlm_budget}"] if tlm_budget else []) + ([f"metaschedule@{trials}"] if trials else [])
    for variant in variants:
        db = tempfile.mkdtemp(prefix=f"tlm-ceiling-matmul-{variant}-")
        t0 = time.perf_counter()
        if variant == "grid":
            progs = grid_programs(task, target)
            with Measurer(target, MeasureConfig()) as meas, open_db(db) as d:
                d.add_task(task)
                d.add_results(meas.measure([Candidate(task, schedule=p.sch, proposer="grid") for p in progs]),
                              target.key)
        elif variant.startswith("tlm@"):
            tune([task], "tlm", str(tlm_budget), db, target=target, config=TuneConfig(seed=0), progress=False)
        else:
            tune([task], "metaschedule", str(trials), db, target=target, config=TuneConfig(seed=0), progress=False)
        wall = time.perf_counter() - t0
        if rest:
            tune(rest, "random", "4g", db, target=target, config=TuneConfig(seed=0), progress=False)
        with open_db(db) as d:
            recs = [r for r in d.records(task.hash, target.key) if r.proposer != GREEDY]
        best = min((r.median_s for r in recs if r.median_s is not None), default=math.inf)
        cm = compile_imported(imported, db, target=target, tasks=tasks,
                              config=CompileConfig(repeat=3, min_repeat_ms=50, compare=False))
        out["variants"][variant] = {
            "measurements": len(recs), "errors": sum(r.median_s is None for r in recs),
            "best_us": best * 1e6, "best_gflops": task.flops / best / 1e9 if best < math.inf else None,
            "search_s": round(wall, 1), "matches": cm.matches, "max_abs_diff": cm.max_abs_diff}
        fns[f"tvm {variant}"] = lambda vm=cm.vm: vm["main"](*args)
        print(f"{m}x{k}x{n} {variant}: {len(recs)} measured in {wall:.0f} s, best {best * 1e6:.1f} us "
              f"({task.flops / best / 1e9:.1f} GFLOPS, one thread), output {'ok' if cm.matches else 'WRONG'}",
              flush=True)
    times = time_with_references(fns, module, x, imported, target, rounds, out)
    flop = 2.0 * m * k * n
    out["ms"] = {key: statistics.median(v) for key, v in times.items()}
    out["gflops"] = {key: flop / (v * 1e-3) / 1e9 for key, v in out["ms"].items()}
    print(f"{m}x{k}x{n} whole calls, GFLOPS on {target.cores} threads: "
          + ", ".join(f"{key} {g:.1f}" for key, g in out["gflops"].items()), flush=True)
    return out


def write(rows: list[dict]) -> None:
    OUT.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    lines = ["# The matmul ceiling (issue 46 item 3)", "",
             "Command: `python bench/ceiling_matmul.py` (see its docstring). `grid`: register-blocked programs of "
             "MetaSchedule's own CPU space (a C tile of mr x nr in registers, the reduction between); `tlm@B`: the "
             "TLM tuner with B measurements; `metaschedule@T`: its search. Best: the checked measurer's median on one "
             "thread (as tuning measures). Whole call: the one-layer model (reshapes included, output checked against "
             "PyTorch) timed interleaved with PyTorch and ONNX Runtime on the host's threads, median GFLOPS.", "",
             "| date | hardware | commit | shape MxKxN | variant | measured | best GFLOPS (1 thread) | whole-call GFLOPS "
             "| ONNX Runtime GFLOPS | torch.addmm GFLOPS | share of ORT | share of torch | output ok |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        g = row["gflops"]
        ort, pt = g.get("onnxruntime"), g.get("pytorch addmm")
        for name, v in row["variants"].items():
            mine = g.get(f"tvm {name}")
            lines.append(
                f"| {row['date']} | {row['hardware']} | {row['commit']} | {'x'.join(map(str, row['shape_mkn']))} | "
                f"{name} | {v['measurements']} | {_f(v['best_gflops'])} | {_f(mine)} | {_f(ort)} | {_f(pt)} | "
                f"{_pct(mine, ort)} | {_pct(mine, pt)} | {'yes' if v['matches'] else 'NO'} |")
    OUT.with_suffix(".md").write_text("\n".join(lines) + "\n")


def _f(v) -> str:
    return "-" if v is None else f"{v:.1f}"


def _pct(a, b) -> str:
    return "-" if not a or not b else f"{a / b:.0%}"


def main(argv: list[str] | None = None) -> int:
    import subprocess

    from tlm.graph.target import resolve_target
    from tlm.measure.shards import host_label

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", action="append", help="M,K,N (default 128,768,768 and 128,768,3072)")
    ap.add_argument("--tlm", type=int, default=10, help="TLM tuner measurements per shape (0: skip)")
    ap.add_argument("--trials", type=int, default=0, help="MetaSchedule measurements per shape (0: skip)")
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args(argv)
    try:
        shapes = [tuple(int(v) for v in s.split(",")) for s in (args.shape or ["128,768,768", "128,768,3072"])]
        if any(len(s) != 3 or min(s) < 1 for s in shapes):
            raise ValueError
    except ValueError:
        print("ceiling_matmul: --shape wants M,K,N (positive integers)", file=sys.stderr)
        return 2
    target = resolve_target(None)
    rows = json.loads(OUT.with_suffix(".json").read_text()) if OUT.with_suffix(".json").exists() else []
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    for shape in shapes:
        row = run_shape(shape, args.tlm, args.trials, args.rounds, target)
        row.update(date=time.strftime("%Y-%m-%d %H:%M"), hardware=host_label(target), commit=commit,
                   threads=target.cores)
        rows.append(row)
        write(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
