"""Odd widths (issue 48, item 3): `Linear(512, W) + ReLU` on (1, 64, 512) compiled with
`tlm.compile(..., budget=B)`, with and without tlm.graph.widths (an odd width split into a round
part and a padded tail).

    .venv/bin/python tools/odd_widths.py       # budgets 0 and 10g, widths 1031 1024 1040 1000 1536
    .venv/bin/python tools/odd_widths.py --budgets 0 --out /tmp/odd_widths

Each (budget, width, variant, tuner seed) is compiled once, into its own empty record database,
its output checked against PyTorch; a budget's programs depend on the seed (budget 0 compiles
each task's first choice). Then `--rounds` rounds time every compiled model in turn (the order
shuffled per round), and as many rounds time PyTorch eager after them, on the target's cores
and on one thread (on a small busy CPU two PyTorch threads can be far slower than one). A
seed's latency is its median over the rounds; a row gives the median over seeds. "as imported"
is the same import with `split_odd_widths` left out (widths it leaves alone are compiled once,
"as is"). W = 1040 is what padding 1031 to a multiple of 16 would compute (its matmul task is
the same). Writes OUT.md and OUT.json (default bench/results/odd_widths).
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from unittest import mock

import torch

import tlm
from tlm.compiler.build import CompileConfig
from tlm.graph import widths
from tlm.graph.target import resolve_target
from tlm.search.base import TuneConfig

p = argparse.ArgumentParser()
p.add_argument("--widths", type=int, nargs="+", default=[1031, 1024, 1040, 1000, 1536])
p.add_argument("--budgets", nargs="+", default=["0", "10g"])
p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
p.add_argument("--rounds", type=int, default=7)
p.add_argument("--repeat", type=int, default=5, help="timer repeats per round (median)")
p.add_argument("--out", default="bench/results/odd_widths")
a = p.parse_args()
info = resolve_target(None)
cpu = next((ln.split(":", 1)[1].strip() for ln in subprocess.run(["lscpu"], capture_output=True, text=True)
            .stdout.splitlines() if ln.startswith("Model name")), "?")
x = torch.randn(1, 64, 512, generator=torch.Generator().manual_seed(0))


def module(width: int) -> torch.nn.Module:
    torch.manual_seed(width)
    return torch.nn.Sequential(torch.nn.Linear(512, width), torch.nn.ReLU()).eval()


def compile_one(width: int, budget: str, split: bool, seed: int):
    cfg = CompileConfig(repeat=3, min_repeat_ms=50, compare=False)
    with tempfile.TemporaryDirectory() as db, \
            mock.patch.object(widths, "split_odd_widths", widths.split_odd_widths if split else (lambda m: m)):
        t0 = time.perf_counter()
        model = tlm.compile(module(width), (x,), budget=int(budget) if budget.isdigit() else budget, db=db,
                            config=cfg, tune_config=TuneConfig(seed=seed))
        return model, time.perf_counter() - t0


def time_ms(fn, repeat: int) -> float:
    from tlm.compiler.contenders import median_ms

    return median_ms(fn, repeat, 100)


rows, timers = [], {}  # a row per (budget, width, variant) with its seeds; a timer per seed
for budget in a.budgets:
    for width in a.widths:
        parts = widths.width_parts(width)
        for name, split in [("split", True), ("as imported", False)] if parts else [("as is", True)]:
            row = {"budget": budget, "width": width, "variant": name, "parts": parts if split else None, "seeds": {}}
            for seed in a.seeds:
                model, secs = compile_one(width, budget, split, seed)
                timers[(budget, width, name, seed)] = lambda model=model, arg=x.numpy(): model(arg)
                row["seeds"][seed] = {"compile_s": round(secs, 1), "max_abs_diff": model.max_abs_diff,
                                      "matches": model.matches, "measurements": model.measurements,
                                      "tasks": [r["name"] for r in model.task_rows], "rounds_ms": []}
                print(f"budget {budget}, {width} {name}, seed {seed}: {model.latency_ms:.3f} ms, "
                      f"max abs diff {model.max_abs_diff:.2g}, {secs:.0f} s", file=sys.stderr, flush=True)
            rows.append(row)
for width in a.widths:
    m = module(width)
    for threads in sorted({info.cores, 1}, reverse=True):
        name = "PyTorch eager" + (", 1 thread" if threads == 1 else "")
        timers[("-", width, name, None)] = lambda m=m, t=threads: (torch.set_num_threads(t), m(x))
        rows.append({"budget": "-", "width": width, "variant": name, "parts": None, "seeds": {None: {"rounds_ms": []}}})

by_key = {(r["budget"], r["width"], r["variant"], seed): v for r in rows for seed, v in r["seeds"].items()}
rng = random.Random(0)
# TVM's programs first, PyTorch after them: each runtime's idle worker threads spin for a while
# after a call and would slow the other one down on a small CPU.
for group in ([k for k in timers if k[0] != "-"], [k for k in timers if k[0] == "-"]):
    for i in range(a.rounds):
        keys = list(group)
        rng.shuffle(keys)
        for key in keys:
            with torch.no_grad():
                by_key[key]["rounds_ms"].append(time_ms(timers[key], a.repeat))
        print(f"round {i + 1}/{a.rounds}", file=sys.stderr, flush=True)
for r in rows:
    for v in r["seeds"].values():
        v["median_ms"] = statistics.median(v["rounds_ms"])
    r["median_ms"] = statistics.median(v["median_ms"] for v in r["seeds"].values())

cmd = ("python tools/odd_widths.py " + " ".join(sys.argv[1:])).strip()
lines = [
    "# Odd widths: `Linear(512, W) + ReLU` on (1, 64, 512)", "",
    f"`{cmd}` (tlm.graph.widths; issue 48, item 3). CPU: {cpu} (LLVM `{info.cpu}`, {info.isa}), "
    f"{info.cores} threads. Each model compiled once per tuner seed ({', '.join(map(str, a.seeds))}), output "
    f"checked; then {a.rounds} interleaved rounds (shuffled) time every compiled model (each the median of "
    f"{a.repeat} timer repeats), and as many rounds time PyTorch eager after them. A seed's latency is its "
    "median over the rounds; a row gives the median over seeds and each seed's. `vs 1024`: against "
    "W = 1024 at the same budget. W = 1040 is what padding 1031 to a multiple of 16 would compute "
    "(the same matmul task).", "",
    "| budget | W | variant | parts (columns, computed) | median ms | vs 1024 | per seed ms | max abs diff | tasks |",
    "|---|---|---|---|---|---|---|---|---|",
]
ref = {r["budget"]: r["median_ms"] for r in rows if r["width"] == 1024 and r["variant"] == "as is"}
for r in rows:
    per = list(r["seeds"].values())
    vs = f"{r['median_ms'] / ref[r['budget']]:.2f}x" if r["budget"] in ref else "-"
    diff = max((v["max_abs_diff"] for v in per if "max_abs_diff" in v), default=None)
    parts = " + ".join(f"({c}, {w})" for c, w in r["parts"]) if r["parts"] else "-"
    per_seed = " / ".join(f"{v['median_ms']:.2f}" for v in per)
    tasks = ", ".join(per[0].get("tasks", [])) or "-"
    lines.append(f"| {r['budget']} | {r['width']} | {r['variant']} | {parts} | {r['median_ms']:.3f} | {vs} | "
                 f"{per_seed} | {'-' if diff is None else f'{diff:.2g}'} | {tasks} |")
os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
with open(a.out + ".md", "w") as f:
    f.write("\n".join(lines) + "\n")
with open(a.out + ".json", "w") as f:
    json.dump({"command": cmd, "cpu": cpu, "target": info.config, "seeds": a.seeds, "rounds": a.rounds,
               "rows": [{**r, "seeds": {str(k): v for k, v in r["seeds"].items()}} for r in rows]}, f, indent=1)
print("\n".join(lines))
