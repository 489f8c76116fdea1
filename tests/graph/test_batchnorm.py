"""Inference batch norms folded into the convs before them (tlm.graph.batchnorm, opted in with
`fold_bn=True`; off by default): no norm left
where a conv (with or without a bias, grouped or not, 1-D, 2-D or transposed) feeds one; the
result matches PyTorch for random shapes and statistics; norms after anything else are left as
one multiply-add and still match; a CNN's conv tasks lose the norm's division."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.tvm


def _run(mod, *inputs) -> np.ndarray:
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(relax.build(relax.transform.LegalizeOps()(mod), target="llvm"), tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(np.ascontiguousarray(x)) for x in inputs]).numpy()


def _randomize(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Running statistics and affine parameters away from the identity a fresh norm has."""
    gen = torch.Generator().manual_seed(seed)
    for m in module.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.running_mean.copy_(torch.rand(m.running_mean.shape, generator=gen) * 2 - 1)
            m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) * 2 + 0.1)
            if m.affine:
                m.weight.data.copy_(torch.rand(m.weight.shape, generator=gen) * 2 - 0.5)
                m.bias.data.copy_(torch.rand(m.bias.shape, generator=gen) * 2 - 1)
    return module.eval()


def _check(module, x: torch.Tensor, unfolded: int = 0) -> None:
    """Imported through `import_torch(fold_bn=True)` (which runs `prepare`): no batch norm's division remains
    (`unfolded` norms follow no conv: each a multiply-add), and the built module
    matches PyTorch."""
    from tlm.graph.importer import import_torch

    with torch.no_grad():
        want = module(x).numpy()
    kept = import_torch(module, (x,)).mod  # the default: the norm decomposed, its division kept
    mod = import_torch(module, (x,), fold_bn=True).mod
    script = mod.script()
    assert "R.divide(" not in script and "batch_norm" not in script, script
    assert script.count("R.multiply(") == unfolded, script
    assert kept.script().count("R.divide(") > 0
    np.testing.assert_allclose(_run(mod, x.numpy()), want, rtol=1e-4, atol=1e-4)


class _Mixed(torch.nn.Module):
    """A conv without bias, a depthwise conv with one, a transposed conv and a 1-D conv with a
    norm without affine parameters, each followed by its batch norm."""

    def __init__(self):
        super().__init__()
        self.c1, self.b1 = torch.nn.Conv2d(3, 8, 3, bias=False), torch.nn.BatchNorm2d(8)
        self.c2, self.b2 = torch.nn.Conv2d(8, 8, 3, groups=8), torch.nn.BatchNorm2d(8)
        self.c3, self.b3 = torch.nn.ConvTranspose2d(8, 4, 4, 2, 1, bias=False), torch.nn.BatchNorm2d(4)
        self.c4, self.b4 = torch.nn.Conv1d(4, 6, 3), torch.nn.BatchNorm1d(6, affine=False)

    def forward(self, x):
        y = self.b3(self.c3(torch.relu(self.b2(self.c2(self.b1(self.c1(x)))))))
        return self.b4(self.c4(y.flatten(2)))


def test_every_kind_of_conv_folds_and_matches():
    torch.manual_seed(0)
    _check(_randomize(_Mixed(), 1), torch.randn(1, 3, 10, 10))


@settings(max_examples=6, deadline=None)
@given(c_in=st.integers(1, 6), c_out=st.integers(1, 6), k=st.integers(1, 3), stride=st.integers(1, 2),
       depthwise=st.booleans(), bias=st.booleans(), eps=st.sampled_from([1e-5, 1e-3, 0.1]), seed=st.integers(0, 99))
def test_folded_conv_matches_pytorch(c_in, c_out, k, stride, depthwise, bias, eps, seed):
    torch.manual_seed(seed)
    groups, c_out = (c_in, c_in) if depthwise else (1, c_out)
    module = torch.nn.Sequential(torch.nn.Conv2d(c_in, c_out, k, stride, padding=k // 2, groups=groups, bias=bias),
                                 torch.nn.BatchNorm2d(c_out, eps=eps), torch.nn.ReLU6())
    _check(_randomize(module, seed), torch.randn(2, c_in, 7, 6))


def test_norms_after_other_ops_become_a_multiply_add():
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.BatchNorm2d(4),
                                 torch.nn.Flatten(), torch.nn.Linear(4 * 36, 5), torch.nn.BatchNorm1d(5))
    _check(_randomize(module, 2), torch.randn(2, 3, 8, 8), unfolded=2)


def test_cnn_conv_tasks_lose_the_division():
    from tlm.graph.extract import extract_from_relax
    from tlm.graph.importer import import_torch
    from tlm.graph.target import resolve_target

    torch.manual_seed(0)
    module = _randomize(torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, bias=False), torch.nn.BatchNorm2d(8),
                                            torch.nn.ReLU()), 3)
    x = (torch.randn(1, 3, 12, 12),)
    host = resolve_target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})
    folded = [t.name for t in extract_from_relax(import_torch(module, x, fold_bn=True).mod, host)]
    kept = [t.name for t in extract_from_relax(import_torch(module, x).mod, host)]
    assert any("divide" in n for n in kept) and not any("divide" in n for n in folded), (kept, folded)
    assert any(n.startswith("fused_conv2d_add") for n in folded), folded


def test_both_doors_give_the_same_conv_tasks(tmp_path, host):
    """`torch.onnx.export` folds a conv's batch norm into its weights and a bias; the PyTorch door
    does too when asked, so both give the same conv tasks, and the ONNX door's build still matches."""
    import tvm
    from tvm import relax

    from tlm.graph.extract import extract_from_relax
    from tlm.graph.importer import import_onnx, import_torch

    torch.manual_seed(0)
    module = _randomize(torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, groups=8, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU()), 4)
    x = (torch.randn(1, 3, 12, 12),)
    path = str(tmp_path / "model.onnx")
    torch.onnx.export(module, x, path, dynamo=False, opset_version=17)
    onnx_mod = import_onnx(path).mod
    convs = lambda mod: {t.hash for t in extract_from_relax(mod, host) if "conv2d" in t.name}  # noqa: E731
    from_torch = convs(import_torch(module, x, fold_bn=True).mod)
    assert len(from_torch) == 2 and from_torch == convs(onnx_mod)
    vm = relax.VirtualMachine(tvm.compile(onnx_mod, target="llvm"), tvm.cpu())
    with torch.no_grad():
        np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x[0].numpy())).numpy(), module(*x).numpy(),
                                   rtol=1e-4, atol=1e-4)
