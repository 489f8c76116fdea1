"""The CUDA measurer of a machine with a GPU (tlm.measure.cuda_local), tested without one.

Lowering, the one-batch bundle, the references and (where the `cuda` extra is installed) nvcc's
cubins are real; the GPU's part, the runner's measurements, is stood in for by `_stand_in`, which
writes result lines as the runner does with made-up numbers (said here: no GPU measured them).
On a GPU machine the same runner measures bundles (tests/measure/test_gpu_bundle.py, marked gpu).
"""

import json
import random

import pytest

import workloads_tir as W
from tlm.errors import TlmError

pytestmark = pytest.mark.tvm


@pytest.fixture(scope="module")
def h100():
    from tlm.graph.target import resolve_target

    return resolve_target("h100")


def _stand_in(seen: list):
    """A stand-in for tlm.measure.cuda_runner.run: compiles the batch with the real nvcc when it is
    here, then writes made-up results: the first program of each task timed, the second wrong,
    the rest never reached (as at a deadline)."""
    from tlm.measure.cuda_measure import read_manifest
    from tlm.measure.cuda_runner import run as real_run
    from tlm.measure.nvcc import find_toolkit

    def run(bundle, out, seconds, jobs, hang_seconds, log):
        manifest = read_manifest(bundle)
        compiled = None
        if find_toolkit() is not None:
            compiled = real_run(bundle, out, seconds, jobs, hang_seconds, log=log, measure=False)
        lines = []
        for e in manifest["tasks"]:
            assert (bundle / e["check"]).exists() and (bundle / e["ref"]["src"]).exists()
            assert all((bundle / g["src"]).exists() for g in e["groups"])
            lines.append({"t": e["hash"], "k": "ref", "lat": [1e-5], "err": None})
            for c in e["candidates"][:2]:
                lines.append({"t": e["hash"], "k": c["id"], "lat": [] if c["id"] else [2e-5, 3e-5],
                              "err": "WrongResult: buffer 2: 7 of 256 elements differ" if c["id"] else None})
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        seen.append({"manifest": manifest, "compiled": compiled})
        return {"child_restarts": 0}

    return run


def _programs(task, target, n, seed=0):
    from tlm.space.design import random_program

    out = []
    for s in range(400):
        prog = random_program(task, target, random.Random(seed * 1000 + s))
        if prog.ok:
            out.append(prog)
        if len(out) == n:
            return out
    raise AssertionError("too few valid programs")


def test_here_there_is_no_gpu_to_measure_on(h100):
    from tlm.measure.cuda_local import local_gpu

    why = local_gpu(h100)
    if why is None:
        pytest.skip("this machine has the GPU: nothing is missing")
    assert "\n" not in why and len(why) < 300


def test_a_batch_is_lowered_bundled_and_read_back_in_order(h100):
    from tlm.measure.cuda_local import CudaMeasurer
    from tlm.measure.measurer import Candidate

    a, b = W.matmul(32), W.softmax(16, 100)
    pa, pb = _programs(a, h100, 3), _programs(b, h100, 2, seed=1)
    cands = ([Candidate(a, schedule=p.sch, proposer="tlm", sentence=f"s{i}") for i, p in enumerate(pa)]
             + [Candidate(a, trace=[["nonsense"]], proposer="tlm")]
             + [Candidate(b, schedule=p.sch, proposer="random") for p in pb])
    seen: list = []
    with CudaMeasurer(h100, runner=_stand_in(seen)) as m:
        res = m.measure(cands)
        again = m.measure(cands[:1])  # a second batch reuses the task's reference files
    assert [r.candidate for r in res] == cands
    assert [r.ok for r in res] == [True, False, False, False, True, False]
    assert res[0].latencies_s == [2e-5, 3e-5] and res[0].trace_json is not None and res[0].build_s > 0
    assert res[1].error.startswith("WrongResult") and "deadline" in res[2].error
    assert res[3].error.startswith("ScheduleError")
    assert res[5].error.startswith("WrongResult")
    assert again[0].ok and len(seen) == 2
    first = seen[0]["manifest"]
    assert [e["hash"] for e in first["tasks"]] == [a.hash, b.hash]
    assert [c["sentence"] for c in first["tasks"][0]["candidates"]] == ["s0", "s1", "s2"]
    if seen[0]["compiled"] is not None:  # the real nvcc compiled every file of the batch
        assert seen[0]["compiled"]["compile_errors"] == 0


def test_tuning_for_a_gpu_measures_there_and_commits_records(h100, tmp_path, monkeypatch):
    """`tlm tune --target h100 --budget B` on a machine with the GPU: the TLM tuner's programs go
    through the CUDA measurer into the database (the GPU and its runner stood in, as above)."""
    import tlm.measure.cuda_local as local
    import tlm.measure.cuda_runner as runner
    from tlm.measure.database import open_db
    from tlm.search.tune import tune

    task = W.matmul(32)
    with pytest.raises(TlmError, match="needs this machine's NVIDIA GPU"):
        tune([task], "tlm", 2, db=str(tmp_path / "none"), target="h100", progress=False)
    seen: list = []
    monkeypatch.setattr(local, "local_gpu", lambda target: None)
    monkeypatch.setattr(runner, "run", _stand_in(seen))
    tune([task], "tlm", 2, db=str(tmp_path / "db"), target="h100", progress=False)
    with open_db(str(tmp_path / "db")) as db:
        recs = [r for r in db.records(task.hash, h100.key) if r.proposer == "tlm"]
    assert len(recs) == 2 and all(r.error is None and r.median_s == 2.5e-5 or r.error.startswith("WrongResult")
                                  for r in recs)
    assert all(r.sentence and r.trace_json for r in recs) and seen
