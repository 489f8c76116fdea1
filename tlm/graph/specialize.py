"""Graph layer, stage 1a: a model that `torch.export` refuses on a data-dependent guard, traced on
its example inputs instead (tlm.graph.importer.import_torch's fallback).

Some models compute sizes from tensors: transformers' EnCodec keeps its convolutions' strides and
paddings in 0-d buffers and pads by their values (`if length <= max_pad`). `torch.export` fakes
every tensor, so such a value is unknown and the export stops on "Could not guard on
data-dependent expression". Traced with real tensors (`make_fx(tracing_mode="real")`), every such
value is read off the example run and fixed in the graph, which `torch.export` then takes. That
is exact where the values come from constants or shapes; where they come from the input's values
(a branch on `x.sum() > 0`, routing by value) the graph is only right for inputs like the
example's. So a trace that read a value computed from the inputs is refused in one line
(`input_dependent_reads`: the graph's reads of tensor values, traced back to the inputs), and the
traced graph is checked against the module on other inputs of the same shapes (floats moved by
their own spread, integers shuffled among the example's values, so that token ids stay in their
vocabulary); the caller says out loud that the model was traced.
"""

from __future__ import annotations

from typing import Any

from tlm.errors import TlmError, first_line

CHECKS = 2  # other inputs the traced graph must reproduce the module on
RTOL = 1e-5  # of the largest output magnitude: the same operators in the same order


def is_data_dependent(err: BaseException) -> bool:
    """Whether `torch.export` failed on a value it cannot know while tracing (a guard or a size
    read from a tensor's data), the failure `trace_on_examples` can get past."""
    text = f"{type(err).__name__}: {err}"
    return any(word in text for word in ("GuardOnDataDependentSymNode", "data-dependent", "DataDependentOutput"))


def other_inputs(example_inputs: tuple, seed: int) -> tuple:
    """Inputs of the example's shapes and dtypes with other values: floats moved by their own
    spread, integers and booleans shuffled among the example's own values."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = []
    for x in example_inputs:
        if not isinstance(x, torch.Tensor) or x.numel() == 0:
            out.append(x)
        elif x.is_floating_point():
            spread = float(x.float().std()) if x.numel() > 1 else 0.0
            spread = spread or float(x.abs().max()) or 1.0
            out.append(x + (torch.randn(x.shape, generator=gen) * spread).to(x.dtype))
        else:
            flat = x.reshape(-1)
            out.append(flat[torch.randperm(flat.numel(), generator=gen)].reshape(x.shape))
    return tuple(out)


def _leaves(out) -> list:
    import torch
    import torch.utils._pytree as pytree

    if hasattr(out, "to_tuple"):  # a Hugging Face ModelOutput
        out = out.to_tuple()
    return [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def _difference(got, want) -> str | None:
    """Why two outputs differ, or None where they agree."""
    import torch

    got, want = _leaves(got), _leaves(want)
    if len(got) != len(want):
        return f"{len(got)} output tensors against {len(want)}"
    for g, w in zip(got, want):
        if g.shape != w.shape:
            return f"an output of shape {tuple(g.shape)} against {tuple(w.shape)}"
        if g.is_floating_point():
            g, w = g.double(), w.double()
            scale = float(w.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0).abs().max()) if w.numel() else 0.0
            close = torch.isclose(g, w, rtol=0.0, atol=RTOL * scale, equal_nan=True)  # equal infinities agree
            if not bool(close.all()):
                diff = float((g - w)[~close].abs().nan_to_num(nan=float("inf")).max())
                return f"an output differs by {diff:.3g} (largest magnitude {scale:.3g})"
        elif not bool((g == w).all()):
            return "an integer or boolean output differs"
    return None


def input_dependent_reads(traced) -> list[str]:
    """The operators of a real-tensor trace whose value or size was read off a tensor computed from
    the model's inputs (`.item()`, a branch on a tensor, `nonzero`): what the trace fixed to the
    example's values. Values read off constants (buffers, parameters) and the inputs' shapes (plain
    integers in such a trace) are not in it."""
    import torch

    reading = {torch.Tag.data_dependent_output, torch.Tag.dynamic_output_shape}
    from_input, reads = set(), []
    for node in traced.graph.nodes:  # in order: a node's inputs come before it
        if node.op == "placeholder" or any(a in from_input for a in node.all_input_nodes):
            from_input.add(node)
            if reading & set(getattr(node.target, "tags", ())):
                reads.append(str(node.target).replace(".default", ""))
    return reads


def trace_on_examples(module, example_inputs: tuple, reason: str) -> Any:
    """`module` traced on `example_inputs` with real tensors: a torch.fx.GraphModule of PyTorch's
    operators (pre-dispatch, so LSTMs and convolutions stay whole) whose every data-dependent value
    is the example run's, checked against the module on `CHECKS` other inputs. `reason`: why
    `torch.export` refused the module, for the error. Raises TlmError (one line) where the trace
    fails, read a value computed from the inputs, or gives other outputs than the module."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    lead = f"import failed: the model does not export with torch.export ({reason})"
    try:
        with torch.no_grad():
            traced = make_fx(module, tracing_mode="real", pre_dispatch=True,
                             _error_on_data_dependent_ops=False)(*example_inputs)
    except Exception as err:
        raise TlmError(f"{lead}, nor traces on its example inputs: {first_line(err, last=False)}") from None
    reads = input_dependent_reads(traced)
    if reads:
        raise TlmError(f"{lead}: its control flow or sizes depend on its input's values ({', '.join(reads[:3])} "
                       "of a value computed from the input)")
    traced.graph.eliminate_dead_code()  # the reads of values now fixed in the graph
    traced.recompile()
    for i in range(CHECKS):
        inputs = other_inputs(example_inputs, seed=i + 1)
        with torch.no_grad():
            why = _difference(traced(*inputs), module(*inputs))
        if why is not None:
            raise TlmError(f"{lead}, and traced on its example inputs it computes other outputs on other "
                           f"inputs ({why}): its control flow or sizes depend on its input's values") from None
    return traced
