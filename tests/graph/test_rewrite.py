"""Graph rewrites that give one model the same tasks from either door: fold_gelu (an ONNX export's exact-GELU chain becomes R.nn.gelu) and flatten_matmuls (N-D @ 2-D matmuls become 2-D, 4-D batched ones 3-D) and round_epsilons (an ONNX export's float32 norm epsilons)."""

import numpy as np
import pytest

pytestmark = pytest.mark.tvm


def _run(mod, x):
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def _chain(form: str):
    """x * 0.5 * (1 + erf(x / sqrt 2)) written as ONNX exports write it, or in another order."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 8), "float32"))
    c = lambda v: relax.const(v, "float32")  # noqa: E731
    with bb.function("main", [x]):
        with bb.dataflow():
            if form == "onnx":
                e = bb.emit(relax.op.erf(bb.emit(relax.op.divide(x, c(2 ** 0.5)))))
                y = bb.emit(relax.op.multiply(bb.emit(relax.op.multiply(x, bb.emit(relax.op.add(e, c(1.0))))), c(0.5)))
            elif form == "scaled":
                e = bb.emit(relax.op.erf(bb.emit(relax.op.multiply(c(2 ** -0.5), x))))
                y = bb.emit(relax.op.multiply(bb.emit(relax.op.multiply(c(0.5), x)), bb.emit(relax.op.add(c(1.0), e))))
            else:  # not a GELU: the scale is wrong
                e = bb.emit(relax.op.erf(bb.emit(relax.op.divide(x, c(2.0)))))
                y = bb.emit(relax.op.multiply(bb.emit(relax.op.multiply(x, bb.emit(relax.op.add(e, c(1.0))))), c(0.5)))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("form", ["onnx", "scaled"])
def test_exact_gelu_chains_become_gelu(form):
    from tlm.graph.rewrite import fold_gelu

    mod = _chain(form)
    new = fold_gelu(mod)
    text = new.script()
    assert "R.nn.gelu" in text and "R.erf" not in text
    x = np.random.default_rng(0).standard_normal((4, 8)).astype("float32")
    np.testing.assert_allclose(_run(new, x), _run(mod, x), atol=1e-6)


def test_other_chains_are_left_alone():
    from tlm.graph.rewrite import fold_gelu

    import tvm

    mod = _chain("other")
    tvm.ir.assert_structural_equal(fold_gelu(mod), mod)


def _same_tasks_from_both_doors(model, inputs, tmp_path, host, keep, count, tol=1e-5) -> None:
    """`model` through torch.export and through its ONNX export: the same `count` tasks that `keep`
    selects from either door, and the ONNX door's build gives PyTorch's output."""
    import torch
    import tvm
    from tvm import relax

    from tlm.graph.extract import extract_from_relax
    from tlm.graph.importer import import_onnx, import_torch

    path = str(tmp_path / "model.onnx")
    torch.onnx.export(model, inputs, path, dynamo=False, opset_version=17)
    onnx_mod = import_onnx(path).mod
    picked = lambda ts: {t.hash for t in ts if keep(t)}  # noqa: E731
    from_torch = picked(extract_from_relax(import_torch(model, inputs).mod, host))
    assert len(from_torch) == count and from_torch == picked(extract_from_relax(onnx_mod, host))
    vm = relax.VirtualMachine(tvm.compile(onnx_mod, target="llvm"), tvm.cpu())
    got = vm["main"](*(tvm.runtime.tensor(t.numpy()) for t in inputs)).numpy()
    with torch.no_grad():
        np.testing.assert_allclose(got, model(*inputs).numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("shape", [(1, 64, 32), (1, 8, 8, 32), (2, 3, 4, 32)])
def test_onnx_nd_linear_gives_the_pytorch_door_matmul_task(shape, tmp_path, host):
    """A Linear on an N-D input: ONNX's MatMul keeps the leading axes, torch.export flattens them;
    flatten_matmuls gives both doors the same matmul task, and the output is unchanged."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU(), torch.nn.Linear(48, 16)).eval()
    _same_tasks_from_both_doors(model, (torch.randn(*shape),), tmp_path, host, lambda t: t.kind == "matmul", 2)


class _Attention(__import__("torch").nn.Module):
    """Window attention's two batched matmuls on 4-D (windows, heads, tokens, dim) tensors."""

    def forward(self, q, k, v):
        return ((q @ k.transpose(-1, -2)) * 0.25).softmax(-1) @ v


def test_onnx_4d_batched_matmul_gives_the_pytorch_door_task(tmp_path, host):
    """ONNX keeps a 4-D `q @ k^T` as one 4-D matmul, torch.export flattens the leading axes into a
    3-D batch matmul; flatten_matmuls gives both doors the same tasks, the output unchanged."""
    import torch

    torch.manual_seed(0)
    inputs = tuple(torch.randn(4, 3, 16, 8) for _ in range(3))
    _same_tasks_from_both_doors(_Attention().eval(), inputs, tmp_path, host, lambda t: "matmul" in t.name, 2)


@pytest.mark.parametrize("eps", [1e-12, 1e-5])
def test_onnx_float32_epsilon_gives_the_pytorch_door_norm_task(eps, tmp_path, host):
    """ONNX stores LayerNorm's epsilon as float32, torch.export as the Python float; round_epsilons
    gives both doors the same layer norm task, the output unchanged."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LayerNorm(16, eps=eps)).eval()
    _same_tasks_from_both_doors(model, (torch.randn(1, 8, 16),), tmp_path, host, lambda t: "norm" in t.name, 1,
                                tol=1e-4)


def test_round_epsilons_keeps_the_float32_value():
    import numpy as np

    from tlm.graph.rewrite import _short

    for eps in (9.999999960041972e-13, 1e-12, 1e-5, 9.999999747378752e-06, 1e-6, 1e-3, 0.1, 3e-7):
        assert np.float32(_short(eps)) == np.float32(eps) and len(repr(_short(eps))) <= len(repr(eps))


def test_matmuls_already_2d_or_batched_are_left_alone():
    import tvm
    from tvm import relax

    from tlm.graph.rewrite import flatten_matmuls

    bb = relax.BlockBuilder()
    a = relax.Var("a", relax.TensorType((8, 16), "float32"))
    b = relax.Var("b", relax.TensorType((2, 16, 4), "float32"))
    w = relax.Var("w", relax.TensorType((16, 4), "float32"))
    with bb.function("main", [a, b, w]):
        with bb.dataflow():
            y = bb.emit(relax.op.matmul(a, w))
            z = bb.emit(relax.op.matmul(bb.emit(relax.op.reshape(y, (2, 16, 1))), bb.emit(relax.op.reshape(b, (2, 1, 64)))))
            out = bb.emit_output(z)
        bb.emit_func_output(out)
    mod = bb.get()
    assert flatten_matmuls(mod) is mod


@pytest.mark.parametrize("form", ["true_divide", "log_of_ratio", "int_times_float", "where_int_float"])
def test_integer_arithmetic_takes_pytorchs_promoted_dtype(form):
    """int64 / 4 is float32 in PyTorch; TVM's importer computed it in int64 (a silently wrong
    output) and DeBERTa's `log(pos / mid)` on int64 failed to import (promote_torch_arithmetic)."""
    import torch
    import tvm
    from tvm import relax

    from tlm.graph.importer import import_torch

    fns = {"true_divide": lambda x: x / 4, "log_of_ratio": lambda x: torch.log(x.abs() / 4 + 1),
           "int_times_float": lambda x: x * 0.5 + 1, "where_int_float": lambda x: torch.where(x > 0, x, x * 0.25)}

    class IntMath(torch.nn.Module):
        def forward(self, x):
            return fns[form](x)

    x = torch.arange(-8, 8, dtype=torch.int64).reshape(1, 16)
    mod = import_torch(IntMath(), (x,)).mod
    want = IntMath()(x)
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x.numpy())).numpy()
    assert str(got.dtype) == str(want.dtype).replace("torch.", "")
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-6, atol=1e-6)


def test_onnx_clip_gives_the_pytorch_door_conv_tasks(tmp_path, host):
    """TVM's ONNX importer writes Clip (ReLU6, Hardtanh) as call_tirs of TOPI's maximum and minimum,
    which the layout pass cannot see through; lift_min_max gives the PyTorch door's conv tasks
    (the clip fused into each conv, no transposes of their own), the output unchanged."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU6(), torch.nn.Conv2d(8, 8, 3, groups=8),
                                torch.nn.Hardtanh(-1.5, 2.0)).eval()
    _same_tasks_from_both_doors(model, (torch.randn(1, 3, 12, 12),), tmp_path, host, lambda t: True, 4, tol=1e-4)


def test_lift_min_max_checks_the_called_function():
    """A call_tir named `maximum` whose function computes something else is left alone."""
    from tvm import relax, topi

    from tlm.graph.rewrite import lift_min_max

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 3), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            c = bb.emit(relax.const(0.5, "float32"))
            out = bb.emit_output(bb.call_te(topi.minimum, x, c, primfunc_name_hint="maximum"))
        bb.emit_func_output(out)
    mod = bb.get()
    assert lift_min_max(mod) is mod
