"""Whole-model GPU plans (tlm.compiler.gpu_plan), built here without a GPU.

The walk, the aliasing of views, the regenerated constants and the step order are tested for
real by building the same plan for LLVM and executing it step by step (`run_plan_cpu`): its
output must equal TVM's VM's on the same module. The CUDA plan of the same model is checked
for what the GPU machine needs (launches, buffers defined before use, seeds instead of
weights, its size), and compiled with nvcc when nvcc is here.
"""

import argparse
import json
import lzma
import random

import numpy as np
import pytest

from tlm.errors import TlmError

pytestmark = pytest.mark.tvm


@pytest.fixture(scope="module")
def mlp():
    """x [4, 8, 64] -> Linear(64, 256) + ReLU -> view [4, 2048] -> Linear(2048, 16): a view of
    the input, a view of an intermediate, one weight over 64 KiB (2048 x 16 floats)."""
    import torch

    from tlm.graph.importer import import_torch

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(64, 256), torch.nn.Linear(2048, 16)

        def forward(self, x):
            return self.b(torch.relu(self.a(x)).reshape(4, 2048))

    torch.manual_seed(0)
    return import_torch(MLP(), (torch.randn(4, 8, 64),))


@pytest.fixture(scope="module")
def cuda_plan(mlp, tmp_path_factory):
    from tlm.compiler.gpu_plan import build_plan

    out = tmp_path_factory.mktemp("plan")
    return build_plan(None, target="h100", imported=mlp, out=out), out


def _defined_before_use(meta) -> None:
    """Inputs and constants exist from the start; an intermediate once a step wrote it; a view
    is its base's memory, so it is defined when its base is."""
    bufs = {b["id"]: b for b in meta["buffers"]}
    root = {i: b.get("base", i) for i, b in bufs.items()}
    written = {i for i, b in bufs.items() if b["kind"] in ("input", "constant")}
    for k, s in enumerate(meta["steps"]):
        reads, writes = s["args"][: -s["n_out"]], s["args"][-s["n_out"]:]
        assert all(root[i] in written for i in reads), f"step {k} reads a buffer no earlier step wrote"
        assert all(bufs[i]["kind"] in ("intermediate", "output") for i in writes)
        written |= {root[i] for i in writes}
    assert all(root[o] in written for o in meta["outputs"])
    assert all(bufs[b["base"]]["kind"] != "view" and b["base"] < b["id"] for b in bufs.values() if b["kind"] == "view")


def test_cpu_executor_matches_the_vm_on_an_mlp(mlp):
    from tlm.compiler.gpu_plan import LARGE_BYTES, build_plan, run_plan_cpu
    from tlm.measure.cuda_plan import host_array

    plan = build_plan(None, target="llvm", imported=mlp, seed=3)
    meta = plan.meta
    got = run_plan_cpu(plan)
    assert got.shape == (4, 16) and np.array_equal(got, plan.expected)  # bit for bit: the same kernels
    _defined_before_use(meta)
    bufs = {b["id"]: b for b in meta["buffers"]}
    views = [b for b in meta["buffers"] if b["kind"] == "view"]
    assert {bufs[v["base"]]["kind"] for v in views} == {"input", "intermediate"}
    (big,) = [b for b in meta["buffers"] if "regen" in b]
    assert big["shape"] == [2048, 16] and "exact" not in big and f"b{big['id']}" not in plan.exact
    assert all(np.asarray(a).nbytes <= LARGE_BYTES for a in plan.exact.values())
    assert meta["schedules"] == {"db": 0, "dlight": 0, "default": 2}
    # the plan's semantics, independently of TVM: numpy on the plan's own data
    (s1, s2) = meta["steps"]
    data = {i: host_array(b, plan.exact) for i, b in bufs.items() if b["kind"] in ("input", "constant")}
    x = data[bufs[s1["args"][0]]["base"]].reshape(32, 64)
    h = np.maximum(x @ data[s1["args"][1]] + data[s1["args"][2]], 0).reshape(4, 2048)
    np.testing.assert_allclose(h @ data[s2["args"][1]] + data[s2["args"][2]], got, rtol=1e-5, atol=1e-5)
    # the regenerated weight keeps the original's scale, and a seed picks other values
    w = data[big["id"]]
    assert abs(w.std() - big["regen"]["std"]) < 0.05 * big["regen"]["std"]
    other = build_plan(None, target="llvm", imported=mlp, seed=4)
    assert not np.array_equal(run_plan_cpu(other), got)


def test_cpu_executor_matches_the_vm_on_bert_tiny():
    from tlm.compiler.gpu_plan import build_plan, run_plan_cpu

    plan = build_plan("bert_tiny-b1-s64", target="llvm")
    assert np.array_equal(run_plan_cpu(plan), plan.expected)
    _defined_before_use(plan.meta)
    kinds = [b["kind"] for b in plan.meta["buffers"]]
    assert kinds.count("view") > 5 and sum("regen" in b for b in plan.meta["buffers"]) >= 4  # embeddings, dense weights
    assert 1e-2 < plan.meta["expected"]["scale"] < 1e3  # regenerated weights keep activations' scale


def test_cuda_plan_of_an_mlp(cuda_plan, mlp):
    from tlm.compiler.gpu_plan import MAX_PLAN_BYTES
    from tlm.measure.cuda_plan import host_arrays, read_expected, read_plan

    plan, out = cuda_plan
    meta = read_plan(out)
    assert meta == json.loads(json.dumps(plan.meta))
    _defined_before_use(meta)
    for s in meta["steps"]:
        f = meta["functions"][s["func"]]
        assert f["kernels"] and (out / f["src"]).exists()
        for k in f["kernels"]:
            assert len(k["grid"]) == 3 and len(k["block"]) == 3 and 1 <= np.prod(k["block"]) <= 1024
            assert all(a["buf"] < len(s["args"]) for a in k["args"] if "buf" in a)
    assert meta["schedules"] == {"db": 0, "dlight": 2, "default": 0} and meta["db"] is None
    assert meta["card"] == "h100" and meta["arch"].startswith("sm_90")
    assert meta["files_bytes"] < MAX_PLAN_BYTES and meta["files_bytes"] < 200_000
    with np.load(out / "data.npz") as data:  # the large weight travels as a seed, not as data
        assert sorted(data.files) == sorted(b["exact"] for b in meta["buffers"] if "exact" in b)
    (big,) = [b for b in meta["buffers"] if "regen" in b]
    assert set(big["regen"]) == {"seed", "mean", "std", "digest"}
    # the GPU machine regenerates exactly what the CPU reference ran with: its output is the LLVM plan's
    from tlm.compiler.gpu_plan import build_plan, run_plan_cpu

    cpu = build_plan(None, target="llvm", imported=mlp, seed=0)
    np.testing.assert_array_equal(read_expected(meta, out), run_plan_cpu(cpu))
    host = host_arrays(meta, out)
    cpu_big = [b for b in cpu.meta["buffers"] if b.get("regen", {}).get("digest") == big["regen"]["digest"]]
    assert cpu_big and cpu_big[0]["regen"] == big["regen"] and host[big["id"]].shape == (2048, 16)


def test_plan_size_limit_and_llvm_plans_stay_in_memory(cuda_plan, tmp_path, monkeypatch):
    from tlm.compiler import gpu_plan

    plan, _ = cuda_plan
    monkeypatch.setattr(gpu_plan, "MAX_PLAN_BYTES", 10_000)
    with pytest.raises(TlmError, match="MiB of files, over") as err:
        gpu_plan.write_plan(plan, tmp_path / "p")
    assert "\n" not in str(err.value) and not (tmp_path / "p" / "plan.json").exists()
    with pytest.raises(TlmError, match="only a CUDA plan is written"):
        gpu_plan.build_plan("bert_tiny-b1-s64", target="llvm", out=tmp_path / "q")


def test_records_of_a_database_are_applied_and_counted(mlp, tmp_path):
    """A task with a record in the database runs that program; the other gets dlight's."""
    from tlm.compiler.gpu_plan import build_plan
    from tlm.graph.extract import extract_from_relax
    from tlm.graph.target import resolve_target
    from tlm.measure.database import open_db
    from tlm.space.design import plain_json, random_program

    h100 = resolve_target("h100")
    task = next(t for t in extract_from_relax(mlp.mod, h100) if t.name == "fused_matmul_add_relu")
    prog = next(p for s in range(100) if (p := random_program(task, h100, random.Random(s))).ok)
    with open_db(str(tmp_path / "db")) as db:
        db.add_record(task, h100.key, plain_json(prog.sch.trace.as_json()), [1e-5], proposer="metaschedule")
    plan = build_plan(None, target="h100", imported=mlp, db=str(tmp_path / "db"))
    assert plan.meta["schedules"] == {"db": 1, "dlight": 1, "default": 0}
    assert plan.meta["functions"]["fused_matmul_add_relu"]["schedule"] == "db"
    assert plan.meta["db_tasks"]["tuned"] == 1


@pytest.mark.skipif(__import__("tlm.measure.nvcc", fromlist=["x"]).find_toolkit() is None,
                    reason="nvcc is not installed here (pip install -e '.[cuda]'): the cubin step is skipped")
def test_every_source_of_a_plan_compiles(cuda_plan, tmp_path):
    from tlm.measure.cuda_plan import run

    _, out = cuda_plan
    res = run(out, tmp_path / "r", measure=False, jobs=1, log=lambda *_: None)
    assert res["error"] is None and res["compile_errors"] == {} and res["functions"] == 2


def test_tlm_gpu_plan_is_a_command():
    from tlm.cli import build_parser

    args = build_parser().parse_args(["gpu", "plan", "bert_tiny-b1-s64", "--out", "x", "--db", "d"])
    assert args.func.__module__ == "tlm.compiler.gpu_plan" and (args.target, args.db, args.seed) == ("h100", "d", 0)


def test_only_weight_like_constants_are_regenerated():
    """A causal mask (0 and -inf), a constant of ones, or a table of few values keeps its
    meaning only exactly: carried, however large; weights are regenerated."""
    from tlm.compiler.plan_walk import weight_like

    rng = np.random.default_rng(0)
    assert weight_like(rng.standard_normal((256, 256)).astype("float32"))
    mask = np.triu(np.full((256, 256), -np.inf, dtype="float32"), 1)
    assert not weight_like(mask) and not weight_like(np.where(np.isinf(mask), np.float32(-3.4e38), 0))
    assert not weight_like(np.ones((256, 256), "float32"))
    assert not weight_like(np.arange(256 * 256).reshape(256, 256))  # integers: indices, exactly


def test_compile_for_a_gpu_writes_a_plan_and_says_it_did_not_run(mlp, tmp_path, capsys):
    """`tlm compile --target h100` builds here what it cannot run here: the plan, the records of
    the database applied, and a warning naming the command that runs and checks it on a GPU."""
    from tlm.compiler.job import _plan_report, tune_and_plan
    from tlm.graph.extract import extract_from_relax
    from tlm.graph.target import resolve_target
    from tlm.measure.database import open_db
    from tlm.space.design import plain_json, random_program

    h100 = resolve_target("h100")
    tasks = extract_from_relax(mlp.mod, h100)
    task = next(t for t in tasks if t.name == "fused_matmul_add_relu")
    prog = next(p for s in range(100) if (p := random_program(task, h100, random.Random(s))).ok)
    with open_db(str(tmp_path / "db")) as db:
        db.add_record(task, h100.key, plain_json(prog.sch.trace.as_json()), [1e-5], proposer="tlm")
    report = tune_and_plan(mlp, tasks, h100, db=str(tmp_path / "db"), budget=None, output=str(tmp_path / "plan"))
    assert (tmp_path / "plan" / "plan.json").is_file() and report["schedules"]["db"] == 1
    assert report["db_tasks"]["tuned"] == 1 and report["card"] == "h100"
    assert _plan_report(report, argparse.Namespace(json=False)) == 0
    out, err = capsys.readouterr()
    assert "plan: " in out and "1 tuned" in out
    assert err.count("\n") == 1 and "not run or checked here" in err and "tlm.measure.cuda_plan" in err


def test_on_a_machine_with_the_gpu_the_plan_runs_there(mlp, tmp_path, monkeypatch, capsys):
    """Where the target's GPU is, `tlm compile --target h100` runs, checks and times the plan there
    (tlm.measure.cuda_plan.run; stood in for here with made-up results, said so: no GPU ran it),
    and a wrong output fails the command."""
    import argparse

    import tlm.measure.cuda_local as local
    import tlm.measure.cuda_plan as cuda_plan
    from tlm.compiler.job import _plan_report, tune_and_plan
    from tlm.graph.extract import extract_from_relax
    from tlm.graph.target import resolve_target

    h100 = resolve_target("h100")
    tasks = extract_from_relax(mlp.mod, h100)
    ran = {"error": None, "device": {"name": "NVIDIA H100 80GB HBM3"}, "checked": True, "wrong": False,
           "max_abs_diff": 2e-6, "median_ms": 0.05}
    monkeypatch.setattr(local, "local_gpu", lambda target: None)
    monkeypatch.setattr(cuda_plan, "run", lambda plan, out, log=None: dict(ran, plan=str(plan)))
    from tlm.measure.database import open_db

    open_db(str(tmp_path / "db")).close()  # no records: dlight's schedules throughout
    report = tune_and_plan(mlp, tasks, h100, db=str(tmp_path / "db"), budget=None, output=str(tmp_path / "plan"))
    assert report["ran"]["median_ms"] == 0.05 and report["not_run"] is None
    assert _plan_report(report, argparse.Namespace(json=False)) == 0
    out, err = capsys.readouterr()
    assert "ran on this GPU (NVIDIA H100 80GB HBM3): 0.050 ms" in out and err == ""
    ran.update(checked=False, wrong=True, why="NaN where the expected output has none (or the reverse)")
    with pytest.raises(TlmError, match="failed: NaN"):
        tune_and_plan(mlp, tasks, h100, db=str(tmp_path / "db"), budget=None, output=str(tmp_path / "plan2"))


def test_a_gpu_budget_needs_a_gpu_and_the_python_api_says_plan(mlp):
    """Measuring CUDA programs here is refused in one line before any database is made; the
    callable API has no GPU model to return and says how to get a plan instead."""
    import tlm
    from tlm.graph.extract import extract_from_relax
    from tlm.graph.target import resolve_target
    from tlm.search.tune import tune

    with pytest.raises(TlmError, match="needs this machine.s NVIDIA GPU"):
        tune(extract_from_relax(mlp.mod, resolve_target("h100")), "tlm", "4g", db="/nonexistent/db", target="h100")
    with pytest.raises(TlmError, match="GPU plan"):
        tlm.compile("bert_tiny", target="h100", db="x")


def test_a_record_that_does_not_lower_gets_dlight_and_a_warning(mlp, tmp_path, monkeypatch, capsys):
    """An unmeasured budget-0 pick can be a program CUDA lowering refuses (resnet_50's mean did):
    the plan gives that function dlight's schedule and says so, instead of failing the model.
    The refusal is made up here (a unit test: lower_cuda fails its first call, the check of the
    record's program); everything else is real."""
    import tlm.measure.cuda_build as cb
    from tlm.compiler.gpu_plan import build_plan
    from tlm.graph.extract import extract_from_relax
    from tlm.graph.target import resolve_target
    from tlm.measure.database import open_db
    from tlm.space.design import plain_json, random_program

    h100 = resolve_target("h100")
    task = next(t for t in extract_from_relax(mlp.mod, h100) if t.name == "fused_matmul_add_relu")
    prog = next(p for s in range(100) if (p := random_program(task, h100, random.Random(s))).ok)
    with open_db(str(tmp_path / "db")) as db:
        db.add_record(task, h100.key, plain_json(prog.sch.trace.as_json()), [1e-5], proposer="tlm")
    real, calls = cb.lower_cuda, []

    def first_refused(mod, target):
        calls.append(1)
        return cb.CudaProgram(error="lowering failed: made up") if len(calls) == 1 else real(mod, target)

    monkeypatch.setattr(cb, "lower_cuda", first_refused)
    plan = build_plan(None, target="h100", imported=mlp, db=str(tmp_path / "db"))
    assert plan.meta["schedules"] == {"db": 0, "dlight": 2, "default": 0}
    assert plan.meta["refused"] == {"fused_matmul_add_relu": "lowering failed: made up"}
    err = capsys.readouterr().err
    assert "fused_matmul_add_relu: the database's program does not lower for h100" in err


def test_a_plan_put_together_from_a_bundle_runs_the_programs_a_database_plan_would(cuda_plan, mlp, tmp_path):
    """tlm.measure.plan_assemble (what the GPU machine does after a bundle's run): each plan
    function names its task's hash, and the pick of a bundle's run put in its place is the same
    CUDA C and launches as a plan built here with that program as a database record. The run's
    latencies are made up here (no GPU): the test is of the bookkeeping, not of a measurement."""
    from tlm.compiler.gpu_plan import build_plan
    from tlm.graph.extract import extract_from_relax
    from tlm.graph.target import resolve_target
    from tlm.measure.database import open_db
    from tlm.measure.gpu_bundle import BundleConfig, build_bundle
    from tlm.measure.plan_assemble import assemble, main as assemble_main, program_source
    from tlm.measure.cuda_plan import read_plan
    from tlm.space.design import plain_json
    from tlm.space.language import parse

    h100 = resolve_target("h100")
    _, out = cuda_plan
    meta = read_plan(out)
    tasks = extract_from_relax(mlp.mod, h100)
    assert {f["task"] for f in meta["functions"].values()} <= {t.hash for t in tasks}  # (weight transposes fold away)
    assert len({f["task"] for f in meta["functions"].values()}) == len(meta["functions"]) == 2
    matmul = next(t for t in tasks if t.name == "fused_matmul_add_relu")
    bundle = tmp_path / "bundle"
    manifest = build_bundle([matmul], BundleConfig(target="h100", per_task=3, jobs=1, task_seconds=30), bundle,
                            progress=False)
    (entry,) = manifest["tasks"]
    ids = [c["id"] for c in entry["candidates"]]
    assert len(ids) >= 2
    lines = [{"t": entry["hash"], "k": "ref", "lat": [1e-6], "err": None},  # dlight's reference: never a pick
             {"t": entry["hash"], "k": ids[0], "lat": [3e-5, 3e-5], "err": None},
             {"t": entry["hash"], "k": ids[1], "lat": [2e-5, 2e-5, 9.0], "err": None}]
    lines += [{"t": entry["hash"], "k": k, "lat": [1e-6], "err": "WrongResult: made up"} for k in ids[2:]]
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(x) + "\n" for x in lines))

    got = assemble(out, bundle, results, "random", tmp_path / "asm")
    assert got["replaced"]["fused_matmul_add_relu"]["candidate"] == ids[1]  # the fastest correct one
    assert set(got["kept"]) == {n for n in meta["functions"] if n != "fused_matmul_add_relu"}
    asm = read_plan(tmp_path / "asm")
    assert asm["schedules"] == {"bundle": 1, "db": 0, "dlight": 1, "default": 0}
    assert asm["steps"] == meta["steps"] and asm["buffers"] == meta["buffers"]
    assert assemble(out, bundle, results, "random", tmp_path / "first1", first=1)["replaced"][
        "fused_matmul_add_relu"]["candidate"] == ids[0]
    assert assemble(out, bundle, results, "tlm", tmp_path / "none")["replaced"] == {}
    only = tmp_path / "only.jsonl"  # a candidates file naming one program (the cost model's top 1, say)
    only.write_text(json.dumps({"task": entry["hash"], "proposer": "random",
                                "sentence": entry["candidates"][ids[0]]["sentence"]}) + "\n")
    got = assemble(out, bundle, results, "random", tmp_path / "only", only=only)
    assert got["replaced"]["fused_matmul_add_relu"]["candidate"] == ids[0] and got["only"] == "only.jsonl"
    assert assemble_main([str(out), str(bundle), str(results), "--proposer", "random", "--only", str(only),
                          "--out", str(tmp_path / "only2")]) == 0

    # the same program as a database record, planned here: the same kernels, launches and code
    cand = entry["candidates"][ids[1]]
    prog = parse(cand["sentence"], matmul, h100)
    with open_db(str(tmp_path / "db")) as db:
        db.add_record(matmul, h100.key, plain_json(prog.sch.trace.as_json()), [2e-5], proposer="random")
    planned = build_plan(None, target="h100", imported=mlp, db=str(tmp_path / "db"), out=tmp_path / "dbplan")
    mine, theirs = asm["functions"]["fused_matmul_add_relu"], planned.meta["functions"]["fused_matmul_add_relu"]
    assert theirs["schedule"] == "db" and mine["schedule"] == "bundle"
    prefix = cand["prefix"]
    assert [dict(k, name=k["name"][len(prefix):]) for k in mine["kernels"]] == theirs["kernels"]
    assert mine["workspaces"] == theirs["workspaces"]
    with lzma.open(tmp_path / "asm" / mine["src"], "rt") as f:
        code = f.read()
    assert code.replace(prefix, "") == planned.sources["fused_matmul_add_relu"]
    with pytest.raises(TlmError, match="not in the bundle's source"):
        program_source(code, "p99_", ["main_kernel"])
    assert assemble_main([str(out), str(bundle), str(tmp_path / "missing.jsonl"), "--proposer", "random",
                          "--out", str(tmp_path / "x")]) == 0  # a run with no lines keeps every function
    assert assemble_main([str(tmp_path), str(bundle), str(results), "--proposer", "random", "--out",
                          str(tmp_path / "y")]) == 1  # not a plan: one line, exit 1
    if __import__("tlm.measure.nvcc", fromlist=["x"]).find_toolkit() is not None:
        from tlm.measure.cuda_plan import run

        res = run(tmp_path / "asm", tmp_path / "r", measure=False, jobs=1, log=lambda *_: None)
        assert res["error"] is None and res["compile_errors"] == {} and res["compiled_ahead"] == 0
        # the bundle and the plan compiled ahead (tlm gpu precompile): the assembled plan takes their
        # cubins (the group's holds the pick's kernels, checked against the launch limits) and runs no nvcc
        import shutil

        from tlm.measure.precompile import precompile

        shutil.copytree(out, tmp_path / "plan")  # (the fixture's plan stays as it was built)
        precompile([bundle, tmp_path / "plan"], jobs=1, log=lambda *_: None, progress=False)
        assemble(tmp_path / "plan", bundle, results, "random", tmp_path / "asm2")
        res2 = run(tmp_path / "asm2", tmp_path / "r2", measure=False, jobs=1, log=lambda *_: None)
        assert res2["error"] is None and res2["compiled_ahead"] == len(meta["functions"]) and res2["compile_cpu_s"] == 0
