"""Graph layer: import a model (zoo name, torch.nn.Module or ONNX file) into Relax, run the
passes that MetaSchedule's compile path runs, and extract the fused subgraphs as `Task`s.

Records tuned for these tasks are found again by `ms.relax_integration.compile_relax`, because
`fuse()` runs the same pass list it runs before applying the database.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tlm.errors import TlmError
from tlm.target import TargetInfo, resolve_target
from tlm.tasks import Task, task_from_mod

# Bump when extraction changes in a way that changes tasks (invalidates the on-disk cache).
EXTRACT_VERSION = 1


def _code_digest() -> str:
    """Digest of the code that defines models and extraction: editing it invalidates the cache."""
    here = Path(__file__).parent
    files = [here / "graph.py", here / "zoo.py", here / "tasks.py", *sorted((here / "models").glob("*.py"))]
    return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:16]


@dataclass
class ImportedModel:
    """A model in Relax form, with example inputs and a reference implementation to check against."""

    source: str
    mod: Any  # relax IRModule "main"; batch norm decomposed, weights bound as constants
    inputs: list  # example inputs as numpy arrays
    reference: Callable[[list], Any] = field(repr=False)  # numpy inputs -> numpy output
    torch_module: Any = field(default=None, repr=False)
    example_inputs: tuple | None = field(default=None, repr=False)  # torch tensors
    onnx_path: str | None = None


@dataclass
class TaskSet:
    source: str
    target: TargetInfo
    tasks: list[Task]

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "target": self.target.config,
            "tasks": [t.to_json() for t in self.tasks],
        }


def cache_dir() -> Path:
    root = os.environ.get("TLM_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "tlm")
    return Path(root)


def _first_line(err: BaseException, last: bool = True) -> str:
    """One line of an exception's message (TVM puts the useful line last, torch first)."""
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    if not lines:
        return type(err).__name__
    return lines[-1] if last else lines[0]


@contextlib.contextmanager
def quiet_stderr():
    """Silence C++ and torch logging on fd 2 (graph dumps, TVM warnings) unless TLM_DEBUG=1."""
    if os.environ.get("TLM_DEBUG") == "1":
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def _constants_last(mod):
    """Put the constant operand of commutative ops second: `b + x` -> `x + b`.

    Frontends differ here (torch.export emits `bias + matmul`, ONNX Gemm `matmul + bias`), and
    the operand order changes the fused TIR and so the task hash; one order makes the same
    model give the same tasks from either frontend.
    """
    import tvm
    from tvm import relax

    ops = [tvm.ir.Op.get(name) for name in ("relax.add", "relax.multiply")]
    Const = type(relax.const(0.0))  # relax constants (the class moved between TVM versions)

    @relax.expr_functor.mutator
    class Swap(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if (any(call.op.same_as(op) for op in ops) and len(call.args) == 2 and isinstance(call.args[0], Const)
                    and not isinstance(call.args[1], Const)):
                return relax.Call(call.op, [call.args[1], call.args[0]], call.attrs, call.ty_args)
            return call

    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mod[gv] = Swap().visit_expr(func)
    return mod


def _prepare(mod):
    """Passes before fusion: batch norm becomes arithmetic that fuses into convs; operand order
    is made frontend-independent."""
    from tvm import relax

    mod = relax.transform.DecomposeOpsForInference()(mod)
    mod = relax.transform.CanonicalizeBindings()(mod)
    return _constants_last(mod)


def import_torch(module, example_inputs, source: str = "<module>") -> ImportedModel:
    """Import a torch.nn.Module with torch.export -> Relax."""
    import numpy as np
    import torch
    from tvm.relax.frontend.torch import from_exported_program

    if not isinstance(module, torch.nn.Module):
        raise TlmError(f"expected a torch.nn.Module, got {type(module).__name__}")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    module = module.eval()
    try:
        with torch.no_grad(), quiet_stderr():
            exported = torch.export.export(module, example_inputs)
    except Exception as err:
        msg = _first_line(err, last=False)
        raise TlmError(f"model does not export with torch.export: {msg}") from None
    try:
        with quiet_stderr():
            mod = from_exported_program(exported, keep_params_as_input=False, unwrap_unit_return_tuple=True)
    except Exception as err:
        msg = _first_line(err)
        if "nsupported" in msg or "not supported" in msg:
            raise TlmError(f"unsupported operator: {msg}") from None
        raise TlmError(f"Relax import failed: {msg}") from None

    def reference(inputs: list) -> Any:
        with torch.no_grad():
            out = module(*[torch.from_numpy(np.asarray(x)) for x in inputs])
        return out.detach().numpy()

    inputs = [x.detach().numpy() for x in example_inputs]
    return ImportedModel(source, _prepare(mod), inputs, reference, module, example_inputs)


def import_onnx(path: str) -> ImportedModel:
    """Import an ONNX file with Relax's ONNX frontend; ONNX Runtime is the reference."""
    import numpy as np
    import onnx
    from onnx import helper

    if not os.path.isfile(path):
        raise TlmError(f"no such ONNX file: {path}")
    try:
        model = onnx.load(path)
        onnx.checker.check_model(model)
    except Exception as err:
        raise TlmError(f"malformed ONNX file {path}: {_first_line(err)}") from None
    init_names = {init.name for init in model.graph.initializer}
    shapes, dtypes = {}, {}
    for inp in model.graph.input:
        if inp.name in init_names:
            continue
        dims = inp.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") for d in dims):
            raise TlmError(f"ONNX input {inp.name!r} has a dynamic shape; export with static shapes")
        shapes[inp.name] = [d.dim_value for d in dims]
        dtypes[inp.name] = str(helper.tensor_dtype_to_np_dtype(inp.type.tensor_type.elem_type))
    from tvm.relax.frontend.onnx import from_onnx

    try:
        with quiet_stderr():
            mod = from_onnx(model, shape_dict=shapes, dtype_dict=dtypes, keep_params_in_input=False)
    except Exception as err:
        msg = _first_line(err)
        if "not supported" in msg or "nsupported" in msg:
            raise TlmError(f"unsupported operator in {path}: {msg}") from None
        raise TlmError(f"ONNX import failed for {path}: {msg}") from None

    rng = np.random.default_rng(0)
    inputs = []
    for name, shape in shapes.items():
        dt = np.dtype(dtypes[name])
        if dt.kind in "iu":
            inputs.append(np.zeros(shape, dt))  # always valid as indices
        else:
            inputs.append(rng.standard_normal(shape).astype(dt))

    def reference(inputs: list) -> Any:
        import onnxruntime as ort

        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        return sess.run(None, dict(zip(shapes, inputs)))[0]

    return ImportedModel(path, _prepare(mod), inputs, reference, onnx_path=path)


def import_source(source: str) -> ImportedModel:
    """A zoo workload name (or family name) or a path to an .onnx file."""
    if source.endswith(".onnx") or os.path.exists(source):
        return import_onnx(source)
    from tlm.zoo import get_workload

    workload = get_workload(source)
    module, inputs = workload.build()
    return import_torch(module, inputs, source=workload.name)


def compile_passes(target) -> list:
    """The passes `compile_relax` runs before it applies a MetaSchedule database."""
    from tvm import relax
    from tvm.relax import pipeline

    try:
        dispatch = list(pipeline.library_dispatch_passes(target))
    except (ValueError, AttributeError):
        dispatch = []
    return [
        *dispatch,
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ]


def fuse(mod, target: TargetInfo):
    """Relax module -> module of fused TIR functions, as compile_relax sees it."""
    import tvm

    tvm_target = target.tvm()
    with tvm_target, tvm.transform.PassContext(opt_level=3):
        return tvm.transform.Sequential(compile_passes(tvm_target))(mod)


def extract_from_relax(mod, target: TargetInfo) -> list[Task]:
    """Fused subgraphs of a prepared Relax module as Tasks (deduplicated, with weights)."""
    from tvm.s_tir import meta_schedule as ms

    try:
        with quiet_stderr():
            fused = fuse(mod, target)
            extracted = ms.relax_integration.extract_tasks(fused, target.tvm())
    except Exception as err:
        raise TlmError(f"task extraction failed: {_first_line(err)}") from None
    tasks = [task_from_mod(t.dispatched[0], name=t.task_name, weight=t.weight) for t in extracted]
    # Heaviest first: a stable order that puts the work that matters on top.
    tasks.sort(key=lambda t: (-t.weight * t.flops, t.name))
    return tasks


def extract_tasks(module, example_inputs, target=None) -> list[Task]:
    """Tasks of any torch.nn.Module that torch.export accepts."""
    info = resolve_target(target)
    return extract_from_relax(import_torch(module, example_inputs).mod, info)


def _cache_key(source: str, target: TargetInfo) -> tuple[str, str]:
    """(display name, cache key); ONNX files are keyed by their content."""
    if source.endswith(".onnx") or os.path.exists(source):
        if not os.path.isfile(source):
            raise TlmError(f"no such ONNX file: {source}")
        digest = hashlib.sha256(Path(source).read_bytes()).hexdigest()
        name = source
    else:
        from tlm.zoo import get_workload

        name = get_workload(source).name
        digest = name
    raw = json.dumps([EXTRACT_VERSION, _code_digest(), digest, target.key])
    return name, hashlib.sha256(raw.encode()).hexdigest()[:24]


def tasks_for_source(source: str, target=None, refresh: bool = False) -> TaskSet:
    """Tasks of a zoo workload or ONNX file for a target, cached on disk per (source, target)."""
    info = resolve_target(target)
    name, key = _cache_key(source, info)
    path = cache_dir() / "tasks" / f"{key}.json"
    if path.is_file() and not refresh:
        try:
            data = json.loads(path.read_text())
            return TaskSet(name, info, [Task.from_json(t) for t in data["tasks"]])
        except (OSError, ValueError, KeyError):
            pass  # a corrupt cache entry is rebuilt below
    tasks = extract_from_relax(import_source(source).mod, info)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"source": name, "target": info.config, "tasks": [t.to_json(with_mod=True) for t in tasks]}
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as tmp:
        json.dump(payload, tmp)
    os.replace(tmp.name, path)
    return TaskSet(name, info, tasks)


def training_tasks(train_sources: list[str], test_sources: list[str], target=None) -> list[Task]:
    """Unique tasks of the training workloads, minus every task (by hash) of a test workload.

    Hold-out is per subgraph, as in the paper: a task shared with any test workload is never
    trained on, even when it also occurs in a training workload.
    """
    held_out = {t.hash for s in test_sources for t in tasks_for_source(s, target).tasks}
    seen: dict[str, Task] = {}
    for source in train_sources:
        for task in tasks_for_source(source, target).tasks:
            if task.hash in held_out:
                continue
            if task.hash in seen:
                seen[task.hash].weight += task.weight
            else:
                seen[task.hash] = Task.from_json(task.to_json(with_mod=True))
    return list(seen.values())
