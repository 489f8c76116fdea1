"""GPU programs built without a GPU: CUDA C, launch plans, cubins (nvcc here), bundles, ingest.

The measuring itself needs a GPU (test_gpu_runner_measures_a_bundle, marked gpu, skipped here
and saying so); everything before and after it runs on this machine.
"""

import json
import random
from pathlib import Path

import numpy as np
import pytest

import workloads_tir as W
from tlm.errors import TlmError

pytestmark = pytest.mark.tvm


@pytest.fixture(scope="module")
def h200():
    from tlm.graph.target import resolve_target

    return resolve_target("h200")


def _programs(task, target, n, seed=0, tries=200):
    from tlm.space.design import random_program

    out = []
    for s in range(tries):
        prog = random_program(task, target, random.Random(seed * 1000 + s))
        if prog.ok:
            out.append(prog)
        if len(out) == n:
            break
    return out


def test_gpu_names_tell_cards_apart(h200):
    from tlm.graph.target import resolve_target
    from tlm.measure.shards import hardware_slug

    h100 = resolve_target("h100")
    assert (h100.cpu, h200.cpu) == ("sm_90a", "sm_90a") and h100.key != h200.key
    assert (h100.cores, h200.cores) == (132, 132)
    assert hardware_slug(h200.key) == "cuda-h200"


def test_matmul_plan_maps_every_buffer(h200):
    from tlm.measure.cuda_build import lower_cuda

    task = W.matmul(64)
    (prog,) = _programs(task, h200, 1)
    cuda = lower_cuda(prog.sch.mod, h200)
    assert cuda.error is None and 'extern "C" __global__' in cuda.source
    (k,) = cuda.kernels
    assert sorted(a["buf"] for a in k.args) == [0, 1, 2] and not cuda.workspaces
    assert 1 <= k.threads <= 1024 and all(g >= 1 for g in k.grid)


def test_multi_kernel_programs_get_workspaces(h200):
    """A softmax not fused into one kernel passes its row maxima and sums through global
    workspaces that the host allocates: the plan says which kernel reads which."""
    from tlm.measure.cuda_build import lower_cuda

    task = W.softmax(64, 100)
    plans = [lower_cuda(p.sch.mod, h200) for p in _programs(task, h200, 12)]
    assert all(p.error is None for p in plans)
    multi = [p for p in plans if len(p.kernels) > 1]
    assert multi, "no multi-kernel softmax among 12 random programs"
    for p in multi:
        used = {a["ws"] for k in p.kernels for a in k.args if "ws" in a}
        assert used == set(range(len(p.workspaces))) and all(n > 0 for n in p.workspaces)
        assert {a["buf"] for k in p.kernels for a in k.args if "buf" in a} == {0, 1}


def test_rename_and_split():
    from tlm.measure.cuda_build import rename_kernels, split_source

    src = '#define X 1\nextern "C" __global__ void main_kernel(float* A) {}\nextern "C" __global__ void main_kernel_1() {}\n'
    pre, body = split_source(src)
    assert pre == "#define X 1\n" and body.startswith('extern "C"')
    out = rename_kernels(body, ["main_kernel", "main_kernel_1"], "p3_")
    assert "p3_main_kernel(" in out and "p3_main_kernel_1(" in out and "p3_p3_" not in out


PTXAS = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'p0_main_kernel' for 'sm_90a'
ptxas info    : Function properties for p0_main_kernel
    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 6912 bytes smem, 384 bytes cmem[0]
ptxas info    : Compiling entry function 'p1_main_kernel' for 'sm_90a'
ptxas info    : Function properties for p1_main_kernel
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 384 bytes cmem[0]
"""


def test_ptxas_report_and_launch_limits():
    from tlm.measure.cuda_build import CudaProgram, Kernel
    from tlm.measure.nvcc import launch_error, parse_ptxas

    res = parse_ptxas(PTXAS)
    assert (res["p0_main_kernel"].registers, res["p0_main_kernel"].smem, res["p0_main_kernel"].spill_bytes) == (255, 6912, 12)
    assert (res["p1_main_kernel"].registers, res["p1_main_kernel"].smem) == (32, 0)
    small = CudaProgram("", [Kernel("main_kernel", [], [1, 1, 1], [256, 1, 1])], [])
    big = CudaProgram("", [Kernel("main_kernel", [], [1, 1, 1], [512, 1, 1])], [])
    assert launch_error(small, "p0_", res) is None  # 256 x 256 registers = 65536
    assert "registers" in launch_error(big, "p0_", res)
    assert launch_error(big, "p1_", res) is None
    assert "ptxas" in launch_error(small, "p9_", res)


def test_occupancy_columns_follow_cudas_rules():
    """sm_90: 2048 threads, 32 blocks, 64K registers (per warp in units of 256) and 228 KB of
    shared memory (1 KB reserved per block) per SM; the columns describe the kernel with the most
    threads in all."""
    from tlm.measure.nvcc import PTXAS_COLUMNS, KernelResources, occupancy_columns

    def cols(kernels, res, sms=132):
        return dict(zip(PTXAS_COLUMNS, occupancy_columns(kernels, res, sms, "sm_90a")))

    full = cols([(256, 132 * 8, 0)], [KernelResources(registers=32)])
    assert (full["resident_blocks"], full["occupancy"], full["waves"], full["last_wave_fill"]) == (8, 1.0, 1.0, 1.0)
    regs = cols([(256, 100, 0)], [KernelResources(registers=128)])  # 4096 per warp x 8 warps: 2 blocks
    assert (regs["resident_blocks"], regs["occupancy"]) == (2, 0.25)
    smem = cols([(128, 1000, 32768)], [KernelResources(registers=16, smem=16384)])  # 49 KB: 4 blocks
    assert smem["resident_blocks"] == 4 and smem["smem"] == 49152
    assert smem["waves"] == 1000 / (4 * 132) and smem["last_wave_fill"] == smem["waves"] / 2
    two = cols([(32, 1, 0), (512, 64, 0)], [KernelResources(registers=255, spill_bytes=8), KernelResources(registers=64)])
    assert (two["kernels"], two["threads"], two["registers"], two["spill_bytes"]) == (2, 512, 64, 8)
    assert two["min_occupancy"] == 8 * 32 / 2048  # the first: 255 registers, 8192 a warp, 8 blocks of 1 warp
    assert occupancy_columns([], [], 132, "sm_90a") == [0.0] * len(PTXAS_COLUMNS)


FIRST_DRAWS = [-0.06933, -0.248325, -0.996533]


def test_runner_inputs_are_the_same_on_any_numpy():
    """The GPU machine has another numpy: the inputs come from a counter hash, not numpy's
    generators, so both machines draw these exact values."""
    from tlm.measure.cuda_measure import make_inputs

    args = [{"dtype": "float32", "shape": [3, 5]}, {"dtype": "int64", "shape": [4]}, {"dtype": "float32", "shape": [7]}]
    a, b, c = make_inputs(args, 3)
    assert a.shape == (3, 5) and a.dtype == np.float32 and not b.any() and b.dtype == np.int64
    assert np.all(a >= -1) and np.all(a < 1) and not np.array_equal(a.reshape(-1)[:7], c)
    assert [round(float(v), 6) for v in a.reshape(-1)[:3]] == FIRST_DRAWS
    big = make_inputs([{"dtype": "float32", "shape": [100000]}], 0)[0]
    assert abs(float(big.mean())) < 0.01 and 0.32 < float(big.var()) < 0.35  # uniform: var 1/3


def test_sample_index_spreads_and_includes_the_ends():
    from tlm.measure.cuda_measure import sample_index

    assert list(sample_index(5)) == [0, 1, 2, 3, 4]
    idx = sample_index(10**6, 100)
    assert idx[0] == 0 and idx[-1] == 10**6 - 1 and len(idx) == 100 and np.all(np.diff(idx) > 0)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """A two-task bundle (a matmul and a multi-kernel-prone softmax), 3 programs each."""
    from tlm.measure.gpu_bundle import BundleConfig, build_bundle

    out = tmp_path_factory.mktemp("bundle")
    tasks = [W.matmul(64), W.softmax(16, 100)]
    # a task of two sources comes once, its calls summed (two workloads can share a task)
    manifest = build_bundle(tasks + [W.matmul(64)], BundleConfig(per_task=3, jobs=1, task_seconds=30), out,
                            progress=False)
    assert [e["weight"] for e in manifest["tasks"]] == [2, 1]
    return out, tasks, manifest


def test_bundle_sentences_round_trip_and_plans(bundle, h200):
    from tlm.space.design import task_space
    from tlm.space.language import parse, render

    out, tasks, manifest = bundle
    assert manifest["card"] == "h200" and manifest["arch"] == "sm_90a"
    for task, entry in zip(tasks, manifest["tasks"]):
        assert entry["hash"] == task.hash and not entry.get("error")
        assert len(entry["candidates"]) == 3 and entry["ref"]["kernels"]
        assert (out / entry["check"]).exists() and entry["written"] == [len(task.args) - 1]
        members = sorted(k for g in entry["groups"] for k in g["members"])
        assert members == [0, 1, 2]
        task_space(task, h200)
        for c in entry["candidates"]:
            assert render(parse(c["sentence"], task, h200), task, h200) == c["sentence"]
            assert c["kernels"] and c["prefix"] == f"p{c['id']}_"


def test_bundle_resumes_and_refuses_another_config(bundle):
    from tlm.measure.gpu_bundle import BundleConfig, build_bundle

    out, tasks, manifest = bundle
    again = build_bundle(tasks + [W.matmul(64)], BundleConfig(per_task=3, jobs=1, task_seconds=30), out, progress=False)
    assert [e["candidates"] for e in again["tasks"]] == [e["candidates"] for e in manifest["tasks"]]
    with pytest.raises(TlmError):
        build_bundle(tasks, BundleConfig(per_task=4, jobs=1), out, progress=False)


def test_bundle_compiles_here(bundle, tmp_path):
    """nvcc (the `cuda` extra) compiles every file of the bundle; ptxas reports each kernel."""
    from tlm.measure.cuda_runner import run
    from tlm.measure.nvcc import find_toolkit

    if find_toolkit() is None:
        pytest.skip("no nvcc: pip install -e '.[cuda]'")
    out, _, manifest = bundle
    summary = run(out, tmp_path / "r", seconds=600, jobs=2, hang_seconds=30, log=lambda *_: None, measure=False)
    assert summary["compile_errors"] == 0
    ready = [json.loads(x) for x in (tmp_path / "r" / "work" / "ready.jsonl").read_text().splitlines()]
    assert {r["t"] for r in ready if "t" in r} == {e["hash"] for e in manifest["tasks"]} and ready[-1] == {"end": True}
    for r in ready[:-1]:
        entry = next(e for e in manifest["tasks"] if e["hash"] == r["t"])
        for c in entry["candidates"]:
            f = r["files"][str(c["id"])]
            assert all(c["prefix"] + k["name"] in f["resources"] for k in c["kernels"])


def test_cubins_compiled_ahead_are_what_the_runner_takes(bundle, tmp_path):
    """`tlm gpu precompile`: every file of the bundle compiled here, kept beside it; the runner then
    runs no nvcc and hands the measuring process the same resources as compiling there would."""
    import shutil

    from tlm.measure.cuda_runner import compile_file, run
    from tlm.measure.nvcc import find_toolkit
    from tlm.measure.precompile import ahead_paths, ahead_status, precompile, sources_of

    if find_toolkit() is None:
        pytest.skip("no nvcc: pip install -e '.[cuda]'")
    src_bundle, _, manifest = bundle
    b = tmp_path / "b"
    shutil.copytree(src_bundle, b)
    arch, srcs = sources_of(b)
    assert arch == manifest["arch"] and len(srcs) == sum(len(e["groups"]) + 1 for e in manifest["tasks"])
    assert ahead_status([b]) == {str(b): (0, len(srcs))}
    res = precompile([b], jobs=2, log=lambda *_: None, progress=False)
    assert ahead_status([b]) == {str(b): (len(srcs), len(srcs))}
    assert res["folders"][str(b)] == {"files": len(srcs), "compiled": len(srcs), "errors": 0}
    assert all(p.exists() for s in srcs for p in ahead_paths(s))
    again = precompile([b], jobs=2, log=lambda *_: None, progress=False)  # resumes: nothing left
    assert again["folders"][str(b)]["compiled"] == 0
    summary = run(b, tmp_path / "r", seconds=600, jobs=2, hang_seconds=30, log=lambda *_: None, measure=False)
    assert summary["compiled_ahead"] == len(srcs) and summary["compile_cpu_s"] == 0 and summary["compile_errors"] == 0
    ready = [json.loads(x) for x in (tmp_path / "r" / "work" / "ready.jsonl").read_text().splitlines()][:-1]
    first = ready[0]["files"]["0"]
    src = next(x for x in srcs if x.name == Path(first["cubin"]).name.replace(".cubin", ".cu.xz"))
    fresh = compile_file(str(src), str(tmp_path / "fresh.cubin"), arch, ahead=False)
    assert Path(first["cubin"]).exists() and first["resources"] == fresh["resources"]
    assert Path(first["cubin"]).read_bytes() == (tmp_path / "fresh.cubin").read_bytes()


def test_a_cubin_ahead_is_taken_only_for_its_own_source_and_arch(tmp_path, monkeypatch):
    """Unit test of the bookkeeping, no nvcc (the files are made up): a changed source, another arch,
    another CUDA release, a cubin without its json (a run killed between the two writes) or a timeout
    is compiled again."""
    import hashlib
    import lzma

    from tlm.measure.precompile import ahead_paths, precompiled

    src = tmp_path / "src" / "t-g0.cu.xz"
    src.parent.mkdir()
    src.write_bytes(lzma.compress(b"extern \"C\" __global__ void k() {}"))
    meta_path, cubin_xz = ahead_paths(src)
    assert meta_path == tmp_path / "cubin" / "t-g0.json" and cubin_xz == tmp_path / "cubin" / "t-g0.cubin.xz"
    assert precompiled(src, "sm_90a") is None
    meta_path.parent.mkdir()
    cubin_xz.write_bytes(lzma.compress(b"not a real cubin"))
    assert precompiled(src, "sm_90a") is None  # the json is written last: not finished
    sha = hashlib.sha256(src.read_bytes()).hexdigest()
    meta_path.write_text(json.dumps({"arch": "sm_90a", "sha256": sha, "resources": {"k": {"registers": 8}}}))
    assert precompiled(src, "sm_90a") == {"resources": {"k": {"registers": 8}}, "cubin_xz": str(cubin_xz)}
    assert precompiled(src, "sm_80") is None
    meta_path.write_text(json.dumps({"arch": "sm_90a", "sha256": sha, "error": "ptxas: too much shared memory"}))
    assert precompiled(src, "sm_90a") == {"error": "ptxas: too much shared memory"}
    meta_path.write_text(json.dumps({"arch": "sm_90a", "sha256": sha, "error": "nvcc timed out after 600 s"}))
    assert precompiled(src, "sm_90a") is None
    meta_path.write_text(json.dumps({"arch": "sm_90a", "sha256": sha, "resources": {},
                                     "nvcc": "Build cuda_13.0.r13.0/compiler.36424714_0"}))
    assert precompiled(src, "sm_90a", "13.0") is not None and precompiled(src, "sm_90a") is not None
    assert precompiled(src, "sm_90a", "12.8") is None  # the GPU machine's own nvcc is of another release
    monkeypatch.setenv("TLM_AHEAD", "0")
    assert precompiled(src, "sm_90a") is None
    monkeypatch.delenv("TLM_AHEAD")
    src.write_bytes(lzma.compress(b"// another program"))
    assert precompiled(src, "sm_90a") is None


def test_a_kept_bundle_tells_its_tasks_by_its_manifest(bundle, tmp_path):
    """--skip reads a bundle's built entries, or its manifest alone (as kept in results/gpu/bundles)."""
    import shutil

    from tlm.measure.cuda_measure import MANIFEST
    from tlm.measure.gpu_bundle import bundle_hashes

    out, tasks, _ = bundle
    kept = tmp_path / "kept"
    kept.mkdir()
    shutil.copy(out / MANIFEST, kept / MANIFEST)
    assert bundle_hashes(out) == bundle_hashes(kept) == {t.hash for t in tasks}
    with pytest.raises(TlmError, match="not a GPU bundle"):
        bundle_hashes(tmp_path / "nothing")


def _fake_run(folder, manifest, device="NVIDIA H200"):
    """Results as the runner writes them, made up here: a unit test of the ingest's bookkeeping
    (no GPU measured these numbers)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "device.json").write_text(json.dumps({"name": device}))
    lines = []
    for e in manifest["tasks"]:
        lines.append({"t": e["hash"], "k": "ref", "lat": [1e-5], "err": None})
        for c in e["candidates"]:
            bad = c["id"] == 2
            lines.append({"t": e["hash"], "k": c["id"], "lat": [] if bad else [2e-5, 3e-5], "err": "WrongResult: x" if bad else None})
    (folder / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_ingest_files_records_under_the_card_once(bundle, tmp_path):
    from tlm.measure.database import open_db
    from tlm.measure.gpu_ingest import ingest_results
    from tlm.measure.shards import read_shard, shard_paths

    out, _, manifest = bundle
    _fake_run(tmp_path / "run", manifest)
    report = ingest_results(out, tmp_path / "run", str(tmp_path / "db"), str(tmp_path / "corpus"))
    assert (report.records, report.ok, report.wrong) == (6, 4, 2)
    (shard,) = shard_paths(tmp_path / "corpus")
    assert shard.parent.name == "cuda-h200"
    header, tasks, records = read_shard(shard)
    assert json.loads(header["target_key"])["model"] == "h200" and len(tasks) == 2 and len(records) == 6
    assert all(r["s"] and r["by"] == "random" for r in records)
    assert "nothing ingested" in str(ingest_results(out, tmp_path / "run", str(tmp_path / "db"), str(tmp_path / "corpus")))
    with open_db(str(tmp_path / "db")) as db:
        assert db.count() == 6
    # One contender's programs alone (a held-out bundle's), into a database only: no shard without a corpus.
    none = ingest_results(out, tmp_path / "run", str(tmp_path / "db-tlm"), None, proposer="tlm")
    some = ingest_results(out, tmp_path / "run", str(tmp_path / "db-random"), None, proposer="random")
    assert (none.records, some.records, none.shards, some.shards) == (0, 6, [], [])
    two = ingest_results(out, tmp_path / "run", str(tmp_path / "db-random2"), None, proposer="random", first=2)
    assert two.records == 4  # the first 2 of each task's 3
    named = tmp_path / "only.jsonl"  # a candidates file (the cost model's top N): only the programs it names
    named.write_text("".join(json.dumps({"task": e["hash"], "proposer": "random", "sentence": e["candidates"][-1]["sentence"]})
                             + "\n" for e in manifest["tasks"]))
    last = ingest_results(out, tmp_path / "run", str(tmp_path / "db-random3"), None, proposer="random", only=named)
    assert last.records == 2
    assert ingest_results(out, tmp_path / "run", str(tmp_path / "db-random3"), None, proposer="random",
                          first=2, only=named).records == 2  # another selection of the same run: not skipped
    _fake_run(tmp_path / "other", manifest, device="NVIDIA H100 80GB HBM3")
    with pytest.raises(TlmError, match="measured on"):
        ingest_results(out, tmp_path / "other", str(tmp_path / "db"), None)


@pytest.mark.gpu
def test_gpu_runner_measures_a_bundle(bundle, tmp_path):
    """On a machine with an NVIDIA GPU, CuPy and nvcc: every program checked, most timed."""
    pytest.importorskip("cupy", reason="needs CuPy and an NVIDIA GPU")
    from tlm.measure.cuda_runner import run

    out, _, manifest = bundle
    summary = run(out, tmp_path / "r", seconds=300, jobs=4, hang_seconds=30, log=lambda *_: None)
    assert summary["programs"] == 6 and summary["references_ok"] == 2 and summary["wrong"] == 0
    # the same bundle compiled ahead (tlm gpu precompile): the cubins taken, the same programs right
    import shutil

    from tlm.measure.precompile import precompile

    shutil.copytree(out, tmp_path / "ahead")
    precompile([tmp_path / "ahead"], jobs=2, log=lambda *_: None, progress=False)
    again = run(tmp_path / "ahead", tmp_path / "r2", seconds=300, jobs=4, hang_seconds=30, log=lambda *_: None)
    assert again["compiled_ahead"] > 0 and again["compile_cpu_s"] == 0
    assert (again["programs"], again["references_ok"], again["wrong"]) == (6, 2, 0)


def test_bundle_of_proposed_sentences(bundle, tmp_path):
    """--candidates: those tasks only, their programs in file order with their proposer; a
    sentence that names no program is counted against its proposer, not dropped silently."""
    from tlm.measure.gpu_bundle import BundleConfig, build_bundle

    _, tasks, manifest = bundle
    matmul = manifest["tasks"][0]
    lines = [{"task": matmul["hash"], "proposer": "tlm", "sentence": c["sentence"]} for c in matmul["candidates"]]
    lines.insert(1, {"task": matmul["hash"], "proposer": "metaschedule", "sentence": "not a program"})
    path = tmp_path / "candidates.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    got = build_bundle(tasks, BundleConfig(jobs=1, candidates=str(path)), tmp_path / "b", progress=False)
    (entry,) = got["tasks"]
    assert entry["hash"] == matmul["hash"] and entry["refused"] == {"metaschedule": 1}
    assert [(c["proposer"], c["sentence"]) for c in entry["candidates"]] == \
        [("tlm", c["sentence"]) for c in matmul["candidates"]]
    with pytest.raises(TlmError, match="unreadable candidates"):
        build_bundle(tasks, BundleConfig(jobs=1, candidates=str(tmp_path / "none.jsonl")), tmp_path / "c", progress=False)


def test_the_rest_of_a_bundle_cut_short_is_built_from_its_sentences(bundle, tmp_path):
    """A run that measured the first task only: the rest (`tlm gpu bundle --rest-of`) holds the
    other task's programs, the same sentences and proposer, and no sampling again."""
    from tlm.measure.gpu_bundle import BundleConfig, build_bundle
    from tlm.measure.gpu_ingest import write_unmeasured

    out, tasks, manifest = bundle
    first, second = manifest["tasks"]
    _fake_run(tmp_path / "run", {"tasks": [first]})
    rest = tmp_path / "rest.jsonl"
    assert write_unmeasured(out, [tmp_path / "run"], rest) == len(second["candidates"])
    got = build_bundle(tasks, BundleConfig(jobs=1, candidates=str(rest)), tmp_path / "b", progress=False)
    (entry,) = got["tasks"]
    assert entry["hash"] == second["hash"]
    assert [(c["proposer"], c["sentence"]) for c in entry["candidates"]] == \
        [(c.get("proposer", "random"), c["sentence"]) for c in second["candidates"]]
    assert write_unmeasured(out, [tmp_path / "run", tmp_path / "run"], rest) == len(second["candidates"])
    with pytest.raises(TlmError, match="no results"):
        write_unmeasured(out, [tmp_path / "none"], rest)


def test_ingest_under_another_card_of_the_same_code(bundle, tmp_path):
    """An H200 bundle measured on an H100: its records are the H100's, prompts included; a card
    whose programs differ (another arch) is refused."""
    from tlm.graph.target import resolve_target
    from tlm.measure.gpu_ingest import ingest_results, same_code
    from tlm.measure.shards import read_shard, shard_paths
    from tlm.space.language import prompt_tokens

    out, tasks, manifest = bundle
    assert same_code(resolve_target("h100").config, manifest["target"])
    assert not same_code(resolve_target("a100").config, manifest["target"])
    _fake_run(tmp_path / "run", manifest, device="NVIDIA H100 80GB HBM3")
    report = ingest_results(out, tmp_path / "run", str(tmp_path / "db"), str(tmp_path / "corpus"), card="h100")
    assert report.records == 6
    (shard,) = shard_paths(tmp_path / "corpus")
    assert shard.parent.name == "cuda-h100"
    _, _, records = read_shard(shard)
    prompt = " ".join(prompt_tokens(tasks[0], resolve_target("h100")))
    assert sum(r["s"].startswith(prompt + " ") for r in records) == 3
    with pytest.raises(TlmError, match="differ"):
        ingest_results(out, tmp_path / "run", str(tmp_path / "db2"), None, card="a100")


def test_pretraining_reads_a_bundles_programs(bundle):
    from tlm.model.pretrain import read_corpus

    out, _, manifest = bundle
    sentences, meta = read_corpus([out])
    assert sorted(sentences) == sorted(c["sentence"] for e in manifest["tasks"] for c in e["candidates"])
    assert meta["target"]["model"] == "h200" and [t["target"]["model"] for t in meta["targets"]] == ["h200"]


def test_a_task_of_many_programs_compiles_in_several_files():
    """Programs share a file by preamble, FILE_PROGRAMS at most, so that the GPU machine's cores
    share a task of a hundred programs (made-up sources: only the grouping is tested)."""
    from tlm.measure.cuda_build import CudaProgram
    from tlm.measure.gpu_bundle import FILE_PROGRAMS, _groups

    progs = [("s", CudaProgram(source=("pre A\n" if k % 3 else "pre B\n") + "body")) for k in range(40)]
    groups = _groups(progs)
    assert sorted(k for _, ks in groups for k in ks) == list(range(40))
    assert all(len(ks) <= FILE_PROGRAMS for _, ks in groups) and len(groups) == 3  # 14 B, 26 A
    assert all(len({("pre A" if k % 3 else "pre B") for k in ks}) == 1 for _, ks in groups)
