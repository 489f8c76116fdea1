"""The reference program (tlm.measure.reference): loops reordered, outputs bitwise the untuned
program's, for every kind of task the graph layer makes."""

import numpy as np
import pytest
import workloads_tir as W

from tlm.measure.reference import fast_reference
from tlm.measure.workers import make_inputs

pytestmark = pytest.mark.tvm


def _model_tasks(host):
    """Tasks of tiny models through the real pipeline: NHWC and transposed convs, 3-D convs,
    packed linear + GELU, attention (batch matmul, softmax), layer norm, pooling."""
    import torch

    from tlm.graph.extract import extract_tasks

    class Net2d(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.dw = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
            self.up = torch.nn.ConvTranspose2d(8, 4, 4, stride=2, padding=1)

        def forward(self, x):
            y = torch.relu(self.dw(self.conv(x)))
            return torch.nn.functional.adaptive_avg_pool2d(self.up(y), 1)

    class Net3d(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv3d(2, 4, 3, padding=1)

        def forward(self, x):
            return torch.relu(self.conv(x))

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = torch.nn.LayerNorm(16)
            self.attn = torch.nn.MultiheadAttention(16, 2, batch_first=True)
            self.fc = torch.nn.Linear(16, 32)

        def forward(self, x):
            h = self.ln(x)
            a, _ = self.attn(h, h, h, need_weights=False)
            return torch.nn.functional.gelu(self.fc(x + a))

    torch.manual_seed(0)
    tasks = []
    for model, shape in ((Net2d(), (1, 3, 8, 8)), (Net3d(), (1, 2, 4, 6, 6)), (Block(), (1, 8, 16))):
        tasks += extract_tasks(model.eval(), (torch.randn(*shape),), target=host)
    return tasks


def _outputs(mod, task, host):
    import tvm

    inputs = make_inputs([["TENSOR", a["dtype"], a["shape"]] for a in task.args])
    lib = tvm.compile(mod, target=host.tvm())
    tensors = [tvm.runtime.tensor(x, tvm.cpu()) for x in inputs]
    lib["main"](*tensors)
    return [t.numpy() for t in tensors]


@pytest.fixture(scope="module")
def tasks(host):
    tir = [W.matmul(16, 24, 20), W.batch_matmul(), W.dense_bias(), W.conv1x1(), W.conv3x3(), W.depthwise_conv(),
           W.softmax(), W.layer_norm(), W.pooling()]
    return tir + _model_tasks(host)


def test_outputs_are_bitwise_the_untuned_programs(tasks, host):
    assert len({t.name for t in tasks}) >= 15
    for task in tasks:
        fast = fast_reference(task.mod)
        for got, want in zip(_outputs(fast, task, host), _outputs(task.mod, task, host)):
            assert np.array_equal(got, want, equal_nan=True), task.name


def _innermost_kinds(mod) -> list[int]:
    """Per block of the function: the iterator kind bound to its innermost loop (0 spatial,
    2 reduction)."""
    from tvm.s_tir import Schedule

    sch = Schedule(mod)
    kinds = []
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        loops = sch.get_loops(block)
        if not loops:
            continue
        inner = sch.get(loops[-1])
        binding = inner.body.iter_values
        (i,) = [j for j, v in enumerate(binding) if v.same_as(inner.loop_var)]
        kinds.append(int(sch.get(block).iter_vars[i].iter_type))
    return kinds


def test_contiguous_inner_loops(tasks):
    """The reorder happens (a silent fallback would only be slow): matmuls and convs get a
    spatial innermost loop; reductions over a last axis (softmax) keep theirs."""
    by_name = {t.name: t for t in tasks}
    assert _innermost_kinds(by_name["fused_matmul"].mod) == [2]
    assert _innermost_kinds(fast_reference(by_name["fused_matmul"].mod)) == [0]
    changed = {t.name for t in tasks if _innermost_kinds(fast_reference(t.mod)) != _innermost_kinds(t.mod)}
    assert {"fused_conv2d_relu", "fused_depthwise_conv2d", "fused_conv3d_add_relu", "fused_matmul_add"} <= changed
    assert "fused_softmax" not in changed and "fused_layer_norm" not in changed
