"""The command line: JSON outputs and one-line errors with a non-zero exit for bad input."""

import json
import subprocess
import sys

import pytest

from tlm.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_workloads_test_split_json(capsys):
    code, out, _ = run(capsys, "workloads", "--split", "test", "--json")
    assert code == 0
    assert len(json.loads(out)) == 12


def test_workloads_table(capsys):
    code, out, _ = run(capsys, "workloads", "--split", "test")
    assert code == 0 and "bert_large-b4-s256" in out


def test_target_json(capsys):
    code, out, _ = run(capsys, "target", "--json")
    data = json.loads(out)
    assert code == 0 and data["target"]["kind"] == "llvm" and data["cores"] >= 1
    assert data["arch"] and isinstance(data["features"], list)


def test_target_prints_the_prompt_words(capsys):
    code, out, _ = run(capsys, "target", "--target", '{"kind": "llvm", "mcpu": "icelake-server", "num-cores": 2}')
    assert code == 0 and out.splitlines()[-1] == ("prompt words: llvm x86_64 avx512 512 avx avx2 fma f16c avx512f "
                                                  "avx512bw avx512vl avx512vnni cores 2 icelake-server")


@pytest.mark.tvm
def test_tasks_json_shape(capsys):
    code, out, _ = run(capsys, "tasks", "dcgan-b1", "--json")
    data = json.loads(out)
    assert code == 0
    assert set(data) == {"source", "target", "tasks"} and data["source"] == "dcgan-b1"
    assert {"name", "hash", "weight", "flops"} <= set(data["tasks"][0])


@pytest.mark.parametrize(
    "argv",
    [
        ["tasks", "no_such_model"],
        ["tasks", "/nonexistent/model.onnx"],
        ["tasks", "dcgan-b1", "--target", "not-a-target"],
        ["target", "--target", '{"kind": "llvm", "mcpu": "native"}'],
        ["compile", "dcgan-b1", "--db", ".", "--cold-pick", "-1"],
        ["gpu", "precompile", "/nonexistent/bundle"],
        ["gpu", "precompile", "--check", "/nonexistent/bundle"],
    ],
)
def test_bad_input_is_one_line_and_non_zero(capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code != 0
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("tlm: error:"), err
    assert "Traceback" not in err


@pytest.mark.tvm
def test_malformed_onnx_file_from_the_shell(tmp_path):
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"\x00\x01garbage")
    proc = subprocess.run([sys.executable, "-m", "tlm.cli", "tasks", str(bad)], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("tlm: error: malformed ONNX file")


def test_the_cli_says_tlm_warnings_in_one_line_and_hides_the_rest():
    """A fallback tlm warns of (a program replaced, an import done another way) reaches the shell
    user as one line; other libraries' warnings do not (the CLI once hid both)."""
    code = ("import warnings; from tlm.cli import main; from tlm.errors import TlmWarning; "
            "main(['workloads', '--split', 'test', '--json']); "
            "warnings.warn('tlm: a fallback\\n  taken', TlmWarning); warnings.warn('a library speaks')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == ["tlm: warning: a fallback taken"], proc.stderr


@pytest.fixture
def sigint_default():
    """SIGINT as Python sets it in a terminal (a CI job started in the background ignores it)."""
    import signal

    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def _wrapped_interrupt(args):
    """What TVM does with a Ctrl-C that lands in a Python callback: its own RuntimeError."""
    import os
    import signal
    import time

    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # the handler runs before this returns
    except KeyboardInterrupt:
        raise RuntimeError("") from None
    raise AssertionError("SIGINT did not interrupt")


def test_an_interrupt_wrapped_by_tvm_exits_130(capsys, monkeypatch, sigint_default):
    import argparse

    import tlm.cli
    from tlm.errors import interrupted

    parser = argparse.ArgumentParser()
    parser.add_argument("--debug", action="store_true")
    parser.set_defaults(func=_wrapped_interrupt)
    monkeypatch.setattr(tlm.cli, "build_parser", lambda: parser)
    code, _, err = run(capsys)
    assert code == 130 and err.strip() == "tlm: interrupted"
    assert not interrupted()  # reset when the command returns


def test_run_plan_stops_on_a_wrapped_interrupt(monkeypatch, sigint_default):
    from tlm.errors import sigint_flagged
    from tlm.eval.suites import Step, run_plan

    ran = []

    def runner(st):
        ran.append(st.id)
        _wrapped_interrupt(None)

    steps = [Step(id=f"s{i}", kind="peak", outputs=[f"/nonexistent/{i}"]) for i in range(2)]
    with sigint_flagged(), pytest.raises(KeyboardInterrupt):
        run_plan(steps, runner, log=lambda *_: None)
    assert ran == ["s0"]  # the second step never ran


def test_a_deferred_interrupt_waits_for_the_loop_to_check(sigint_default):
    """sigint_deferred: SIGINT inside only sets the flag (no exception inside TVM's calls);
    check_interrupt raises it; outside sigint_flagged the flag is cleared on the way out."""
    import os
    import signal
    import time

    from tlm.errors import check_interrupt, interrupted, sigint_deferred

    with pytest.raises(KeyboardInterrupt), sigint_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)  # would have raised here without the deferral
        assert interrupted()
        check_interrupt()
    assert not interrupted()
