"""Conv layout passes (tlm.graph.layout): zero pads fold into the convs after them, convs run in
NHWC with ReLU6 carried through (no transpose pairs around activations), and compiled models
built either way match PyTorch; models without a 2-D conv are left exactly as they were.
Issue 48: a transposed conv between convs (a U-Net) becomes an NHWC conv (tlm.graph.deconv) or,
left by that pass, stays in the layout it legalizes in; Swin
(negative squeeze axes) converts, and a conversion that fails or would not legalize leaves the
convs unconverted with one warning naming the operator."""

import warnings

import pytest
import torch

pytestmark = pytest.mark.tvm


class PadConvRelu6(torch.nn.Module):
    """TF-style "same" padding (an explicit asymmetric pad) before a strided conv and a depthwise
    conv, batch norm and ReLU6, as Hugging Face's MobileNetV2 writes them: [1, 8, 15, 15] -> [1, 16, 8, 8]."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 16, 3, stride=2)
        self.bn = torch.nn.BatchNorm2d(16)
        self.dw = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)

    def forward(self, x):
        y = torch.nn.functional.relu6(self.bn(self.conv(torch.nn.functional.pad(x, (0, 1, 0, 1)))))
        return torch.nn.functional.relu6(self.dw(y))


def _script(imported) -> str:
    return imported.mod["main"].script()


def test_pads_fold_and_convs_run_nhwc(host):
    from tlm.graph.extract import extract_from_relax
    from tlm.graph.importer import import_torch

    torch.manual_seed(0)
    x = (torch.randn(1, 8, 15, 15),)
    nchw = import_torch(PadConvRelu6(), x, conv_layout="NCHW")
    nhwc = import_torch(PadConvRelu6(), x, conv_layout="NHWC")
    assert "R.nn.pad" not in _script(nchw) and "R.nn.pad" not in _script(nhwc)
    assert "padding=[0, 0, 1, 1]" in _script(nchw)  # top, left, bottom, right
    assert 'data_layout="NHWC"' in _script(nhwc) and 'data_layout="NCHW"' not in _script(nhwc)
    names = [t.name for t in extract_from_relax(nhwc.mod, host)]
    # Two conv tasks (activation fused), the input and output transposes; nothing else.
    assert sum("conv2d" in n for n in names) == 2 and all("conv2d" in n or "transpose" in n for n in names), names
    assert not any("clip" in n or "pad" in n for n in names), names


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_compiled_model_matches_pytorch_in_both_layouts(tmp_path, host, layout):
    from tlm.compiler.build import CompileConfig, compile_imported
    from tlm.graph.importer import import_torch
    from tlm.measure.database import open_db

    torch.manual_seed(0)
    imported = import_torch(PadConvRelu6().eval(), (torch.randn(1, 8, 15, 15) * 3,), conv_layout=layout)
    open_db(str(tmp_path / "db")).close()
    with pytest.warns(UserWarning, match="untuned"):
        compiled = compile_imported(imported, str(tmp_path / "db"), target=host,
                                    config=CompileConfig(repeat=1, min_repeat_ms=1, compare=False, cold_pick=0))
    assert compiled.matches, compiled.max_abs_diff


def test_models_without_conv2d_are_unchanged():
    from tlm.graph.importer import import_torch

    class Clip(torch.nn.Module):
        def forward(self, x):
            return torch.clamp(x * 2, 0.0, 6.0)

    x = (torch.randn(4, 8),)
    assert _script(import_torch(Clip(), x, conv_layout="NHWC")) == _script(import_torch(Clip(), x, conv_layout="NCHW"))


def test_unknown_layout_is_a_one_line_error():
    from tlm.errors import TlmError
    from tlm.graph.importer import import_torch

    with pytest.raises(TlmError, match="unknown conv layout"):
        import_torch(PadConvRelu6(), (torch.randn(1, 8, 15, 15),), conv_layout="NCWH")


class TinyUNet(torch.nn.Module):
    """3x3 convs, max pooling, a ConvTranspose2d(k=2, s=2) decoder and a `cat` skip connection:
    [1, 3, 16, 16] -> [1, 2, 16, 16]."""

    def __init__(self, c=4, up_groups=1):
        super().__init__()
        conv = lambda i, o: torch.nn.Sequential(torch.nn.Conv2d(i, o, 3, padding=1), torch.nn.ReLU())  # noqa: E731
        self.enc1, self.enc2, self.dec = conv(3, c), conv(c, 2 * c), conv(2 * c, c)
        self.up = torch.nn.ConvTranspose2d(2 * c, c, 2, stride=2, groups=up_groups)
        self.head = torch.nn.Conv2d(c, 2, 1)

    def forward(self, x):
        a = self.enc1(x)
        b = self.enc2(torch.nn.functional.max_pool2d(a, 2))
        return self.head(self.dec(torch.cat([self.up(b), a], 1)))


class ConvThen(torch.nn.Module):
    """A conv followed by `fn` (axes written negative, as torch and Hugging Face write them)."""

    def __init__(self, fn):
        super().__init__()
        self.conv, self.fn = torch.nn.Conv2d(3, 8, 3, padding=1), fn

    def forward(self, x):
        return self.fn(self.conv(x))


def _compile_untuned(imported, tmp_path, host):
    from tlm.compiler.build import CompileConfig, compile_imported
    from tlm.measure.database import open_db

    open_db(str(tmp_path / "db")).close()
    with pytest.warns(UserWarning, match="untuned"):
        return compile_imported(imported, str(tmp_path / "db"), target=host,
                                config=CompileConfig(repeat=1, min_repeat_ms=1, compare=False, cold_pick=0))


def _warnings(capfd) -> list[str]:
    err = capfd.readouterr().err
    assert "Traceback" not in err, err
    return [line for line in err.splitlines() if line.startswith("tlm: warning")]


def _layouts_of(script: str, op: str) -> list[str]:
    return [line.split(f"{op}(", 1)[1] for line in script.splitlines() if f"{op}(" in line]


@pytest.mark.parametrize("up_groups", [1, 2])
def test_transposed_conv_between_convs_compiles_and_matches(up_groups, tmp_path, host, capfd):
    """The transposed conv becomes a sub-pixel conv2d, NHWC like the others (tlm.graph.deconv);
    one the rewrite leaves (groups 2) stays NCHW/IOHW, the only layout TOPI lowers it in."""
    from tlm.graph.importer import import_torch

    torch.manual_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        imported = import_torch(TinyUNet(up_groups=up_groups).eval(), (torch.randn(1, 3, 16, 16),))
    script = _script(imported)
    convs, transposed = _layouts_of(script, "R.nn.conv2d"), _layouts_of(script, "R.nn.conv2d_transpose")
    assert len(convs) == 4 + (up_groups == 1) and all('data_layout="NHWC"' in c for c in convs), convs
    said = [str(w.message) for w in caught if str(w.message).startswith("tlm:")]
    if up_groups == 1:
        assert not transposed and not said, said
    else:
        assert len(transposed) == 1 and 'data_layout="NCHW", kernel_layout="IOHW"' in transposed[0], transposed
        assert len(said) == 1 and "groups > 1" in said[0], said  # the fallback is said, once
    assert _warnings(capfd) == []
    compiled = _compile_untuned(imported, tmp_path, host)
    assert compiled.matches, compiled.max_abs_diff


def test_swin_compiles_in_nhwc_and_matches(tmp_path, host, capfd):
    """Swin's pooler (AdaptiveAvgPool1d, flatten) writes `squeeze(axis=[-1])`, which made TVM's
    ConvertLayout fail with std::bad_alloc. The model (its output a SwinModelOutput: the first
    field, last_hidden_state, is checked) now converts."""
    transformers = pytest.importorskip("transformers")
    from tlm.graph.importer import import_torch

    torch.manual_seed(0)
    config = transformers.SwinConfig(image_size=32, patch_size=4, embed_dim=12, depths=[2], num_heads=[2],
                                     window_size=4, mlp_ratio=2.0)
    imported = import_torch(transformers.SwinModel(config).eval(), (torch.randn(1, 3, 32, 32),))
    assert 'data_layout="NHWC"' in _script(imported)
    assert _warnings(capfd) == []
    compiled = _compile_untuned(imported, tmp_path, host)
    assert compiled.matches, compiled.max_abs_diff


def test_axes_are_written_as_layout_inference_handles_them():
    import numpy as np
    import tvm
    from tvm import relax

    from tlm.graph.layout import normalize_axes

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 1, 1), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            calls = [relax.op.squeeze(x, [-1]), relax.op.squeeze(x, [0, 1, 2, 3]), relax.op.squeeze(x, [1]),
                     relax.op.permute_dims(x, [0, -1, 1, -2]), relax.op.stack([x, x], -1), relax.op.squeeze(x, [2])]
            outs = [bb.emit(c) for c in calls]
            out = bb.emit_output(relax.Tuple(outs))
        bb.emit_func_output(out)
    before = bb.get()
    after = normalize_axes(before)
    script = after["main"].script()
    assert "axis=[3]" in script and "axis=[0, 2, 3]" in script and "axes=[0, 3, 1, 2]" in script, script
    assert "axis=4" in script and "axis=[2]" in script, script  # stack; an axis already so stays
    assert "axis=[1]" not in script and "axis=[-" not in script and "-1" not in script, script  # [1]: no unit axis
    x = tvm.runtime.tensor(np.arange(8, dtype="float32").reshape(1, 8, 1, 1))
    run = lambda mod: relax.VirtualMachine(relax.build(mod, target="llvm"), tvm.cpu())["main"](x)  # noqa: E731
    for a, b in zip(run(before), run(after)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_negative_axes_after_convs_convert_and_match(tmp_path, host, capfd):
    from tlm.graph.importer import import_torch

    torch.manual_seed(0)
    model = ConvThen(lambda y: torch.stack([y.mean(-1, keepdim=True).squeeze(-1).permute(0, -1, -2),
                                            y[:, :, :, :1].squeeze().t().unsqueeze(0)], -1))
    imported = import_torch(model.eval(), (torch.randn(1, 3, 6, 6),))
    assert 'data_layout="NHWC"' in _script(imported)
    assert _warnings(capfd) == []
    assert _compile_untuned(imported, tmp_path, host).matches


def test_a_failing_conversion_leaves_convs_unconverted_with_one_warning(tmp_path, host, capfd, monkeypatch):
    import tlm.graph.layout as layout
    from tlm.graph.importer import import_torch

    monkeypatch.setattr(layout, "normalize_axes", lambda mod: mod)  # TVM then fails on a negative permutation
    torch.manual_seed(0)
    imported = import_torch(ConvThen(lambda y: y.permute(0, -1, -3, -2)).eval(), (torch.randn(1, 3, 6, 6),))
    warned = _warnings(capfd)
    assert len(warned) == 1 and "relax.permute_dims" in warned[0] and "ConvertLayout" in warned[0], warned
    assert 'data_layout="NHWC"' not in _script(imported)
    assert _compile_untuned(imported, tmp_path, host).matches


def test_an_op_that_would_not_legalize_leaves_convs_unconverted(capfd, monkeypatch):
    import tlm.graph.layout as layout
    from tlm.graph.importer import import_torch

    monkeypatch.setattr(layout, "PINNED", {})  # the transposed conv would follow its input to NHWC
    imported = import_torch(TinyUNet(up_groups=2).eval(), (torch.randn(1, 3, 16, 16),))
    warned = _warnings(capfd)
    assert len(warned) == 1 and "relax.nn.conv2d_transpose" in warned[0] and "legalize" in warned[0], warned
    assert 'data_layout="NHWC"' not in _script(imported)


class Conv1dStack(torch.nn.Module):
    """1-D convs as audio front ends write them (strided, padded and dilated, grouped, pointwise)
    and a ConvTranspose1d between them (`up_groups=2`: one tlm.graph.deconv leaves as it is):
    [1, 4, 64] -> [1, 6, 32]."""

    def __init__(self, up_groups: int = 1):
        super().__init__()
        self.a = torch.nn.Conv1d(4, 8, 5, stride=2, padding=2)
        self.b = torch.nn.Conv1d(8, 8, 3, padding=2, dilation=2, groups=4)
        self.up = torch.nn.ConvTranspose1d(8, 8, 2, stride=2, groups=up_groups)
        self.c = torch.nn.Conv1d(8, 6, 1, stride=2)

    def forward(self, x):
        y = torch.nn.functional.gelu(self.a(x))
        return self.c(torch.relu(self.up(self.b(y))))


def test_1d_convs_run_nwc_and_match(tmp_path, host, capfd):
    """1-D convs take NWC/WIO (vectorized over channels, not strided positions), the transposed
    one too as a sub-pixel conv1d (tlm.graph.deconv); a transposed 1-D conv left as it is
    (grouped) stays NCW/IOW, the only layout TOPI lowers it in; the compiled models match."""
    from tlm.graph.importer import import_torch

    torch.manual_seed(0)
    imported = import_torch(Conv1dStack().eval(), (torch.randn(1, 4, 64),))
    script = _script(imported)
    convs, transposed = _layouts_of(script, "R.nn.conv1d"), _layouts_of(script, "R.nn.conv1d_transpose")
    assert len(convs) == 4 and all('data_layout="NWC", kernel_layout="WIO"' in c for c in convs), convs
    assert transposed == [], transposed
    assert _warnings(capfd) == []
    compiled = _compile_untuned(imported, tmp_path, host)
    assert compiled.matches, compiled.max_abs_diff
    grouped = import_torch(Conv1dStack(up_groups=2).eval(), (torch.randn(1, 4, 64),))
    transposed = _layouts_of(_script(grouped), "R.nn.conv1d_transpose")
    assert len(transposed) == 1 and 'data_layout="NCW", kernel_layout="IOW"' in transposed[0], transposed
    assert [w for w in _warnings(capfd) if "groups > 1" not in w] == []
    assert _compile_untuned(grouped, tmp_path / "grouped", host).matches
    ncw = import_torch(Conv1dStack().eval(), (torch.randn(1, 4, 64),), conv_layout="NCHW")
    assert 'data_layout="NWC"' not in _script(ncw)
