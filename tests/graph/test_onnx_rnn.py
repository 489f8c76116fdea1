"""ONNX LSTM, GRU and RNN through tlm's converters (tlm.graph.onnx_rnn): every output against ONNX
Runtime, for PyTorch's exports and for nodes written by hand with what PyTorch never writes
(peepholes, clip, batch-first layout, initial states, GRU's linear_before_reset=0, activation
functions with parameters); what is not supported is refused in one line."""

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.tvm


def _run_both(path: str, feeds: dict, reference: bool = True):
    """(tlm's outputs, ONNX Runtime's or None) for the model at `path` on `feeds`."""
    import onnxruntime as ort
    import tvm
    from tvm import relax

    from tlm.graph.importer import import_onnx

    imported = import_onnx(path)
    vm = relax.VirtualMachine(tvm.compile(imported.mod, target="llvm"), tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(v) for v in feeds.values()])
    ours = [out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out]
    if not reference:
        return ours, None
    return ours, ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)


def _check(path: str, feeds: dict, ref=None) -> None:
    ours, ort_ref = _run_both(path, feeds, reference=ref is None)
    ref = ort_ref if ref is None else ref
    assert len(ours) == len(ref)
    for a, b in zip(ours, ref):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn"])
def test_pytorch_exports_match_onnx_runtime(kind, tmp_path):
    torch.manual_seed(0)
    module = {"lstm": torch.nn.LSTM(8, 16, num_layers=2, bidirectional=True),
              "gru": torch.nn.GRU(8, 16, batch_first=True, bidirectional=True),
              "rnn": torch.nn.RNN(8, 16, nonlinearity="relu")}[kind].eval()
    x = torch.randn(2, 5, 8) if kind == "gru" else torch.randn(5, 2, 8)
    path = str(tmp_path / f"{kind}.onnx")
    with pytest.warns(Warning):  # the exporter's own warnings about batch sizes
        torch.onnx.export(module, (x,), path, dynamo=False, input_names=["x"])
    _check(path, {"x": x.numpy()})


def _node_model(path: str, op: str, attrs: dict, *, batch_first: bool = False, peepholes: bool = False,
                states: bool = True, lengths=None, seq: int = 4, batch: int = 3, size: int = 5, hidden: int = 6):
    """One ONNX `op` node with random constant weights; inputs x (and initial states)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    inits = {"W": rng.standard_normal((dirs, gates * hidden, size)), "R": rng.standard_normal((dirs, gates * hidden, hidden)),
             "B": rng.standard_normal((dirs, 2 * gates * hidden))}
    if lengths is not None:
        inits["L"] = np.asarray(lengths, dtype=np.int32)
    if peepholes:
        inits["P"] = rng.standard_normal((dirs, 3 * hidden))
    x_shape = [batch, seq, size] if batch_first else [seq, batch, size]
    s_shape = [batch, dirs, hidden] if batch_first else [dirs, batch, hidden]
    graph_inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
    names = ["x", "W", "R", "B", "L" if lengths is not None else ""]
    if states:
        names.append("h0")
        graph_inputs.append(helper.make_tensor_value_info("h0", TensorProto.FLOAT, s_shape))
        if op == "LSTM":
            names.append("c0")
            graph_inputs.append(helper.make_tensor_value_info("c0", TensorProto.FLOAT, s_shape))
    elif peepholes:
        names += ["", ""]
    if peepholes:
        names.append("P")
    outs = ["y", "y_h"] + (["y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, names, outs, hidden_size=hidden, layout=int(batch_first), **attrs)
    y_shape = [batch, seq, dirs, hidden] if batch_first else [seq, dirs, batch, hidden]
    graph = helper.make_graph(
        [node], op.lower(), graph_inputs,
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, y_shape if o == "y" else s_shape) for o in outs],
        [numpy_helper.from_array(v.astype(np.int32 if k == "L" else np.float32) * (1 if k == "L" else 0.5), k)
         for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    onnx.save(model, path)
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    if states:
        feeds["h0"] = rng.standard_normal(s_shape).astype(np.float32)
        if op == "LSTM":
            feeds["c0"] = rng.standard_normal(s_shape).astype(np.float32)
    return feeds


CASES = [
    ("LSTM", dict(direction="bidirectional"), dict(peepholes=True)),
    ("LSTM", dict(direction="reverse", clip=0.7), dict(batch_first=True)),
    ("LSTM", dict(activations=["HardSigmoid", "LeakyRelu", "Affine"], activation_alpha=[0.3, 0.05, 2.0],
                  activation_beta=[0.4, -0.5]), dict(states=False)),
    ("GRU", dict(direction="bidirectional", linear_before_reset=0), {}),
    ("GRU", dict(linear_before_reset=1, activations=["Sigmoid", "ScaledTanh"], activation_alpha=[1.5],
                 activation_beta=[0.5]), dict(batch_first=True)),
    ("RNN", dict(direction="bidirectional", activations=["Elu", "Softsign"]), {}),
    ("RNN", dict(activations=["Softplus"]), dict(lengths=[4, 4, 4])),
    ("RNN", dict(direction="reverse", activations=["ThresholdedRelu"], activation_alpha=[0.2]), {}),
]


@pytest.mark.parametrize("op,attrs,shape", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_hand_written_nodes_match_onnx_runtime(op, attrs, shape, tmp_path):
    path = str(tmp_path / "m.onnx")
    feeds = _node_model(path, op, attrs, **shape)
    if not shape.get("batch_first"):
        _check(path, feeds)
        return
    # ONNX Runtime refuses layout=1: its reference is the same node in layout 0 on transposed inputs
    twin = str(tmp_path / "twin.onnx")
    _node_model(twin, op, attrs, **{**shape, "batch_first": False})
    _, ref = _run_both(twin, {k: np.ascontiguousarray(v.swapaxes(0, 1)) for k, v in feeds.items()})
    ref = [np.ascontiguousarray(ref[0].transpose(2, 0, 1, 3))] + [np.ascontiguousarray(r.swapaxes(0, 1)) for r in ref[1:]]
    _check(path, feeds, ref)
    # what the compiled model's check runs instead: the node in layout 0 between transposes, in one graph
    import onnxruntime as ort

    from tlm.graph.onnx_rnn import runtime_model

    model, batch_first = runtime_model(path)
    assert batch_first == [op] and isinstance(model, bytes)
    for a, b in zip(ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds), ref):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op,attrs,shape,words", [
    ("LSTM", {}, dict(lengths=[4, 2, 3]), "sequence_lens"),
    ("LSTM", dict(input_forget=1), {}, "input_forget"),
])
def test_unsupported_forms_are_refused_in_one_line(op, attrs, shape, words, tmp_path, capfd):
    import gc

    from tlm.errors import TlmError
    from tlm.graph.importer import import_onnx

    path = str(tmp_path / "m.onnx")
    _node_model(path, op, attrs, **shape)
    capfd.readouterr()
    with pytest.raises(TlmError) as err:
        import_onnx(path)
    assert words in str(err.value) and "\n" not in str(err.value)
    del err
    gc.collect()
    out, log = capfd.readouterr()  # nothing beside the error: TVM's print and its builder's warning
    assert "Error converting" not in out and "BlockBuilder" not in log


def test_the_importer_is_left_as_it_was():
    """The converters are lent for an import only: TVM's own table is back afterwards."""
    from tvm.relax.frontend.onnx import onnx_frontend

    from tlm.graph.onnx_rnn import rnn_converters

    before = onnx_frontend._get_convert_map
    with rnn_converters():
        assert "LSTM" in onnx_frontend._get_convert_map()
    assert onnx_frontend._get_convert_map is before


def test_a_batch_first_model_is_checked_against_its_layout0_twin(tmp_path):
    """ONNX Runtime refuses layout 1, which tlm converts: the reference and the ONNX Runtime
    contender run the layout-0 twin, said in a warning, and the compiled model matches it."""
    import tvm
    from tvm import relax

    from tlm.compiler.contenders import onnxruntime_runner
    from tlm.errors import TlmWarning
    from tlm.graph.importer import import_onnx
    from tlm.graph.onnx_rnn import runtime_model

    path = str(tmp_path / "m.onnx")
    _node_model(path, "GRU", dict(direction="bidirectional"), batch_first=True)
    assert runtime_model(str(tmp_path / "m.onnx"))[1] == ["GRU"]
    imported = import_onnx(path)
    with pytest.warns(TlmWarning, match="layout=1"):
        want = imported.reference(imported.inputs)
    vm = relax.VirtualMachine(tvm.compile(imported.mod, target="llvm"), tvm.cpu())
    got = vm["main"](*[tvm.runtime.tensor(x) for x in imported.inputs])
    np.testing.assert_allclose(got[0].numpy(), want, rtol=1e-5, atol=1e-5)
    run, note = onnxruntime_runner(imported, threads=1)
    assert note is None and np.array_equal(run()[0], want)
    plain = str(tmp_path / "plain.onnx")
    _node_model(plain, "GRU", {})
    assert runtime_model(plain) == (plain, [])


def test_a_reference_onnx_runtime_cannot_run_is_said_in_one_line(tmp_path, monkeypatch):
    """Where ONNX Runtime refuses a model tlm imported, nothing can check the compiled model: one
    line says so. (ONNX Runtime's refusal is simulated: a stand-in session that raises.)"""
    import onnxruntime as ort

    from tlm.errors import TlmError
    from tlm.graph.importer import import_onnx

    path = str(tmp_path / "m.onnx")
    _node_model(path, "LSTM", {})
    imported = import_onnx(path)

    def refuse(*args, **kwargs):
        raise RuntimeError("[ONNXRuntimeError] : 1 : FAIL : Load model failed")

    monkeypatch.setattr(ort, "InferenceSession", refuse)
    with pytest.raises(TlmError) as err:
        imported.reference(imported.inputs)
    assert "ONNX Runtime" in str(err.value) and "Load model failed" in str(err.value) and "\n" not in str(err.value)
