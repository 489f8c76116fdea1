"""An inverted residual's expand 1x1 conv and 3x3 depthwise conv, as two stages or one fused loop
nest (issue 46; bench/results/ort-gap-where-znver4-2026-12-07.md).

    python bench/fused_pair.py [--pairs 112,16,96,2 56,24,144,1 ...] [--out bench/results/fused_pair]

Each PAIR is `side,in_channels,expanded_channels,stride` (NHWC, batch 1; ReLU6 and a bias after
each conv, as in mobilenet_v2). Two stages: the expanded tensor is written whole, then read by the
depthwise conv (what two tasks do). Fused: the expanded rows an output-row tile needs (its rows
plus the 3x3 window's halo, recomputed between tiles) are computed just before the depthwise conv
reads them (TVM's `compute_at`), for each tile that divides the output side. The same hand schedule
for both (not MetaSchedule's: its CPU rules never compute a reduction at a consumer's tile), so the
figures compare the forms, not what a tuner reaches. Every program's output is checked against
numpy; times are TVM's timer, medians: warm (calls back to back) and cold (64 MiB flushed before
each call).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

FLUSH_BYTES = 64 << 20


def pair_func(side: int, cin: int, cexp: int, stride: int):
    """The pair as a TIR PrimFunc (X, W1, B1, W2, B2 -> D)."""
    import tvm
    from tvm import te

    out = side // stride
    x = te.placeholder((1, side, side, cin), name="X")
    w1 = te.placeholder((cin, cexp), name="W1")
    b1 = te.placeholder((cexp,), name="B1")
    w2 = te.placeholder((3, 3, cexp), name="W2")
    b2 = te.placeholder((cexp,), name="B2")
    k = te.reduce_axis((0, cin), name="k")
    e0 = te.compute((1, side, side, cexp), lambda n, h, w, c: te.sum(x[n, h, w, k] * w1[k, c], axis=k), name="E0")
    e = te.compute(e0.shape, lambda n, h, w, c: te.min(te.max(e0[n, h, w, c] + b1[c], 0.0), 6.0), name="E")
    r, s = te.reduce_axis((0, 3), name="r"), te.reduce_axis((0, 3), name="s")

    def window(n, i, j, c):  # the expanded tensor zero-padded by one
        h, w = i * stride + r - 1, j * stride + s - 1
        return tvm.tirx.if_then_else(tvm.tirx.all(h >= 0, h < side, w >= 0, w < side), e[n, h, w, c], 0.0)

    d0 = te.compute((1, out, out, cexp), lambda n, i, j, c: te.sum(window(n, i, j, c) * w2[r, s, c], axis=[r, s]),
                    name="D0")
    d = te.compute(d0.shape, lambda n, i, j, c: te.min(te.max(d0[n, i, j, c] + b2[c], 0.0), 6.0), name="D")
    return te.create_prim_func([x, w1, b1, w2, b2, d])


def schedule(func, fused: bool, tile: int, pixels: int = 8):
    """Both forms: the depthwise conv by output-row tiles (parallel), 16 channels a vector; the 1x1
    conv `pixels` pixels x 16 channels at a time, at the depthwise conv's tile when `fused`."""
    import tvm.s_tir as s_tir

    sch = s_tir.Schedule(func)
    e0, d0, d = sch.get_sblock("E0"), sch.get_sblock("D0"), sch.get_sblock("D")
    sch.compute_inline(sch.get_sblock("E"))
    n, i, j, c, r, s = sch.get_loops(d0)
    io, ii = sch.split(i, [None, tile])
    co, ci = sch.split(c, [None, 16])
    sch.reorder(io, ii, j, co, r, s, ci)
    sch.parallel(sch.fuse(n, io))
    sch.vectorize(ci)
    sch.reverse_compute_at(d, j)
    sch.vectorize(sch.split(sch.get_loops(d)[-1], [None, 16])[1])
    sch.decompose_reduction(d0, r)
    if fused:
        sch.compute_at(e0, sch.get_loops(d0)[0])
    en, eh, ew, ec, ek = sch.get_loops(e0)
    ewo, ewi = sch.split(ew, [None, pixels])
    eco, eci = sch.split(ec, [None, 16])
    sch.reorder(eh, ewo, eco, ek, ewi, eci)
    if not fused:
        sch.parallel(sch.fuse(en, eh))
    sch.unroll(ewi)
    sch.vectorize(eci)
    sch.decompose_reduction(e0, ek)
    return sch


def reference(arrays: list[np.ndarray], stride: int) -> np.ndarray:
    x, w1, b1, w2, b2 = arrays
    e = np.clip(np.einsum("nhwk,kc->nhwc", x, w1) + b1, 0, 6)
    padded = np.pad(e, ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = x.shape[1] // stride
    d = np.zeros((1, out, out, w1.shape[1]), "float32")
    for r in range(3):
        for s in range(3):
            d += padded[:, r:r + stride * out:stride, s:s + stride * out:stride, :] * w2[r, s]
    return np.clip(d + b2, 0, 6)


def run_pair(side: int, cin: int, cexp: int, stride: int, fused: bool, tile: int, target,
             time: bool = True, seed: int = 0) -> tuple[float, float | None, float | None]:
    """(max abs error against numpy, warm ms, cold ms) of one form (times None when not `time`)."""
    import tvm

    func = pair_func(side, cin, cexp, stride)
    lib = tvm.compile(schedule(func, fused, tile).mod, target=target)
    rng = np.random.default_rng(seed)
    shapes = [(1, side, side, cin), (cin, cexp), (cexp,), (3, 3, cexp), (cexp,)]
    arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(a, dev) for a in arrays]
    out = tvm.runtime.tensor(np.zeros((1, side // stride, side // stride, cexp), "float32"), dev)
    lib(*args, out)
    err = float(np.abs(out.numpy() - reference(arrays, stride)).max())
    if not time:
        return err, None, None
    mod = lib.mod
    warm = mod.time_evaluator(mod.entry_name, dev, number=20, repeat=15)(*args, out).median * 1e3
    cold = mod.time_evaluator(mod.entry_name, dev, number=1, repeat=40, cache_flush_bytes=FLUSH_BYTES)(
        *args, out).median * 1e3
    return err, warm, cold


HEADER = ("date | hardware | commit | threads | round trip ns, before / after | pair (side, in, expanded, stride) "
          "| form | row tile | warm ms | cold ms | cold / warm | max abs err")


def _cells(r: dict) -> list:
    return [r["date"], r["hardware"], r["commit"], r["threads"], r["trips"], r["pair"], r["form"], r["tile"],
            f"{r['warm_ms']:.4f}", f"{r['cold_ms']:.4f}", f"{r['cold_ms'] / r['warm_ms']:.2f}", f"{r['max_abs_err']:.1e}"]


def main(argv: list[str] | None = None) -> int:
    import os

    from xcore import append_table, round_trip_ns, run_stamp  # bench/ is on the path when a bench script runs

    from tlm.graph.target import resolve_target

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", nargs="+", default=["112,16,96,2", "56,24,144,1", "28,32,192,1", "14,64,384,1",
                                                    "14,96,576,1"])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "fused_pair"))
    args = ap.parse_args(argv)
    try:
        pairs = [tuple(int(v) for v in pair.split(",")) for pair in args.pairs]
        if any(len(p) != 4 or min(p) < 1 or p[0] % p[3] for p in pairs):
            raise ValueError
    except ValueError:
        print(f"error: --pairs takes side,in,expanded,stride with the side a multiple of the stride, not {args.pairs}",
              file=sys.stderr)
        return 2
    target = resolve_target(None).tvm()
    stamp = dict(run_stamp(), threads=os.environ.get("TVM_NUM_THREADS", "all"))
    before = round_trip_ns()
    rows = []
    for side, cin, cexp, stride in pairs:
        out = side // stride
        forms = [(False, 1)] + [(True, t) for t in (1, 2, 4, 7, 8, 14) if out % t == 0 and out // t >= 2]
        for fused, tile in forms:
            err, warm, cold = run_pair(side, cin, cexp, stride, fused, tile, target)
            rows.append(dict(stamp, pair=f"{side},{cin},{cexp},{stride}", form="fused" if fused else "two stages",
                             tile=tile if fused else "-", warm_ms=warm, cold_ms=cold, max_abs_err=err))
            print(" | ".join(str(c) for c in _cells(dict(rows[-1], trips="-"))[5:]), flush=True)
    after = round_trip_ns()
    trips = " / ".join("-" if t is None else f"{t:.0f}" for t in (before, after))
    intro = ("Command: `python bench/fused_pair.py` (see its docstring; `TVM_NUM_THREADS=1` for one thread). "
             "mobilenet_v2's expand 1x1 conv and 3x3 depthwise conv as two stages or fused per output-row tile, the "
             "same hand schedule for both; medians of TVM's timer, warm (back to back) and cold (64 MiB flushed before "
             "each call); every output checked against numpy. The round trip between the two CPUs before and after "
             "the run (`bench/xcore.py`: near 55-140 ns, far 600-670 on AMD).")
    append_table(Path(args.out), [dict(r, trips=trips) for r in rows], "An inverted residual's expand and depthwise "
                 "convs, two stages or fused", intro, HEADER, _cells)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
