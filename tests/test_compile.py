"""Whole-model compile: a small CNN from a small database matches PyTorch; other targets ignored."""

import numpy as np
import pytest

pytestmark = pytest.mark.tvm


def _tiny_cnn():
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4),
    ).eval()
    return net, (torch.randn(1, 3, 16, 16),)


def test_small_cnn_from_small_db(tmp_path, host):
    from tlm.compile import CompileConfig, compile_model
    from tlm.graph import extract_tasks
    from tlm.measure import MeasureConfig
    from tlm.tune import TuneConfig, tune

    net, inputs = _tiny_cnn()
    tasks = extract_tasks(net, inputs, target=host)
    assert tasks
    db = str(tmp_path / "db")
    cfg = TuneConfig(batch_size=2, measure=MeasureConfig(repeat=3, min_repeat_ms=5, remeasure_top=1))
    tune(tasks[:2], "random", "2g", db, target=host, config=cfg, progress=False)
    out = tmp_path / "model.so"
    model = compile_model(net, inputs, db=db, target=host, output=str(out),
                          config=CompileConfig(repeat=3, min_repeat_ms=5))
    report = model.to_json()
    for key in ("latency_ms", "pytorch_ms", "onnxruntime_ms", "max_abs_diff", "measurements", "tasks", "tuned_tasks"):
        assert key in report
    assert model.matches, report
    assert model.tuned_tasks >= 1 and model.tasks == len(tasks) and model.measurements == 4
    assert model.latency_ms > 0 and model.pytorch_ms > 0
    assert out.exists()
    # The callable takes torch tensors or numpy arrays and returns numpy.
    got = model(inputs[0])
    want = net(inputs[0]).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(model(inputs[0].numpy()), got)


def test_records_of_another_target_are_ignored(tmp_path, host, matmul32):
    from tvm.s_tir import meta_schedule as ms

    from tlm.database import open_db
    from tlm.intrin import light_tensor_intrin
    from tlm.measure import plain_json
    from tlm.target import resolve_target

    light_tensor_intrin()
    other = resolve_target({**host.config, "num-cores": host.cores + 7})
    assert other.key != host.key
    ctx = ms.TuneContext(mod=matmul32.mod, target=other.tvm(), space_generator="post-order-apply")
    trace = plain_json(ctx.generate_design_space()[0].trace.as_json())
    with open_db(str(tmp_path / "db")) as db:
        db.add_record(matmul32, other.key, trace, [1e-9])
        assert db.best(matmul32.hash, host.key) is None
        assert len(db.to_metaschedule(host)) == 0
        assert len(db.to_metaschedule(other)) == 1


def test_missing_db_is_an_error(tmp_path):
    from tlm.cli import main

    assert main(["compile", "mobilenet_v2", "--db", str(tmp_path / "nope")]) == 2
