"""bench/gpu_device.sh's RESUME: a bundle measured in part on an earlier machine is measured only
where it was not, and only the new lines come back.

A unit test of the shell script's bookkeeping: `python3` and `nvidia-smi` are stubs on PATH (the
runner itself needs a GPU and is tested in tests/measure); the stub runner appends one line per
call to the results file it was given, as the real one appends one per program."""
from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

STUB_PYTHON = """#!/usr/bin/env bash
# stub: `python3 -m tlm.measure.cuda_runner BUNDLE --out DIR ...` appends one result line
if [ "$2" = tlm.measure.cuda_runner ]; then
  mkdir -p "$5"; n=$(cat "$5/results.jsonl" 2>/dev/null | wc -l)
  echo "{\\"t\\": \\"new\\", \\"k\\": $n}" >> "$5/results.jsonl"; echo '{"programs": 1}' > "$5/summary.json"
fi
exit 0
"""


def _stub(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_resume_seeds_the_runner_and_returns_only_new_lines(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _stub(bin_dir / "python3", STUB_PYTHON)
    _stub(bin_dir / "nvidia-smi", "#!/usr/bin/env bash\necho stub\n")
    run_dir = tmp_path / "run-earlier"
    run_dir.mkdir()
    (run_dir / "bundle-x-results.jsonl").write_text('{"t": "a", "k": 0}\n{"t": "a", "k": 1}\n')
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", OUT=str(out), PYTORCH="0",
               RESUME=str(run_dir), TMPDIR=str(tmp))
    script = (ROOT / "bench/gpu_device.sh").read_text().replace("/tmp/tlm-", f"{tmp}/tlm-")
    (tmp_path / "gpu_device.sh").write_text(script)
    res = subprocess.run(["bash", str(tmp_path / "gpu_device.sh"), str(tmp_path / "bundle-x")], env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "2 lines measured before (RESUME)" in (out / "log.txt").read_text()
    seeded = (tmp / "tlm-run/bundle-x/results.jsonl").read_text().splitlines()
    assert len(seeded) == 3 and seeded[0] == '{"t": "a", "k": 0}'  # the runner saw the earlier lines
    assert (out / "bundle-x-results.jsonl").read_text().splitlines() == ['{"t": "new", "k": 2}']


def test_assemble_takes_a_number_as_first_and_a_path_as_only(tmp_path: Path) -> None:
    """ASSEMBLE="NAME=PLAN:BUNDLE:PROPOSER[:FIRST|:FILE]": a number is --first, anything else
    --only (a candidates file: the cost model's top 10); the stub records plan_assemble's arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.txt"
    _stub(bin_dir / "python3", f'#!/usr/bin/env bash\n[ "$2" = tlm.measure.plan_assemble ] && echo "$@" >> {log}\nexit 0\n')
    _stub(bin_dir / "nvidia-smi", "#!/usr/bin/env bash\necho stub\n")
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", OUT=str(out), PYTORCH="0", TMPDIR=str(tmp),
               ASSEMBLE="w-tlm=p:b:tlm:10 w-tlmcm=p:b:tlm:work/w-cm10.jsonl w-all=p:b:metaschedule")
    script = (ROOT / "bench/gpu_device.sh").read_text().replace("/tmp/tlm-", f"{tmp}/tlm-")
    (tmp_path / "gpu_device.sh").write_text(script)
    res = subprocess.run(["bash", str(tmp_path / "gpu_device.sh")], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    calls = log.read_text().splitlines()
    assert "--proposer tlm --first 10 --out" in calls[0]
    assert "--proposer tlm --only work/w-cm10.jsonl --out" in calls[1]
    assert "--proposer metaschedule --out" in calls[2] and "--first" not in calls[2] and "--only" not in calls[2]
