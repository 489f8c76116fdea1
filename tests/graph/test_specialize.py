"""A model torch.export stops on (a size read from a tensor) is traced on its example inputs, checked
on other inputs, and said in a warning (tlm.graph.specialize, tlm.graph.importer.import_torch).
The first tests need torch only; the last imports into Relax and builds with TVM."""

import warnings

import pytest
import torch

from tlm.errors import TlmError, TlmWarning
from tlm.graph.specialize import is_data_dependent, other_inputs, trace_on_examples


class BufferPadded(torch.nn.Module):
    """transformers' EnCodec pattern: a conv's padding kept in a 0-d buffer and applied by its
    value, with a branch on it (`if length <= pad`): torch.export stops on `Eq(u0, ...)`."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 6, 5)
        self.register_buffer("pad", torch.tensor(4, dtype=torch.int64), persistent=False)

    def forward(self, x):  # [1, 4, 32] -> [1, 6, 32]
        extra = 1 if x.shape[-1] <= self.pad else 0
        return self.conv(torch.nn.functional.pad(x, (int(self.pad) + extra, 0), mode="reflect"))


class ValueDependent(torch.nn.Module):
    """A size from the input's values: the sum over the first n positive-count columns."""

    def forward(self, x):  # [2, 64] -> [2]
        n = int((x > 0).sum())
        return x[:, : n // 2].sum(dim=1)


def _export_error(module, x):
    with pytest.raises(Exception) as info:
        torch.export.export(module, x)
    return info.value


def test_a_padding_read_from_a_buffer_is_traced_exactly():
    torch.manual_seed(0)
    module, x = BufferPadded().eval(), (torch.randn(1, 4, 32),)
    err = _export_error(module, x)
    assert is_data_dependent(err), err
    traced = trace_on_examples(module, x, "stand-in reason")
    assert not any("item" in str(n.target) for n in traced.graph.nodes)  # the padding is a number now
    torch.export.export(traced, x)  # the traced graph exports
    for seed in (5, 6):
        y = other_inputs(x, seed)
        assert torch.equal(traced(*y), module(*y))


def test_a_size_from_the_input_values_is_refused_in_one_line():
    torch.manual_seed(0)
    module, x = ValueDependent(), (torch.randn(2, 64),)
    assert is_data_dependent(_export_error(module, x))
    with pytest.raises(TlmError, match="depend on its input's values") as info:
        trace_on_examples(module, x, "guard")
    assert "\n" not in str(info.value)


class SignBranch(torch.nn.Module):
    """A branch on the input's values that two random other inputs may well take the same way:
    the trace is refused for what it read, not for what the checks happened to see."""

    def forward(self, x):
        return x if x.sum() > -1e9 else -x


def test_a_branch_on_the_input_values_is_refused_however_the_checks_fall():
    from torch.fx.experimental.proxy_tensor import make_fx

    from tlm.graph.specialize import input_dependent_reads

    x = (torch.randn(4, 8),)
    with pytest.raises(TlmError, match="depend on its input's values"):
        trace_on_examples(SignBranch(), x, "guard")
    buffered = make_fx(BufferPadded().eval(), tracing_mode="real", pre_dispatch=True,
                       _error_on_data_dependent_ops=False)(torch.randn(1, 4, 32))
    assert input_dependent_reads(buffered) == []  # a buffer's value is no input's


def test_other_inputs_keep_shapes_dtypes_and_ids_in_range():
    ids = torch.randint(4, 50, (2, 16), generator=torch.Generator().manual_seed(0))
    x = torch.randn(3, 5) * 7 + 2
    mask = torch.rand(3, 5) > 0.5
    got = other_inputs((ids, x, mask, 3), seed=1)
    assert [t.shape for t in got[:3]] == [ids.shape, x.shape, mask.shape] and got[3] == 3
    assert [t.dtype for t in got[:3]] == [ids.dtype, x.dtype, mask.dtype]
    assert sorted(got[0].flatten().tolist()) == sorted(ids.flatten().tolist())  # the same ids, shuffled
    assert not torch.equal(got[1], x) and 2 < float(got[1].std()) < 20
    assert int(got[2].sum()) == int(mask.sum())
    assert all(torch.equal(a, b) for a, b in zip(other_inputs((ids, x), 1), other_inputs((ids, x), 1)))


def test_other_failures_are_not_taken_for_data_dependent_ones():
    assert not is_data_dependent(RuntimeError("unsupported operator aten.foo"))
    assert is_data_dependent(RuntimeError("Could not extract specialized integer from data-dependent expression u0"))


@pytest.mark.tvm
def test_import_traces_the_model_says_so_and_builds_the_same_outputs():
    import numpy as np
    import tvm
    from tvm import relax

    from tlm.graph.importer import import_torch

    torch.manual_seed(0)
    module, x = BufferPadded().eval(), (torch.randn(1, 4, 32),)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        imported = import_torch(module, x)
    said = [str(w.message) for w in caught if issubclass(w.category, TlmWarning)]
    assert len(said) == 1 and "traced on its example inputs" in said[0], said
    vm = relax.VirtualMachine(tvm.compile(imported.mod, target="llvm"), tvm.cpu())
    got = vm["main"](*[tvm.runtime.tensor(a) for a in imported.inputs]).numpy()
    np.testing.assert_allclose(got, imported.reference(imported.inputs), rtol=1e-5, atol=1e-5)
