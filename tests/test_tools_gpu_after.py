"""tools/gpu_after.sh: a GPU call's files filed under a run folder whose name says the card.

Fast: made-up call folders (no GPU ran them); only the checks before any report is made."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _after(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "tools" / "gpu_after.sh"), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


def _call(path: Path, card: str = "H100 80GB HBM3") -> Path:
    path.mkdir()
    (path / "log.txt").write_text(f"name, driver_version\nNVIDIA {card}, 580.159.04\n")
    return path


def test_bad_arguments_get_one_line_and_no_folder(tmp_path):
    files = _call(tmp_path / "files")
    for args, said in ((("only-one",), "usage:"), ((str(tmp_path / "none"), str(tmp_path / "run-2026-12-08-h100-a")), "not a folder"),
                       ((str(files), str(tmp_path / "run-a")), "name the run"),
                       ((str(files), str(tmp_path / "run-2026-12-08-h200-a")), "the log says h100")):
        res = _after(*args)
        assert res.returncode != 0 and said in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not list(tmp_path.glob("run-*"))  # nothing filed on a refusal
    res = _after(str(_call(tmp_path / "nolog", card="A100")), str(tmp_path / "run-2026-12-08-h100-b"))
    assert res.returncode != 0 and "names no H100 or H200" in res.stderr


def test_a_call_with_nothing_to_report_is_filed_and_said(tmp_path):
    files = _call(tmp_path / "files", card="H200")
    run = tmp_path / "run-2026-12-08-h200-a"
    res = _after(str(files), str(run))
    assert res.returncode == 1 and "holds none of the calls' results" in res.stderr
    assert (run / "log.txt").read_text() == (files / "log.txt").read_text()
