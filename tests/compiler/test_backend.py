"""`torch.compile(m, backend="tlm")` and `tlm.load` (issue 47, item 5): compiled graphs match
eager, graphs tlm cannot take run eagerly with one warning, saved libraries reload and run."""

import warnings

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.tvm


class TwoHeads(torch.nn.Module):
    """A hand-written model in no zoo entry, with two outputs (a tuple comes back as a tuple)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(32, 48), torch.nn.Linear(48, 10)
        self.scale = torch.nn.Parameter(torch.linspace(0.5, 1.5, 48))

    def forward(self, x):  # [4, 32] -> ([4, 10], [4])
        h = torch.nn.functional.gelu(self.a(x)) * self.scale
        return self.b(h), h.sum(-1)


def _tiny_cnn():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 5))
    return net.eval(), torch.randn(2, 3, 16, 16)


def _fallback_warnings(record) -> list[str]:
    return [str(w.message) for w in record if "tlm: running this graph in eager PyTorch" in str(w.message)]


def test_backend_is_found_by_name():
    import torch._dynamo

    assert "tlm" in torch._dynamo.list_backends()  # the pyproject entry point


def test_torch_compile_matches_eager(tmp_path, monkeypatch):
    monkeypatch.setenv("TLM_CACHE", str(tmp_path / "cache"))  # the budget-0 run directory
    torch.manual_seed(0)
    torch._dynamo.reset()
    model, x = TwoHeads().eval(), torch.randn(4, 32)
    compiled = torch.compile(model, backend="tlm", options={"budget": 0})
    with torch.no_grad(), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        got, want = compiled(x), model(x)
        assert not _fallback_warnings(record)
        assert isinstance(got, tuple) and len(got) == 2
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4)
        x2 = torch.randn(4, 32)  # same shapes: the compiled graph again, not eager
        torch.testing.assert_close(compiled(x2), model(x2), rtol=1e-3, atol=1e-4)
        assert not _fallback_warnings(record)
        # The weights are constants of the library: changed in place, the graph runs eagerly.
        model.a.weight.mul_(2)
        torch.testing.assert_close(compiled(x), model(x))
    assert len(_fallback_warnings(record)) == 1
    assert "parameter or buffer changed" in _fallback_warnings(record)[0]


class WithFft(torch.nn.Module):
    def forward(self, x):
        return torch.fft.rfft(torch.relu(x)).abs() * 2


class InPlace(torch.nn.Module):
    def forward(self, x):
        x.mul_(2)  # the caller sees its input doubled, once
        return x + 1


@pytest.mark.parametrize("case", ["unsupported_op", "autograd", "dynamic", "bad_option", "in_place"])
def test_what_tlm_cannot_take_runs_eagerly(case, tmp_path, monkeypatch):
    """Each of these is refused before any program is generated, so the test stays fast."""
    monkeypatch.setenv("TLM_CACHE", str(tmp_path / "cache"))
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, x = {"unsupported_op": (WithFft(), torch.randn(2, 16)),
                "in_place": (InPlace(), torch.randn(2, 16))}.get(case, (TwoHeads().eval(), torch.randn(4, 32)))
    x0 = x.clone()
    options = {"budget": 0, "colour": "red"} if case == "bad_option" else {"budget": 0}
    compiled = torch.compile(model, backend="tlm", options=options, dynamic=True if case == "dynamic" else None)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        if case == "autograd":  # parameters require grad: tlm compiles inference only
            got = compiled(x)
            got[0].sum().backward()  # eager kept autograd working
            assert model.a.weight.grad is not None
        else:
            with torch.no_grad():
                got = compiled(x)
    if case == "in_place":
        torch.testing.assert_close(x, 2 * x0)  # changed once, as eager changes it
        torch.testing.assert_close(got, 2 * x0 + 1)
    else:
        with torch.no_grad():
            torch.testing.assert_close(got, model(x))
    msgs = _fallback_warnings(record)
    assert len(msgs) == 1 and "\n" not in msgs[0], msgs
    assert {"unsupported_op": "unsupported operator", "autograd": "inference only",
            "dynamic": "dynamic", "bad_option": "unknown option(s) colour",
            "in_place": "in place"}[case] in msgs[0]


def test_outputs_that_differ_run_eagerly(monkeypatch):
    """A library whose outputs differ from eager is not used (a stand-in library answers zeros,
    so no real build is needed)."""
    import tvm

    class Zeros:
        vm = {"main": lambda *args: tvm.runtime.tensor(np.zeros((2, 3), "float32"), tvm.cpu())}

    monkeypatch.setattr("tlm.compiler.job.compile_model", lambda *args, **kwargs: Zeros())
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, x = torch.nn.Linear(8, 3).eval(), torch.randn(2, 8)
    with torch.no_grad(), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        got = torch.compile(model, backend="tlm")(x)
        torch.testing.assert_close(got, model(x))
    msgs = _fallback_warnings(record)
    assert len(msgs) == 1 and "output 0 differs from eager PyTorch" in msgs[0], msgs


@pytest.fixture(scope="module")
def saved_cnn(tmp_path_factory):
    """A tiny CNN compiled at budget 0 and saved as `tlm compile -o PATH` saves it."""
    import tlm
    from tlm.compiler.build import CompileConfig

    tmp = tmp_path_factory.mktemp("saved")
    net, x = _tiny_cnn()
    path = str(tmp / "cnn.so")
    with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings():
        mp.setenv("TLM_CACHE", str(tmp / "cache"))
        warnings.simplefilter("ignore")
        model = tlm.compile(net, (x,), budget=0, output=path,
                            config=CompileConfig(repeat=1, min_repeat_ms=0, compare=False))
    assert model.matches
    return net, path


def test_load_reproduces_the_outputs(saved_cnn):
    import tlm

    net, path = saved_cnn
    lib = tlm.load(path)
    assert lib.arity == 1
    x = torch.randn(2, 3, 16, 16)  # not the inputs it was compiled with
    with torch.no_grad():
        want = net(x)
    got = lib(x)  # torch in, torch out
    assert isinstance(got, torch.Tensor)
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4)
    got_np = lib(x.numpy())  # numpy in, numpy out
    assert isinstance(got_np, np.ndarray)
    np.testing.assert_allclose(got_np, want.numpy(), rtol=1e-3, atol=1e-4)


def test_load_errors_are_one_line(saved_cnn, tmp_path):
    import tlm
    from tlm.errors import TlmError

    with pytest.raises(TlmError, match="no compiled library"):
        tlm.load(tmp_path / "missing.so")
    (tmp_path / "junk.so").write_text("not a library")
    with pytest.raises(TlmError, match="cannot load") as err:
        tlm.load(tmp_path / "junk.so")
    assert "\n" not in str(err.value)
    lib = tlm.load(saved_cnn[1])
    with pytest.raises(TlmError, match="takes 1 inputs"):
        lib(np.zeros((2, 3, 16, 16), "float32"), np.zeros(1))
    with pytest.raises(TlmError) as err:
        lib(np.zeros((2, 3, 8, 8), "float32"))  # the wrong shape: the VM's check, on one line
    assert "\n" not in str(err.value)
