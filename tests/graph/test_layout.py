"""Conv layout passes (tlm.graph.layout): zero pads fold into the convs after them, convs run in
NHWC with ReLU6 carried through (no transpose pairs around activations), and compiled models
built either way match PyTorch; models without a 2-D conv are left exactly as they were."""

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
                                    config=CompileConfig(repeat=1, min_repeat_ms=1, compare=False))
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
