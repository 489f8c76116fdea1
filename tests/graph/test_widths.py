"""Odd widths (tlm.graph.widths, issue 48 item 3): a matmul of a width without a factor of 8 is
computed as a round part and a padded tail, each with its epilogue, and a conv of such a width
padded whole, and still match PyTorch; round widths and graphs the pass does not know are left
exactly as they were."""

import pytest
import torch

from tlm.graph.widths import conv_width_parts, width_parts


def test_the_rule_splits_only_widths_without_a_factor_of_8():
    assert width_parts(1031) == ((1024, 1024), (7, 16))
    assert width_parts(50257) == ((50240, 50240), (17, 32))
    assert width_parts(131) == ((128, 128), (3, 16))
    assert width_parts(61) == ((61, 64),)
    # A factor of 8 (1000: the zoo's classifier heads), or a third more work (24 -> 32, 37 -> 48).
    assert [width_parts(n) for n in (1024, 1000, 768, 3072, 16, 8, 24, 37, 1, 2, 0)] == [None] * 11


def test_a_conv_width_is_padded_to_a_multiple_of_8_for_at_most_60_percent_more_work():
    assert [conv_width_parts(n) for n in (12, 36, 21, 5, 10, 255, 1031)] == [
        ((12, 16),), ((36, 40),), ((21, 24),), ((5, 8),), ((10, 16),), ((255, 256),), ((1031, 1032),)]
    assert [conv_width_parts(n) for n in (8, 16, 48, 1024, 0, 1, 3, 4, 9)] == [None] * 9  # 4 -> 8: twice the work


@pytest.mark.tvm
@pytest.mark.parametrize("dims", [1, 2])
def test_an_odd_conv_is_padded_with_its_epilogue_and_matches_pytorch(dims):
    """Conv (12 channels) -> BatchNorm -> ReLU -> a 1x1 conv reading all 12: the first conv and its
    epilogue compute 16 channels, one slice gives the 12 back; a depthwise conv of 12 channels
    (one group per channel) is left as it is."""
    import numpy as np
    import tvm
    from tvm import relax

    from tlm.graph.importer import import_torch

    nn = torch.nn
    conv, bn = (nn.Conv1d, nn.BatchNorm1d) if dims == 1 else (nn.Conv2d, nn.BatchNorm2d)
    torch.manual_seed(0)
    block = nn.Sequential(conv(8, 12, 3, padding=1), bn(12), nn.ReLU(), conv(12, 12, 3, padding=1, groups=12),
                          conv(12, 8, 1)).eval()
    with torch.no_grad():
        block[1].running_mean.uniform_(-1, 1), block[1].running_var.uniform_(0.5, 2)
    x = torch.randn(1, 8, *[10] * dims)
    mod = import_torch(block, (x,)).mod
    script = mod["main"].script()
    assert script.count("R.strided_slice") == 1, script
    assert f"R.Tensor((1, {', '.join(['10'] * dims)}, 16)" in script, script
    vm = relax.VirtualMachine(relax.build(mod, target="llvm"), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x.numpy())).numpy()
    np.testing.assert_allclose(got, block(x).detach().numpy(), rtol=1e-4, atol=1e-5)


def _linear(width: int, k: int = 64) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(k, width), torch.nn.ReLU()).eval()


def _as_imported(module, x):
    """The module imported with the split left out."""
    from unittest import mock

    from tlm.graph import widths
    from tlm.graph.importer import import_torch

    with mock.patch.object(widths, "split_odd_widths", lambda mod: mod):
        return import_torch(module, x)


@pytest.mark.tvm
def test_an_odd_linear_is_split_and_matches_pytorch(tmp_path, host):
    from tlm.compiler.build import CompileConfig, compile_imported
    from tlm.graph.extract import extract_from_relax
    from tlm.graph.importer import import_torch
    from tlm.measure.database import open_db

    x = (torch.randn(1, 4, 64),)
    imported = import_torch(_linear(1031), x)
    script = imported.mod["main"].script()
    assert "R.Tensor((4, 1024)" in script and "R.Tensor((4, 16)" in script, script
    assert script.count("R.concat") == 1 and script.count("R.strided_slice") == 1, script
    tasks = extract_from_relax(imported.mod, host)
    round_task = extract_from_relax(import_torch(_linear(1024), x).mod, host)[0]
    assert round_task.name == "fused_matmul_add_relu" and round_task.hash in {t.hash for t in tasks}
    assert sum(t.name.startswith("fused_matmul") for t in tasks) == 2, [t.name for t in tasks]
    open_db(str(tmp_path / "db")).close()
    with pytest.warns(UserWarning, match="untuned"):
        compiled = compile_imported(imported, str(tmp_path / "db"), target=host,
                                    config=CompileConfig(repeat=1, min_repeat_ms=1, compare=False, cold_pick=0))
    assert compiled.matches, compiled.max_abs_diff
    assert compiled(*x).shape == (1, 4, 1031)


@pytest.mark.tvm
def test_a_round_linear_is_left_alone():
    from tlm.graph.importer import import_torch
    from tlm.graph.widths import split_odd_widths

    x = (torch.randn(1, 4, 64),)
    assert "R.concat" not in import_torch(_linear(1024), x).mod["main"].script()
    imported = _as_imported(_linear(1024), x)
    assert split_odd_widths(imported.mod) is imported.mod  # not even rebuilt: the same tasks, the same hashes


@pytest.mark.tvm
def test_an_epilogue_with_constants_is_carried_by_both_parts():
    import numpy as np
    import tvm
    from tvm import relax

    from tlm.graph.importer import import_torch

    class Block(torch.nn.Module):  # bias, GELU, a per-column scale, then a Linear reading all 131
        def __init__(self):
            super().__init__()
            self.fc, self.out = torch.nn.Linear(64, 131), torch.nn.Linear(131, 24)
            self.scale = torch.nn.Parameter(torch.rand(131) + 0.5)

        def forward(self, x):
            return self.out(torch.nn.functional.gelu(self.fc(x)) * self.scale)

    torch.manual_seed(0)
    block, x = Block().eval(), torch.randn(1, 8, 64)
    script = import_torch(block, (x,)).mod["main"].script()
    assert script.count("R.nn.gelu") == 2 and script.count("R.multiply") == 2, script
    vm = relax.VirtualMachine(relax.build(import_torch(block, (x,)).mod, target="llvm"), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x.numpy())).numpy()
    np.testing.assert_allclose(got, block(x).detach().numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.tvm
def test_an_onnx_gemm_is_split_too():
    """ONNX's Gemm imports as matmul(x, permute_dims(W)) with no out_dtype."""
    import numpy as np
    import tvm
    from tvm import relax

    from tlm.graph.widths import split_odd_widths

    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((131, 64)).astype("float32"), rng.standard_normal(131).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 64), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            mm = bb.emit(relax.op.matmul(x, bb.emit(relax.op.permute_dims(relax.const(w), [1, 0]))))
            out = bb.emit_output(relax.op.nn.relu(bb.emit(relax.op.add(mm, relax.const(b)))))
        bb.emit_func_output(out)
    mod = bb.get()
    split = split_odd_widths(mod)
    assert "R.concat" in split.script()
    data = rng.standard_normal((4, 64)).astype("float32")
    run = lambda m: relax.VirtualMachine(tvm.compile(m, target="llvm"), tvm.cpu())["main"](  # noqa: E731
        tvm.runtime.tensor(data)).numpy()
    np.testing.assert_allclose(run(split), run(mod), rtol=1e-5, atol=1e-5)


@pytest.mark.tvm
def test_a_graph_it_cannot_handle_is_left_as_it_was(capsys):
    from unittest import mock

    from tlm.graph import widths

    x = (torch.randn(1, 4, 64),)
    imported = _as_imported(_linear(1031), x)
    before = imported.mod["main"].script()
    with mock.patch.object(widths, "_part_consts", side_effect=RuntimeError("boom")):
        out = widths.split_odd_widths(imported.mod)
    assert out is imported.mod and out["main"].script() == before
    assert capsys.readouterr().err.count("tlm: warning: odd widths left unsplit: ") == 1

    class Bmm(torch.nn.Module):  # an odd width without a constant weight: nothing to split
        def forward(self, a, b):
            return torch.relu(a @ b)

    bmm = _as_imported(Bmm(), (torch.randn(4, 64), torch.randn(64, 1031)))
    assert widths.split_odd_widths(bmm.mod) is bmm.mod
