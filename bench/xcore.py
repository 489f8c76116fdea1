"""Where the hypervisor has put this VM's CPUs: the round trip of a cache line between CPU 0 and
CPU 1, in ns (issue 46: a whole model's time moves with it, its kernels timed alone do not).

    python bench/xcore.py [--samples 5]      # prints the median round trip in ns
    python bench/xcore.py --beside WORKLOAD LIB.so [--rounds 40]   # a model's three contenders beside it
    python bench/xcore.py --sweep          # one thread's read rate over working sets of 0.5-96 MiB

On the 2-core znver4 hosts of 2026-11-29 the round trip was ~70 ns in some minutes and ~350 ns in
others (the two virtual CPUs on one core complex, or on two); bert_tiny's whole call ran 0.69 ms
with the first and 1.00 ms with the second, its kernels alone 0.67 ms with both. The benchmarks
record it beside their timings (`round_trip_ns`). A small C program (two threads pinned to CPU 0
and 1 bounce an atomic counter), built once with the system's C compiler into ~/.cache/tlm; None
where there is no compiler or fewer than two CPUs, said on stderr once.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

SOURCE = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static _Alignas(64) atomic_long flag;
static long N;
static void pin(int cpu) { cpu_set_t s; CPU_ZERO(&s); CPU_SET(cpu, &s); pthread_setaffinity_np(pthread_self(), sizeof s, &s); }
static void *pong(void *arg) {
  pin(1);
  for (long i = 0; i < N; i++) {
    while (atomic_load_explicit(&flag, memory_order_acquire) != 2 * i + 1) {}
    atomic_store_explicit(&flag, 2 * i + 2, memory_order_release);
  }
  return 0;
}
int main(int argc, char **argv) {
  N = argc > 1 ? atol(argv[1]) : 100000;
  pthread_t t; pin(0); atomic_store(&flag, 0); pthread_create(&t, 0, pong, 0);
  struct timespec a, b; clock_gettime(CLOCK_MONOTONIC, &a);
  for (long i = 0; i < N; i++) {
    atomic_store_explicit(&flag, 2 * i + 1, memory_order_release);
    while (atomic_load_explicit(&flag, memory_order_acquire) != 2 * i + 2) {}
  }
  clock_gettime(CLOCK_MONOTONIC, &b); pthread_join(t, 0);
  printf("%.1f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / N);
  return 0;
}
"""
_said = False


def _binary() -> Path | None:
    global _said
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None or (os.cpu_count() or 1) < 2 or len(os.sched_getaffinity(0)) < 2 or not {0, 1} <= os.sched_getaffinity(0):
        if not _said:
            print("xcore: no C compiler or not both of CPU 0 and 1: the cross-core round trip is not recorded",
                  file=sys.stderr)
            _said = True
        return None
    out = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tlm" / (
        "xcore-" + hashlib.sha256(SOURCE.encode()).hexdigest()[:12])
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        src = out.with_suffix(".c")
        src.write_text(SOURCE)
        tmp = out.with_suffix(".tmp")
        subprocess.run([cc, "-O2", "-pthread", str(src), "-o", str(tmp)], check=True, capture_output=True)
        tmp.replace(out)  # atomic: a killed build leaves no half binary behind
    return out


def round_trip_ns(samples: int = 3, bounces: int = 100_000) -> float | None:
    """Median over `samples` runs of the CPU 0 <-> CPU 1 cache-line round trip, in ns (about 10 ms
    each at ~70 ns); None where it cannot be measured."""
    try:
        exe = _binary()
        if exe is None:
            return None
        runs = [float(subprocess.run([str(exe), str(bounces)], capture_output=True, text=True, check=True,
                                     timeout=30).stdout) for _ in range(samples)]
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        print(f"xcore: the round trip could not be measured ({type(e).__name__})", file=sys.stderr)
        return None
    return round(statistics.median(runs), 1)


def median_trip(trips: list) -> float | None:
    """The median of the rounds' round trips that were measured (None where none was)."""
    measured = [t for t in trips if t is not None]
    return round(statistics.median(measured), 1) if measured else None


NEAR_NS = 150  # round trips below this: both CPUs on one core complex (~70 ns seen, ~350 across)


@functools.lru_cache(maxsize=None)  # read once per process: every split of every table asks
def core_complexes(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this host's CPUs sit on AMD core complexes (each with its own L3), the hosts NEAR_NS
    was set on. An Intel Xeon's cores share one L3 over a mesh: its round trips spread over
    150-300 ns within an hour (2026-12-07, rocketlake) with no two placements to tell apart."""
    try:
        with open(cpuinfo) as f:
            return any(line.startswith("vendor_id") and "AuthenticAMD" in line for line in f)
    except OSError:
        return False


def split_by_placement(trips: list, items: list, complexes: bool | None = None) -> tuple[list, list]:
    """`items` (one per round) of the rounds whose round trip was below NEAR_NS, and of those at or
    above it; rounds without a round trip are in neither. Both empty where the CPUs are not on core
    complexes (`complexes`, default: this host's, `core_complexes`): the split would be noise."""
    if not (core_complexes() if complexes is None else complexes):
        return [], []
    near = [x for t, x in zip(trips, items) if t is not None and t < NEAR_NS]
    far = [x for t, x in zip(trips, items) if t is not None and t >= NEAR_NS]
    return near, far


def write_table(out: Path, title: str, intro: str, header: str, cells, rows: list[dict]) -> None:
    """OUT.md (a title, an intro paragraph and one table row per result, `cells(row)` its cells)
    and OUT.json (the rows): the results files of the whole-model A/B benches."""
    import json

    lines = [f"# {title}", "", intro, "", f"| {header} |", "|" + "---|" * (header.count("|") + 1)]
    lines += ["| " + " | ".join(str(c) for c in cells(r)) + " |" for r in rows]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")


def run_stamp() -> dict:
    """{"date", "hardware", "commit"} of a run now on this host (the commit "unknown" outside git): what
    the A/B benches write beside each row."""
    import time

    from tlm.measure.shards import host_label

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).resolve().parent,
                            capture_output=True, text=True).stdout.strip()
    return {"date": time.strftime("%Y-%m-%d %H:%M"), "hardware": host_label(), "commit": commit or "unknown"}


def append_table(stem: Path, new: list[dict], title: str, intro: str, header: str, cells) -> None:
    """STEM.json's rows with `new` after them, and STEM.md from them all (`write_table`)."""
    import json

    old = json.loads(stem.with_suffix(".json").read_text()) if stem.with_suffix(".json").exists() else []
    write_table(stem, title, intro, header, cells, old + new)


def interleaved_ms(vms: dict, args: list, rounds: int) -> tuple[dict[str, float], float | None]:
    """Each Relax VM of `vms` called back to back for 200 ms by TVM's timer, the VMs in turn round
    by round with each round's round trip first: (median ms per key, median round trip ns). The
    order rotates every round, so that no VM always runs first (or always after the same one)."""
    import tvm

    timers = {k: vm.time_evaluator("main", tvm.cpu(), number=1, repeat=1, min_repeat_ms=200) for k, vm in vms.items()}
    times: dict[str, list[float]] = {k: [] for k in timers}
    trips = []
    keys = list(timers)
    for r in range(rounds):
        trips.append(round_trip_ns(samples=1))
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            times[k].append(timers[k](*args).mean * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}, median_trip(trips)


def beside(workload: str, library: str, rounds: int) -> list[tuple]:
    """(round trip ns, tlm ms, ONNX Runtime ms, PyTorch eager ms) per round: a zoo workload's tlm
    library and its two contenders, timed by `bench/ort_gap.py`'s interleaved run (same inputs and
    threads, each the median of 3 repeats of >= 200 ms, the round trip measured before each round)."""
    from ort_gap import time_workload

    timing = time_workload(workload, {"tlm": library}, rounds, torch_compile=False)
    if timing["onnxruntime_note"]:
        raise RuntimeError(f"ONNX Runtime did not run: {timing['onnxruntime_note']}")
    per = timing["per_round"]
    return list(zip(per["round_trip_ns"], per["tlm:tlm"], per["onnxruntime"], per["pytorch"]))


SWEEP_MIB = (0.5, 1, 2, 4, 8, 12, 16, 20, 24, 28, 32, 48, 96)


def read_rates(sizes=SWEEP_MIB, rounds: int = 3) -> list[tuple[float, float]]:
    """(MiB, GB/s): one thread reading a float32 buffer of each size again and again (BLAS's dot of
    the buffer with itself, the median of >= 400 MiB read), the sizes interleaved over `rounds`.
    Where the rate falls from the cache's to memory's is how much of the last-level cache this VM
    gets in practice (the cache is shared with the host's other guests)."""
    import time

    import numpy as np

    bufs = {mb: np.ones(int(mb * 2**20 / 4), dtype=np.float32) for mb in sizes}
    times: dict[float, list[float]] = {mb: [] for mb in sizes}
    for _ in range(rounds):
        for mb, a in bufs.items():
            a.dot(a)
            for _ in range(max(5, int(400 / mb / rounds))):
                t = time.perf_counter()
                a.dot(a)
                times[mb].append(time.perf_counter() - t)
    return [(mb, round(mb / 2**10 / statistics.median(times[mb]), 1)) for mb in sizes]


def summary(rows: list[tuple]) -> list[str]:
    """Markdown lines: each contender's median over the rounds with the CPUs near and far apart."""
    lines = ["| CPUs | rounds | median round trip ns | tlm ms | ONNX Runtime ms | PyTorch eager ms |",
             "|---|---|---|---|---|---|"]
    if core_complexes():
        near, far = split_by_placement([r[0] for r in rows], rows, complexes=True)
        groups = [(f"near (round trip < {NEAR_NS:.0f} ns)", near), (f"far (round trip >= {NEAR_NS:.0f} ns)", far)]
    else:  # an Intel Xeon: every measured round together
        groups = [("all (no core complexes)", [r for r in rows if r[0] is not None])]
    for label, sel in groups:
        if sel:
            med = [statistics.median(r[i] for r in sel) for i in range(4)]
            lines.append(f"| {label} | {len(sel)} | {med[0]:.0f} | {med[1]:.3f} | {med[2]:.3f} | {med[3]:.3f} |")
    return lines


def _append(out: Path, args, lines: list[str]) -> None:
    """A dated section per run at the end of OUT (the hardware, commit and command beside it)."""
    import time

    from tlm.measure.shards import host_label

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parent).stdout.strip() or "-"
    head = [] if out.exists() else [
        "# Where the host puts the two CPUs, and what it does to each contender (issue 46)", "",
        "`python bench/xcore.py --beside WORKLOAD LIB.so --rounds N`: round by round, the cache-line round trip "
        "between CPU 0 and CPU 1, then the workload's tlm library, ONNX Runtime and PyTorch eager (same inputs and "
        "threads; each the median of 3 repeats of >= 200 ms); medians over the rounds with the CPUs near and far apart."]
    what = args.title if args.sweep else f"{args.beside[0]} (`{os.path.basename(args.beside[1])}`), {args.rounds} rounds"
    section = ["", f"## {time.strftime('%Y-%m-%d %H:%M')}, {host_label()}, commit {commit}: {what}", ""] + lines
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a") as f:
        f.write("\n".join(head + section) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--beside", nargs=2, metavar=("WORKLOAD", "LIBRARY"),
                        help="time a zoo workload's tlm library, ONNX Runtime and PyTorch eager round by round "
                             "beside the round trip, and split the medians by it")
    parser.add_argument("--sweep", action="store_true", help="one thread's read rate over working sets of 0.5-96 MiB")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "xcore.md"))
    args = parser.parse_args(argv)
    if args.beside:
        if not os.path.exists(args.beside[1]):
            print(f"xcore: no such library: {args.beside[1]}", file=sys.stderr)
            return 2
        lines = summary(beside(*args.beside, args.rounds))
        print("\n".join(lines))
        _append(Path(args.out), args, lines)
        return 0
    if args.sweep:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads BLAS: one reader
        rates = read_rates()
        lines = ["| working set MiB | " + " | ".join(f"{mb:g}" for mb, _ in rates) + " |",
                 "|---|" + "---|" * len(rates), "| read GB/s (1 thread) | " + " | ".join(f"{r:.1f}" for _, r in rates) + " |"]
        print("\n".join(lines))
        args.title = f"read rate against working set (`--sweep`, round trip {round_trip_ns(3)} ns)"
        _append(Path(args.out), args, lines)
        return 0
    ns = round_trip_ns(args.samples)
    if ns is None:
        return 1
    print(f"{ns} ns")
    return 0


if __name__ == "__main__":
    sys.exit(main())
