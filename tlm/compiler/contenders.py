"""What a compiled model is timed against, on the same inputs and threads: PyTorch eager and ONNX
Runtime (the compile's report, bench/ort_gap.py), with one timer for all (`median_ms`)."""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from typing import Any, Callable


def median_ms(fn, repeat: int, min_repeat_ms: int) -> float:
    """Median over `repeat` repeats of the mean of enough calls to last `min_repeat_ms`."""
    fn()  # warm-up
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-6)
    number = max(1, int(min_repeat_ms / 1e3 / once))
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return statistics.median(times) * 1e3


def pytorch_ms(module, example_inputs, threads: int, repeat: int, min_repeat_ms: int) -> float:
    import torch

    torch.set_num_threads(threads)
    with torch.no_grad():
        return median_ms(lambda: module(*example_inputs), repeat, min_repeat_ms)


def onnxruntime_runner(imported, threads: int) -> tuple[Callable[[], Any] | None, str | None]:
    """A callable running the model in ONNX Runtime on `imported.inputs`; (None, reason) when no
    ONNX model can be had."""
    import onnxruntime as ort

    from tlm.graph.onnx_rnn import runtime_model

    path = imported.onnx_path
    tmp = None
    if path is None:
        import torch

        from tlm.errors import quiet_stderr

        tmp = tempfile.mkdtemp(prefix="tlm-onnx-")
        path = os.path.join(tmp, "model.onnx")
        errors = []
        for dynamo in (False, True):  # the TorchScript exporter needs no extra package
            try:
                with torch.no_grad(), quiet_stderr():
                    torch.onnx.export(imported.torch_module, tuple(imported.example_inputs), path, dynamo=dynamo)
                break
            except Exception as err:  # e.g. the dynamo exporter needs `onnxscript`
                errors.append(str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
            return None, "torch.onnx.export failed: " + " | ".join(errors)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    # an ONNX file's batch-first recurrent nodes, which ONNX Runtime refuses, run in layout 0
    model = runtime_model(path, imported.onnx_batch_first)[0] if imported.onnx_path else path
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    if tmp:  # the session holds the model in memory
        shutil.rmtree(tmp, ignore_errors=True)
    feed = {i.name: x for i, x in zip(sess.get_inputs(), imported.inputs)}
    return (lambda: sess.run(None, feed)), None


def onnxruntime_ms(imported, threads: int, repeat: int, min_repeat_ms: int) -> tuple[float | None, str | None]:
    """ONNX Runtime latency on the same inputs; (None, reason) when no ONNX model can be had."""
    run, note = onnxruntime_runner(imported, threads)
    return (None, note) if run is None else (median_ms(run, repeat, min_repeat_ms), None)
