"""fold_gelu: an ONNX export's exact-GELU chain becomes R.nn.gelu, as through torch.export."""

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
