"""PyTorch's way in and a saved library's way back: `torch.compile(m, backend="tlm")` and `tlm.load`.

`tlm_backend` is the TorchDynamo backend (registered by the `torch_dynamo_backends` entry point
in pyproject.toml). Dynamo hands it one FX graph per graph break with real example inputs; the
graph is compiled with tlm's whole-model pipeline (tlm.compiler.job.compile_model: budget 0 by
default, i.e. each task's greedy program from the shipped language model, nothing measured),
and every output is checked against the eager graph on those inputs. A graph tlm cannot take, or
one whose outputs do not match, runs eagerly, with one warning naming why.

Parameters, buffers and other tensors that are not the caller's arguments are folded into the
library as constants (that is what lets tlm pre-pack weights); each call checks they are still
the same tensors at the same version counter, and goes eager once they are not (a write through
`.data` bumps no counter and goes unseen). The library has no autograd and no side effects: with
grad enabled on tensors that require it, or a graph that writes its inputs, the graph runs eagerly.

`load(path)` reopens a library saved with `tlm compile -o PATH` (or `tlm.compile(..., output=)`):
the Relax VM's `main` takes the model's inputs in the forward's order, so nothing else is needed.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Callable, Sequence

from tlm.compiler.apply import to_tvm
from tlm.errors import TlmError, TlmWarning, first_line, quiet_stderr

OPTIONS = ("budget", "db", "target", "model")  # torch.compile(..., options={...}) keys


def _warn(reason: str) -> None:
    # One line: an explicit location without source text (warnings.warn would point into
    # dynamo and print its source line); filter it with `-W ignore:::tlm.compiler.backend`.
    warnings.warn_explicit(f"tlm: running this graph in eager PyTorch: {reason}", TlmWarning,
                           "torch.compile(backend='tlm')", 0, module=__name__)


def _flatten(out) -> list:
    """A VM result (one tensor or a nested tuple of them) -> numpy arrays, in order."""
    if hasattr(out, "numpy"):
        return [out.numpy()]
    return [a for o in out for a in _flatten(o)]


def _is_user_input(node, value) -> bool:
    """Whether a placeholder is an argument of the compiled call, not a parameter, buffer, global
    or closure tensor that dynamo lifted into the graph (those become constants)."""
    import torch

    if isinstance(value, torch.nn.Parameter):
        return False
    source = getattr(node.meta.get("grapharg"), "source", None)
    if source is None:
        return True  # not from dynamo: every placeholder is an argument
    from torch._dynamo import source as sources

    if sources.is_from_unspecialized_param_buffer_source(source):
        return False
    return sources.is_from_local_source(source, only_allow_input=True)


def _frozen_module(gm, example_inputs: list, user: list[int]):
    """The torch.nn.Module that tlm compiles: the graph, its arguments `user`, the rest buffers."""
    import torch

    consts = [i for i in range(len(example_inputs)) if i not in user]

    class Frozen(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gm = gm
            for i in consts:  # buffers: torch.export keeps them, Relax binds them as constants
                self.register_buffer(f"c{i}", example_inputs[i].detach().cpu())

        def forward(self, *xs):
            it = iter(xs)
            args = [getattr(self, f"c{i}") if i in consts else next(it) for i in range(len(example_inputs))]
            out = self.gm(*args)
            return tuple(out) if isinstance(out, (tuple, list)) else out

    return Frozen()


def _version(x) -> int | None:
    """A tensor's version counter (None for inference tensors, which keep none)."""
    try:
        return x._version
    except RuntimeError:
        return None


class CompiledGraph:
    """What the backend returns: runs the tlm library, or the eager graph once constants changed."""

    def __init__(self, gm, vm, example_inputs: list, user: list[int], reference: Any):
        import torch

        self.gm, self.vm, self.user, self.eager = gm, vm, user, False
        # Constants by identity and version counter: in-place updates (load_state_dict) bump it.
        self.consts = {i: (x, _version(x)) for i, x in enumerate(example_inputs) if i not in user}
        single = isinstance(reference, torch.Tensor)
        self.container = None if single else type(reference)
        self.meta = [(r.dtype, r.device) for r in ([reference] if single else reference)]

    def __call__(self, *args):
        if not self.eager and any(args[i] is not x or _version(x) != v for i, (x, v) in self.consts.items()):
            self.eager = True
            _warn("a parameter or buffer changed after compiling (recompile to use tlm again)")
        if self.eager:
            return self.gm(*args)
        return self.run(args)

    def run(self, args: Sequence[Any]):
        import torch

        outs = _flatten(self.vm["main"](*to_tvm([args[i] for i in self.user])))
        if len(outs) != len(self.meta):
            raise TlmError(f"the library returns {len(outs)} outputs, the graph {len(self.meta)}")
        got = [torch.from_numpy(o).to(device=dev, dtype=dt) for o, (dt, dev) in zip(outs, self.meta)]
        return got[0] if self.container is None else self.container(got)


def _check_graph(gm, example_inputs: list, opts: dict[str, Any]) -> Any:
    """A TlmError naming what tlm cannot take in this graph; its eager outputs otherwise."""
    import torch

    unknown = sorted(set(opts) - set(OPTIONS))
    if unknown:
        raise TlmError(f"unknown option(s) {', '.join(unknown)} (tlm takes {', '.join(OPTIONS)})")
    for x in example_inputs:
        if not isinstance(x, torch.Tensor):
            raise TlmError(f"a {type(x).__name__} input: dynamic shapes are not supported (use dynamic=False)")
        if isinstance(x, torch._subclasses.FakeTensor):
            raise TlmError("fake example inputs (tlm needs real tensors)")
    for node in gm.graph.nodes:
        val = node.meta.get("example_value")
        if node.op == "placeholder" and isinstance(val, torch.Tensor) and not all(
                isinstance(d, int) for d in val.shape):
            raise TlmError(f"input {node.name} has a dynamic shape (use dynamic=False)")
    if torch.is_grad_enabled() and any(x.requires_grad for x in example_inputs):
        raise TlmError("autograd is on and inputs require grad; tlm compiles inference only "
                       "(call the model under torch.no_grad() or torch.inference_mode())")
    # The reference runs on copies: the caller's tensors must not change before dynamo runs the
    # graph for real, and a graph that changes its inputs in place (ReLU(inplace) on an argument,
    # batch norm updating its statistics) is one a library without side effects cannot replace.
    with torch.inference_mode(False), torch.no_grad():
        copies = [x.detach().clone() for x in example_inputs]
        ref = gm(*copies)
    if any(c._version for c in copies):
        raise TlmError("the graph changes an input, parameter or buffer in place")
    outs = [ref] if isinstance(ref, torch.Tensor) else ref
    if not isinstance(outs, (tuple, list)) or not all(isinstance(o, torch.Tensor) for o in outs):
        raise TlmError("the graph returns something other than tensors")
    return ref


def compile_graph(gm, example_inputs: Sequence[Any], options: dict[str, Any] | None = None) -> Callable | None:
    """An FX graph -> a checked callable running its tlm library; None for a graph with nothing
    to compile. Raises (TlmError or anything else) when tlm cannot take it."""
    import torch

    from tlm.compiler.build import CompileConfig
    from tlm.compiler.job import compile_model
    from tlm.graph.target import resolve_target

    opts = dict(options or {})
    example_inputs = list(example_inputs)
    ref = _check_graph(gm, example_inputs, opts)
    if not any(n.op in ("call_function", "call_method", "call_module") for n in gm.graph.nodes):
        return None  # only moves tensors around: nothing for tlm to do
    info = resolve_target(opts.get("target"))
    if info.kind != "llvm":
        raise TlmError(f"the torch backend runs on the CPU only, not a {info.kind} target")
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    user = [i for i, (n, x) in enumerate(zip(placeholders, example_inputs)) if _is_user_input(n, x)]
    module = _frozen_module(gm, example_inputs, user)
    xs = tuple(example_inputs[i].detach().cpu() for i in user)
    db = opts.get("db")
    budget = opts.get("budget", 0 if db is None else None)  # default: greedy programs, no measuring
    # One timed run, no PyTorch / ONNX Runtime timing: dynamo may compile many graphs.
    cfg = CompileConfig(repeat=1, min_repeat_ms=0, compare=False)
    compiled = compile_model(module, xs, db=db, target=info, budget=budget, model=opts.get("model"), config=cfg)
    graph = CompiledGraph(gm, compiled.vm, example_inputs, user, ref)
    got = graph.run(example_inputs)
    want = [ref] if isinstance(ref, torch.Tensor) else list(ref)
    got = [got] if isinstance(got, torch.Tensor) else list(got)
    for k, (g, w) in enumerate(zip(got, want)):  # every output, not only the first
        if g.shape != w.shape:
            raise TlmError(f"output {k} has shape {tuple(g.shape)}, eager {tuple(w.shape)}")
        w64, g64 = w.detach().cpu().double(), g.detach().cpu().double()
        diff = float((g64 - w64).abs().max()) if w.numel() else 0.0
        tol = cfg.atol + cfg.rtol * (float(w64.abs().max()) if w.numel() else 0.0)
        if not diff <= tol:  # NaN differences fail too
            raise TlmError(f"output {k} differs from eager PyTorch: max abs diff {diff:.3g} > {tol:.3g}")
    return graph


def tlm_backend(gm, example_inputs: list, *, options: dict[str, Any] | None = None,
                mode: str | None = None) -> Callable:
    """The TorchDynamo backend: `torch.compile(m, backend="tlm", options={"budget": 0, "db": DIR,
    "target": ..., "model": DIR})`, the options of `tlm.compile`. Without a budget: 0 (each task's
    greedy program, nothing measured) unless a db is given, whose records are then used as they
    are. Never raises: what tlm cannot take runs eagerly, with a one-line warning."""
    try:
        compiled = compile_graph(gm, example_inputs, options)
    except Exception as err:  # a backend failure would abort the user's call; eager still answers
        _warn(str(err) if isinstance(err, TlmError) else f"{type(err).__name__}: {first_line(err)}")
        return gm.forward
    return gm.forward if compiled is None else compiled


class Library:
    """A saved tlm library: call it with numpy arrays (numpy back) or torch tensors (torch back,
    on the first tensor's device); one output comes back as it is, several as a tuple."""

    def __init__(self, path: str, vm):
        self.path, self.vm = path, vm
        self.arity = int(vm._get_function_arity("main"))
        self.inputs = [str(vm._get_function_param_name("main", i)) for i in range(self.arity)]

    def __repr__(self) -> str:
        return f"Library({self.path!r}, inputs={self.inputs})"

    def __call__(self, *inputs):
        import torch

        if len(inputs) != self.arity:
            raise TlmError(f"{self.path} takes {self.arity} inputs ({', '.join(self.inputs)}), got {len(inputs)}")
        try:
            outs = _flatten(self.vm["main"](*to_tvm(inputs)))
        except Exception as err:  # wrong shapes or dtypes: the VM's check says which
            raise TlmError(f"{self.path}: {first_line(err)}") from None
        device = next((x.device for x in inputs if isinstance(x, torch.Tensor)), None)
        if device is not None:
            outs = [torch.from_numpy(o).to(device) for o in outs]
        return outs[0] if len(outs) == 1 else tuple(outs)


def load(path: str | os.PathLike) -> Library:
    """A library saved by `tlm compile -o PATH`, ready to call; a one-line TlmError if it is not one."""
    import tvm
    from tvm import relax

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise TlmError(f"no compiled library at {path}")
    try:
        with quiet_stderr():
            vm = relax.VirtualMachine(tvm.runtime.load_module(path), tvm.cpu())
        return Library(os.path.abspath(path), vm)
    except Exception as err:
        raise TlmError(f"cannot load {path} as a tlm library: {first_line(err)}") from None
