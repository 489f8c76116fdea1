"""Where a compiled model's time goes (issue 46 item 1): the whole call, each kernel inside it,
and each kernel timed alone on the same arguments.

    python bench/vm_profile.py MODEL.so SHAPE [SHAPE ...] [--rounds 20] [--out bench/results/vm_profile]
        SHAPE: comma-separated dims of a float32 input (1,3,224,224), or `int:` + dims for int64 ids

A `tlm compile ... -o MODEL.so` library is run by the Relax VM with an instrument on every call
instruction (TVM's `VirtualMachine.set_instrument`): each kernel's time inside the model, and
the VM's own builtins (allocation, shape checks); and each kernel called alone on the arguments
it had in the model, twice, the second call timed (its inputs and weights warm in cache, the most
a task timed alone can gain). `whole` is the model called back to back for 200 ms by TVM's timer
(as `bench/ort_gap.py` and users time it), `alone (TVM timer)` each kernel likewise for 5 ms (as
the tuner times a task); `whole, one call` is a single call after the cold kernels' flushes (the
only `whole` of rows before 2026-11-29). The rest are interleaved round by round; medians. The gap between the whole call and the sum of its kernels alone is
the issue's "outside the tasks"; split into the VM's builtins, the instrument-free remainder,
and the kernels running slower in sequence than alone. Writes OUT.json and OUT.md (appends a row
per run; the kernel tables are each library's newest).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

from xcore import NEAR_NS, median_trip, round_trip_ns, split_by_placement  # bench/ is on the path when a bench script runs


def _inputs(shapes: list[str]):
    import numpy as np
    import tvm

    rng = np.random.default_rng(0)
    out = []
    for s in shapes:
        if s.startswith("int:"):
            dims = tuple(int(d) for d in s[4:].split(","))
            out.append(tvm.runtime.tensor(rng.integers(0, 100, dims).astype("int64")))
        else:
            out.append(tvm.runtime.tensor(rng.standard_normal(tuple(int(d) for d in s.split(","))).astype("float32")))
    return out


def _flusher():
    """A function that evicts the caches: it writes a buffer of twice the last-level cache (64 MiB
    when the size cannot be read), so that a kernel called next reads its weights and inputs from
    memory, as a model's kernel does when the layers before it filled the caches with their own."""
    import numpy as np

    size = 32 << 20
    try:
        text = Path("/sys/devices/system/cpu/cpu0/cache/index3/size").read_text().strip()
        size = int(text[:-1]) << (20 if text.endswith("M") else 10) if text[-1] in "KM" else int(text)
    except (OSError, ValueError, IndexError):
        pass
    buf = np.zeros(2 * size // 8, dtype=np.float64)

    def flush() -> None:
        np.add(buf, 1.0, out=buf)

    return flush


def footprint_mib(calls: list[tuple]) -> float:
    """The distinct memory the kernels of one call read and write, in MiB: the union of their
    tensor arguments' byte ranges (weights, inputs, the planned activation storage; views of one
    storage counted once). A gather's whole table counts, though it reads a few rows of it."""
    import numpy as np
    import tvm

    spans = sorted({(x.data_ptr(), x.data_ptr() + int(np.prod(x.shape)) * tvm.runtime.DataType(x.dtype).bits // 8)
                    for _, _, args in calls for x in args if isinstance(x, tvm.runtime.Tensor)})
    total, end = 0, 0
    for lo, hi in spans:  # merge the overlapping ranges, left to right
        total += max(0, hi - max(lo, end))
        end = max(end, hi)
    return round(total / 2**20, 1)


def kernels_alone(lib, args) -> Callable[[], float]:
    """A timer of a library's kernels alone (ms): each kernel call of one whole call (TVM's VM
    instrument) timed by TVM's timer on the arguments it had there (>= 5 ms each, as the tuner
    times a task), summed. Issue 46 asks the whole call within 1.1x of it (bench/ort_gap.py times it beside the whole call)."""
    import tvm
    from tvm import relax

    calls = []

    def instrument(func, symbol, before, _ret, *call_args):
        if before and not symbol.startswith("vm."):
            calls.append((symbol, call_args))
        return 0

    vm = relax.VirtualMachine(lib, tvm.cpu())
    vm.set_instrument(instrument)
    vm["main"](*args)
    if not calls:  # a VM built with exec_mode="compiled" calls its kernels without the instrument
        from tlm.errors import TlmError

        raise TlmError("the library's VM reports no kernel calls to its instrument (built with "
                       "exec_mode=\"compiled\"?): its kernels cannot be timed alone")
    kernels = lib.imports[0]  # the compiled kernels, for TVM's timer
    timers = {sym: kernels.time_evaluator(sym, tvm.cpu(), number=1, repeat=1, min_repeat_ms=5) for sym, _ in calls}

    def run() -> float:
        return sum(timers[sym](*call_args).mean for sym, call_args in calls) * 1e3

    run.kernels = [sym for sym, _ in calls]  # the kernel calls it times, in the model's order
    return run


def profile(artifact: str, shapes: list[str], rounds: int) -> dict:
    """Interleaved rounds (so that drift of the host hits all three alike): the whole call on a
    plain VM, the whole call on an instrumented VM (each call instruction timed), then each kernel
    called once alone on the arguments it had in the model; medians over the rounds."""
    import tvm
    from tvm import relax

    from tlm.graph.target import runtime_threads  # importing tlm first: TVM's pool gets the host's cores

    dev = tvm.cpu()
    lib = tvm.runtime.load_module(artifact)
    plain, vm = relax.VirtualMachine(lib, dev), relax.VirtualMachine(lib, dev)
    args = _inputs(shapes)
    inside: dict[str, list[float]] = collections.defaultdict(list)
    calls: list[tuple[str, object, tuple]] = []  # (symbol, function, arguments) of each kernel call
    start: dict[str, float] = {}
    record = {"on": True}

    def instrument(func, symbol, before, _ret, *call_args):
        now = time.perf_counter()
        if before:
            if record["on"] and not symbol.startswith("vm."):
                calls.append((symbol, func, call_args))
            start[symbol] = now
        else:
            inside[symbol].append(now - start[symbol])
        return 0

    vm.set_instrument(instrument)
    vm["main"](*args)  # warm, and the kernels' arguments
    plain["main"](*args)
    record["on"] = False
    for _, func, call_args in calls:
        func(*call_args)
    whole, instrumented = [], []
    alone: dict[str, list[float]] = collections.defaultdict(list)
    cold: dict[str, list[float]] = collections.defaultdict(list)
    flush = _flusher()
    per_round: list[dict[str, float]] = []
    steady = plain.time_evaluator("main", dev, number=1, repeat=1, min_repeat_ms=200)
    alone_tvm = kernels_alone(lib, args)  # each kernel call timed as the tuner times a task
    whole_steady, alone_timer, trips = [], [], []
    for _ in range(rounds):
        trips.append(round_trip_ns(samples=1))  # where the host has put the two CPUs this round
        t0 = time.perf_counter()
        plain["main"](*args)
        whole.append(time.perf_counter() - t0)
        whole_steady.append(steady(*args).mean)
        alone_timer.append(alone_tvm() / 1e3)
        inside.clear()
        t0 = time.perf_counter()
        vm["main"](*args)
        instrumented.append(time.perf_counter() - t0)
        per_round.append({k: sum(v) for k, v in inside.items()})
        this = collections.defaultdict(float)
        for symbol, func, call_args in calls:
            func(*call_args)  # twice, the second timed: its inputs and weights warm
            t0 = time.perf_counter()
            func(*call_args)
            this[symbol] += time.perf_counter() - t0
        for k, v in this.items():
            alone[k].append(v)
        this = collections.defaultdict(float)
        for symbol, func, call_args in calls:  # cold: every cache level refilled by other data first
            flush()
            t0 = time.perf_counter()
            func(*call_args)
            this[symbol] += time.perf_counter() - t0
        for k, v in this.items():
            cold[k].append(v)
    symbols = per_round[0].keys()
    med = {k: statistics.median(r.get(k, 0.0) for r in per_round) * 1e3 for k in symbols}
    count = collections.Counter(sym for sym, _, _ in calls)
    alone_ms = {k: statistics.median(v) * 1e3 for k, v in alone.items()}
    cold_ms = {k: statistics.median(v) * 1e3 for k, v in cold.items()}
    kernels = {k: v for k, v in med.items() if not k.startswith("vm.")}
    builtins = {k: v for k, v in med.items() if k.startswith("vm.")}
    return {
        "artifact": artifact, "shapes": shapes, "rounds": rounds,
        "whole_ms": round(statistics.median(whole_steady) * 1e3, 4),
        **_by_placement(trips, whole_steady),
        "whole_one_call_ms": round(statistics.median(whole) * 1e3, 4),
        "kernels_alone_timer_ms": round(statistics.median(alone_timer) * 1e3, 4),
        "instrumented_ms": round(statistics.median(instrumented) * 1e3, 4),
        "kernels_inside_ms": round(sum(kernels.values()), 4),
        "kernels_alone_ms": round(sum(alone_ms.values()), 4),
        "kernels_cold_ms": round(sum(cold_ms.values()), 4),
        "builtins_ms": round(sum(builtins.values()), 4),
        "kernel_calls": len(calls), "threads": runtime_threads(), "footprint_mib": footprint_mib(calls),
        "builtin_calls": sum(len(v) for k, v in inside.items() if k.startswith("vm.")),  # the last round's
        "top": sorted(({"kernel": k, "calls": count[k], "inside_ms": round(v, 4), "alone_ms": round(alone_ms.get(k, 0), 4),
                        "cold_ms": round(cold_ms.get(k, 0), 4)}
                       for k, v in kernels.items()), key=lambda r: -r["inside_ms"])[:15],
    }


def _by_placement(trips: list, whole: list[float], complexes: bool | None = None) -> dict:
    """The median round trip, and the whole call's median over the rounds with the CPUs near
    (< NEAR_NS) and far apart, each with its count of rounds (none of either where the CPUs are not
    on core complexes: xcore.split_by_placement); {} where nothing was measured."""
    trip = median_trip(trips)
    if trip is None:
        return {}
    near, far = split_by_placement(trips, whole, complexes)
    return {"round_trip_ns": trip,
            "whole_near_ms": round(statistics.median(near) * 1e3, 4) if near else None, "near_rounds": len(near),
            "whole_far_ms": round(statistics.median(far) * 1e3, 4) if far else None, "far_rounds": len(far)}


def _placement_cells(r: dict) -> str:
    if r.get("round_trip_ns") is None:
        return "- | - | -"
    alone = r.get("kernels_alone_timer_ms") or r["kernels_alone_ms"]
    cells = [f"{r['round_trip_ns']:.0f}"]
    for key, n in (("whole_near_ms", "near_rounds"), ("whole_far_ms", "far_rounds")):
        cells.append("-" if r.get(key) is None else f"{r[key]:.2f} ({r[key] / alone:.2f}x, {r[n]})")
    return " | ".join(cells)


def write(rows: list[dict], out: Path) -> None:
    lines = ["# Where a compiled model's time goes (issue 46 item 1)", "",
             "Command: `python bench/vm_profile.py MODEL.so SHAPE...` (one row per library; see the script's "
             "docstring). Medians in ms. `inside`: the kernels' time within the whole call (VM instrument); "
             "`alone`: each kernel called twice on the same arguments, the second timed (warm caches); `cold`: each kernel "
             "called once after a write of twice the last-level cache (weights and inputs from memory; rows before "
             "2026-11-28 18:00 lack it); interleaved rounds; `builtins`: the VM's own calls (allocation, shape checks). "
             "`whole`: from 2026-11-29 the model called back to back for 200 ms by TVM's timer (as ort_gap times "
             "it), before that one call after the cold kernels' flushes (now `whole, one call`); `alone (TVM timer)`: "
             "each kernel called back to back for 5 ms by TVM's timer, as the tuner times a task; `whole / alone` "
             "divides by it where the row has it. From 2026-11-29 03:40: `round trip`, the median cross-core round "
             "trip over the rounds (`bench/xcore.py`: ~70 ns with both CPUs on one core complex, ~350 across), and "
             "`whole, CPUs near` / `far`: the whole call's median over the rounds with a round trip below / above "
             f"{NEAR_NS} ns (its ratio to the kernels alone, the number of rounds). From 2026-11-29 08:30: `footprint`, "
             "the distinct MiB the kernels of one call touch (weights, inputs, activation storage).", "",
             "| date | hardware | library | whole | whole, one call | kernels inside | kernels alone | "
             "alone (TVM timer) | kernels cold | builtins (calls) | whole / alone | whole / cold | load | "
             "round trip ns | whole, CPUs near | whole, CPUs far | footprint MiB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cold = r.get("kernels_cold_ms")
        cold_ms, per_cold = ("-", "-") if not cold else (f"{cold:.2f}", f"{r['whole_ms'] / cold:.2f}")
        timer = r.get("kernels_alone_timer_ms")
        one = r.get("whole_one_call_ms")
        lines.append(f"| {r['date']} | {r['hardware']} | {r['name']} | {r['whole_ms']:.2f} | "
                     + ("-" if one is None else f"{one:.2f}") + f" | {r['kernels_inside_ms']:.2f} "
                     f"| {r['kernels_alone_ms']:.2f} | " + ("-" if timer is None else f"{timer:.2f}")
                     + f" | {cold_ms} | {r['builtins_ms']:.2f} ({r['builtin_calls']}) | "
                     f"{r['whole_ms'] / (timer or r['kernels_alone_ms']):.2f} | {per_cold} | {r['load']} | "
                     f"{_placement_cells(r)} | {r.get('footprint_mib', '-')} |")
    newest = {(r["name"], r["hardware"]): r for r in rows}  # kernels of each library's newest row
    for r in newest.values():
        lines += ["", f"## {r['name']} ({r['date']}, {r['hardware']}): largest kernels", "",
                  "| kernel | calls | inside ms | alone ms | cold ms | inside / alone |", "|---|---|---|---|---|---|"]
        lines += [f"| {t['kernel']} | {t['calls']} | {t['inside_ms']:.3f} | {t['alone_ms']:.3f} | "
                  + ("-" if t.get("cold_ms") is None else f"{t['cold_ms']:.3f}")
                  + f" | {t['inside_ms'] / t['alone_ms']:.2f} |" for t in r["top"] if t["alone_ms"] > 0]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("artifact")
    parser.add_argument("shapes", nargs="+")
    parser.add_argument("--name", help="row name (default: the library's folder and file name)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--out", default="bench/results/vm_profile")
    args = parser.parse_args(argv)
    from tlm.measure.shards import host_label

    if not os.path.exists(args.artifact):
        print(f"vm_profile: no such library: {args.artifact}", file=sys.stderr)
        return 2
    from tlm.errors import TlmError, first_line

    try:
        row = profile(args.artifact, args.shapes, args.rounds)
    except (TlmError, RuntimeError, ValueError) as err:  # a wrong shape (TVM's MatchShape), a compiled VM
        print(f"vm_profile: {args.artifact}: {first_line(err, last=not isinstance(err, TlmError))}", file=sys.stderr)
        return 2
    row.update(name=args.name or os.path.basename(args.artifact), hardware=host_label(),
               date=time.strftime("%Y-%m-%d %H:%M"), load=round(os.getloadavg()[0], 2))
    out = Path(args.out)
    rows = json.loads(out.with_suffix(".json").read_text()) if out.with_suffix(".json").exists() else []
    rows.append(row)  # append-only: a library profiled again is a new row
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    write(rows, out)
    print(f"{row['name']}: whole {row['whole_ms']:.2f} ms (one call {row['whole_one_call_ms']:.2f}), kernels inside "
          f"{row['kernels_inside_ms']:.2f}, alone {row['kernels_alone_ms']:.2f} (TVM timer "
          f"{row['kernels_alone_timer_ms']:.2f}), builtins {row['builtins_ms']:.2f} ({row['builtin_calls']} calls)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
