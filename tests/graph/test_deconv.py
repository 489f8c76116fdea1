"""Transposed convs as a sub-pixel conv2d and a depth-to-space (tlm.graph.deconv): exact against
PyTorch for the usual and odd strides, kernels, paddings and output paddings; calls that do not
qualify keep TVM's transposed conv, still match, and warn once; DCGAN's tasks are plain convs."""

import warnings

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.tvm


def _run(mod, *inputs) -> np.ndarray:
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(relax.build(relax.transform.LegalizeOps()(mod), target="llvm"), tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(np.ascontiguousarray(x)) for x in inputs]).numpy()


def _deconv(c_in: int, c_out: int, k, s, p, op=0, bias: bool = True, relu: bool = False, groups: int = 1,
            dilation: int = 1) -> torch.nn.Module:
    torch.manual_seed(0)
    layers = [torch.nn.ConvTranspose2d(c_in, c_out, k, s, p, output_padding=op, bias=bias, groups=groups,
                                       dilation=dilation)]
    return torch.nn.Sequential(*layers, *([torch.nn.ReLU()] if relu else [])).eval()


def _check(module, x: torch.Tensor, rewritten: bool = True, op: str = "conv2d_transpose") -> None:
    """Imported through `import_torch` (which runs `prepare`), built and compared with PyTorch."""
    from tlm.graph.importer import import_torch

    mod = import_torch(module, (x,)).mod
    assert (op in mod.script()) is not rewritten, mod.script()
    with torch.no_grad():
        want = module(x).numpy()
    np.testing.assert_allclose(_run(mod, x.numpy()), want, rtol=1e-4, atol=1e-4)


CASES = {  # name: (c_in, c_out, kernel, stride, padding, output_padding, input shape N, H, W)
    "dcgan": (8, 6, 4, 2, 1, 0, (1, 5, 5)),
    "unet": (6, 4, 2, 2, 0, 0, (1, 6, 6)),
    "k3s2p1op1": (4, 4, 3, 2, 1, 1, (1, 5, 5)),
    "k3s1p1": (4, 5, 3, 1, 1, 0, (1, 6, 6)),
    "k5s3p2": (3, 4, 5, 3, 2, 0, (1, 4, 5)),
    "rectangular": (3, 5, (3, 4), (2, 3), (1, 0), 0, (1, 5, 4)),
    "batch2_nonsquare": (5, 3, 4, 2, 1, 0, (2, 3, 7)),
    "padding_over_kernel": (2, 3, 2, 3, 2, 1, (1, 4, 3)),  # the output starts inside the second phase
    "op_over_padding": (2, 3, 3, 3, 0, 2, (1, 3, 4)),  # the output ends past the conv's natural rows
    "noise_1x1": (10, 6, 4, 1, 0, 0, (2, 1, 1)),  # a generator's first layer: a matmul
    "noise_1x1_s2p1op1": (5, 3, 3, 2, 1, 1, (1, 1, 1)),  # output past the kernel: zero taps
}


@pytest.mark.parametrize("bias,relu", [(True, False), (False, True)])
@pytest.mark.parametrize("name", list(CASES))
def test_rewritten_transposed_convs_match_pytorch(name, bias, relu):
    c_in, c_out, k, s, p, op, (n, h, w) = CASES[name]
    x = torch.randn(n, c_in, h, w, generator=torch.Generator().manual_seed(1))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="tlm: .*transposed")  # a qualifying call: no noise
        _check(_deconv(c_in, c_out, k, s, p, op, bias=bias, relu=relu), x)


@st.composite
def _shapes(draw):
    """A transposed conv that PyTorch accepts: p < k, output_padding < stride, a non-empty output."""
    k, s = draw(st.integers(1, 5)), draw(st.integers(1, 4))
    p, op = draw(st.integers(0, k - 1)), draw(st.integers(0, s - 1))
    h, w = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    assume((min(h, w) - 1) * s - 2 * p + k + op > 0)
    return k, s, p, op, draw(st.integers(1, 5)), draw(st.integers(1, 5)), h, w


@settings(max_examples=25, deadline=None)
@given(_shapes())
def test_any_small_transposed_conv_matches_pytorch(shape):
    k, s, p, op, c_in, c_out, h, w = shape
    x = torch.randn(1, c_in, h, w, generator=torch.Generator().manual_seed(k * 100 + s))
    _check(_deconv(c_in, c_out, k, s, p, op), x)


def test_the_weight_is_each_phase_flipped_sub_kernel():
    from tlm.graph.deconv import subpixel_weight

    w = np.arange(2 * 3 * 3 * 4, dtype="float32").reshape(2, 3, 3, 4)  # IOHW, K = (3, 4)
    w2 = subpixel_weight(w, (2, 3))  # T = (2, 2), 6 phases
    assert w2.shape == (2 * 3 * 3, 2, 2, 2)
    for r_h in range(2):
        for r_w in range(3):
            for co in range(3):
                for t_h in range(2):
                    for t_w in range(2):
                        k_h, k_w = r_h + 2 * (1 - t_h), r_w + 3 * (1 - t_w)
                        want = w[:, co, k_h, k_w] if k_h < 3 and k_w < 4 else 0.0
                        np.testing.assert_array_equal(w2[(r_h * 3 + r_w) * 3 + co, :, t_h, t_w], want)


def _numpy_deconv(x: np.ndarray, w: np.ndarray, s, pads, out) -> np.ndarray:
    """A transposed conv by its definition: y[o] += x[i] * w[k] for o = i*s - pad_begin + k."""
    n, c_in, h, wd = x.shape
    _, c_out, k_h, k_w = w.shape
    y = np.zeros((n, c_out, *out), "float64")
    for i in range(h):
        for j in range(wd):
            for a in range(k_h):
                for b in range(k_w):
                    o, q = i * s[0] - pads[0] + a, j * s[1] - pads[1] + b
                    if 0 <= o < out[0] and 0 <= q < out[1]:
                        y[:, :, o, q] += x[:, :, i, j] @ w[:, :, a, b]
    return y


def test_asymmetric_padding_as_relax_gives_it():
    """ONNX's ConvTranspose can pad the begin and end of an axis differently."""
    from tvm import relax

    from tlm.graph.deconv import subpixel_conv_transpose

    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((1, 3, 4, 5)).astype("float32")
    w_np = rng.standard_normal((3, 2, 3, 4)).astype("float32")
    pads, s, op = [2, 0, 1, 3], (2, 3), (1, 2)  # top, left, bottom, right
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 3, 4, 5), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.conv2d_transpose(x, relax.const(w_np), strides=s, padding=pads,
                                                            output_padding=op))
        bb.emit_func_output(y)
    mod = bb.get()
    out = [(4 - 1) * 2 - (2 + 1) + 3 + 1, (5 - 1) * 3 - (0 + 3) + 4 + 2]  # assert_allclose checks the shape
    new = subpixel_conv_transpose(mod)
    assert "conv2d_transpose" not in new.script() and "conv2d_transpose" in mod.script()  # mod as it was
    want = _numpy_deconv(x_np, w_np, s, pads, out)
    np.testing.assert_allclose(_run(new, x_np), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(_run(mod, x_np), want, rtol=1e-4, atol=1e-4)


def _tlm_warnings(record) -> list[str]:
    return [str(w.message) for w in record if "tlm:" in str(w.message)]


@pytest.mark.parametrize("kind", ["groups", "dilation"])
def test_calls_that_do_not_qualify_are_left_and_warn_once(kind):
    class Two(torch.nn.Module):  # two such calls: one warning
        def __init__(self):
            super().__init__()
            extra = dict(groups=2) if kind == "groups" else dict(dilation=2)
            self.a = _deconv(4, 4, 3, 2, 1, **extra)
            self.b = _deconv(4, 6, 4, 2, 1, **extra)

        def forward(self, x):
            return self.b(torch.relu(self.a(x)))

    x = torch.randn(1, 4, 5, 6, generator=torch.Generator().manual_seed(2))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        _check(Two().eval(), x, rewritten=False)
    reason = "groups > 1" if kind == "groups" else "dilation > 1"
    assert _tlm_warnings(record) == [
        f"tlm: 2 conv2d_transpose calls left as TVM's dilated transposed convolution: {reason}"]


def test_a_weight_that_is_not_a_constant_is_left():
    import tvm
    from tvm import relax

    from tlm.graph.deconv import subpixel_conv_transpose

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 3, 4, 4), "float32"))
    w = relax.Var("w", relax.TensorType((3, 2, 4, 4), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.conv2d_transpose(x, w, strides=2, padding=1))
        bb.emit_func_output(y)
    mod = bb.get()
    with pytest.warns(UserWarning, match="tlm: 1 conv2d_transpose call left as TVM's dilated transposed "
                                         "convolution: its weight is not a constant"):
        out = subpixel_conv_transpose(mod)
    tvm.ir.assert_structural_equal(out, mod)


def test_dcgan_has_only_conv2d_tasks_and_matches_pytorch(host):
    import tlm
    from tlm.graph.importer import import_torch
    from tlm.graph.zoo import get_workload

    module, x = get_workload("dcgan-b1").build()
    tasks = tlm.extract_tasks(module, x, target=host)
    names = [t.name for t in tasks]
    assert not any("conv2d_transpose" in n for n in names), names
    assert sum("conv2d" in n for n in names) == 4, names  # the 1x1-noise layer is a matmul
    assert sum("matmul" in n for n in names) == 1, names
    imported = import_torch(module, x)
    assert "conv2d_transpose" not in imported.mod.script() and 'data_layout="NHWC"' in imported.mod.script()
    with torch.no_grad():
        want = module(*x).numpy()
    np.testing.assert_allclose(_run(imported.mod, *[t.numpy() for t in x]), want, rtol=1e-4, atol=1e-4)


def _check_1d(module, x: torch.Tensor, rewritten: bool = True) -> None:
    _check(module, x, rewritten, op="conv1d_transpose")


CASES_1D = {  # name: (c_in, c_out, kernel, stride, padding, output_padding, N, W)
    "encodec_k8s4": (8, 4, 8, 4, 0, 0, 1, 12),  # transformers' EnCodec decoder (its trim is a slice after)
    "hifigan_k16s8p4": (6, 3, 16, 8, 4, 0, 1, 9),  # HiFi-GAN's upsampling
    "k3s2p1op1": (4, 4, 3, 2, 1, 1, 2, 7),
    "k5s1p2": (3, 5, 5, 1, 2, 0, 1, 6),  # stride 1: a flipped conv1d, no depth-to-space
    "k2s3p0": (3, 2, 2, 3, 0, 2, 1, 5),  # the kernel shorter than the stride: zero taps
}


@pytest.mark.parametrize("bias,relu", [(True, False), (False, True)])
@pytest.mark.parametrize("name", list(CASES_1D))
def test_rewritten_transposed_conv1d_matches_pytorch(name, bias, relu):
    c_in, c_out, k, s, p, op, n, w = CASES_1D[name]
    torch.manual_seed(0)
    layers = [torch.nn.ConvTranspose1d(c_in, c_out, k, s, p, output_padding=op, bias=bias)]
    module = torch.nn.Sequential(*layers, *([torch.nn.ReLU()] if relu else [])).eval()
    x = torch.randn(n, c_in, w, generator=torch.Generator().manual_seed(1))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="tlm: .*transposed")
        _check_1d(module, x)


@settings(max_examples=20, deadline=None)
@given(_shapes())
def test_any_small_transposed_conv1d_matches_pytorch(shape):
    k, s, p, op, c_in, c_out, _, w = shape
    torch.manual_seed(k * 10 + s)
    module = torch.nn.ConvTranspose1d(c_in, c_out, k, s, p, output_padding=op).eval()
    x = torch.randn(1, c_in, w, generator=torch.Generator().manual_seed(k * 100 + s))
    _check_1d(module, x)


def test_the_1d_weight_is_each_phase_flipped_sub_kernel():
    from tlm.graph.deconv import subpixel_weight

    w = np.arange(2 * 3 * 5, dtype="float32").reshape(2, 3, 5)  # IOW, K = 5
    w2 = subpixel_weight(w, (2,))  # T = 3, 2 phases
    assert w2.shape == (2 * 3, 2, 3)
    for r in range(2):
        for co in range(3):
            for t in range(3):
                k = r + 2 * (2 - t)
                np.testing.assert_array_equal(w2[r * 3 + co, :, t], w[:, co, k] if k < 5 else 0.0)


def test_a_grouped_conv1d_transpose_is_left_and_says_so():
    module = torch.nn.ConvTranspose1d(4, 4, 4, 2, 1, groups=2).eval()
    x = torch.randn(1, 4, 6, generator=torch.Generator().manual_seed(3))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        _check_1d(module, x, rewritten=False)
    assert _tlm_warnings(record) == [
        "tlm: 1 conv1d_transpose call left as TVM's dilated transposed convolution: groups > 1"]


def test_a_weight_normed_transposed_conv1d_is_rewritten():
    """HiFi-GAN and EnCodec wrap their upsampling in weight norm: the weight is g * v / |v|,
    computed from constants, and folded into one before the rewrite."""
    torch.manual_seed(0)
    module = torch.nn.utils.parametrizations.weight_norm(torch.nn.ConvTranspose1d(4, 3, 8, 4, 2)).eval()
    x = torch.randn(1, 4, 10, generator=torch.Generator().manual_seed(4))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="tlm: .*transposed")
        _check_1d(module, x)
