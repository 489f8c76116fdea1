"""The corpus' convergence curve (tlm.search.corpus_curve): from hand-written shards, no TVM."""

import json
import lzma

import pytest

from tlm.search.corpus_curve import curve, write_curves


def rec(t, lat, at, err=None):
    return {"t": t, "s": "x", "lat": [] if err else [lat], "err": err, "by": "tlm", "r": 0, "at": at}


def test_curve_starts_when_every_task_is_measured_and_never_rises():
    w = {"a": 2.0, "b": 1.0, "c": 1.0}
    recs = [rec("a", 4.0, 1), rec("b", None, 2, "wrong"), rec("a", 3.0, 3), rec("b", 2.0, 4),
            rec("c", 1.0, 5), rec("a", 1.0, 6), rec("b", 5.0, 7), rec("c", 0.5, 8)]
    c = curve("hw", w, recs, step=1)
    assert c.reference == 5 and c.tasks == 3 and c.records == 8
    norm = [p["normalized"] for p in c.points]
    assert norm[:4] == [None] * 4
    ref = 2 * 3.0 + 2.0 + 1.0
    assert norm[4] == 1.0 and norm[5] == pytest.approx((2 * 1.0 + 3.0) / ref)
    assert c.final == pytest.approx((2 * 1.0 + 2.0 + 0.5) / ref)
    assert all(x >= y for x, y in zip(norm[4:], norm[5:]))
    # A task of the universe never measured here: no first pass yet, no curve.
    c = curve("hw", w, recs, step=1, universe={"a", "b", "c", "d"})
    assert c.reference is None and c.final is None and c.points[-1]["tasks_measured"] == 3


def test_write_curves_from_shards(tmp_path):
    corpus = tmp_path / "corpus"
    for hw, recs in (("llvm-a-2c", [rec("a", 2.0, 1), rec("b", 1.0, 2), rec("a", 1.0, 3)]),
                     ("llvm-b-2c", [rec("a", 3.0, 1)]), ("cuda-h200", [rec("g", 1.0, 1), rec("g", 0.5, 2)])):
        (corpus / hw).mkdir(parents=True)
        lines = [{"shard": 1, "target_key": hw}] + [{"task": {"hash": h, "weight": 1}} for h in "ab"] + recs
        with lzma.open(corpus / hw / f"uid-00000001-0000000{len(recs)}.jsonl.xz", "wt") as f:
            f.write("\n".join(json.dumps(x) for x in lines) + "\n")
    curves = {c.hardware: c for c in write_curves(corpus, tmp_path / "out", step=1)}
    assert curves["llvm-a-2c"].reference == 2 and curves["llvm-a-2c"].final == pytest.approx(2 / 3)
    assert curves["llvm-b-2c"].reference is None  # b never measured on this CPU
    # a GPU's tasks are not the CPUs' (nor theirs its): each kind's first pass is its own
    assert curves["cuda-h200"].reference == 1 and curves["cuda-h200"].final == pytest.approx(0.5)
    assert (tmp_path / "out" / "convergence.png").stat().st_size > 1000
    rows = (tmp_path / "out" / "convergence-llvm-a-2c.csv").read_text().splitlines()
    assert rows[0] == "measurements,tasks_measured,tasks_in_sum,total_latency_s,normalized" and len(rows) == 4
