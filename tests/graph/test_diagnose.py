"""Failures in one line naming the stage, the operator, its shapes and layouts (tlm.graph.diagnose;
issue 48, item 5): never TVM's last line (`# Metadata omitted ...`), never a traceback."""

import re

import numpy as np
import pytest
import torch

from tlm.errors import TlmError
from tlm.graph import diagnose

pytestmark = pytest.mark.tvm


def _transposed_conv_nhwc(layout="NHWC"):
    """A Relax module whose transposed convolution is in a layout that nothing legalizes (what
    the NHWC conversion once made of a U-Net's decoder, issue 48 item 1); legal in NCHW."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 8, 16) if layout == "NHWC" else (1, 16, 8, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            w = relax.const(np.ones((16, 8, 2, 2), "float32"))
            y = bb.emit(relax.op.nn.conv2d_transpose(x, w, strides=(2, 2), data_layout=layout, kernel_layout="IOHW"))
            out = bb.emit_output(relax.op.nn.relu(y))
        bb.emit_func_output(out)
    return bb.get()


def _imported(mod):
    from tlm.graph.importer import ImportedModel

    return ImportedModel("hand-built", mod, [np.ones((1, 8, 8, 16), "float32")], lambda inputs: None)


def _one_line(text: str) -> None:
    assert "\n" not in text and "Metadata omitted" not in text and "Traceback" not in text, text


def test_an_operator_nothing_legalizes_is_named_with_shapes_layouts_and_stage(tmp_path, host):
    from tlm.compiler.build import compile_imported
    from tlm.measure.database import open_db

    open_db(str(tmp_path / "db")).close()
    with pytest.raises(TlmError) as info:
        compile_imported(_imported(_transposed_conv_nhwc()), str(tmp_path / "db"), target=host)
    msg = str(info.value)
    _one_line(msg)
    # refused by the build, or earlier, by task extraction (`check_lowered`)
    assert re.match(r"(whole-model build|task extraction) failed in legalization at relax\.nn\.conv2d_transpose\(",
                    msg), msg
    for part in ("float32[1, 8, 8, 16]", "float32[16, 8, 2, 2]", "data_layout=NHWC", "kernel_layout=IOHW",
                 "strides=[2, 2]", "cannot emit"):
        assert part in msg, (part, msg)


def test_the_cli_prints_the_build_failure_in_one_line(tmp_path, host, monkeypatch, capsys):
    """`tlm compile` on a model whose build fails: exit 2, one `tlm: error:` line, no traceback."""
    from tlm.cli import main
    from tlm.measure.database import open_db

    loaded = (_imported(_transposed_conv_nhwc()), [])  # no tasks: the build meets the op
    monkeypatch.setattr("tlm.graph.extract.load", lambda *args, **kwargs: loaded)
    open_db(str(tmp_path / "db")).close()
    assert main(["compile", "dcgan-b1", "--db", str(tmp_path / "db"), "--no-compare"]) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("tlm: error: whole-model build failed in legalization at relax.nn.conv2d_transpose(")
    assert "data_layout=NHWC" in lines[0]


class Quantiles(torch.nn.Module):  # lgamma: no conversion in TVM's importer, none in tlm.graph.decompose
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.lgamma(torch.sigmoid(self.proj(x)))


def test_a_torch_operator_the_importer_lacks_is_named_with_shapes_and_source():
    import tlm

    with pytest.raises(TlmError) as info:
        tlm.compile(Quantiles(), (torch.randn(1, 4, 8),), budget=0)  # fails in the import, before any tuning
    msg = str(info.value)
    _one_line(msg)
    assert msg.startswith("import failed: unsupported operator aten.lgamma.default("), msg
    assert "float32[1, 4, 8]" in msg and "test_diagnose.py:" in msg, msg


def test_an_onnx_operator_the_importer_lacks_fails_in_one_cli_line(tmp_path, capsys):
    from onnx import TensorProto, helper

    from tlm.cli import main

    node = helper.make_node("DFT", ["x"], ["y"], name="spectrum")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])])
    path = tmp_path / "dft.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    assert main(["tasks", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"tlm: error: import failed: unsupported operator DFT(float32[4, 8]) (node spectrum) in {path}")


def test_reason_drops_tvm_noise():
    err = RuntimeError("CodeGenVM cannot emit this Relax operator directly. Run the lowering pass.\n"
                       "Offending call:\nR.nn.conv2d_transpose(x, metadata[\"ir.GenericConst\"][0])\n"
                       "# Metadata omitted. Use show_meta=True in script() method to show it.")
    assert diagnose.reason(err) == "CodeGenVM cannot emit this Relax operator directly. Run the lowering pass."
    assert diagnose.quoted_op(err) == "relax.nn.conv2d_transpose"
    assert diagnose.reason(RuntimeError("")) == "RuntimeError"


def test_the_call_being_legalized_names_the_operator():
    """A legalization (or any pass) that raises while it holds a call: its operator and shapes."""
    mod = _transposed_conv_nhwc()
    (call,) = diagnose.op_calls(mod, "relax.nn.conv2d_transpose")

    def legalize(bb, call):  # stands in for a TVM or tlm legalization function
        raise ValueError("only NCHW is supported")

    try:
        legalize(None, call)
    except ValueError as err:
        msg = diagnose.explain(err, "whole-model build", diagnose.BUILD)
    assert msg.startswith("whole-model build failed in legalization at relax.nn.conv2d_transpose(float32[1, 8, 8, 16]")
    assert msg.endswith(": only NCHW is supported")


def test_a_fused_module_with_an_unlowered_call_is_refused_before_any_tuning(host):
    """`check_lowered`: what task extraction can run on its fused module, so that a model that
    cannot build is refused in one line before it is tuned."""
    from tlm.graph.extract import fuse

    fused = fuse(_transposed_conv_nhwc(), host)
    with pytest.raises(TlmError) as info:
        diagnose.check_lowered(fused)
    msg = str(info.value)
    _one_line(msg)
    assert msg.startswith("task extraction failed in legalization at relax.nn.conv2d_transpose(float32[1, 8, 8, 16]")
    assert "kernel_layout=IOHW" in msg
    diagnose.check_lowered(fuse(_transposed_conv_nhwc(layout="NCHW"), host))  # legal in NCHW: nothing to say


def test_first_line_skips_tvm_metadata_note():
    from tlm.errors import first_line

    err = RuntimeError("CodeGenVM cannot emit this.\n# Metadata omitted. Use show_meta=True in script() method to show it.")
    assert first_line(err) == "CodeGenVM cannot emit this."


def test_an_operator_object_in_tvms_message_becomes_its_name():
    """TVM writes `ir.Op(span=None, ty=ir.Type(span=None), name="relax.log", ...)` into its
    messages (DeBERTa's log of int64 positions showed it): the one line names `relax.log`."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4,), "int64"))
    with pytest.raises(Exception) as info:
        with bb.function("main", [x]):
            bb.emit_func_output(bb.emit(relax.op.log(x)))
    text = diagnose.reason(info.value)
    assert text.startswith("relax.log requires the input tensor to have float dtype"), text
    assert "ir.Op(" not in text
