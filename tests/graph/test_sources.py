"""Many sources' tasks extracted in worker processes (tlm.graph.sources.tasks_for_sources), on real
TVM and PyTorch."""

import pytest
import torch

from tlm.errors import TlmError
from tlm.graph.extract import extract_from_relax, tasks_for_source
from tlm.graph.importer import import_onnx
from tlm.graph.sources import tasks_for_sources

pytestmark = pytest.mark.tvm


@pytest.fixture()
def tiny_onnx(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.ReLU(), torch.nn.Linear(24, 8)).eval()
    path = str(tmp_path / "tiny.onnx")
    torch.onnx.export(model, (torch.randn(2, 16),), path, dynamo=False, input_names=["x"])
    return path


def test_uncached_sources_are_extracted_by_workers_into_the_cache(tmp_path, monkeypatch, tiny_onnx, host):
    monkeypatch.setenv("TLM_CACHE", str(tmp_path / "cache"))
    sets = tasks_for_sources(["dcgan-b1", tiny_onnx, "dcgan-b1"], host, jobs=2)
    assert len(list((tmp_path / "cache" / "tasks").glob("*.json"))) == 2  # written by the workers
    assert [s.source for s in sets] == ["dcgan-b1", tiny_onnx, "dcgan-b1"]
    here = extract_from_relax(import_onnx(tiny_onnx).mod, host)
    assert [t.hash for t in sets[1].tasks] == [t.hash for t in here]
    assert [t.hash for t in sets[0].tasks] == [t.hash for t in tasks_for_source("dcgan-b1", host).tasks]
    assert sets[0].tasks[0].mod is not None


def test_a_bad_source_is_one_line_before_anything_is_extracted(tmp_path, monkeypatch, host):
    monkeypatch.setenv("TLM_CACHE", str(tmp_path / "cache"))
    with pytest.raises(TlmError) as err:
        tasks_for_sources(["dcgan-b1", "no_such_model-b1"], host)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "cache" / "tasks").exists()


def test_a_source_that_fails_in_a_worker_is_one_line(tmp_path, monkeypatch, tiny_onnx, host):
    monkeypatch.setenv("TLM_CACHE", str(tmp_path / "cache"))
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not an onnx model")
    with pytest.raises(TlmError) as err:
        tasks_for_sources([tiny_onnx, str(broken)], host)
    assert "\n" not in str(err.value) and str(broken) in str(err.value)
