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


def interleaved(fns: dict[str, Callable], rounds: int, min_ms: float = 200.0) -> dict[str, list[float]]:
    """ms per call of every contender, once per round, contenders interleaved within a round."""
    import torch

    times: dict[str, list[float]] = {k: [] for k in fns}
    with torch.no_grad():
        [fn() for fn in fns.values()]  # warm-up
        for _ in range(max(1, rounds)):
            for k, fn in fns.items():
                n, t0 = 0, time.perf_counter()
                while (el := time.perf_counter() - t0) * 1e3 < min_ms or n == 0:
                    fn()
                    n += 1
                times[k].append(el * 1e3 / n)
    return times
