"""bench/gpu_picks.py: each picker's summed latency against dlight's, the donor where one came first.

Fast: a made-up bundle and run (no TVM, no GPU measured these numbers)."""

import gzip
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from gpu_picks import markdown, report  # noqa: E402


def test_picks_summed_per_workload_with_donors_and_dlight_charged(tmp_path):
    def task(h, cands):
        return {"hash": h, "name": f"t{h}", "candidates": [{"id": i, "proposer": p} for i, p in enumerate(cands)]}

    bundle = tmp_path / "b"
    bundle.mkdir()
    with gzip.open(bundle / "manifest.json.gz", "wt") as f:
        json.dump({"tasks": [task("a", ["tlm-cm", "donor", "new-cm"]), task("b", ["tlm-cm", "new-cm"])]}, f)
    run = tmp_path / "run"
    run.mkdir()
    lines = [("a", "ref", 10), ("a", 0, 8), ("a", 1, 4), ("a", 2, 6), ("b", "ref", 2), ("b", 0, 1)]
    (run / "results.jsonl").write_text("".join(json.dumps({"t": t, "k": k, "lat": [x * 1e-6], "err": None}) + "\n"
                                               for t, k, x in lines)
                                       + json.dumps({"t": "b", "k": 1, "lat": [], "err": "WrongResult: x"}) + "\n")
    props = tmp_path / "p"
    props.mkdir()
    (props / "tasks.json").write_text(json.dumps({"calls": {"w": {"a": 2.0, "b": 1.0}}}))
    rep = report(bundle, run, [props])
    assert rep["columns"] == ["dlight", "new-cm", "tlm-cm", "tlm-cm+donor"]
    w = rep["summed_ms"]["w"]
    assert w["dlight"] == pytest.approx(0.022) and w["tlm-cm"] == pytest.approx(0.017)
    assert w["tlm-cm+donor"] == pytest.approx(0.009)  # a's donor (4 us) twice, b's own pick (no donor)
    assert w["new-cm"] == pytest.approx(0.014)  # b's wrong: dlight's 2 us
    assert rep["charged_dlight"] == {"new-cm": 1}
    text = markdown(rep, "python bench/gpu_picks.py ...", "NVIDIA H100")
    assert "| w | 2 | 0.022 | 0.014 | 0.017 | 0.009 |" in text
    # each task once: dlight 12 us; new-cm 6 + 2 (b charged dlight's), tlm-cm 8 + 1, tlm-cm+donor 4 + 1
    assert "- new-cm: 1.500x (met)" in text and "- tlm-cm: 1.333x (missed)" in text
    assert "- tlm-cm+donor: 2.400x (met)" in text
