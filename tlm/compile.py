"""Whole-model compile: apply the best record of each task, build, check, time, compare.

`tlm compile SOURCE --db DIR [-o OUT] [--json]` and `compile_model(module, example_inputs,
db=...)`. Tasks without a record for this target get TVM's default schedule (compile_relax's
DLight fallback). Records of other targets are never applied (the MetaSchedule database view
holds only this target's records). The artifact is a shared library that
`tvm.runtime.load_module` + `relax.VirtualMachine` reload; we time and check the reloaded one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from tlm.errors import TlmError

# Outputs must match the reference within ATOL + RTOL * max|reference| (float32 end to end).
RTOL = 1e-3
ATOL = 1e-4


@dataclass
class CompileConfig:
    repeat: int = 10  # timed repeats (median reported)
    min_repeat_ms: int = 100
    rtol: float = RTOL
    atol: float = ATOL
    compare: bool = True  # also time PyTorch eager and ONNX Runtime


@dataclass
class CompiledModel:
    """A compiled model: call it with numpy arrays or torch tensors, get numpy back."""

    vm: Any = field(repr=False)
    artifact: str
    latency_ms: float
    max_abs_diff: float | None
    tolerance: float | None
    pytorch_ms: float | None = None
    onnxruntime_ms: float | None = None
    onnxruntime_note: str | None = None
    tasks: int = 0
    tuned_tasks: int = 0
    measurements: int = 0
    threads: int = 1
    target: dict | None = None

    def __call__(self, *inputs):
        import numpy as np
        import tvm

        dev = tvm.cpu()
        args = [tvm.runtime.tensor(np.ascontiguousarray(_to_numpy(x)), dev) for x in inputs]
        out = self.vm["main"](*args)
        return _out_numpy(out)

    @property
    def matches(self) -> bool:
        return self.max_abs_diff is not None and self.max_abs_diff <= (self.tolerance or 0.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "latency_ms": self.latency_ms, "pytorch_ms": self.pytorch_ms,
            "onnxruntime_ms": self.onnxruntime_ms, "onnxruntime_note": self.onnxruntime_note,
            "max_abs_diff": self.max_abs_diff, "tolerance": self.tolerance, "matches": self.matches,
            "measurements": self.measurements, "tasks": self.tasks, "tuned_tasks": self.tuned_tasks,
            "threads": self.threads, "artifact": self.artifact, "target": self.target,
        }


def _to_numpy(x):
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return x.numpy() if hasattr(x, "numpy") and not hasattr(x, "__array_interface__") else x


def _out_numpy(out):
    if hasattr(out, "numpy"):
        return out.numpy()
    return _out_numpy(out[0])  # a tuple output: the first element is the model's output


def _median_ms(fn, repeat: int, min_repeat_ms: int) -> float:
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


def _pytorch_ms(module, example_inputs, threads: int, cfg: CompileConfig) -> float:
    import torch

    torch.set_num_threads(threads)
    with torch.no_grad():
        return _median_ms(lambda: module(*example_inputs), cfg.repeat, cfg.min_repeat_ms)


def _onnxruntime_ms(imported, threads: int, cfg: CompileConfig) -> tuple[float | None, str | None]:
    """ONNX Runtime latency on the same inputs; (None, reason) when no ONNX model can be had."""
    import onnxruntime as ort

    path = imported.onnx_path
    tmp = None
    if path is None:
        import torch

        from tlm.graph import quiet_stderr

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
            return None, "torch.onnx.export failed: " + " | ".join(errors)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    feed = {i.name: x for i, x in zip(sess.get_inputs(), imported.inputs)}
    ms_ = _median_ms(lambda: sess.run(None, feed), cfg.repeat, cfg.min_repeat_ms)
    if tmp:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return ms_, None


def compile_imported(imported, db: str, target=None, output: str | None = None,
                     config: CompileConfig | None = None, tasks=None) -> CompiledModel:
    """Compile an `ImportedModel` (tlm.graph) with the best records of `db` for `target`."""
    import numpy as np
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from tlm.database import open_db
    from tlm.graph import extract_from_relax, quiet_stderr
    from tlm.intrin import light_tensor_intrin
    from tlm.target import resolve_target

    cfg = config or CompileConfig()
    info = resolve_target(target)
    light_tensor_intrin()
    database = open_db(db, create=False)
    try:
        if tasks is None:
            tasks = extract_from_relax(imported.mod, info)
        tuned = sum(1 for t in tasks if database.best(t.hash, info.key) is not None)
        measurements = database.count(target_key=info.key)
        msdb = database.to_metaschedule(info)
    finally:
        database.close()
    try:
        with quiet_stderr():
            ex = ms.relax_integration.compile_relax(msdb, imported.mod, info.tvm(), params=None)
    except Exception as err:
        lines = str(err).strip().splitlines()
        raise TlmError(f"whole-model build failed: {lines[-1] if lines else err}") from None
    artifact = output or os.path.join(tempfile.mkdtemp(prefix="tlm-model-"), "model.so")
    os.makedirs(os.path.dirname(os.path.abspath(artifact)), exist_ok=True)
    ex.export_library(artifact)
    dev = tvm.cpu()
    vm = relax.VirtualMachine(tvm.runtime.load_module(artifact), dev)  # check the saved artifact
    model = CompiledModel(vm=vm, artifact=os.path.abspath(artifact), latency_ms=0.0, max_abs_diff=None,
                          tolerance=None, tasks=len(tasks), tuned_tasks=tuned, measurements=measurements,
                          threads=info.cores, target=info.config)
    got = model(*imported.inputs)
    want = np.asarray(imported.reference(imported.inputs))
    if got.shape != want.shape:
        raise TlmError(f"compiled output shape {got.shape} differs from the reference {want.shape}")
    model.max_abs_diff = float(np.max(np.abs(got.astype("float64") - want.astype("float64"))))
    model.tolerance = cfg.atol + cfg.rtol * float(np.max(np.abs(want)))
    args = [tvm.runtime.tensor(np.ascontiguousarray(x), dev) for x in imported.inputs]
    timer = vm.time_evaluator("main", dev, number=1, repeat=cfg.repeat, min_repeat_ms=cfg.min_repeat_ms)
    model.latency_ms = float(statistics.median(timer(*args).results)) * 1e3
    if cfg.compare:
        if imported.torch_module is not None:
            model.pytorch_ms = _pytorch_ms(imported.torch_module, imported.example_inputs, info.cores, cfg)
        try:
            model.onnxruntime_ms, model.onnxruntime_note = _onnxruntime_ms(imported, info.cores, cfg)
        except Exception as err:  # a comparison that cannot run is reported, not fatal
            model.onnxruntime_note = f"{type(err).__name__}: {str(err).strip()[:200]}"
    return model


def compile_model(module, example_inputs=None, *, db: str, target=None, output: str | None = None,
                  config: CompileConfig | None = None) -> CompiledModel:
    """`tlm.compile`: a torch.nn.Module (with example inputs), a zoo name or an .onnx path ->
    a callable compiled model with its latency figures."""
    from tlm.graph import import_source, import_torch

    if isinstance(module, str):
        imported = import_source(module)
    else:
        if example_inputs is None:
            raise TlmError("example_inputs are required to compile a torch module")
        imported = import_torch(module, example_inputs)
    return compile_imported(imported, db, target=target, output=output, config=config)


def _cmd_compile(args: argparse.Namespace) -> int:
    from tlm.graph import import_source, tasks_for_source
    from tlm.target import resolve_target

    if not os.path.isdir(args.db):
        raise TlmError(f"no record database directory {args.db}")
    info = resolve_target(args.target)
    tasks = tasks_for_source(args.source, target=info).tasks
    cfg = CompileConfig(repeat=args.repeat, compare=not args.no_compare)
    model = compile_imported(import_source(args.source), args.db, target=info, output=args.output,
                             config=cfg, tasks=tasks)
    report = {"source": args.source, **model.to_json()}
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        from rich.console import Console
        from rich.table import Table

        fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        table = Table(title=f"{args.source}: {model.tuned_tasks}/{model.tasks} tasks tuned, "
                            f"{model.measurements} measurements, {model.threads} threads")
        for col in ("runtime", "median ms"):
            table.add_column(col, justify="right" if col != "runtime" else "left")
        table.add_row("tlm (TVM)", fmt(model.latency_ms))
        table.add_row("PyTorch eager", fmt(model.pytorch_ms))
        table.add_row("ONNX Runtime", fmt(model.onnxruntime_ms))
        Console().print(table)
        verdict = "match" if model.matches else "MISMATCH"
        print(f"outputs {verdict}: max abs diff {model.max_abs_diff:.3g} (tolerance {model.tolerance:.3g})")
        if model.onnxruntime_note:
            print(f"ONNX Runtime: {model.onnxruntime_note}")
        print(f"artifact: {model.artifact}")
    return 0 if model.matches else 3


def register_cli(sub) -> None:
    p = sub.add_parser("compile", help="build a whole model with the best records and compare it")
    p.add_argument("source", help="a zoo workload name or a path to an .onnx file")
    p.add_argument("--db", required=True, help="record database directory")
    p.add_argument("-o", "--output", default=None, help="where to save the compiled library (.so)")
    p.add_argument("--target", default=None, help="'host' (default), or a TVM target as JSON")
    p.add_argument("--repeat", type=int, default=10, help="timed repeats (median)")
    p.add_argument("--no-compare", action="store_true", help="skip PyTorch / ONNX Runtime timing")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_compile)
