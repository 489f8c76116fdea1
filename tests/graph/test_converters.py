"""tlm.graph.converters: operators TVM's PyTorch importer converts wrongly, imported, built and
checked against PyTorch (tests/graph/test_decompose.py has the earlier ones)."""

import numpy as np
import pytest


def _imports_and_matches(model, x, rtol: float, atol: float) -> None:
    """`model` imported by tlm, built by TVM and run on `x` gives PyTorch's output."""
    import tvm
    from tvm import relax

    from tlm.graph.importer import import_torch

    mod = import_torch(model, (x,)).mod
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x.numpy())).numpy(), model(x).numpy(), rtol=rtol,
                               atol=atol)


@pytest.mark.tvm
def test_cumsum_and_cumprod_of_bool_and_int32_give_int64():
    """transformers' causal models called with token ids alone build their mask with a cumsum of
    a bool tensor: TVM kept the scan in bool and LLVM codegen refused it ("MatchesCode(kDLFloat)")."""
    import torch

    class Scans(torch.nn.Module):
        def forward(self, x):  # x: (2, 40)
            flags = x > 0
            small = (x * 3).to(torch.int32)
            return (flags.cumsum(-1) + small.cumsum(1) + flags.cumprod(1)).float() + x.cumsum(0)

    model, x = Scans().eval(), torch.randn(2, 40, generator=torch.Generator().manual_seed(0))
    assert model(x).dtype == torch.float32
    _imports_and_matches(model, x, rtol=1e-6, atol=1e-5)


@pytest.mark.tvm
def test_arange_with_a_negative_step():
    """Relax sized arange(32, -32, -1) as 66 elements (Funnel's relative positions failed to import)."""
    import torch

    class Ranges(torch.nn.Module):
        def forward(self, x):  # x: (64,)
            return (x + torch.arange(32, -32, -1) + torch.arange(31, -33, -1).float() * 0.5
                    + torch.arange(10.0, -2.8, -0.2)[:64] + torch.arange(0, 128, 2))

    model, x = Ranges().eval(), torch.randn(64, generator=torch.Generator().manual_seed(0))
    _imports_and_matches(model, x, rtol=1e-6, atol=1e-5)


@pytest.mark.tvm
def test_index_add_and_index_put_of_whole_rows():
    """x.index_add_(0, idx, rows) (graph networks' message passing), x[idx] = rows and x[mask] = v
    were refused: TVM's importer wanted one integer index tensor per dim. Duplicate indices add up,
    as in PyTorch."""
    import torch

    class Scatter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            gen = torch.Generator().manual_seed(1)
            self.register_buffer("dst", torch.randint(0, 12, (40,), generator=gen))  # with duplicates
            self.register_buffer("rows", torch.randperm(12, generator=gen)[:5])

        def forward(self, x):  # x: (12, 6)
            msg = x.index_select(0, self.dst.flip(0))
            summed = torch.zeros_like(x).index_add_(0, self.dst, msg)
            placed = x.clone()
            placed[self.rows] = x[self.rows] * 2
            masked = x.clone()
            masked[x[:, 0] > 0] = -1.0
            col = x[:, 1].clone()
            col[col < 0] = 0.5
            return summed + placed + masked + col[:, None]

    model, x = Scatter().eval(), torch.randn(12, 6, generator=torch.Generator().manual_seed(0))
    _imports_and_matches(model, x, rtol=1e-5, atol=1e-5)


@pytest.mark.tvm
def test_splits_feeding_pointwise_ops_become_slices():
    """A split or chunk whose pieces only feed pointwise ops is strided slices (each fuses into its
    consumer; TVM's split is a kernel that writes every piece); one feeding anything else (here a
    matmul) stays TVM's split. Chunks of uneven size, negative dims and sizes given as a list."""
    import torch

    from tlm.graph.importer import import_torch

    class Gates(torch.nn.Module):
        def forward(self, x):  # x: (4, 22)
            a, b, c = x.chunk(3, dim=-1)  # 8, 8, 6
            d, e = x.split([10, 12], dim=1)
            f = x.split(9, dim=1)  # 9, 9, 4
            return torch.cat([a * torch.sigmoid(b), torch.tanh(c), d.exp(), e + 1, f[0] * 2, -f[2]], 1)

    class ToMatmul(torch.nn.Module):
        def forward(self, x):  # x: (4, 22)
            a, b = x.split(11, dim=1)
            return a @ b.T

    for model, split_left in ((Gates(), False), (ToMatmul(), True)):
        x = torch.randn(4, 22, generator=torch.Generator().manual_seed(0))
        assert ("R.split" in import_torch(model.eval(), (x,)).mod.script()) == split_left
        _imports_and_matches(model.eval(), x, rtol=1e-6, atol=1e-6)


@pytest.mark.tvm
def test_lstm_and_gru_cells_from_pytorch_have_no_split_kernel():
    """PyTorch's decomposition of nn.LSTM / nn.GRU chunks each step's gates: those become slices,
    the cell matches PyTorch (one kernel fewer per step)."""
    import torch

    from tlm.graph.importer import import_torch

    torch.manual_seed(0)
    for rnn in (torch.nn.LSTM(6, 8, num_layers=2, batch_first=True, bidirectional=True),
                torch.nn.GRU(6, 8, batch_first=True)):

        class Last(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, x):
                return self.inner(x)[0]

        model, x = Last(rnn).eval(), torch.randn(1, 5, 6)
        assert "R.split" not in import_torch(model, (x,)).mod.script()
        with torch.no_grad():
            _imports_and_matches(model, x, rtol=1e-5, atol=1e-6)


@pytest.mark.tvm
def test_max_and_min_over_a_dim_are_reductions_with_first_indices():
    """x.max(dim) was a top-k of 1 (a sort-like kernel: PointNet's slowest) and x.min(dim) had no
    converter: both are now a reduction and an arg-reduction; values and indices as PyTorch's, the
    first index among equal values."""
    import torch

    from tlm.graph.importer import import_torch

    class MaxMin(torch.nn.Module):
        def forward(self, x):  # x: (2, 24, 24)
            v, i = x.max(dim=2)
            w, j = torch.min(x, 1, keepdim=True)
            u, k = x.round().max(dim=-1)  # ties: the first index wins, as in PyTorch
            s, n = x[0, 0, 0].max(dim=0)  # a 0-d tensor: itself at index 0 (TVM's top-k refused it)
            return v + w.sum(1) + u + (i + k).float() + j.float().sum(1) + s + n

    model = MaxMin().eval()
    x = torch.randn(2, 24, 24, generator=torch.Generator().manual_seed(0)) * 2
    _imports_and_matches(model, x, rtol=1e-6, atol=1e-5)
    text = import_torch(model, (x,)).mod.script()
    assert "topk" not in text and "R.argmin" in text and "R.argmax" in text
