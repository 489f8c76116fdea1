"""Whole-model compile: a small CNN from a small database matches PyTorch; other targets ignored."""

import json
import os
import warnings

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
    from tlm.compiler.build import CompileConfig
    from tlm.compiler.job import compile_model
    from tlm.graph.extract import extract_tasks
    from tlm.measure.config import MeasureConfig
    from tlm.search.base import TuneConfig
    from tlm.search.tune import tune

    net, inputs = _tiny_cnn()
    tasks = extract_tasks(net, inputs, target=host)
    assert tasks
    db = str(tmp_path / "db")
    cfg = TuneConfig(batch_size=2, measure=MeasureConfig(repeat=3, min_repeat_ms=5, remeasure_top=1))
    tune(tasks[:2], "random", "2g", db, target=host, config=cfg, progress=False)
    out = tmp_path / "model.so"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = compile_model(net, inputs, db=db, target=host, output=str(out),
                              config=CompileConfig(repeat=3, min_repeat_ms=5))
    report = model.to_json()
    untuned = [r["name"] for r in model.task_rows if r["status"] == "untuned"]
    assert model.untuned_tasks == report["untuned_tasks"] == untuned and len(untuned) == len(tasks) - 2
    said = [str(w.message) for w in caught if "untuned" in str(w.message)]
    assert len(said) == (1 if untuned else 0) and all(name in said[0] for name in untuned[:5])
    for key in ("latency_ms", "pytorch_ms", "onnxruntime_ms", "max_abs_diff", "measurements", "tasks", "tuned_tasks"):
        assert key in report
    assert model.matches, report
    assert model.tuned_tasks >= 1 and model.tasks == len(tasks) and model.measurements == 4
    assert model.latency_ms > 0 and model.pytorch_ms > 0
    # `import tlm` gave TVM's pool the host's cores (TVM alone: half the logical CPUs)
    assert model.threads == int(os.environ["TVM_NUM_THREADS"]) == report["threads"]
    assert out.exists()
    # The callable takes torch tensors or numpy arrays and returns numpy.
    got = model(inputs[0])
    want = net(inputs[0]).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(model(inputs[0].numpy()), got)
    # A budget on a records directory that holds measurements already adds to them; the summary
    # line says how many were there (budget 0 there is not a zero-measurement build).
    from tlm.compiler.job import _measured_before

    assert _measured_before(db, tasks, host) == 4 and _measured_before(str(tmp_path / "none"), tasks, host) == 0
    assert model.earlier_note() == "" and report["earlier_measurements"] == 0
    model.earlier_measurements = 4
    assert "4 of them already in the records directory from an earlier run, 0 new" in model.earlier_note()


def test_packed_weights_fold_into_the_compiled_model(tmp_path, host):
    """A tuned matmul whose weight its program packs: the compile folds the packing into the
    constants, the user passes the input as before, and the output matches PyTorch."""
    import torch

    from tlm.compiler.build import CompileConfig
    from tlm.compiler.job import compile_model
    from tlm.graph.extract import extract_tasks
    from tlm.measure.database import open_db
    from tlm.measure.config import MeasureConfig
    from tlm.search.base import TuneConfig
    from tlm.search.tune import tune

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.ReLU(), torch.nn.Linear(48, 40)).eval()
    inputs = (torch.randn(1, 16, 64),)
    tasks = [t for t in extract_tasks(net, inputs, target=host) if t.mod["main"].attrs.get("layout_free_buffers")]
    assert len(tasks) == 2
    db = str(tmp_path / "db")
    cfg = TuneConfig(batch_size=4, measure=MeasureConfig(repeat=2, min_repeat_ms=5, remeasure_top=1))
    tune(tasks, "random", "4g", db, target=host, config=cfg, progress=False)
    with open_db(db) as d:
        best = [d.compile_record(t.hash, host.key) for t in tasks]
    assert all(b is not None for b in best)
    assert any("TransformLayout" in json.dumps(b.trace_json) for b in best)  # a packed program won
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = compile_model(net, inputs, db=db, target=host,
                              config=CompileConfig(repeat=2, min_repeat_ms=5, compare=False, cold_pick=0))
    assert model.matches, model.max_abs_diff
    np.testing.assert_allclose(model(inputs[0]), net(inputs[0]).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_records_of_another_target_are_ignored(tmp_path, host, matmul32):
    from tvm.s_tir import meta_schedule as ms

    from tlm.graph.target import resolve_target
    from tlm.measure.database import open_db
    from tlm.space.design import plain_json
    from tlm.space.intrin import light_tensor_intrin

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


def test_cli_compile_budget_zero_end_to_end(tmp_path, host, monkeypatch, capsys):
    """`tlm compile MODEL.onnx --budget 0 --model DIR`: every task gets the greedy program of
    the model, nothing is measured, the whole model still matches the reference."""
    import json

    import torch

    from tlm.cli import main
    from tlm.graph.extract import tasks_for_source
    from tlm.measure.database import GREEDY, open_db
    from tlm.model.lm import build_tokenizer, new_model, save_model, space_words
    from tlm.space.sampling import target_id

    monkeypatch.setenv("TLM_CACHE", str(tmp_path / "cache"))  # the default run directory goes here
    net, inputs = _tiny_cnn()
    onnx_path = str(tmp_path / "cnn.onnx")
    torch.onnx.export(net, inputs, onnx_path, dynamo=False, input_names=["x"])
    tasks = tasks_for_source(onnx_path, host).tasks
    tok = build_tokenizer(space_words(tasks, host, walks=1))
    model_dir = tmp_path / "model"
    save_model(new_model("tiny", tok.get_vocab_size(), seed=1), tok, model_dir,
               {"preset": "tiny", "target": host.config, "target_id": target_id(host)})
    argv = ["compile", onnx_path, "--budget", "0", "--model", str(model_dir), "--repeat", "3"]
    assert main(argv + ["--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["matches"] and report["measurements"] == 0 and report["budget"] == "0"
    assert report["wall_s"] > 0 and report["tune_s"] is not None and report["tuned_tasks"] == 0
    assert report["greedy_tasks"] == report["tasks"] == len(tasks)
    assert {r["status"] for r in report["task_rows"]} == {"greedy"}
    assert report["db"].startswith(str(tmp_path / "cache" / "runs"))
    with open_db(report["db"]) as db:
        assert db.count() == db.count(proposer=GREEDY) == len(tasks)
    # The table report, resumed on the same run directory (nothing new is stored).
    assert main(argv + ["--no-compare"]) == 0
    out = capsys.readouterr().out
    assert "greedy" in out and "measurements: 0, budget 0" in out and "outputs match" in out
    with open_db(report["db"]) as db:
        assert db.count() == len(tasks)
    # The Python API: tlm.compile(module, inputs, db=..., budget=..., model=...).
    import tlm
    from tlm.compiler.build import CompileConfig

    model = tlm.compile(net, inputs, db=str(tmp_path / "api-db"), budget=0, model=str(model_dir),
                        config=CompileConfig(repeat=3, min_repeat_ms=5, compare=False))
    assert model.matches and model.budget == "0" and model.measurements == 0
    assert model.greedy_tasks == model.tasks > 0
    assert "untuned" not in capsys.readouterr().err  # every task had a program
    # A database with no record for these tasks: said out loud, on one line.
    open_db(str(tmp_path / "empty")).close()
    assert main(["compile", onnx_path, "--db", str(tmp_path / "empty"), "--no-compare", "--repeat", "3"]) == 0
    err = capsys.readouterr().err
    assert f"tlm: warning: {len(tasks)} of {len(tasks)} tasks run TVM's default schedule, untuned" in err


def test_compile_needs_db_or_budget(tmp_path, capsys):
    from tlm.cli import main

    assert main(["compile", "mobilenet_v2"]) == 2
    assert "give --db" in capsys.readouterr().err
    # the first argument is checked first: an unknown workload is what is wrong, not the missing --db
    assert main(["compile", "nonexistent"]) == 2
    assert "unknown workload 'nonexistent'" in capsys.readouterr().err
    assert main(["compile", str(tmp_path / "m.onnx")]) == 2
    assert "no such ONNX file" in capsys.readouterr().err
    assert main(["compile", "mobilenet_v2", "--db", str(tmp_path), "--model", str(tmp_path)]) == 2
    assert main(["compile", "mobilenet_v2", "--budget", "lots"]) == 2


def shipped_model(host) -> str:
    """The shipped language model for this host, or a skip that says why (also test_job_outside_zoo)."""
    from tlm.errors import TlmError
    from tlm.model.lm import default_model_dir, load_model

    try:
        path = default_model_dir(host)
        load_model(path)
    except TlmError as err:
        pytest.skip(f"no usable shipped model for this host: {err}")
    return str(path)


def test_a_zoo_model_compiles_at_budget_zero_and_matches(tmp_path, host):
    """The default test run compiles a real zoo model end to end (issue 48): BERT-tiny (Hugging
    Face BertModel, 2 layers, 64 tokens, 18 tasks) through import, the layout and fusion passes,
    task extraction, the shipped model's programs at budget 0, the build and the output check.
    Each task's first choice is the model's word-by-word greedy sentence and no cost model:
    the pipeline is what is tested here, and the default pick (the cost model's best of 32
    samples) would spend ~4x longer generating (68 s against 18 s here)."""
    from tlm.compiler.build import CompileConfig
    from tlm.compiler.job import compile_model
    from tlm.search.base import TuneConfig

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = compile_model("bert_tiny-b1-s64", db=str(tmp_path / "db"), target=host, budget=0,
                              model=shipped_model(host), tune_config=TuneConfig(pick="greedy", cost_model="none"),
                              config=CompileConfig(repeat=2, min_repeat_ms=5, compare=False))
    assert model.matches, (model.max_abs_diff, model.tolerance)
    assert model.tasks >= 10 and model.greedy_tasks == model.tasks and not model.untuned_tasks
    assert model.measurements == 0


def _test_workloads() -> list[str]:
    from tlm.graph.zoo import list_workloads

    return [w.name for w in list_workloads("test")]


@pytest.mark.slow
@pytest.mark.parametrize("workload", _test_workloads())
def test_held_out_workloads_compile_and_match(workload, tmp_path, host):
    """Every held-out workload goes through tlm's passes, one random program per task (checked by
    the measurer), and compiles to a model whose output matches PyTorch."""
    from tlm.compiler.build import CompileConfig
    from tlm.compiler.job import compile_model
    from tlm.search.base import TuneConfig
    from tlm.search.tune import tune

    db = str(tmp_path / "db")
    tune(workload, "random", "1g", db, target=host, config=TuneConfig(seed=0), progress=False)
    model = compile_model(workload, db=db, target=host,
                          config=CompileConfig(repeat=1, min_repeat_ms=1, compare=False))
    assert model.matches, (model.max_abs_diff, model.tolerance)


def test_conv_weights_are_packed_at_compile_time(tmp_path, host):
    """Conv tasks are tuned unmarked (their hashes stay those of the records); the compile gives
    each conv its tuned program with the weights packed (tlm.compiler.pack), and the packed model
    matches PyTorch as the unpacked one does."""
    import tvm

    from tlm.compiler.apply import compile_database
    from tlm.compiler.build import CompileConfig
    from tlm.compiler.job import compile_model
    from tlm.compiler.pack import COMPILE_PACK_OPS, pack_records
    from tlm.graph.extract import extract_tasks, fuse, import_torch
    from tlm.graph.passes import PREPACK_OPS
    from tlm.measure.database import open_db
    from tlm.measure.config import MeasureConfig
    from tlm.search.base import TuneConfig
    from tlm.search.tune import tune

    net, inputs = _tiny_cnn()
    tasks = extract_tasks(net, inputs, target=host)
    convs = [t for t in tasks if t.kind == "conv2d"]
    assert len(convs) == 2 and all(t.mod["main"].attrs.get("layout_free_buffers") is None for t in convs)
    db = str(tmp_path / "db")
    cfg = TuneConfig(batch_size=4, measure=MeasureConfig(repeat=2, min_repeat_ms=5, remeasure_top=1))
    tune(convs, "random", "4g", db, target=host, config=cfg, progress=False)

    with open_db(db) as d:
        msdb, _rows = compile_database(d, tasks, host)
    fused = fuse(import_torch(net, inputs).mod, host, prepack=PREPACK_OPS | COMPILE_PACK_OPS)
    with host.tvm():
        pack_records(msdb, host.tvm())(fused)
    normalize = tvm.get_global_func("tvm.s_tir.meta_schedule.normalize_mod")
    packed = 0
    for gv, func in fused.functions.items():
        if isinstance(func, tvm.tirx.PrimFunc) and "conv2d" in gv.name_hint:
            assert func.attrs.get("layout_free_buffers") is not None, gv.name_hint
            rec = msdb.query_tuning_record(normalize(func), host.tvm(), gv.name_hint)
            assert rec is not None, gv.name_hint  # the tuned program, never TVM's default
            packed += "transform_layout" in str(rec.trace)
    assert packed == 2

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for pack in (True, False):
            model = compile_model(net, inputs, db=db, target=host,
                                  config=CompileConfig(repeat=2, min_repeat_ms=5, compare=False, pack_convs=pack, cold_pick=0))
            assert model.matches and model.tuned_tasks == 2, (pack, model.max_abs_diff)
            np.testing.assert_allclose(model(inputs[0]), net(inputs[0]).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_a_task_with_other_block_names_is_applied(tmp_path, host):
    """A block's name comes from the model's variables (`input_sum` in one model, `lv10_sum` in
    another) and a task's hash ignores it. One process writing budget-0 programs for both writes
    each with its own names (the design spaces were cached by hash: the second got the first's),
    and a program stored for one is applied in the other: neither is left to TVM's default
    schedule (both were, as untuned)."""
    import torch

    from tlm.compiler.build import CompileConfig
    from tlm.compiler.job import compile_model
    from tlm.graph.extract import extract_tasks
    from tlm.search.base import TuneConfig
    from tlm.search.tune import tune

    torch.manual_seed(0)
    a = torch.nn.LayerNorm(64).eval()
    b = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.LayerNorm(64)).eval()
    x = (torch.randn(1, 24, 64),)
    (ln_a,) = [t for t in extract_tasks(a, x, target=host) if t.kind == "layer_norm"]
    tasks_b = extract_tasks(b, x, target=host)
    (ln_b,) = [t for t in tasks_b if t.kind == "layer_norm"]
    assert ln_a.hash == ln_b.hash and ln_a.mod_json != ln_b.mod_json
    cfg = dict(target=host, progress=False, model=shipped_model(host))
    tune([ln_a], "tlm", 0, str(tmp_path / "db-a"), config=TuneConfig(pick="greedy", cost_model="none"), **cfg)
    tune(tasks_b, "tlm", 0, str(tmp_path / "db-b"), config=TuneConfig(pick="greedy", cost_model="none"), **cfg)
    build = CompileConfig(repeat=1, min_repeat_ms=1, compare=False)
    for db in ("db-b", "db-a"):  # its own program; the other model's (A's names, in A's IR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # db-a has no program of b's other tasks: untuned, said
            model = compile_model(b, x, db=str(tmp_path / db), target=host, config=build)
        assert model.matches
        (row,) = [r for r in model.task_rows if r["hash"] == ln_b.hash]
        assert row["status"] == "greedy", (db, row)


def test_a_packing_that_would_lose_values_is_left_out(host):
    """RewriteLayout takes a weight's packed layout from the region the program reads: a conv
    padded to 16 channels whose bias is added in its slice's block (12 channels kept) reads 12 of
    the 16 values, and the packing wrote `packed[c % 12] = bias[c]` for all 16 (the model came out
    wrong). Such a program keeps its weights as they are; with the bias added over all 16 it packs."""
    import torch
    import tvm

    from tlm.compiler.pack import packed_schedule
    from tlm.graph.extract import load

    _, tasks = load(torch.nn.Conv2d(16, 12, 3, padding=1).eval(), (torch.randn(1, 16, 8, 8),), host)
    task = next(t for t in tasks if t.name == "fused_conv2d_add_strided_slice")
    marked = tvm.IRModule({"main": task.mod["main"].with_attr("layout_free_buffers", [1, 2])})
    sch = tvm.s_tir.Schedule(task.mod)
    assert packed_schedule(marked, sch.trace)[1]
    sch.compute_inline(sch.get_sblock("T_add"))
    packed, ok = packed_schedule(marked, sch.trace)
    assert not ok and "layout_rewrite_preproc" not in packed.mod.script()
