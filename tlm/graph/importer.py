"""Graph layer, stage 1a: import a model (zoo name, torch.nn.Module or ONNX file) into Relax.

The result is an `ImportedModel`: the Relax module with weights bound as constants, batch norm
decomposed and operand order made frontend-independent (tlm.graph.passes.prepare; what
tlm.graph.extract fuses), plus
example inputs and a reference implementation that compiled models are checked against.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import tempfile
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

from tlm.errors import TlmError, TlmWarning, first_line, quiet_stderr, reason
from tlm.graph.diagnose import IMPORT, PREPARE, explain, unsupported_onnx_ops, unsupported_torch_ops
from tlm.graph.passes import prepare
from tlm.graph.onnx_rnn import batch_first_nodes, rnn_converters, runtime_model
from tlm.graph.specialize import CHECKS, is_data_dependent, trace_on_examples


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
    onnx_batch_first: list = field(default_factory=list)  # its batch-first recurrent nodes (tlm.graph.onnx_rnn)


def _first_tensor(out):
    """A model's output, or the first tensor of a tuple or Hugging Face `ModelOutput` (what the
    compiled model returns for them, tlm.compiler.build)."""
    while not hasattr(out, "detach"):
        if hasattr(out, "to_tuple"):
            out = out.to_tuple()
        if not isinstance(out, (tuple, list)) or not out:
            raise TlmError(f"the model's output is a {type(out).__name__}, not a tensor or a tuple of them")
        out = out[0]
    return out


def import_torch(module, example_inputs, source: str = "<module>", sink_reshapes: bool = True,
                 conv_layout: str | None = None, fold_bn: bool = False) -> ImportedModel:
    """Import a torch.nn.Module with torch.export -> Relax (`sink_reshapes=False`: without
    tlm.graph.passes.sink_reshapes, the benchmarks' "before"; `conv_layout`: "NCHW" or "NHWC",
    default tlm.graph.layout.CONV_LAYOUT; `fold_bn=True`: batch norms folded into the convs'
    weights, tlm.graph.batchnorm, off by default: see there)."""
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
        msg = first_line(err, last=False, limit=None)
        if not is_data_dependent(err):
            raise TlmError(f"import failed: the model does not export with torch.export: {msg}") from None
        exported = _export_traced(module, example_inputs, msg)
    from tlm.graph.rewrite import promote_torch_arithmetic

    promote_torch_arithmetic(exported)  # int64 / 4 is float32, as in PyTorch
    from tlm.graph.converters import CONVERTERS
    from tlm.graph.decompose import decompose_unsupported

    try:
        with quiet_stderr():
            exported = decompose_unsupported(exported)  # nn.EmbeddingBag, which TVM cannot import
    except Exception as err:
        raise TlmError(f"import failed: rewriting an operator TVM has no conversion for: "
                       f"{first_line(err, last=False, limit=None)}") from None
    try:
        with quiet_stderr():
            mod = from_exported_program(exported, keep_params_as_input=False, unwrap_unit_return_tuple=True,
                                        custom_convert_map=CONVERTERS)
    except Exception as err:
        raise _refusal(err, unsupported_torch_ops(exported, reason(err)), "PyTorch") from None

    def reference(inputs: list) -> Any:
        with torch.no_grad():
            out = module(*[torch.from_numpy(np.asarray(x)) for x in inputs])
        return _first_tensor(out).detach().numpy()

    inputs = [x.detach().numpy() for x in example_inputs]
    return ImportedModel(source, _prepared(mod, sink_reshapes, conv_layout, fold_bn), inputs, reference, module, example_inputs)


def _export_traced(module, example_inputs: tuple, why: str):
    """torch.export of the module traced on its example inputs (tlm.graph.specialize), said in a
    warning: the export stopped on a value read from a tensor (`why`)."""
    import torch

    with quiet_stderr():
        traced = trace_on_examples(module, example_inputs, why)
    try:
        with torch.no_grad(), quiet_stderr():
            exported = torch.export.export(traced, example_inputs)
    except Exception as err:
        raise TlmError(f"import failed: the model does not export with torch.export ({why}), nor once traced "
                       f"on its example inputs: {first_line(err, last=False)}") from None
    warnings.warn(f"tlm: torch.export stopped on a value read from a tensor ({why[:120]}); "
                  f"the model was traced on its example inputs instead, each such value fixed to the example's "
                  f"(the same outputs as the model on {CHECKS} other inputs)", stacklevel=3, category=TlmWarning)
    return exported


def _prepared(mod, sink: bool = True, conv_layout: str | None = None, fold_bn: bool = False):
    """`prepare`, its failures named by stage (layout pass, graph preparation) and operator."""
    try:
        return prepare(mod, sink, conv_layout, fold_bn)
    except TlmError:
        raise
    except Exception as err:
        raise TlmError(explain(err, "import", PREPARE, mod)) from None


def import_onnx(path: str, conv_layout: str | None = None) -> ImportedModel:
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
        raise TlmError(f"malformed ONNX file {path}: {first_line(err, limit=None)}") from None
    batch_first = batch_first_nodes(model)  # ONNX Runtime, the reference, refuses them
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
        with _onnx_frontend():
            mod = from_onnx(model, shape_dict=shapes, dtype_dict=dtypes, keep_params_in_input=False)
    except Exception as err:
        mod = _import_folded(path, shapes, dtypes)
        if mod is None:
            raise _refusal(err, unsupported_onnx_ops(model, reason(err)), "ONNX", path) from None
        warnings.warn(f"TVM's ONNX importer refused {os.path.basename(path)} ({first_line(err)}); imported it "
                      "after ONNX Runtime's constant folding instead", stacklevel=2, category=TlmWarning)

    rng = np.random.default_rng(0)
    inputs = []
    for name, shape in shapes.items():
        dt = np.dtype(dtypes[name])
        if dt.kind in "iu":
            inputs.append(np.zeros(shape, dt))  # always valid as indices
        else:
            inputs.append(rng.standard_normal(shape).astype(dt))

    @functools.cache
    def runnable() -> str | bytes:  # the file, or its layout-0 twin built once (not per reference call)
        return runtime_model(path, batch_first)[0]

    def reference(inputs: list) -> Any:
        import onnxruntime as ort

        if batch_first:
            warnings.warn(f"ONNX Runtime cannot run batch-first (layout=1) {'/'.join(sorted(set(batch_first)))} "
                          f"nodes; the reference runs them in layout 0 between transposes", TlmWarning, stacklevel=2)
        try:
            with quiet_stderr():  # ONNX Runtime logs its refusal on stderr too
                sess = ort.InferenceSession(runnable(), providers=["CPUExecutionProvider"])
        except Exception as err:
            raise TlmError(f"ONNX Runtime, the reference the compiled model is checked against, cannot run "
                           f"{path}: {first_line(err)}") from None
        return sess.run(None, dict(zip(shapes, inputs)))[0]

    return ImportedModel(path, _prepared(mod, conv_layout=conv_layout), inputs, reference, onnx_path=path,
                         onnx_batch_first=batch_first)


@contextlib.contextmanager
def _onnx_frontend():
    """TVM's ONNX importer with tlm's recurrent converters (tlm.graph.onnx_rnn), quiet: its C++ log,
    the line it prints for a converter that raises, and the warning of its half-built function
    (freed here, while stderr is still quiet) would follow the one-line refusal."""
    with quiet_stderr(), contextlib.redirect_stdout(io.StringIO()), rnn_converters():
        try:
            yield
        except Exception as err:
            traceback.clear_frames(err.__traceback__)
            raise


def _refusal(err: Exception, ops: str | None, frontend: str, path: str | None = None) -> TlmError:
    """The one line for a model TVM's `frontend` importer refused: the unsupported operators
    (`ops`, from tlm.graph.diagnose) when known, else TVM's reason, else the stage."""
    where = f" in {path}" if path else ""
    msg = reason(err)
    if ops is not None:
        return TlmError(f"import failed: unsupported operator {ops}{where}: TVM's {frontend} importer has no "
                        f"conversion for {'them' if '), ' in ops else 'it'}")
    if "nsupported" in msg or "not supported" in msg:
        return TlmError(f"import failed: unsupported operator{where}: {msg}")
    return TlmError(explain(err, f"import of {path}" if path else "import", IMPORT))


def _import_folded(path: str, shapes: dict, dtypes: dict):
    """The Relax module of `path` after ONNX Runtime's basic graph optimizations (constant
    folding, shape computations on static shapes included: a PyTorch export's `Shape -> Gather
    -> Concat -> Reshape` chains, which TVM's importer cannot follow); None if that fails too."""
    import onnx
    import onnxruntime as ort
    from tvm.relax.frontend.onnx import from_onnx

    with tempfile.TemporaryDirectory(prefix="tlm-onnx-") as tmp:
        try:
            opts = ort.SessionOptions()
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
            opts.optimized_model_filepath = os.path.join(tmp, "folded.onnx")
            ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
            with _onnx_frontend():
                return from_onnx(onnx.load(opts.optimized_model_filepath), shape_dict=shapes, dtype_dict=dtypes,
                                 keep_params_in_input=False)
        except Exception:  # noqa: BLE001 - the caller reports the first refusal
            return None


def import_source(source: str, conv_layout: str | None = None) -> ImportedModel:
    """A zoo workload name (or family name) or a path to an .onnx file."""
    if source.endswith(".onnx") or os.path.exists(source):
        return import_onnx(source, conv_layout)
    from tlm.graph.zoo import get_workload

    workload = get_workload(source)
    module, inputs = workload.build()
    return import_torch(module, inputs, source=workload.name, conv_layout=conv_layout)
