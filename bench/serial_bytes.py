"""What a serial kernel between parallel ones costs (tlm.space.serial.SERIAL_OUT_BYTES, issue 46).

    python bench/serial_bytes.py [--rows 8,16,32,64,128,256,512] [--rounds 7] [--out bench/results/serial_bytes]
    python bench/serial_bytes.py --models NAME=BEFORE.so,AFTER.so [NAME=...] [--rounds 15]
        NAME: a zoo workload or a model of bench/outside_models.py; the two libraries compiled
        without and with the rule (same seeds and shipped models)

A producer writes a [rows, 128] float32 tensor with its rows split between TVM's threads (a
parallel outer loop, as the matmuls of a transformer split their rows); a consumer copies it
(x * 1.5 + 1), either serial (on the calling thread: tlm.space.serial's small tasks) or split by
the same rows. Each pair is timed in sequence (producer, consumer, back to back) and alone (each
kernel called twice in a row, so that it reads what it wrote itself); `in sequence - alone` is
what moving the data between the cores costs. `pool trip`: a 2 x 16 copy with a parallel loop
against the same copy serial, alone: what a parallel loop's start and stop costs. Python calls
each kernel (about 0.3 us a call, the same in both). Rounds repeated (the same order in each), each
with its cross-core round trip (bench/xcore.py; CPUs near below 150 ns), medians. Appends rows to OUT.json, writes OUT.md.

`--models`: whole models, each pair of libraries checked against each other and timed
interleaved (tlm.eval.timing.interleaved: 50 ms untimed, then calls for >= 200 ms, the order
rotated round by round) with the sum of each library's kernels alone (bench/vm_profile.kernels_alone, as bench/ort_gap.py times it) and the
round trip, medians over all rounds and over the rounds with the CPUs near and far; appends rows
to OUT-models.json and writes OUT-models.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from xcore import append_table, median_trip, round_trip_ns, run_stamp, split_by_placement, write_table  # bench/ is on the path when a bench script runs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
COLS = 128


def _copy(rows: int, cols: int, parallel: bool):
    """x * 1.5 + 1 over [rows, cols], rows split between the threads or serial; vectorized."""
    import tvm
    from tvm import s_tir, te

    a = te.placeholder((rows, cols), name="A")
    b = te.compute((rows, cols), lambda i, j: a[i, j] * 1.5 + 1.0, name="B")
    sch = s_tir.Schedule(te.create_prim_func([a, b]))
    i, j = sch.get_loops(sch.get_sblock("B"))
    if parallel:
        sch.parallel(i)
    sch.vectorize(j)
    return tvm.compile(sch.mod, target="llvm").mod["main"]


def _per_call_us(fn, ms: float) -> float:
    from tlm.eval.timing import run_for

    n, seconds = run_for(fn, ms)
    return seconds / n * 1e6


def measure(rows_list: list[int], rounds: int, ms: float = 10.0) -> dict:
    import numpy as np
    import tvm

    from tlm.graph.target import runtime_threads  # importing tlm first: TVM's pool gets the host's cores

    kernels = {n: (_copy(n, COLS, True), _copy(n, COLS, True), _copy(n, COLS, False)) for n in rows_list}
    rng = np.random.default_rng(0)
    arrays = {n: [tvm.runtime.tensor(rng.standard_normal((n, COLS)).astype("float32")) for _ in range(3)]
              for n in rows_list}
    tiny_par, tiny_ser = _copy(2, 16, True), _copy(2, 16, False)
    ta, tb = (tvm.runtime.tensor(np.zeros((2, 16), "float32")) for _ in range(2))
    cells: dict[str, list] = {}
    trips = []
    for _ in range(rounds):
        trips.append(round_trip_ns(samples=1))
        trip = (_per_call_us(lambda: tiny_par(ta, tb), ms) - _per_call_us(lambda: tiny_ser(ta, tb), ms))
        cells.setdefault("pool_trip_us", []).append(trip)
        for n in rows_list:
            produce, par, ser = kernels[n]
            x, y, z = arrays[n]
            for name, consume in (("parallel", par), ("serial", ser)):
                seq = _per_call_us(lambda: (produce(x, y), consume(y, z)), ms)
                alone = (_per_call_us(lambda: (produce(x, y), produce(x, y)), ms) / 2
                         + _per_call_us(lambda: (consume(y, z), consume(y, z)), ms) / 2)
                cells.setdefault(f"{n}:{name}", []).append(seq - alone)
    return {"cells": cells, "trips": trips, "threads": runtime_threads()}


def _placed(values: list, trips: list) -> dict[str, list]:
    """The rounds' values, all and split by where the CPUs sat (xcore.split_by_placement)."""
    near, far = split_by_placement(trips, values)
    return {"all": values, "near": near, "far": far}


def _median(values: list, digits: int) -> float | None:
    return round(statistics.median(values), digits) if values else None


def rows_of(result: dict, rows_list: list[int], stamp: dict) -> list[dict]:
    cells, trips = result["cells"], result["trips"]
    out = []
    for n in rows_list:
        row = dict(stamp, kb=n * COLS * 4 // 1024, threads=result["threads"], rounds=len(trips))
        for name in ("parallel", "serial"):
            for place, values in _placed(cells[f"{n}:{name}"], trips).items():
                row[f"{name}_{place}_us"] = _median(values, 3)
                row[f"{place}_rounds"] = len(values)
        row["pool_trip_us"] = _median(cells["pool_trip_us"], 3)
        row["round_trip_ns"] = median_trip(trips)
        out.append(row)
    return out


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def _cells(r: dict) -> list:
    return [r["date"], r["hardware"], r["commit"], r["kb"], _fmt(r["serial_all_us"]), _fmt(r["parallel_all_us"]),
            f"{_fmt(r['serial_near_us'])} / {_fmt(r['serial_far_us'])}",
            f"{_fmt(r['parallel_near_us'])} / {_fmt(r['parallel_far_us'])}",
            _fmt(r["pool_trip_us"]), f"{r['near_rounds']} / {r['far_rounds']}", r["round_trip_ns"], r["threads"]]


HEADER = ("date | hardware | commit | output KB | serial consumer: in sequence - alone us | row-split consumer us | "
          "serial, CPUs near / far | row-split, near / far | pool trip us | rounds near / far | round trip ns | threads")


def _model_inputs(name: str) -> list:
    """A zoo workload's or a battery model's example inputs as TVM tensors."""
    from outside_models import entries, get

    from tlm.compiler.apply import to_tvm
    from tlm.graph.zoo import get_workload

    if name in {e.name for e in entries()}:
        return to_tvm(get(name).make()[1])
    return to_tvm(get_workload(name).build()[1])


def time_models(pairs: dict[str, tuple[str, str]], rounds: int) -> dict[str, dict]:
    """Per model: both libraries' whole call (tlm.eval.timing.interleaved: settled, order rotated)
    and, first in each round, the round trip and each library's kernels alone."""
    import tvm
    from tvm import relax

    from tlm.compiler.apply import out_numpy
    from tlm.compiler.check import max_abs_diff
    from tlm.eval.timing import interleaved
    from vm_profile import kernels_alone

    out = {}
    for name, libs in pairs.items():
        args = _model_inputs(name)
        vms, alone, results = {}, {}, []
        for key, path in zip(("before", "after"), libs):
            lib = tvm.runtime.load_module(path)
            vms[key] = relax.VirtualMachine(lib, tvm.cpu())
            alone[key] = kernels_alone(lib, args)
            results.append(out_numpy(vms[key]["main"](*args)))
        per: dict[str, list] = {"trip": [], "before_alone": [], "after_alone": []}

        def before_round() -> None:
            per["trip"].append(round_trip_ns(samples=1))
            for k, timer in alone.items():
                per[f"{k}_alone"].append(timer())

        per.update(interleaved({k: (lambda f=vm["main"]: f(*args)) for k, vm in vms.items()}, rounds,
                               before_round=before_round))
        out[name] = {"libraries": list(libs), "max_abs_diff": max_abs_diff(results[0], results[1]), "per_round": per}
    return out


def model_rows(timed: dict[str, dict], stamp: dict) -> list[dict]:
    rows = []
    for name, t in timed.items():
        per = t["per_round"]
        row = dict(stamp, model=name, libraries=t["libraries"], max_abs_diff=t["max_abs_diff"], rounds=len(per["trip"]))
        for k in ("before", "after"):
            ratios = [w / a for w, a in zip(per[k], per[f"{k}_alone"])]
            for place, values in _placed(per[k], per["trip"]).items():
                row[f"{k}_{place}_ms"] = _median(values, 4)
                row[f"{place}_rounds"] = len(values)
            for place, values in _placed(ratios, per["trip"]).items():
                row[f"{k}_{place}_ratio"] = _median(values, 3)
        speedups = [b / a for b, a in zip(per["before"], per["after"])]
        for place, values in _placed(speedups, per["trip"]).items():
            row[f"speedup_{place}"] = _median(values, 3)
        rows.append(row)
    return rows


def _model_cells(r: dict) -> list:
    def pair(place: str) -> str:
        if not r[f"{place}_rounds"]:
            return "-"
        return (f"{r[f'before_{place}_ms']:.3f} / {r[f'after_{place}_ms']:.3f} ({r[f'speedup_{place}']:.3f}x; "
                f"whole / alone {r[f'before_{place}_ratio']:.2f} / {r[f'after_{place}_ratio']:.2f}, {r[f'{place}_rounds']})")
    return [r["date"], r["hardware"], r["commit"], r["model"], pair("all"), pair("near"), pair("far"),
            f"{r['max_abs_diff']:.2g}"]


MODEL_HEADER = ("date | hardware | commit | model | before / after ms, all rounds | CPUs near | CPUs far | "
                "max abs diff between the two")


def main_models(specs: list[str], rounds: int, out: Path, stamp: dict) -> int:
    pairs = {}
    for spec in specs:
        name, _, libs = spec.partition("=")
        paths = libs.split(",")
        if len(paths) != 2 or not all(Path(x).exists() for x in paths):
            print(f"error: --models takes NAME=BEFORE.so,AFTER.so with both libraries present, not {spec!r}",
                  file=sys.stderr)
            return 2
        pairs[name] = (paths[0], paths[1])
    new = model_rows(time_models(pairs, rounds), stamp)
    intro = ("Command: `python bench/serial_bytes.py --models NAME=BEFORE.so,AFTER.so ...` (see its docstring). "
             "Whole models compiled without (before) and with (after) tlm.space.serial's output-bytes rule, same "
             "seeds and shipped models, timed interleaved round by round, order rotated (the rows of 2026-12-06 by TVM's "
             "timer, 200 ms a call; later rows by tlm.eval.timing.interleaved, 50 ms untimed then >= 200 ms); "
             "speedup: the median over the rounds of before / after; `whole / alone`: the whole call over its "
             "kernels alone (issue 46 asks at most 1.1x); the number of rounds last.")
    append_table(out.with_name(out.name + "-models"), new, "Whole models with and without the output-bytes rule", intro,
                 MODEL_HEADER, _model_cells)
    for r in new:
        print(" | ".join(str(c) for c in _model_cells(r)[3:]))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="8,16,32,64,128,256,512", help="comma-separated row counts (x 128 floats)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "serial_bytes"))
    p.add_argument("--models", nargs="+", metavar="NAME=BEFORE.so,AFTER.so", help="time whole models instead")
    args = p.parse_args(argv)
    try:
        rows_list = [int(x) for x in args.rows.split(",")]
    except ValueError:
        print(f"error: --rows takes comma-separated integers, not {args.rows!r}", file=sys.stderr)
        return 2
    stamp = run_stamp()
    out = Path(args.out)
    if args.models:
        from tlm.errors import TlmError

        try:
            return main_models(args.models, args.rounds, out, stamp)
        except TlmError as err:  # an unknown model name: one line
            print(f"error: {err}", file=sys.stderr)
            return 2
    new = rows_of(measure(rows_list, args.rounds), rows_list, stamp)
    intro = ("Command: `python bench/serial_bytes.py` (see its docstring). A [rows, 128] float32 tensor written by a "
             "kernel whose rows are split between TVM's threads, then copied by a serial kernel or by one split by the "
             "same rows: each pair's time in sequence minus the two kernels' times alone (each called twice in a row), "
             "medians over interleaved rounds, all rounds and then those with the CPUs near / far (cross-core round "
             "trip below / above 150 ns). `pool trip`: a 2 x 16 copy with a parallel loop minus the same copy serial. "
             "tlm.space.serial keeps a small task's parallel loops from SERIAL_OUT_BYTES (32 KB) of output.")
    append_table(out, new, "A serial kernel between parallel ones", intro, HEADER, _cells)
    for r in new:
        print(f"{r['kb']:>5} KB: serial {_fmt(r['serial_all_us'])} us, row-split {_fmt(r['parallel_all_us'])} us "
              f"(pool trip {_fmt(r['pool_trip_us'])} us)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
