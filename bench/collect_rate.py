"""The collector's rate with and without generating the next task while the last one builds.

    python bench/collect_rate.py [--tasks 16] [--reps 3] [--model DIR] [--out bench/results]

One round of the collector's loop (`tlm.search.loop`, the collector's settings: k_p 8, the shipped
cost model choosing 6 of 32 samples, the collector's timing rules) over the same `--tasks`
training tasks (from the corpus's tasks archive, round robin over task kinds, seeded), in a fresh
work directory each time, with `LoopConfig.overlap` on and off, in interleaved repetitions (on
off, off on, ...), in one process with one measurer whose worker pools start before the clock.
Per setting: programs per second of the round (the loop's own round time: generation, builds,
timed runs; not the fine-tuning after it), median over repetitions, and the generation and
measuring seconds. Nothing measured here goes into the corpus.

Writes OUT/collect_rate.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def _tasks(n: int, seed: int, target) -> list:
    from tlm.search.collect import read_tasks_archive, tasks_archive

    archive = tasks_archive(ROOT / "data" / "corpus", ["train-set"], target)
    tasks = read_tasks_archive(archive)
    if not tasks:
        raise SystemExit(f"error: no tasks archive {archive} for this target")
    from measure_rate import spread_over_kinds

    return spread_over_kinds(tasks, n, random.Random(seed))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=16)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default=str(ROOT / "pretrained" / "tlm-ft-llvm-x86_64"))
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = p.parse_args(argv)
    from results_file import write_results


    from tvm.s_tir import Schedule

    from tlm.graph.target import host_target
    from tlm.graph.tasks import matmul_task
    from tlm.measure.measurer import Candidate, MeasureConfig, Measurer
    from tlm.search.loop import LoopConfig, run_loop

    target = host_target()
    tasks = _tasks(args.tasks, args.seed, target)
    # the collector's measuring settings (tlm collect's defaults)
    mcfg = MeasureConfig(timing_budget_ms=400.0, slow_factor=3.0, min_gflops=1.0, min_repeat_ms=10)
    runs: dict[str, list[dict]] = {"overlap": [], "sequential": []}
    tmp = Path(tempfile.mkdtemp(prefix="tlm-collect-rate-"))
    with Measurer(target, mcfg) as m:
        warm = matmul_task(16)
        m.measure([Candidate(warm, schedule=Schedule(warm.mod), proposer="warm-up")])
        for rep in range(args.reps):
            order = ["overlap", "sequential"] if rep % 2 == 0 else ["sequential", "overlap"]
            for name in order:
                work = tmp / f"{name}-{rep}"
                cfg = LoopConfig(base=args.model, work=str(work), kb=1, kp=8, rounds=1, pipeline=False,
                                 ft_steps=1, ft_threads=target.cores, cost_model="auto", seed=args.seed,
                                 overlap=name == "overlap", measure=mcfg)
                t0 = time.perf_counter()
                run_loop(cfg, tasks, progress=False, measurer=m)
                wall = time.perf_counter() - t0
                rnd = json.loads((work / "state.json").read_text())["rounds"][0]
                res = {"programs": rnd["measured"], "errors": rnd["errors"], "seconds": rnd["seconds"],
                       "generate_s": rnd["generate_s"], "measure_s": rnd["measure_s"], "wall_s": round(wall, 1),
                       "rate": rnd["measured"] / rnd["seconds"]}
                runs[name].append(res)
                print(f"rep {rep} {name}: {res['programs']} programs ({res['errors']} failed) in "
                      f"{res['seconds']:.1f} s: {res['rate']:.3f}/s (generation {res['generate_s']:.1f} s, "
                      f"measuring {res['measure_s']:.1f} s)", flush=True)
    command = "python bench/collect_rate.py " + " ".join(sys.argv[1:] if argv is None else argv)
    med = {k: statistics.median(r["rate"] for r in v) for k, v in runs.items()}
    summary = {"command": command, "host": target.key, "model": args.model,
               "tasks": [{"name": t.name, "kind": t.kind} for t in tasks],
               "settings": {k: {"rate_median": med[k], "runs": v} for k, v in runs.items()},
               "speedup": med["overlap"] / med["sequential"]}
    lines = ["# The collector's rate: generating the next task while the last one builds", "",
             f"`{command}` on `{target.key}`: one loop round over {len(tasks)} training tasks "
             f"({len({t.kind for t in tasks})} kinds), k_p 8 with the shipped cost model, the collector's timing "
             f"rules, {args.reps} interleaved repetitions, each in a fresh work directory.", "",
             "| setting | programs/s (median) | per repetition | generation s | measuring s |", "|---|---|---|---|---|"]
    for k, v in runs.items():
        lines.append(f"| {k} | {med[k]:.3f} | {', '.join(format(r['rate'], '.3f') for r in v)} | "
                     f"{statistics.median(r['generate_s'] for r in v):.1f} | "
                     f"{statistics.median(r['measure_s'] for r in v):.1f} |")
    lines += ["", f"Overlap over sequential: **{summary['speedup']:.2f}x** programs per second."]
    write_results(args.out, "collect_rate", summary, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
