"""Budget-0 picks that redo work (tlm.space.build_cost.flops_ratio): what the check changes.

For each model and each CPU the TLM generates for (the host, and other CPUs by LLVM name: the
prompt names the CPU, so each gets its own picks), every task's budget-0 choice is made twice
from the same ranked samples: with the check (`TlmTuner.first_choice`, what tlm does now) and
without it (only the LLVM build-time check, as before 2026-12-01). Where the two differ, both
programs are compiled for THIS host, their outputs checked against TVM's unscheduled program on
the same random inputs, and timed alone in interleaved rounds (median of `--rounds`, each the
median of 3 repeats of >= 20 ms, the host's threads). A model's weighted sum (task weight x time)
over the changed tasks says what the check saves per call.

    python bench/lean_pick.py                                   # the battery and the zoo, host + znver5
    python bench/lean_pick.py --models poolformer,bert_base-b1-s128 --cpus host,znver5,rocketlake

Rows go to work/lean-pick/<host>/rows.jsonl (a killed run resumes per model and CPU); the
report to bench/results/lean-pick.{json,md}, keyed by the host.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
RESULTS = ROOT / "bench" / "results"
ZOO = ["bert_tiny-b1-s128", "bert_base-b1-s128", "gpt2-b1-s128", "resnet_50-b1-i224", "mobilenet_v2-b1-i224", "dcgan-b8"]


def _tasks(model: str, host):
    from outside_models import load_named

    return load_named(model, host)[1]


def _time_pair(task, mods: list, host, rounds: int) -> tuple[list[float], float]:
    """Medians in us of `mods` (scheduled IRModules of `task`) timed alone, interleaved; and the
    largest absolute difference of their outputs from TVM's unscheduled program's."""
    import numpy as np
    import tvm

    from tlm.compiler.check import max_abs_diff

    dev = tvm.cpu()
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.random(a["shape"]).astype(a["dtype"]), dev) for a in task.args]
    ref = None
    libs, diff = [], 0.0
    for mod in [task.mod, *mods]:
        lib = tvm.compile(mod, target=host.tvm()).mod
        outs = [tvm.runtime.tensor(np.zeros(a["shape"], a["dtype"]), dev) for a in task.args]
        lib(*[*args[:-1], outs[-1]])
        got = outs[-1].numpy()
        if ref is None:
            ref = got
        else:
            diff = max(diff, max_abs_diff(got, ref))  # inf for a NaN (Python's max skips a NaN)
            libs.append(lib)
    times = [[] for _ in libs]
    for _ in range(rounds):
        for i, lib in enumerate(libs):
            ev = lib.time_evaluator(lib.entry_name, dev, number=1, repeat=3, min_repeat_ms=20)
            times[i].append(statistics.median(ev(*args).results) * 1e6)
    return [statistics.median(t) for t in times], diff


def run_model(model: str, cpu: str, host, rounds: int, lm: str | None = None) -> tuple[list[dict], int]:
    """One row per task of `model` whose budget-0 choice for `cpu` the check changes; the task count."""
    from tlm.graph.target import resolve_target
    from tlm.measure.database import open_db
    from tlm.search.base import TuneConfig
    from tlm.search.tlm_tuner import TlmTuner
    from tlm.space.build_cost import first_fine, odd_lanes_problem

    gen_target = host if cpu == "host" else resolve_target(dict(host.config, mcpu=cpu))
    tasks = _tasks(model, host)
    tuner = TlmTuner(tasks, open_db(tempfile.mkdtemp(prefix="lean-pick-")), gen_target,
                     TuneConfig(tuner="tlm", budget="0", model=lm), progress=False)
    rows = []
    for task in tasks:
        ranked = tuner.choices(task)
        new = tuner.first_choice(task, ranked)
        old = first_fine(task.name, ranked, lambda g: odd_lanes_problem(tuner._build_cost(task, g)))
        if not new or not old or new[0] is old[0]:
            continue
        old_s, new_s = tuner.schedule(task, old[0]), tuner.schedule(task, new[0])
        (old_us, new_us), diff = _time_pair(task, [old_s.mod, new_s.mod], host, rounds)
        rows.append({"model": model, "cpu": cpu, "task": task.name, "kind": task.kind, "weight": task.weight,
                     "old_ratio": round(tuner._redone_work(task, old[0]) or 0, 2),
                     "new_ratio": round(tuner._redone_work(task, new[0]) or 0, 2),
                     "new_rank": ranked.index(new[0]) + 1, "old_us": round(old_us, 3), "new_us": round(new_us, 3),
                     "max_abs_diff": diff})
    return rows, len(tasks)


def report(rows: list[dict], done: list[dict], host_label: str, commit: str, command: str) -> str:
    lines = [f"# Budget-0 picks that redo work, timed on {host_label}", "",
             f"Command: `{command}` (commit {commit}). Each task whose budget-0 choice the "
             "redone-work check (tlm.space.build_cost) changes: the TLM's picks generated for the CPU named "
             "(the prompt names it), both programs compiled for and timed on this host alone, interleaved "
             "(median of the rounds, each the median of 3 repeats of >= 20 ms), outputs checked against TVM's "
             "unscheduled program. `ratio`: TVM's flop estimate of the program over the task's.", "",
             "| model | CPU generated for | tasks | changed | weighted old us | weighted new us | old / new |",
             "|---|---|---|---|---|---|---|"]
    for d in done:
        got = [r for r in rows if r["model"] == d["model"] and r["cpu"] == d["cpu"]]
        old = sum(r["weight"] * r["old_us"] for r in got)
        new = sum(r["weight"] * r["new_us"] for r in got)
        lines.append(f"| {d['model']} | {d['cpu']} | {d['tasks']} | {len(got)} | {old:.2f} | {new:.2f} | "
                     + (f"{old / new:.2f}x |" if got else "- |"))
    lines += ["", "| model | CPU | task | weight | old ratio | new ratio | new choice # | old us | new us | old / new | max abs diff |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['cpu']} | {r['task'][:60]} | {r['weight']} | {r['old_ratio']} | {r['new_ratio']} | "
                     f"{r['new_rank']} | {r['old_us']} | {r['new_us']} | {r['old_us'] / r['new_us']:.2f}x | {r['max_abs_diff']:.1e} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    import subprocess

    from outside_models import entries
    from tlm.graph.target import resolve_target
    from tlm.measure.shards import host_label

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join([e.name for e in entries()] + ZOO))
    ap.add_argument("--cpus", default="host,znver5")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--model", default=None, help="the TLM generating (default: the shipped one for the host)")
    args = ap.parse_args()
    host = resolve_target(None)
    label = host_label(host)
    work = ROOT / "work" / "lean-pick" / label
    work.mkdir(parents=True, exist_ok=True)
    rows_file, done_file = work / "rows.jsonl", work / "done.jsonl"
    done = [json.loads(x) for x in done_file.read_text().splitlines()] if done_file.exists() else []
    for cpu in args.cpus.split(","):
        for model in args.models.split(","):
            if any(d["model"] == model and d["cpu"] == cpu for d in done):
                continue
            t0 = time.perf_counter()
            rows, ntasks = run_model(model, cpu, host, args.rounds, args.model)
            with rows_file.open("a") as f:
                f.writelines(json.dumps(r) + "\n" for r in rows)
            d = {"model": model, "cpu": cpu, "tasks": ntasks,
                 "seconds": round(time.perf_counter() - t0, 1)}
            done.append(d)
            with done_file.open("a") as f:
                f.write(json.dumps(d) + "\n")
            print(f"{model} ({cpu}): {len(rows)} changed, {d['seconds']} s", flush=True)
    rows = [json.loads(x) for x in rows_file.read_text().splitlines()] if rows_file.exists() else []
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    command = "python bench/lean_pick.py " + " ".join(sys.argv[1:])
    out = RESULTS / "lean-pick.json"  # every host's run, this host's replaced
    runs = json.loads(out.read_text()) if out.exists() else {}
    runs[label] = {"commit": commit, "date": time.strftime("%Y-%m-%d"), "command": command.strip(), "done": done, "rows": rows}
    out.write_text(json.dumps(runs, indent=1) + "\n")
    (RESULTS / "lean-pick.md").write_text("\n".join(report(r["rows"], r["done"], h, r["commit"], r["command"])
                                                   for h, r in runs.items()))


if __name__ == "__main__":
    main()
