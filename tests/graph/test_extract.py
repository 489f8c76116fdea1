"""Model import (tlm.graph.importer) and task extraction (tlm.graph.extract) on real TVM, PyTorch and ONNX paths."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from tlm.errors import TlmError
from tlm.graph.extract import extract_from_relax, tasks_for_source, training_tasks
from tlm.graph.importer import import_onnx, import_torch

pytestmark = pytest.mark.tvm


class SmallNet(torch.nn.Module):
    """conv(bias) -> relu -> conv -> relu -> global pool -> linear; no batch norm, so the
    ONNX exporter and torch.export see the same graph."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.c2(torch.relu(self.c1(x))))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


@pytest.fixture(scope="module")
def small_onnx(tmp_path_factory):
    torch.manual_seed(0)
    model = SmallNet().eval()
    x = torch.randn(1, 3, 16, 16)
    path = str(tmp_path_factory.mktemp("onnx") / "small.onnx")
    torch.onnx.export(model, (x,), path, dynamo=False, input_names=["x"])
    return model, x, path


def test_api_extracts_tasks_from_a_users_module(host):
    import tlm

    torch.manual_seed(0)
    tasks = tlm.extract_tasks(SmallNet(), (torch.randn(1, 3, 16, 16),))
    kinds = {t.kind for t in tasks}
    assert {"conv2d", "matmul"} <= kinds
    for t in tasks:
        assert len(t.hash) == 16 and t.weight >= 1 and t.args
    convs = [t for t in tasks if t.kind == "conv2d"]
    assert all("relu" in t.name for t in convs)  # the activation is fused into the conv


def test_onnx_and_pytorch_give_the_same_task_hashes(small_onnx, host):
    model, x, path = small_onnx
    from_torch = extract_from_relax(import_torch(model, (x,)).mod, host)
    from_onnx = extract_from_relax(import_onnx(path).mod, host)
    heavy = lambda ts: {t.hash for t in ts if t.kind in ("conv2d", "matmul")}  # noqa: E731
    assert heavy(from_torch) and heavy(from_torch) == heavy(from_onnx)


def test_onnx_reference_matches_pytorch(small_onnx):
    model, x, path = small_onnx
    imported = import_onnx(path)
    ref = imported.reference([x.numpy()])
    np.testing.assert_allclose(ref, model(x).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_imported_model_compiles_and_matches_pytorch(host):
    """The untuned Relax module (the input of every later compile) computes what PyTorch does."""
    import tvm
    from tvm import relax

    torch.manual_seed(0)
    imported = import_torch(SmallNet(), (torch.randn(1, 3, 16, 16),))
    ex = relax.build(imported.mod, target=host.tvm())
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(x) for x in imported.inputs]).numpy()
    np.testing.assert_allclose(out, imported.reference(imported.inputs), rtol=1e-4, atol=1e-5)


HASH_SCRIPT = """
import json, sys, torch
sys.path.insert(0, {tests!r})
from test_extract import SmallNet
import tlm
torch.manual_seed(0)
print(json.dumps(sorted(t.hash for t in tlm.extract_tasks(SmallNet(), (torch.randn(1, 3, 16, 16),)))))
"""


def test_every_cpu_of_an_architecture_gets_the_same_tasks():
    """TargetInfo.extraction_key drops the LLVM CPU and cores: the corpus' task archive of one
    CPU serves every other CPU of its architecture (tlm.search.collect.tasks_archive)."""
    from tlm.graph.target import resolve_target

    torch.manual_seed(0)
    imported = import_torch(SmallNet(), (torch.randn(1, 3, 16, 16),))
    base = {"kind": "llvm", "mtriple": "x86_64-unknown-linux-gnu"}
    targets = [resolve_target({**base, "mcpu": cpu, "num-cores": n})
               for cpu, n in (("znver3", 2), ("icelake-server", 4), ("znver5", 2))]
    got = [[(t.hash, t.weight, t.mod_json) for t in extract_from_relax(imported.mod, info)] for info in targets]
    assert got[0] and got[0] == got[1] == got[2]
    assert len({info.extraction_key for info in targets}) == 1
    assert resolve_target("cuda").extraction_key != targets[0].extraction_key


def test_task_hashes_are_stable_across_processes():
    script = HASH_SCRIPT.format(tests=os.path.dirname(__file__))
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
            for _ in range(2)]
    first, second = (json.loads(r.stdout.strip().splitlines()[-1]) for r in runs)
    assert first and first == second


def test_tasks_are_cached_per_source_and_target(tmp_path, monkeypatch, host):
    monkeypatch.setenv("TLM_CACHE", str(tmp_path))
    first = tasks_for_source("dcgan-b1", host)
    assert len(list((tmp_path / "tasks").glob("*.json"))) == 1
    second = tasks_for_source("dcgan-b1", host)
    assert [t.hash for t in first.tasks] == [t.hash for t in second.tasks]
    assert second.tasks[0].mod is not None  # the TIR survives the cache
    other = tasks_for_source("dcgan-b1", {"kind": "llvm", "mcpu": "haswell", "num-cores": 2})
    assert len(list((tmp_path / "tasks").glob("*.json"))) == 2
    assert other.target.cpu == "haswell"


def test_a_corrupt_cache_entry_is_rebuilt(tmp_path, monkeypatch, host):
    monkeypatch.setenv("TLM_CACHE", str(tmp_path))
    first = tasks_for_source("dcgan-b1", host)
    (entry,) = (tmp_path / "tasks").glob("*.json")
    entry.write_text("{not json")
    again = tasks_for_source("dcgan-b1", host)
    assert [t.hash for t in again.tasks] == [t.hash for t in first.tasks]


def test_load_imports_once_and_gives_the_cached_tasks(tmp_path, monkeypatch, small_onnx, host):
    import tlm.graph.extract as extract

    model, x, path = small_onnx
    monkeypatch.setenv("TLM_CACHE", str(tmp_path))
    calls, real = [], extract.import_source
    monkeypatch.setattr(extract, "import_source", lambda source: calls.append(source) or real(source))
    imported, tasks = extract.load(path, target=host)  # cache miss: one import serves both
    assert calls == [path] and imported.onnx_path == path
    assert [t.hash for t in tasks] == [t.hash for t in extract.cached_tasks(path, host).tasks]
    _, from_module = extract.load(model, (x,), target=host)
    assert sorted(t.hash for t in from_module) == sorted(t.hash for t in tasks)
    with pytest.raises(TlmError, match="example_inputs"):
        extract.load(model, target=host)


def test_resnet_50_convs_carry_their_batch_norm(host):
    tasks = tasks_for_source("resnet_50", host).tasks
    convs = [t for t in tasks if t.kind == "conv2d"]
    assert 23 <= len(convs) <= 27
    # batch norm (subtract/divide/multiply/add after decomposition) lives in the conv epilogues
    assert all({"subtract", "divide", "multiply"} <= {w.rstrip("0123456789") for w in t.name.split("_")}
               for t in convs)
    assert not any("batch_norm" in t.name for t in tasks)
    assert sum(t.weight for t in convs) == 53  # every conv call of ResNet-50 is a conv task call


def test_bert_base_has_matmul_softmax_layer_norm(host):
    tasks = tasks_for_source("bert_base", host).tasks
    kinds = {t.kind for t in tasks}
    assert {"matmul", "softmax", "layer_norm"} <= kinds


def test_test_workload_tasks_never_appear_in_training_lists(host):
    # ResNet-18 (train) shares its stem conv and max pool with ResNet-50 (test).
    test_hashes = {t.hash for t in tasks_for_source("resnet_50", host).tasks}
    train_all = {t.hash for t in tasks_for_source("resnet_18-b1-i224", host).tasks}
    assert train_all & test_hashes, "the two models should share some subgraphs"
    train = training_tasks(["resnet_18-b1-i224"], ["resnet_50"], host)
    assert train and not ({t.hash for t in train} & test_hashes)
    assert {t.hash for t in train} == train_all - test_hashes


@pytest.mark.slow
def test_held_out_set_is_disjoint_from_every_training_workload(host):
    from tlm.graph.zoo import list_workloads

    test_hashes = {t.hash for w in list_workloads("test") for t in tasks_for_source(w.name, host).tasks}
    train = training_tasks([w.name for w in list_workloads("train")[:20]],
                           [w.name for w in list_workloads("test")], host)
    assert not ({t.hash for t in train} & test_hashes)


def test_bad_sources_raise_one_line_errors(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not a protobuf")
    for source in ["no_such_model", str(tmp_path / "missing.onnx"), str(bad)]:
        with pytest.raises(TlmError) as info:
            tasks_for_source(source)
        assert "\n" not in str(info.value)


class DataDependent(torch.nn.Module):
    def forward(self, x):
        return x if x.sum() > 0 else -x


class UsesFFT(torch.nn.Module):
    def forward(self, x):
        return torch.fft.fft(x).abs()  # a complex modulus: no rewrite (tlm.graph.decompose takes .real/.imag apart)


def test_model_that_does_not_export_is_a_clean_error():
    with pytest.raises(TlmError, match="does not export"):
        import_torch(DataDependent(), (torch.randn(4, 8),))


def test_unsupported_operator_is_a_clean_error(tmp_path):
    with pytest.raises(TlmError, match="unsupported operator"):
        import_torch(UsesFFT(), (torch.randn(4, 8),))
    from onnx import TensorProto, helper

    node = helper.make_node("DFT", ["x"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])])
    path = tmp_path / "dft.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    with pytest.raises(TlmError, match="unsupported operator"):
        import_onnx(str(path))


def _pad_from_shape_onnx(path) -> None:
    """y = Reshape(Pad(x, pads computed from x's shape), [-1, 4]) + 1 on a (2, 7) input: the pads
    are static, but TVM's importer sees a dynamic Pad (as in Swin's and MobileViT's exports)."""
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "i1"], ["w"], axis=0),
             helper.make_node("Mod", ["w", "four"], ["r"]), helper.make_node("Sub", ["four", "r"], ["p"]),
             helper.make_node("Concat", ["zeros3", "p"], ["pads"], axis=0), helper.make_node("Pad", ["x", "pads"], ["xp"]),
             helper.make_node("Reshape", ["xp", "shape"], ["y0"]), helper.make_node("Add", ["y0", "one"], ["y"])]
    inits = [numpy_helper.from_array(np.array(v, dt), n) for n, v, dt in
             [("i1", [1], np.int64), ("four", [4], np.int64), ("zeros3", [0, 0, 0], np.int64),
              ("shape", [-1, 4], np.int64), ("one", [1.0], np.float32)]]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 7])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())


def test_an_onnx_file_the_importer_refuses_is_imported_after_constant_folding(tmp_path):
    import tvm
    from tvm import relax

    path = tmp_path / "pad.onnx"
    _pad_from_shape_onnx(path)
    with pytest.warns(UserWarning, match="constant folding"):
        imported = import_onnx(str(path))
    vm = relax.VirtualMachine(tvm.compile(imported.mod, target="llvm"), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(imported.inputs[0])).numpy()
    np.testing.assert_allclose(got, imported.reference(imported.inputs), rtol=1e-6)
