"""Graph passes (tlm.graph.passes): fast float32 math leaves no scalar libm call in any task, and
whole models built with it match PyTorch closely over the whole float range that matters."""

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.tvm

SLOW_CALLS = ("T.erf(", "T.exp(", "T.tanh(", "T.sigmoid(", "T.pow(")


class AllMath(torch.nn.Module):
    """Every op that fast math rewrites, each on its own copy of the input: [N] -> [10, N]."""

    def forward(self, x):
        return torch.stack([
            torch.erf(x), torch.tanh(x), torch.exp(torch.clamp(x, max=30.0)), torch.sigmoid(x),
            torch.nn.functional.gelu(x), torch.nn.functional.gelu(x, approximate="tanh"),
            torch.nn.functional.silu(x), torch.softmax(x.reshape(8, -1), dim=-1).reshape(-1),
            torch.pow(x, 3.0), torch.pow(x.abs(), 0.5),
        ])


def _inputs():
    x = np.concatenate([np.linspace(-12, 12, 4001), [-90.0, -30.0, -1e-4, 0.0, 1e-4, 30.0, 90.0]])
    x = np.concatenate([x, np.random.default_rng(0).standard_normal(8 * 600 - len(x)) * 3])
    return (torch.from_numpy(x.astype("float32")),)


def test_fast_math_tasks_have_no_scalar_libm_calls(host):
    from tlm.graph.extract import extract_tasks

    tasks = extract_tasks(AllMath(), _inputs(), target=host)
    assert tasks
    for t in tasks:
        script = t.mod.script()
        assert not [c for c in SLOW_CALLS if c in script], t.name


def test_fast_math_matches_pytorch(tmp_path, host):
    from tlm.compiler.build import CompileConfig
    from tlm.compiler.job import compile_model
    from tlm.measure.database import open_db

    open_db(str(tmp_path / "db")).close()  # no records: every task runs TVM's default schedule
    model, inputs = AllMath(), _inputs()
    with pytest.warns(UserWarning, match="untuned"):
        compiled = compile_model(model, inputs, db=str(tmp_path / "db"), target=host,
                                 config=CompileConfig(repeat=1, min_repeat_ms=1, compare=False))
    assert compiled.matches
    got = compiled(*inputs).astype("float64")
    want = model(inputs[0].double()).numpy()
    err = np.abs(got - want) / np.maximum(np.abs(want), 1.0)  # relative above 1, absolute below
    # Per op: within a few float32 ulps of the float64 reference (erf, tanh near 1e-7).
    assert err.max(axis=1).tolist() == pytest.approx([0.0] * 10, abs=2e-6), err.max(axis=1)


def test_other_dtypes_keep_the_default_legalization(host):
    from tlm.graph.extract import extract_tasks

    class Half(torch.nn.Module):
        def forward(self, x):
            return torch.tanh(x.double()).float()

    (task,) = [t for t in extract_tasks(Half(), _inputs(), target=host) if "tanh" in t.name]
    assert "T.tanh(" in task.mod.script()  # float64: TVM's own (exact) tanh
