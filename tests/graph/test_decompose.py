"""tlm.graph.decompose: nn.EmbeddingBag and adaptive max pooling, which TVM's importer refused,
rewritten into operators it converts; exact against PyTorch (fast, torch only), and imported and
built by TVM."""

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings


def _bag(mode: str, padding_idx=None, last: bool = False, weighted: bool = False):
    import torch

    class Bag(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bag = torch.nn.EmbeddingBag(50, 8, mode=mode, padding_idx=padding_idx, include_last_offset=last)

        def forward(self, ids, offsets, weights=None):
            return self.bag(ids, offsets, per_sample_weights=weights) if weighted else self.bag(ids, offsets)

    torch.manual_seed(0)
    ids = torch.randint(0, 6, (20,))  # small ids: padding_idx 3 occurs
    offsets = torch.tensor([0, 4, 4, 11] + ([20] if last else []))  # bag 1 is empty
    args = (ids, offsets) + ((torch.rand(20),) if weighted else ())
    return Bag().eval(), args


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 3])
@pytest.mark.parametrize("last", [False, True])
def test_embedding_bag_rewritten_exactly(mode, padding_idx, last):
    import torch

    from tlm.graph.decompose import decompose_unsupported

    model, args = _bag(mode, padding_idx, last)
    rewritten = decompose_unsupported(torch.export.export(model, args))
    assert not [n for n in rewritten.graph.nodes if "embedding_bag" in str(n.target)]
    torch.testing.assert_close(rewritten.module()(*args), model(*args), rtol=1e-6, atol=1e-6)


def test_per_sample_weights_and_other_outputs():
    import torch

    from tlm.graph.decompose import decompose_unsupported

    model, args = _bag("sum", weighted=True)
    rewritten = decompose_unsupported(torch.export.export(model, args))
    torch.testing.assert_close(rewritten.module()(*args), model(*args), rtol=1e-6, atol=1e-6)

    class ReadsBagSizes(torch.nn.Module):  # offset2bag and the bag sizes are not computed: left as it was
        def forward(self, w, ids, offsets):
            out = torch.ops.aten._embedding_bag(w, ids, offsets, False, 1)
            return out[0], out[2]

    exported = torch.export.export(ReadsBagSizes(), (torch.rand(50, 8),) + args[:2])
    assert decompose_unsupported(exported) is exported


@pytest.mark.tvm
def test_embedding_bag_imports_and_builds():
    """The battery's embedding_bag model was refused at import (`aten._embedding_bag`)."""
    import torch
    import tvm
    from tvm import relax

    from tlm.graph.importer import import_torch

    model, args = _bag("mean", padding_idx=3)
    mod = import_torch(model, args).mod
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    got = vm["main"](*[tvm.runtime.tensor(a.numpy()) for a in args]).numpy()
    np.testing.assert_allclose(got, model(*args).detach().numpy(), rtol=1e-5, atol=1e-6)


def _pool(dims: int, out):
    import torch

    class Pool(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.pool = (torch.nn.AdaptiveMaxPool1d if dims == 1 else torch.nn.AdaptiveMaxPool2d)(out)

        def forward(self, x):
            return self.pool(x) * 2.0

    return Pool().eval()


@settings(max_examples=10, deadline=None)
@given(h=st.integers(1, 13), w=st.integers(1, 13), oh=st.integers(1, 9), ow=st.integers(1, 9), one_d=st.booleans())
def test_adaptive_max_pool_rewritten_exactly(h, w, oh, ow, one_d):
    """Every window PyTorch takes, whether or not the input divides (and outputs larger than inputs)."""
    import torch

    from tlm.graph.decompose import decompose_unsupported

    model = _pool(1, oh) if one_d else _pool(2, (oh, ow))
    x = torch.randn((2, 3, w) if one_d else (1, 3, h, w), generator=torch.Generator().manual_seed(h * 16 + w))
    rewritten = decompose_unsupported(torch.export.export(model, (x,)))
    assert not [n for n in rewritten.graph.nodes if "adaptive_max" in str(n.target)]
    assert torch.equal(rewritten.module()(x), model(x))


def test_adaptive_max_pool_indices_read_is_left_alone():
    import torch

    from tlm.graph.decompose import decompose_unsupported

    class WithIndices(torch.nn.Module):
        def forward(self, x):
            values, idx = torch.nn.functional.adaptive_max_pool2d(x, 3, return_indices=True)
            return values + idx.float()

    exported = torch.export.export(WithIndices(), (torch.randn(1, 2, 9, 9),))
    assert decompose_unsupported(exported) is exported


@pytest.mark.tvm
@pytest.mark.parametrize("size,out", [(12, (3, 3)), (17, (5, 7))])
def test_adaptive_max_pool_imports_and_builds(size, out):
    """The op battery's op_adaptive_max was refused at import (`aten.adaptive_max_pool2d`)."""
    import torch
    import tvm
    from tvm import relax

    from tlm.graph.importer import import_torch

    model, x = _pool(2, out), torch.randn(1, 4, size, size)
    mod = import_torch(model, (x,)).mod
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    np.testing.assert_array_equal(vm["main"](tvm.runtime.tensor(x.numpy())).numpy(), model(x).numpy())


@pytest.mark.tvm
def test_amax_amin_import_and_build():
    """torch.amax/amin had no conversion in TVM's importer (`tlm.graph.converters.CONVERTERS` adds them)."""
    import torch
    import tvm
    from tvm import relax

    from tlm.graph.importer import import_torch

    class Reduce(torch.nn.Module):
        def forward(self, x):
            return x.amax(-1) + x.amin(1).sum() + x.amax((0, 2), keepdim=True).squeeze(-1) + torch.amax(x, []) * 0.5

    model, x = Reduce().eval(), torch.randn(2, 5, 7)
    mod = import_torch(model, (x,)).mod
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x.numpy())).numpy(), model(x).numpy(), rtol=1e-6)


def test_unfold_rewritten_exactly():
    """F.unfold (aten.im2col) as a grouped conv with one-hot kernels: every stride, dilation and padding."""
    import torch
    import torch.nn.functional as F

    from tlm.graph.decompose import decompose_unsupported

    class Unfold(torch.nn.Module):
        def forward(self, x):
            return F.unfold(x, (2, 3), dilation=(2, 1), padding=(1, 2), stride=(2, 1)) * 2.0

    x = torch.randn(2, 3, 9, 7)
    rewritten = decompose_unsupported(torch.export.export(Unfold(), (x,)))
    assert not [n for n in rewritten.graph.nodes if "im2col" in str(n.target)]
    assert torch.equal(rewritten.module()(x), Unfold()(x))


@pytest.mark.tvm
def test_converters_tvm_lacks_or_gets_wrong():
    """F.selu lost ELU's scale in TVM's converter (0.62 off, silently); torch.exp2 had no conversion;
    an int64 clamp with one bound failed in legalization (-inf as an integer); F.unfold failed to
    import. Each now imports, builds and matches PyTorch."""
    import torch
    import torch.nn.functional as F
    import tvm
    from tvm import relax

    from tlm.graph.importer import import_torch

    class Mixed(torch.nn.Module):
        def forward(self, x):  # x: (2, 36)
            ids = (x.abs() * 10).long().clamp(max=49) + (x * 4).long().clamp(min=-3)
            cols = F.unfold(x.reshape(1, 2, 6, 6), 3, padding=1).sum(1)  # (1, 36)
            return F.selu(x) + F.celu(x, 0.7) + F.elu(x, 0.5) + torch.exp2(x) + ids.float() + cols

    model, x = Mixed().eval(), torch.randn(2, 36, generator=torch.Generator().manual_seed(0)) * 3
    mod = import_torch(model, (x,)).mod
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x.numpy())).numpy(), model(x).numpy(),
                               rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, float("inf")])
def test_cdist_rewritten(p):
    import torch

    from tlm.graph.decompose import decompose_unsupported

    class Dist(torch.nn.Module):
        def forward(self, x):
            return torch.cdist(x[:, :5], x[:, 5:], p=p)

    x = torch.randn(2, 12, 6, generator=torch.Generator().manual_seed(1))
    rewritten = decompose_unsupported(torch.export.export(Dist(), (x,)))
    assert not [n for n in rewritten.graph.nodes if "cdist" in str(n.target)]
    torch.testing.assert_close(rewritten.module()(x), Dist()(x), rtol=1e-5, atol=1e-5)


@pytest.mark.tvm
def test_cdist_hypot_and_grid_sample_build_and_match():
    """The second operator batch: torch.cdist and torch.hypot were refused at import; F.grid_sample
    imported with PyTorch's (N, H, W, 2) grid where Relax reads (N, 2, H, W): a wrong shape."""
    import torch
    import torch.nn.functional as F
    import tvm
    from tvm import relax

    from tlm.graph.importer import import_torch

    class Mixed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("grid", torch.rand(1, 6, 7, 2, generator=torch.Generator().manual_seed(2)) * 2.2 - 1.1)

        def forward(self, x):  # x: (1, 3, 9, 11)
            g = F.grid_sample(x, self.grid, mode="bilinear", padding_mode="zeros", align_corners=False)  # (1, 3, 6, 7)
            d = torch.cdist(g[0, :, :3], g[0, :, 3:])  # (3, 3, 3)
            return torch.hypot(g[:, :, :3, :3], d[None]) + g.sum()

    model, x = Mixed().eval(), torch.randn(1, 3, 9, 11, generator=torch.Generator().manual_seed(0))
    mod = import_torch(model, (x,)).mod
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x.numpy())).numpy(), model(x).numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.tvm
def test_division_by_a_python_number_keeps_the_tensors_dtype():
    """An int64 tensor `// 3` failed to import: TVM's converter typed the 3 int32. Floor and trunc
    division of ints and floats by Python numbers, negative divisors included, match PyTorch exactly."""
    import torch
    import tvm
    from tvm import relax

    from tlm.graph.importer import import_torch

    class Div(torch.nn.Module):
        def forward(self, x):
            i = (x * 7).long()
            ints = torch.floor_divide(i, 3) + torch.div(i, -4, rounding_mode="floor") + torch.div(i, -3, rounding_mode="trunc")
            return ints.float() + torch.div(x, 0.3, rounding_mode="trunc") + torch.div(x, 2.0, rounding_mode="floor") + i / 3

    model, x = Div().eval(), torch.randn(4, 10, generator=torch.Generator().manual_seed(0)) * 3
    vm = relax.VirtualMachine(tvm.compile(import_torch(model, (x,)).mod, target="llvm"), tvm.cpu())
    np.testing.assert_array_equal(vm["main"](tvm.runtime.tensor(x.numpy())).numpy(), model(x).numpy())


@pytest.mark.tvm
@pytest.mark.parametrize("kw", [{"scale_factor": 2}, {"size": (5, 7, 9), "align_corners": True},
                                {"scale_factor": (1.5, 0.5, 2.5)}])
def test_trilinear_interpolation_imports_and_matches(kw):
    """F.interpolate(mode="trilinear") failed to import (TVM's index_tensor of torch's decomposition)."""
    import torch
    import torch.nn.functional as F
    import tvm
    from tvm import relax

    from tlm.graph.importer import import_torch

    class Up(torch.nn.Module):
        def forward(self, x):
            return F.interpolate(x, mode="trilinear", **kw)

    model, x = Up().eval(), torch.randn(1, 2, 4, 5, 6, generator=torch.Generator().manual_seed(0))
    vm = relax.VirtualMachine(tvm.compile(import_torch(model, (x,)).mod, target="llvm"), tvm.cpu())
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x.numpy())).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)


def test_erfinv_and_eval_rrelu_rewritten():
    """torch.erfinv and F.rrelu / nn.RReLU in eval mode were refused at import: erfinv now runs
    PyTorch's own algorithm (its inf at +-1 and NaN past it kept), rrelu is the leaky ReLU of the
    mean slope."""
    import torch

    from tlm.graph.decompose import _erfinv, decompose_unsupported

    y = torch.cat([torch.linspace(-1, 1, 4001), torch.tensor([1.5, -2.0, 1 - 1e-7, -1 + 1e-7, 0.7, 0.70001])])
    want, got = torch.erfinv(y), _erfinv(y)
    assert torch.equal(torch.isnan(got), torch.isnan(want)) and torch.equal(got[want.isinf()], want[want.isinf()])
    torch.testing.assert_close(got[want.isfinite()], want[want.isfinite()], rtol=1e-5, atol=1e-5)

    class M(torch.nn.Module):
        def forward(self, x):
            return (torch.nn.functional.rrelu(x, 0.1, 0.3, training=False) + torch.erfinv(torch.tanh(x))
                    + torch.nn.RReLU().eval()(x))

    x = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    rewritten = decompose_unsupported(torch.export.export(M().eval(), (x,)))
    assert not [n for n in rewritten.graph.nodes if "erfinv" in str(n.target) or "rrelu" in str(n.target)]
    torch.testing.assert_close(rewritten.module()(x), M()(x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kw", [dict(cin=4, cout=2, k=2, stride=2),
                                dict(cin=4, cout=6, k=3, stride=2, padding=1, output_padding=1, groups=2),
                                dict(cin=3, cout=3, k=(3, 2, 3), stride=(1, 2, 3), padding=(1, 0, 1), dilation=(2, 1, 1)),
                                dict(cin=2, cout=2, k=2, stride=2, padding=(2, 1, 0))])
def test_conv_transpose3d_rewritten_exactly(kw):
    """nn.ConvTranspose3d was refused at import ("Unsupported transposed convolution dimensionality:
    5"): now its definition, a conv3d over the zero-dilated input, with groups, dilation, output
    padding and a padding past the kernel's reach (which crops)."""
    import torch

    from tlm.graph.decompose import decompose_unsupported

    kw = dict(kw)
    cin, cout, k = kw.pop("cin"), kw.pop("cout"), kw.pop("k")
    model = torch.nn.ConvTranspose3d(cin, cout, k, **kw).eval()
    x = torch.randn(1, cin, 3, 4, 5, generator=torch.Generator().manual_seed(0))
    rewritten = decompose_unsupported(torch.export.export(model, (x,)))
    assert not [n for n in rewritten.graph.nodes if "transpose3d" in str(n.target)]
    torch.testing.assert_close(rewritten.module()(x), model(x), rtol=1e-5, atol=1e-5)


@pytest.mark.tvm
def test_conv_transpose3d_and_erfinv_build_and_match():
    import torch
    import tvm
    from tvm import relax

    from tlm.graph.importer import import_torch

    class Up(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up = torch.nn.ConvTranspose3d(4, 2, 3, stride=2, padding=1, output_padding=1)

        def forward(self, x):
            return torch.erfinv(torch.tanh(self.up(x))) + torch.nn.functional.rrelu(x.mean(1, keepdim=True).repeat(
                1, 1, 2, 2, 2), training=False)

    torch.manual_seed(0)
    model, x = Up().eval(), torch.randn(1, 4, 3, 4, 4, generator=torch.Generator().manual_seed(0))
    mod = import_torch(model, (x,)).mod
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x.numpy())).numpy(), model(x).detach().numpy(),
                               rtol=1e-4, atol=1e-4)


SPECTRAL = ["fftn_real", "fft_imag", "ifft2_ortho_both", "rfft_forward", "rfftn_both", "ifftn_default"]


def _spectral(name: str):
    """torch.fft over a real input, its complex output taken apart (as FNet's token mixing does)."""
    import torch

    fft = torch.fft
    forward = {
        "fftn_real": lambda x: fft.fftn(x, dim=(1, 2)).real,
        "fft_imag": lambda x: fft.fft(x).imag,
        "ifft2_ortho_both": lambda x: torch.view_as_real(fft.ifft2(x, norm="ortho")),
        "rfft_forward": lambda x: fft.rfft(x, dim=1, norm="forward").real * 2,
        "rfftn_both": lambda x: torch.view_as_real(fft.rfftn(x)).flatten(-2),
        "ifftn_default": lambda x: fft.ifftn(x).imag,
    }[name]

    class Spectral(torch.nn.Module):
        def forward(self, x):
            return forward(x)

    return Spectral().eval()


@pytest.mark.parametrize("name", SPECTRAL)
@pytest.mark.parametrize("shape", [(2, 6, 10), (1, 7, 5)])
def test_fft_of_a_real_input_rewritten_without_complex_values(name, shape):
    """A DFT per dimension in real arithmetic (tlm.graph.decompose._dft): no complex value left, the
    same numbers as torch.fft (odd and even sizes, one-sided, every norm)."""
    import torch

    from tlm.graph.decompose import decompose_unsupported

    model, x = _spectral(name), torch.randn(shape, generator=torch.Generator().manual_seed(len(name)))
    rewritten = decompose_unsupported(torch.export.export(model, (x,)))
    assert not [n for n in rewritten.graph.nodes if "fft" in str(n.target) or "complex" in str(n.target)]
    assert not any(getattr(n.meta.get("val"), "is_complex", lambda: False)() for n in rewritten.graph.nodes)
    torch.testing.assert_close(rewritten.module()(x), model(x), rtol=1e-4, atol=1e-4)


def test_fft_with_a_complex_use_is_left_refused():
    """The modulus of an FFT keeps a complex value: left as it was, and refused in one line."""
    import torch

    from tlm.errors import TlmError
    from tlm.graph.decompose import decompose_unsupported
    from tlm.graph.importer import import_torch

    class Modulus(torch.nn.Module):
        def forward(self, x):
            return torch.fft.fft(x).abs()

    exported = torch.export.export(Modulus(), (torch.randn(4, 8),))
    assert decompose_unsupported(exported) is exported
    with pytest.raises(TlmError, match="unsupported operator"):
        import_torch(Modulus(), (torch.randn(4, 8),))


@pytest.mark.tvm
def test_fnet_style_fft_builds_and_matches():
    """The battery's FNet was refused (`aten._fft_c2c`, complex64); its Fourier mixing now builds."""
    import torch
    import tvm
    from tvm import relax

    from tlm.graph.importer import import_torch

    model, x = _spectral("fftn_real"), torch.randn(1, 16, 24)
    mod = import_torch(model, (x,)).mod
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x.numpy())).numpy(), model(x).numpy(), rtol=1e-4, atol=1e-4)


def _rewritten(model, args):
    import torch

    from tlm.graph.decompose import decompose_unsupported

    return decompose_unsupported(torch.export.export(model, args))


@given(n=st.integers(3, 12), size=st.integers(1, 3), step=st.integers(1, 3), dim=st.sampled_from([0, 1, -1]))
@settings(max_examples=25, deadline=None)
def test_tensor_unfold_rewritten_exactly(n, size, step, dim):
    """Tensor.unfold (windows along a dim, a new last dim) as one gather, on every window layout."""
    import torch

    class Windows(torch.nn.Module):
        def forward(self, x):
            return x.unfold(dim, size, step) * 2.0

    x = torch.randn(n, n + 1, 4)
    rewritten = _rewritten(Windows().eval(), (x,))
    assert not [m for m in rewritten.graph.nodes if str(m.target) == "aten.unfold.default"]
    torch.testing.assert_close(rewritten.module()(x), Windows()(x), rtol=0, atol=0)


def test_histc_with_a_range_rewritten_exactly():
    """torch.histc over a given range (a mixture of experts' tokens per expert): the top edge in the
    last bin, values outside the range not counted; over the data's own range it is left alone."""
    import torch

    class Counts(torch.nn.Module):
        def forward(self, x):
            return torch.histc(x, bins=4, min=0, max=3)

    x = torch.tensor([0.0, 1.0, 1.0, 3.0, 2.5, -1.0, 4.0, 0.99])  # 3.0: top edge; -1 and 4: outside
    rewritten = _rewritten(Counts().eval(), (x,))
    assert not [m for m in rewritten.graph.nodes if "histc" in str(m.target)]
    torch.testing.assert_close(rewritten.module()(x), torch.histc(x, bins=4, min=0, max=3), rtol=0, atol=0)

    class OwnRange(torch.nn.Module):
        def forward(self, x):
            return torch.histc(x, bins=4)

    kept = _rewritten(OwnRange().eval(), (x,))
    assert [m for m in kept.graph.nodes if "histc" in str(m.target)]


@pytest.mark.parametrize("counts", [[3, 0, 5], [8, 0, 0], [0, 0, 6]])  # empty groups; rows past the last
def test_grouped_mm_dense_matches_per_group_matmuls(counts):
    """_grouped_mm against the loop it replaces: each group's rows times its own weights, rows past
    the last group 0 (as transformers' fallback leaves them)."""
    import torch

    from tlm.graph.decompose import _grouped_mm

    torch.manual_seed(0)
    x, w = torch.randn(8, 5), torch.randn(3, 5, 4)
    offs = torch.tensor(counts).cumsum(0).to(torch.int32)
    want, start = torch.zeros(8, 4), 0
    for e, end in enumerate(offs.tolist()):
        want[start:end] = x[start:end] @ w[e]
        start = end
    torch.testing.assert_close(_grouped_mm(x, w, offs), want, rtol=1e-5, atol=1e-5)
