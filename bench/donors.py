"""Nearest-task donors in the first choice (tlm.search.donors): each task's pick and whole models.

    python bench/donors.py --tasks gpt2,bert_base,resnet_50,mobilenet_v2,bert_tiny,dcgan [--top 8] [--repeats 4]
    python bench/donors.py --models NAME=D0.so,D3.so [NAME=...] [--rounds 15]
        D0 / D3: `tlm compile NAME --budget 0 --donors 0` / `--donors 3` (same code, seeds and shipped models)

`--tasks`: for each workload's `--top` tasks by weight x flops (tlm.extract_tasks), the first choice
that `--budget 0` compiles (TlmTuner.pick) with `--donors 0` and with `--donors K`, whether the second
is a donor's program, and both measured `--repeats` times each in one batch on one thread (the
corpus's measurer, interleaved: old, new, old, new, ...), medians; the weighted sum is over the tasks
shown (each task's latency times its calls in the model). Appends rows to OUT-tasks.json, writes
OUT-tasks.md.

`--models`: the two whole models checked against each other and timed interleaved with their kernels
alone and the cross-core round trip, as `bench/serial_bytes.py --models` times them; appends rows to
OUT-models.json, writes OUT-models.md.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from pathlib import Path

from xcore import append_table, run_stamp  # bench/ is on the path when a bench script runs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def task_rows(workload: str, top: int, repeats: int, donors: int) -> list[dict]:
    """One row per heavy task of `workload`: both picks and their measured medians (us)."""
    import tlm
    from tlm.graph.target import host_target
    from tlm.graph.zoo import get_workload
    from tlm.measure.database import open_db
    from tlm.measure.config import MeasureConfig
    from tlm.measure.measurer import Candidate, Measurer
    from tlm.search.base import TuneConfig
    from tlm.search.tlm_tuner import TlmTuner
    from tlm.space.language import parse

    target = host_target()
    module, inputs = get_workload(workload).build()
    tasks = sorted(tlm.extract_tasks(module, inputs, target), key=lambda t: -t.weight * t.flops)[:top]
    rows, cands = [], []
    gen = None
    with tempfile.TemporaryDirectory() as tmp, open_db(tmp) as db:
        for task in tasks:
            picks = {}
            for k in (0, donors):
                tuner = TlmTuner([task], db, target, TuneConfig(budget="0", donors=k), progress=False, generator=gen)
                got = tuner.pick(task)
                gen = tuner.generator
                picks[k] = got[0] if got else None
            if picks[0] is None or picks[donors] is None:
                continue
            row = {"workload": workload, "task": task.name, "calls": task.weight,
                   "donor": math.isnan(picks[donors].logprob), "same": picks[0].sentence == picks[donors].sentence,
                   "old": picks[0].sentence, "new": picks[donors].sentence}
            rows.append(row)
            for _ in range(repeats):
                for key in ("old", "new"):
                    cands.append((row, key, Candidate(task, schedule=parse(row[key], task, target).sch,
                                                      proposer="bench-donors", sentence=row[key])))
    with Measurer(target, MeasureConfig()) as m:
        results = m.measure([c for _, _, c in cands])
    got: dict[int, dict[str, list]] = {}
    for (row, key, _), r in zip(cands, results):
        got.setdefault(id(row), {"old": [], "new": []})[key].append(r.median_s * 1e6 if r.ok else math.nan)
    for row in rows:
        for key in ("old", "new"):
            row[f"{key}_us"] = round(statistics.median(got[id(row)][key]), 2)
    return rows


def _task_cells(r: dict) -> list:
    return [r["date"], r["hardware"], r["commit"], r["workload"], r["task"][:48], r["calls"],
            "donor" if r["donor"] else ("same" if r["same"] else "model"), f"{r['old_us']:.1f}", f"{r['new_us']:.1f}",
            f"{r['old_us'] / r['new_us']:.2f}x"]


def _sum_cells(r: dict) -> list:
    return [r["date"], r["hardware"], r["commit"], r["workload"], "weighted sum of the tasks above", "",
            f"{r['donor_picks']} donor picks", f"{r['old_us']:.1f}", f"{r['new_us']:.1f}", f"{r['old_us'] / r['new_us']:.3f}x"]


TASK_HEADER = ("date | hardware | commit | workload | task | calls | `--donors 3` pick | `--donors 0` us | "
               "`--donors 3` us | speedup")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", help="comma-separated zoo workloads: each heavy task's two picks, measured")
    p.add_argument("--top", type=int, default=8, help="--tasks: tasks per workload, by weight x flops")
    p.add_argument("--repeats", type=int, default=4, help="--tasks: measurements of each pick")
    p.add_argument("--donors", type=int, default=3, help="--tasks: K of the second pick")
    p.add_argument("--models", nargs="+", metavar="NAME=D0.so,DK.so", help="time whole models instead")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "donors"))
    args = p.parse_args(argv)
    from tlm.errors import TlmError

    out = Path(args.out)
    stamp = run_stamp()
    if args.models:
        import serial_bytes

        pairs = {}
        for spec in args.models:
            name, _, libs = spec.partition("=")
            paths = libs.split(",")
            if len(paths) != 2 or not all(Path(x).exists() for x in paths):
                print(f"donors: --models takes NAME=D0.so,DK.so with both libraries present, not {spec!r}", file=sys.stderr)
                return 2
            pairs[name] = (paths[0], paths[1])
        try:
            new = serial_bytes.model_rows(serial_bytes.time_models(pairs, args.rounds), stamp)
        except TlmError as err:
            print(f"donors: {err}", file=sys.stderr)
            return 2
        intro = ("Command: `python bench/donors.py --models NAME=D0.so,D3.so ...` (see its docstring). Whole models "
                 "compiled at budget 0 without (before, `--donors 0`) and with (after, `--donors 3`) nearest-task "
                 "donors, same code, seeds and shipped models, checked against each other, timed interleaved "
                 "round by round (tlm.eval.timing.interleaved); speedup: the median over the rounds of before / "
                 "after; `whole / alone`: the whole call over its kernels alone; the number of rounds last.")
        append_table(out.with_name(out.name + "-models"), new, "Whole models with and without donors at budget 0",
                     intro, serial_bytes.MODEL_HEADER, serial_bytes._model_cells)
        for r in new:
            print(" | ".join(str(c) for c in serial_bytes._model_cells(r)[3:]))
        return 0
    if not args.tasks:
        print("donors: give --tasks W,... or --models NAME=D0.so,DK.so", file=sys.stderr)
        return 2
    new = []
    for workload in args.tasks.split(","):
        try:
            rows = task_rows(workload, args.top, args.repeats, args.donors)
        except TlmError as err:
            print(f"donors: {err}", file=sys.stderr)
            return 2
        rows = [dict(stamp, **r) for r in rows]
        total = {k: sum(r["calls"] * r[f"{k}_us"] for r in rows) for k in ("old", "new")}
        rows.append(dict(stamp, workload=workload, summary=True, donor_picks=sum(r["donor"] for r in rows),
                         old_us=round(total["old"], 1), new_us=round(total["new"], 1)))
        for r in rows:
            print(" | ".join(str(c) for c in (_sum_cells(r) if r.get("summary") else _task_cells(r))[3:]), flush=True)
        new += rows
    intro = ("Command: `python bench/donors.py --tasks W,... --top N --repeats R` (see its docstring). Each heavy "
             "task's budget-0 first choice without and with nearest-task donors (`--donors 0` / `3`), each "
             "measured R times on one thread, interleaved in one batch, medians (us); `donor`: the pick with "
             "donors is a donor's program, `same`: the two picks are one program, `model`: another of the "
             "model's samples (the donors changed the ranking's lean limit); speedup: without / with.")
    append_table(out.with_name(out.name + "-tasks"), new, "Budget-0 first choices with and without nearest-task donors",
                 intro, TASK_HEADER, lambda r: _sum_cells(r) if r.get("summary") else _task_cells(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
