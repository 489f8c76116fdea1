"""bench/ort_gap.py's results and README tables: the headline markers and a named CPU's block
(fast; made-up rows, no timing), and its kernels-alone timer on a tiny library built here."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import ort_gap  # noqa: E402


def _row(build: str, tlm_ms: float, run: str = "2026-12-02T08:00:00") -> dict:
    return {"threads": 2, "onnxruntime_note": None, "torch_compile_note": None, "pytorch_ms": 220.0,
            "torch_compile_ms": 206.0, "onnxruntime_ms": 175.0, "rounds": 9, "load": 2.0, "round_trip_ns": 200.0,
            "tlm_ms": tlm_ms, "workload": "bert_base", "build": build, "matches": True, "tasks": 18,
            "measurements": 0, "hardware": "znver3 (AMD EPYC, 2 cores)", "commit": "abc1234", "date": "2026-12-02",
            "records": None, "run": run, "command": "python bench/ort_gap.py --budget 0,10g --rounds 9", "readme": True}


def test_a_named_block_gets_this_runs_table_and_the_headline_stays(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("top\n<!-- ort-gap:begin -->\nold headline\n<!-- ort-gap:end -->\nmiddle\n"
                      "<!-- ort-gap:znver3:begin -->\nold znver3\n<!-- ort-gap:znver3:end -->\nend\n")
    ort_gap.write([_row("budget 0", 250.0), _row("budget 10g", 175.0)], tmp_path / "gap", readme, "znver3")
    text = readme.read_text()
    assert "old headline" in text and "old znver3" not in text
    assert "| bert_base | 250 | 175 | 220 | 206 | 175 | 1.00x | 1.26x | 1.18x | True |" in text
    assert text.startswith("top\n") and text.endswith("end\n")
    assert "| 2026-12-02 | znver3 (AMD EPYC, 2 cores) | abc1234 | bert_base | budget 10g | 175 |" in (
        tmp_path / "gap.md").read_text()


def test_the_readme_table_is_this_runs_not_an_older_ones(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("<!-- ort-gap:begin -->\n<!-- ort-gap:end -->\n")
    ort_gap.write([_row("budget 10g", 100.0, run="2026-12-03T08:00:00")], tmp_path / "gap", None)
    ort_gap.write([_row("budget 10g", 175.0)], tmp_path / "gap", readme)  # an earlier run, written later
    assert "| bert_base | 175 |" in readme.read_text()


def test_the_command_named_leaves_the_readme_flag_out():
    assert ort_gap._without_readme(["--budget", "0,10g", "--readme", "znver3", "--rounds", "9"]) == [
        "--budget", "0,10g", "--rounds", "9"]
    assert ort_gap._without_readme(["--rounds", "9", "--readme"]) == ["--rounds", "9"]
    assert ort_gap._without_readme(["--readme", "--rounds", "9"]) == ["--rounds", "9"]


def test_the_whole_call_against_its_kernels_alone_gets_a_column_in_runs_that_timed_it(tmp_path):
    row = _row("budget 10g", 175.0) | {"kernels_alone_ms": 160.0,
                                       "whole_over_alone": {"all": [1.09, 9], "near": [1.05, 7], "far": [1.4, 2]}}
    readme = tmp_path / "README.md"
    readme.write_text("<!-- ort-gap:begin -->\n<!-- ort-gap:end -->\n")
    ort_gap.write([_row("budget 0", 250.0) | {"whole_over_alone": None}, row], tmp_path / "gap", readme)
    text = readme.read_text()
    assert "TLM@10g whole / kernels alone (CPUs near, far) |" in text
    assert "| 1.00x | 1.26x | 1.18x | 1.09x (1.05x in 7, 1.40x in 2) | True |" in text
    assert "| True | 160 | 1.09x (1.05x in 7, 1.40x in 2) |" in (tmp_path / "gap.md").read_text()
    assert ort_gap._over_alone({"all": [1.2, 3], "near": [None, 0], "far": [1.2, 3]}) == "1.20x (-, 1.20x in 3)"


def test_kernels_alone_times_every_kernel_call_of_a_real_library(tmp_path):
    """A small Relax model built for this CPU (relax.build without fusion: four kernel calls, one
    kernel twice): the timer finds the calls through the VM's instrument and sums TVM's timer over
    them."""
    import numpy as np
    import pytest

    tvm = pytest.importorskip("tvm")
    from tvm import relax
    from tvm.script import ir as I, relax as R

    @I.ir_module
    class Tiny:
        @R.function
        def main(x: R.Tensor((64, 64), "float32"), w: R.Tensor((64, 64), "float32")):
            with R.dataflow():
                y = R.matmul(x, w)
                z = R.nn.relu(R.add(y, x))
                out = R.matmul(z, w)
                R.output(out)
            return out

    path = tmp_path / "tiny.so"
    relax.build(Tiny, target="llvm").export_library(str(path))
    lib = tvm.runtime.load_module(str(path))
    args = [tvm.runtime.tensor(np.ones((64, 64), "float32")) for _ in range(2)]
    timer = ort_gap.kernels_alone(lib, args)
    assert len(timer.kernels) == 4 and timer.kernels[0] == timer.kernels[-1]  # matmul, add, relu, matmul (unfused)
    assert not any(k.startswith("vm.") for k in timer.kernels)
    assert 0 < timer() < 1000 and 0 < timer() < 1000


def test_kernels_alone_and_vm_profile_say_what_they_cannot_time(tmp_path, capsys):
    """A VM built with exec_mode="compiled" calls its kernels without the instrument: one clear
    error, not a sum of zero (a division by it crashed serial_bytes); vm_profile given a shape the
    library does not take exits 2 with one line."""
    import numpy as np
    import pytest

    tvm = pytest.importorskip("tvm")
    from tvm import relax
    from tvm.script import ir as I, relax as R

    import vm_profile
    from tlm.errors import TlmError

    @I.ir_module
    class Tiny:
        @R.function
        def main(x: R.Tensor((8, 8), "float32")):
            with R.dataflow():
                out = R.nn.relu(x)
                R.output(out)
            return out

    path = tmp_path / "compiled.so"
    relax.build(Tiny, target="llvm", exec_mode="compiled").export_library(str(path))
    lib = tvm.runtime.load_module(str(path))
    with pytest.raises(TlmError, match="no kernel calls"):
        ort_gap.kernels_alone(lib, [tvm.runtime.tensor(np.ones((8, 8), "float32"))])
    assert vm_profile.main([str(path), "4,4", "--rounds", "1", "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("vm_profile: ") and not (tmp_path / "p.json").exists()
