"""Do programs rank alike on one TVM thread and on the host's cores? (issue 46)

    python bench/measure_threads.py [WORKLOAD ...] [--programs 16] [--tasks 4] [--min-work 65536]

Tuning times programs with TVM's default pool (one thread on a 2-core x86 host: how the corpus
was measured), while compiled models now run on every core. For the largest tasks of each
workload (at least `--min-work` iteration points, so that they keep their parallel loops), random
programs of tlm's spaces are built once and timed alternately on the host's threads (this
process) and on one thread (a child process), TVM's time_evaluator, 5 repeats of >= 20 ms, three
alternations, medians. Per task: Spearman's rank correlation of the two timings, and the regret
of picking by one thread: the host-threads time of the one-thread winner over the host-threads
winner's. Writes bench/results/measure_threads.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "measure_threads"


def _args(path: str):
    import numpy as np
    import tvm

    lib = tvm.runtime.load_module(path)
    rng = np.random.default_rng(0)
    shapes = json.loads(Path(path + ".json").read_text())
    args = [tvm.runtime.tensor(rng.random(s).astype(d)) for s, d in shapes]
    return lib.time_evaluator("main", tvm.cpu(), number=1, repeat=5, min_repeat_ms=20), args


def _server(conn) -> None:
    """Times each library path it is sent (us); run by ort_gap.one_thread_child."""
    while (path := conn.recv()) is not None:
        ev, args = _args(path)
        conn.send(statistics.median(ev(*args).results) * 1e6)


def measure(workloads: list[str], programs: int, tasks_per: int, min_work: int) -> list[dict]:
    import tvm
    from ort_gap import one_thread_child
    from scipy.stats import spearmanr
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from tlm.graph.extract import tasks_for_source
    from tlm.graph.target import host_target, runtime_threads
    from tlm.space.design import space_context
    from tlm.space.serial import task_work

    target, threads = host_target(), runtime_threads()
    parent, close = one_thread_child(_server)
    tmp = tempfile.mkdtemp(prefix="tlm-threads-")
    rows = []
    for name in workloads:
        tasks = [t for t in tasks_for_source(name, target).tasks if (task_work(t.mod) or 0) >= min_work]
        tasks.sort(key=lambda t: -t.weight * (t.flops or 0))
        for task in tasks[:tasks_per]:
            ctx = space_context(task, target)
            spaces = ctx.generate_design_space()
            one, many = [], []
            for seed in range(programs):
                sch = tvm.s_tir.Schedule(ctx.mod, seed=1000003 * (seed + 1) % (2**31 - 1))
                spaces[random.Random(seed).randrange(len(spaces))].trace.apply_to_schedule(sch, remove_postproc=True)
                if not all(p.apply(sch) for p in ctx.space_generator.postprocs):
                    continue
                path = os.path.join(tmp, f"{task.hash}-{seed}.so")
                tvm.compile(sch.mod, target=target.tvm()).export_library(path)
                shapes = [([int(d) for d in a.shape], a.dtype) for a in ArgInfo.from_prim_func(sch.mod["main"])]
                Path(path + ".json").write_text(json.dumps(shapes))
                ev, args = _args(path)
                pairs = []
                for _ in range(3):
                    parent.send(path)
                    pairs.append((statistics.median(ev(*args).results) * 1e6, parent.recv()))
                many.append(statistics.median(p for p, _ in pairs))
                one.append(statistics.median(q for _, q in pairs))
            if len(one) < 4:
                continue
            pick = min(range(len(one)), key=one.__getitem__)
            row = {"workload": name, "task": task.name, "work": task_work(task.mod), "programs": len(one),
                   "threads": threads, "spearman": round(float(spearmanr(one, many).statistic), 3),
                   "regret": round(many[pick] / min(many), 3),
                   "speedup_of_best": round(min(one) / min(many), 3),
                   "one_us": [round(x, 2) for x in one], "many_us": [round(x, 2) for x in many]}
            rows.append(row)
            print(f"{name} {task.name[:50]}: spearman {row['spearman']}, regret {row['regret']}, "
                  f"best {min(one):.1f} us on 1 thread, {min(many):.1f} on {threads}", flush=True)
    close()
    return rows


def write(rows: list[dict], argv: list[str]) -> None:
    from tlm.measure.shards import host_label

    OUT.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = ["# Do programs rank alike on one TVM thread and on the host's cores? (issue 46)", "",
             f"`python bench/measure_threads.py {' '.join(argv)}` on {host_label()}, {time.strftime('%Y-%m-%d')}. Random programs of tlm's spaces for each workload's "
             "largest tasks, each timed on the host's threads and on one thread (alternately, medians). `regret`: "
             "the host-threads time of the program one thread ranks first over the best host-threads time (1.0: "
             "the same pick).", "",
             "| workload | task | work | programs | Spearman | regret | best 1-thread / best host-threads |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['workload']} | {r['task'][:60]} | {r['work']:,} | {r['programs']} | {r['spearman']} | "
                     f"{r['regret']} | {r['speedup_of_best']}x |")
    if rows:
        lines += ["", f"Median Spearman {statistics.median(r['spearman'] for r in rows):.2f}; median regret "
                  f"{statistics.median(r['regret'] for r in rows):.3f}, worst {max(r['regret'] for r in rows):.3f}."]
    OUT.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workloads", nargs="*", default=["bert_base", "resnet_50", "mobilenet_v2"])
    parser.add_argument("--programs", type=int, default=16)
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--min-work", type=int, default=65536)
    args = parser.parse_args(argv)
    import tlm  # noqa: F401 - this process's pool gets the host's cores

    rows = measure(args.workloads, args.programs, args.tasks, args.min_work)
    write(rows, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
