"""The GPU machine's side of a whole-model plan (tlm.measure.cuda_plan) without TVM: reading a
plan, regenerating its constants, checking an output, compiling it with nvcc (when nvcc is
here), and the failures that must come back as one line in the result. Running it needs CuPy
and a GPU (test_plan_runs_on_the_gpu, marked gpu, skipped here and saying so).

The plans here are written by hand (two launches of one `add` kernel over a view), so these
tests need numpy only; tests/compiler/test_gpu_plan.py builds real ones with TVM.
"""

import json
import lzma
import subprocess
import sys

import numpy as np
import pytest

from tlm.errors import TlmError

ADD = """extern "C" __global__ void __launch_bounds__(64) main_kernel(float* __restrict__ A, float* __restrict__ B,
                                                                float* __restrict__ C) {
  int i = blockIdx.x * 64 + threadIdx.x;
  if (i < 256) C[i] = A[i] + B[i];
}
"""
TARGET = {"kind": "cuda", "arch": "sm_90a", "max_shared_memory_per_block": 49152, "max_threads_per_block": 1024,
          "registers_per_block": 65536, "model": "h100"}


def _plan(tmp_path, block=64, expected_delta=0.0):
    """out = x.reshape(256) + 2 c, in two steps (c regenerated from a seed, x carried)."""
    from tlm.measure.cuda_plan import PLAN_VERSION, regenerate

    d = tmp_path / "plan"
    (d / "src").mkdir(parents=True)
    with lzma.open(d / "src" / "add.cu.xz", "wt") as f:
        f.write(ADD)
    x = np.arange(256, dtype=np.float32).reshape(4, 64) / 100
    regen = {"seed": 99, "mean": 0.25, "std": 0.5, "digest": "0"}
    c = regenerate([256], "float32", **regen)
    want = x.reshape(-1) + c + c + np.float32(expected_delta)
    np.savez_compressed(d / "data.npz", b0=x)
    np.savez_compressed(d / "expected.npz", out=want)
    kernel = {"name": "main_kernel", "args": [{"buf": 0}, {"buf": 1}, {"buf": 2}], "grid": [256 // block, 1, 1],
              "block": [block, 1, 1], "smem": 0}
    plan = {"version": PLAN_VERSION, "source": "hand", "target": TARGET, "card": "h100", "arch": "sm_90a", "seed": 0,
            "buffers": [{"id": 0, "shape": [4, 64], "dtype": "float32", "kind": "input", "exact": "b0"},
                        {"id": 1, "shape": [256], "dtype": "float32", "kind": "constant", "regen": regen},
                        {"id": 2, "shape": [256], "dtype": "float32", "kind": "view", "base": 0},
                        {"id": 3, "shape": [256], "dtype": "float32", "kind": "intermediate"},
                        {"id": 4, "shape": [256], "dtype": "float32", "kind": "output"}],
            "steps": [{"func": "add", "args": [2, 1, 3], "n_out": 1}, {"func": "add", "args": [3, 1, 4], "n_out": 1}],
            "functions": {"add": {"src": "src/add.cu.xz", "schedule": "dlight", "kernels": [kernel], "workspaces": []}},
            "output": 4, "outputs": [4], "schedules": {"db": 0, "dlight": 1, "default": 0},
            "expected": {"shape": [256], "dtype": "float32", "sampled": False, "scale": float(np.abs(want).max())},
            "tolerance": {"rtol": 1e-4, "atol": 1e-5, "model_rtol": 1e-3, "model_atol": 1e-4}}
    (d / "plan.json").write_text(json.dumps(plan))
    return d, plan, want


def _nvcc():
    from tlm.measure.nvcc import find_toolkit

    return find_toolkit()


needs_nvcc = pytest.mark.skipif(_nvcc() is None, reason="nvcc is not installed here (pip install -e '.[cuda]')")


def test_regenerated_constants_are_the_same_on_any_numpy():
    """The builder and the GPU machine regenerate a large constant from its seed: a counter
    hash (no numpy generator), at the original's mean and std, so both draw these values."""
    from tlm.measure.cuda_plan import regenerate

    x = regenerate([3, 4], "float32", seed=12345, mean=0.5, std=2.0)
    assert x.shape == (3, 4) and x.dtype == np.float32
    assert x.reshape(-1)[:4].tolist() == pytest.approx([0.18700798, 3.86604023, 3.71259165, 3.34162188], abs=1e-6)
    big = regenerate([1000, 100], "float32", seed=7, mean=0.5, std=2.0)
    assert abs(big.mean() - 0.5) < 0.02 and abs(big.std() - 2.0) < 0.02
    assert np.array_equal(big, regenerate([1000, 100], "float32", seed=7, mean=0.5, std=2.0))
    assert not np.array_equal(big, regenerate([1000, 100], "float32", seed=8, mean=0.5, std=2.0))


def test_reading_a_plan_and_its_data(tmp_path):
    from tlm.measure.cuda_plan import host_arrays, read_expected, read_plan, regenerate

    d, plan, want = _plan(tmp_path)
    assert read_plan(d) == plan
    host = host_arrays(plan, d)
    assert sorted(host) == [0, 1]  # inputs and constants; views and intermediates live on the GPU only
    assert np.array_equal(host[0], np.arange(256, dtype=np.float32).reshape(4, 64) / 100)
    assert np.array_equal(host[1], regenerate([256], "float32", seed=99, mean=0.25, std=0.5))
    assert np.array_equal(read_expected(plan, d), want)
    with pytest.raises(TlmError, match="not a GPU plan"):
        read_plan(tmp_path)
    (d / "plan.json").write_text(json.dumps(dict(plan, version=0)))
    with pytest.raises(TlmError, match="version"):
        read_plan(d)


def test_output_check(tmp_path):
    """Tolerance: cuda_measure's RTOL/ATOL scaled by the output's magnitude; a near miss still
    says whether it is within the whole-model compile's looser tolerance."""
    from tlm.measure.cuda_plan import check_output

    _, plan, want = _plan(tmp_path)
    assert check_output(want, plan, want)["checked"]
    limit = 1e-5 + 1e-4 * plan["expected"]["scale"]
    near = check_output(want + np.float32(3 * limit), plan, want)
    assert near["wrong"] and near["max_abs_diff"] == pytest.approx(3 * limit, rel=1e-2) and near["within_model_tolerance"]
    nan = want.copy()
    nan[5] = np.nan
    assert "NaN" in check_output(nan, plan, want)["why"]
    assert "elements" in check_output(want[:10], plan, want)["why"]
    sampled = dict(plan, expected=dict(plan["expected"], sampled=True))  # a large output travels as a sample
    from tlm.measure.cuda_measure import sample_index

    big = np.linspace(-1, 1, 10000, dtype=np.float32)
    assert check_output(big, sampled, big[sample_index(big.size)])["checked"]


def test_without_cupy_the_result_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    from tlm.measure import cuda_plan

    d, _, _ = _plan(tmp_path)
    monkeypatch.setitem(sys.modules, "cupy", None)  # `import cupy` raises ImportError
    assert cuda_plan.main([str(d), "--out", str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"error: {cuda_plan.NO_CUPY}" and "\n" not in err
    res = json.loads((tmp_path / "r" / "plan-result.json").read_text())
    assert res["error"] == cuda_plan.NO_CUPY and res["source"] == "hand"
    assert cuda_plan.main([str(tmp_path / "none"), "--out", str(tmp_path / "r2")]) == 1
    assert "not a GPU plan" in capsys.readouterr().err


@needs_nvcc
def test_compile_only_and_launch_limits(tmp_path, monkeypatch):
    """Every function compiled to a cubin with ptxas's resources; a block the card could not
    launch is refused before anything runs. The GPU machine has no TVM and no torch: neither
    is imported."""
    from tlm.measure.cuda_plan import run

    for name in ("tvm", "torch"):
        monkeypatch.setitem(sys.modules, name, None)  # `import tvm` raises ImportError

    d, _, _ = _plan(tmp_path)
    res = run(d, tmp_path / "r", measure=False, jobs=1, log=lambda *_: None)
    assert res["error"] is None and res["compile_errors"] == {} and res["compile_s"] > 0
    assert json.loads((tmp_path / "r" / "plan-result.json").read_text())["compile_cpu_s"] > 0
    d2, _, _ = _plan(tmp_path / "big", block=2048)
    res = run(d2, tmp_path / "r2", measure=False, jobs=1, log=lambda *_: None)
    assert "cannot launch" in res["compile_errors"]["add"] and "did not compile" in res["error"]
    # compiled ahead (tlm gpu precompile): the same, and no nvcc runs (here: none could, it is gone)
    from tlm.measure.precompile import precompile

    precompile([d, d2], jobs=1, log=lambda *_: None, progress=False)
    monkeypatch.setattr("tlm.measure.nvcc.require_toolkit", lambda: (_ for _ in ()).throw(AssertionError("nvcc ran")))
    res = run(d, tmp_path / "r3", measure=False, jobs=1, log=lambda *_: None)
    assert res["error"] is None and res["compiled_ahead"] == len(json.loads((d / "plan.json").read_text())["functions"])
    assert res["compile_cpu_s"] == 0
    res = run(d2, tmp_path / "r4", measure=False, jobs=1, log=lambda *_: None)
    assert "cannot launch" in res["compile_errors"]["add"] and res["compiled_ahead"] == 1


@needs_nvcc
def test_a_runner_that_fails_is_an_error_in_the_result(tmp_path, monkeypatch):
    """The measuring child dies (here: no CuPy in it): the parent writes the error, with the
    phase it died in, instead of a traceback."""
    from tlm.measure import cuda_plan

    d, _, _ = _plan(tmp_path)
    if cuda_plan.cupy_missing() is None:
        pytest.skip("CuPy is here: the child would run")
    monkeypatch.setattr(cuda_plan, "cupy_missing", lambda: None)
    res = cuda_plan.run(d, tmp_path / "r", seconds=120, jobs=1, log=lambda *_: None)
    assert res["error"].startswith("fault in device") and "cupy" in res["error"]
    assert "median_ms" not in res


@pytest.mark.gpu
def test_plan_runs_on_the_gpu(tmp_path):
    """On a machine with an NVIDIA GPU, CuPy and nvcc: checked, timed, per step, CUDA graph."""
    pytest.importorskip("cupy", reason="needs CuPy and an NVIDIA GPU")
    d, _, _ = _plan(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "tlm.measure.cuda_plan", str(d), "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=300)
    res = json.loads((tmp_path / "r" / "plan-result.json").read_text())
    assert proc.returncode == 0 and res["error"] is None, res
    assert res["checked"] and res["max_abs_diff"] <= res["limit"] and res["median_ms"] > 0
    assert len(res["steps"]) == 2 and res["graph_median_ms"] > 0
    d2, _, _ = _plan(tmp_path / "wrong", expected_delta=1.0)
    from tlm.measure.cuda_plan import run

    res = run(d2, tmp_path / "r2", log=lambda *_: None)
    assert res["wrong"] and res["max_abs_diff"] == pytest.approx(1.0, abs=1e-3)


def test_one_programs_kernels_are_cut_out_of_a_bundles_group_source():
    """A bundle's group file holds many programs (kernels prefixed p<id>_, TVM's forward
    declarations first); plan_assemble keeps one program's declarations and definitions, in order."""
    from tlm.errors import TlmError
    from tlm.measure.plan_assemble import program_source

    pre = '#include <cuda.h>\n__device__ float helper(float x) { return x; }\n'
    decl = 'extern "C" __global__ void __launch_bounds__({t}) {n}(float* __restrict__ a);\n'
    body = 'extern "C" __global__ void __launch_bounds__({t}) {n}(float* __restrict__ a) {{\n  a[0] = helper(1.f);\n}}\n\n'
    names = ["p1_main_kernel", "p1_main_kernel_1", "p10_main_kernel", "p2_main_kernel"]
    code = pre + "".join(decl.format(t=32, n=n) for n in names) + "".join(body.format(t=64, n=n) for n in names)
    got = program_source(code, "p1_", ["main_kernel", "main_kernel_1"])
    assert got == pre + "".join(decl.format(t=32, n=n) for n in names[:2]) + "".join(body.format(t=64, n=n) for n in names[:2])
    assert "p10_" not in program_source(code, "p1_", ["main_kernel"])
    with pytest.raises(TlmError, match="p2_main_kernel_1"):
        program_source(code, "p2_", ["main_kernel", "main_kernel_1"])
