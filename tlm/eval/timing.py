"""Timing whole models the way a user compares them: PyTorch and ONNX Runtime beside the compiled
model, every contender once per round, interleaved (`tlm eval`'s end-to-end step and the benches)."""

from __future__ import annotations

import time
from typing import Callable


def reference_runners(imported, threads: int) -> tuple[dict[str, Callable], str | None]:
    """What a user would run instead, on the model's example inputs: {"pytorch": eager,
    "onnxruntime": a session on `threads`} (each where it can be had), and why ONNX Runtime is
    missing (None when it is there)."""
    from tlm.compiler.contenders import onnxruntime_runner

    fns: dict[str, Callable] = {}
    if imported.torch_module is not None:
        mod, ex = imported.torch_module.eval(), imported.example_inputs
        fns["pytorch"] = lambda: mod(*ex)
    try:
        run, note = onnxruntime_runner(imported, threads)
    except Exception as err:  # noqa: BLE001 - a missing ORT figure is reported, not fatal
        run, note = None, f"{type(err).__name__}: {err}"
    if run is not None:
        fns["onnxruntime"] = run
    return fns, note


def run_for(fn: Callable, ms: float) -> tuple[int, float]:
    """(calls, seconds): `fn` called back to back for at least `ms` milliseconds (once at least)."""
    n, t0 = 0, time.perf_counter()
    while (el := time.perf_counter() - t0) * 1e3 < ms or n == 0:
        fn()
        n += 1
    return n, el


def interleaved(fns: dict[str, Callable], rounds: int, min_ms: float = 200.0,
                settle_ms: float = 50.0, before_round: Callable[[], object] | None = None) -> dict[str, list[float]]:
    """ms per call of every contender, once per round, contenders interleaved within a round.

    Each contender first runs untimed for `settle_ms` (the runtime before it stops spinning its
    threads, its own thread pool wakes), and the order rotates by one each round: timed in a
    fixed order without that, the first of two identical tlm builds of a sub-millisecond model ran
    1.35x slower than the second, round after round (znver3, 2026-12-02, after ONNX Runtime).
    `before_round` runs first in every round (e.g. a probe of where the host put the CPUs)."""
    import torch

    keys = list(fns)
    times: dict[str, list[float]] = {k: [] for k in keys}
    with torch.no_grad():
        [fn() for fn in fns.values()]  # warm-up
        for r in range(max(1, rounds)):
            if before_round is not None:
                before_round()
            for k in keys[r % len(keys):] + keys[:r % len(keys)]:
                run_for(fns[k], settle_ms)
                n, el = run_for(fns[k], min_ms)
                times[k].append(el * 1e3 / n)
    return times
