"""When a parallel loop costs more than it saves (tlm.space.serial's threshold, issue 48).

    python bench/serial_tasks.py [MODEL ...] [--max-work 4000000] [--programs 2]
        MODEL: a zoo workload (bert_tiny) or an outside-zoo battery model (lstm, transformer_enc)

For every task of the models (up to `--max-work` iteration points, tlm.space.serial.task_work),
random programs of MetaSchedule's default CPU spaces (parallel outer loops) are built twice: as
they are, and with every parallel loop made serial (what tlm's spaces give a task under
SERIAL_WORK). Both are timed alternately on the same arguments (TVM's time_evaluator, 5 repeats
of >= 20 ms, three alternations, medians). Writes bench/results/serial_tasks.{md,json}: one row
per task with its work and the serial / parallel time ratio.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
OUT = ROOT / "bench" / "results" / "serial_tasks"


def _tasks(name: str, target):
    from outside_models import entries, get

    from tlm.graph.extract import extract_tasks, tasks_for_source

    if name in {e.name for e in entries()}:
        module, inputs = get(name).make()
        return extract_tasks(module, inputs, target)
    return tasks_for_source(name, target).tasks


def _timer(mod, target):
    import numpy as np
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    lib = tvm.compile(mod, target=target.tvm()).mod
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(np.asarray(rng.random([int(d) for d in a.shape])).astype(a.dtype))
            for a in ArgInfo.from_prim_func(mod["main"])]
    ev = lib.time_evaluator("main", tvm.cpu(), number=1, repeat=5, min_repeat_ms=20)
    return lambda: statistics.median(ev(*args).results) * 1e6


def measure(names: list[str], max_work: int, programs: int) -> list[dict]:
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from tlm.graph.target import host_target
    from tlm.space.design import space_generator
    from tlm.space.inline import space_mod
    from tlm.space.serial import task_work

    target = host_target()
    rows, seen = [], set()
    for name in names:
        for task in _tasks(name, target):
            work = task_work(task.mod)
            same = (re.sub(r"\d+", "", task.name), work)  # the LSTM's 30 strided slices: one row
            if same in seen or work is None or work > max_work:
                continue
            seen.add(same)
            ctx = ms.TuneContext(mod=space_mod(task, target), target=target.tvm(), space_generator=space_generator(target),
                                 task_name=task.name, num_threads=1)  # TVM's own spaces: parallel loops
            spaces = ctx.generate_design_space()
            pairs = []
            for seed in range(programs):
                sch = tvm.s_tir.Schedule(ctx.mod, seed=1000003 * (seed + 1) % (2**31 - 1))
                spaces[random.Random(seed).randrange(len(spaces))].trace.apply_to_schedule(sch, remove_postproc=True)
                if not all(p.apply(sch) for p in ctx.space_generator.postprocs):
                    continue
                text = sch.mod.script()
                if "T.parallel(" not in text:
                    continue
                par = _timer(sch.mod, target)
                ser = _timer(tvm.script.from_source(text.replace("T.parallel(", "T.serial(")), target)
                times = [(par(), ser()) for _ in range(3)]
                pairs.append((statistics.median(p for p, _ in times), statistics.median(s for _, s in times)))
            if pairs:
                par_us = statistics.median(p for p, _ in pairs)
                ser_us = statistics.median(s for _, s in pairs)
                rows.append({"model": name, "task": task.name, "work": work, "parallel_us": round(par_us, 3),
                             "serial_us": round(ser_us, 3), "ratio": round(ser_us / par_us, 3)})
                print(f"{name} {task.name[:60]} work {work}: parallel {par_us:.2f} us, serial {ser_us:.2f} us", flush=True)
    return rows


def write(rows: list[dict], names: list[str], argv: list[str]) -> None:
    import os

    from tlm.graph.target import runtime_threads
    from tlm.measure.shards import host_label
    from tlm.space.serial import SERIAL_WORK

    head = {"date": time.strftime("%Y-%m-%d"), "hardware": host_label(),
            "command": "python bench/serial_tasks.py " + " ".join(argv), "load": round(os.getloadavg()[0], 2),
            "serial_work": SERIAL_WORK, "threads": runtime_threads()}
    OUT.with_suffix(".json").write_text(json.dumps({**head, "rows": rows}, indent=1) + "\n")
    rows = sorted(rows, key=lambda r: r["work"])
    below = [r["ratio"] for r in rows if r["work"] < SERIAL_WORK]
    above = [r["ratio"] for r in rows if r["work"] >= SERIAL_WORK]
    lines = [
        "# Parallel or serial: small tasks on the thread pool (tlm.space.serial)", "",
        f"{head['date']}, {head['hardware']}, load {head['load']}, TVM's pool {head['threads']} thread(s) (before "
        f"2026-11-28 this bench ran a one-thread pool: TVM's default on 2-core hosts). Command: `{head['command']}`. "
        "Random programs of MetaSchedule's default CPU spaces, as they are (parallel outer loops) and with "
        "their parallel loops made serial, timed alternately; medians in microseconds. `work`: iteration points "
        "summed over the task's blocks.", "",
        f"Below SERIAL_WORK = {SERIAL_WORK:,}: {len(below)} tasks, serial / parallel median "
        f"{statistics.median(below):.2f}, max {max(below):.2f}." if below else "No task below SERIAL_WORK.",
        f"At or above it: {len(above)} tasks, median {statistics.median(above):.2f}, range "
        f"{min(above):.2f}-{max(above):.2f}." if above else "No task at or above SERIAL_WORK.", "",
        "| model | task | work | parallel us | serial us | serial / parallel |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['task'][:60]} | {r['work']:,} | {r['parallel_us']} | {r['serial_us']} | {r['ratio']:.2f} |"
              for r in rows]
    OUT.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="*", default=["lstm", "transformer_enc", "conv1d_audio", "bert_tiny"])
    p.add_argument("--max-work", type=int, default=4_000_000)
    p.add_argument("--programs", type=int, default=2, help="random programs per task")
    args = p.parse_args(argv)
    write(measure(args.models, args.max_work, args.programs), args.models, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
