"""The whole model's output check (tlm.compiler.check): NaN and infinities never pass it, and a
model that does not match with its convolution weights packed at compile time is built again
without the packing. Fast: the rebuild is a stand-in here (said in the test); the real build of a
model that needed it is in test_job_outside_zoo (conv_transpose1d)."""

import warnings

import numpy as np
import pytest

from tlm.compiler import build, check
from tlm.graph.tasks import op_names, task_kind


@pytest.mark.parametrize("got, want, diff", [
    ([1.0, 2.5], [1.0, 2.0], 0.5),
    ([1.0, np.nan], [1.0, 2.0], np.inf),  # NaN > tolerance is False: it must not be NaN
    ([1.0, 2.0], [1.0, np.nan], np.inf),
    ([np.nan, 2.0], [np.nan, 2.0], 0.0),  # NaN where the reference has NaN
    ([np.inf, -np.inf], [np.inf, -np.inf], 0.0),
    ([np.inf, 1.0], [1.0, 1.0], np.inf),
    ([-np.inf], [np.inf], np.inf),
])
def test_max_abs_diff_never_lets_a_nan_pass(got, want, diff):
    assert check.max_abs_diff(np.array(got, "float32"), np.array(want, "float32")) == diff
    assert not check.max_abs_diff(np.zeros(2), np.zeros(3)) < np.inf


def test_tolerance_ignores_the_references_nans():
    cfg = build.CompileConfig(rtol=1e-3, atol=1e-5)
    assert check.tolerance_for(np.array([np.nan, -4.0, 2.0], "float32"), cfg) == pytest.approx(1e-5 + 4e-3)


def test_a_transposed_1d_conv_task_is_not_a_conv1d():
    """Its weights must not be packed as a conv1d's (tlm.compiler.pack matches operator words)."""
    assert op_names("fused_conv1d_transpose2_leaky_relu") == ["conv1d_transpose", "leaky", "relu"]
    assert task_kind("fused_conv1d_transpose2_leaky_relu") == "conv1d_transpose"
    assert op_names("fused_conv1d3_add") == ["conv1d", "add"]


@pytest.mark.parametrize("right", [True, False])
def test_a_model_wrong_with_packed_weights_is_built_without(right):
    calls = []

    def fake_build(cfg):  # a stand-in for the whole-model build (no TVM): right only without the packing
        calls.append(cfg.pack_convs)
        return [("vm", np.array([1.0 if right and not cfg.pack_convs else np.nan]), [])]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = check.without_packing(fake_build, build.CompileConfig(), np.array([1.0]), 1e-5)
    assert calls == [False]
    assert check.max_abs_diff(got[0][1], np.array([1.0])) == (0.0 if right else np.inf)
    said = " ".join(str(w.message) for w in caught)
    assert ("it matches" in said) == right and ("with or without" in said) != right
