"""The report's corpus section and end-to-end targets (tlm.eval.corpus): hand-written shards and
CSVs, no TVM, no measurement."""

import csv
import json
import lzma

from tlm.eval.corpus import corpus_lines, e2e_target_lines, write_corpus_table
from tlm.eval.report import write_report
from tlm.eval.tables import read_csv


def rec(t, lat, at, err=None):
    return {"t": t, "s": "x", "lat": [] if err else [lat], "err": err, "by": "tlm", "r": 0, "at": at}


def write_corpus(corpus):
    for hw, recs in (("llvm-a-2c", [rec("a", 2.0, 1), rec("b", 1.0, 2), rec("a", 1.0, 3), rec("b", 0, 4, "wrong")]),
                     ("llvm-b-2c", [rec("a", 3.0, 1)])):
        (corpus / hw).mkdir(parents=True)
        lines = [{"shard": 1, "target_key": hw}] + [{"task": {"hash": h, "weight": 1}} for h in "ab"] + recs
        with lzma.open(corpus / hw / f"uid-00000001-0000000{len(recs)}.jsonl.xz", "wt") as f:
            f.write("\n".join(json.dumps(x) for x in lines) + "\n")


def test_corpus_table_and_section(tmp_path):
    write_corpus(tmp_path / "corpus")
    out = tmp_path / "run"
    rows = write_corpus_table(out, tmp_path / "corpus", evaluated={"b", "z"})
    assert [r["hardware"] for r in rows] == ["llvm-a-2c", "llvm-b-2c", "all"]
    a, b, total = rows
    assert (a["records"], a["correct"], a["tasks"], a["first_pass_at"]) == (4, 3, 2, 2)
    assert b["first_pass_at"] is None and b["normalized"] is None
    assert (total["records"], total["correct"], total["tasks"]) == (5, 4, 2)
    assert total["evaluated_in_corpus"] == 1 and total["evaluated_tasks"] == 2  # "b" was trained on
    assert (out / "corpus" / "convergence.png").stat().st_size > 1000

    text = "\n".join(corpus_lines(read_csv(out / "corpus.csv"), out))
    assert "| measured programs committed | >= 100,000 | 5 | missed |" in text
    assert "| training tasks | >= 1,000 | 2 | missed |" in text
    assert "| evaluated tasks in the corpus (of 2) | 0 | 1 | missed |" in text
    assert "| llvm-b-2c | 1 | 1 | 1 | not yet | - |" in text and "| all | 5 | 4 | 2 | - | - |" in text
    assert "![corpus/convergence.png](corpus/convergence.png)" in text

    # The report shows the section only for a suite that asks for it (config "corpus").
    (out / "config.json").write_text(json.dumps({"suite": "full", "corpus": True}))
    assert "## 6. The corpus" in open(write_report(str(out))).read()
    (out / "config.json").write_text(json.dumps({"suite": "quick"}))
    assert "## 6. The corpus" not in open(write_report(str(out))).read()


def test_no_corpus(tmp_path):
    rows = write_corpus_table(tmp_path / "run", tmp_path / "missing", evaluated=set())
    assert rows == [] and "(no corpus" in corpus_lines([], tmp_path / "run")[-1]


def test_e2e_targets(tmp_path):
    e2e = [{"workload": w, "method": m, "e2e_ms": v} for w, m, v in (
        ("bert_tiny", "metaschedule@64g", 1.0), ("bert_tiny", "tlm@0", 1.2), ("bert_tiny", "tlm@10g", 0.9),
        ("dcgan", "metaschedule@64g", 50.0), ("dcgan", "tlm@0", 90.0), ("dcgan", "tlm@10g", 52.0),
        ("dcgan", "pytorch", 7.0))]
    with open(tmp_path / "e2e.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["workload", "method", "e2e_ms"])
        w.writeheader()
        w.writerows(e2e)
    text = "\n".join(e2e_target_lines(read_csv(tmp_path / "e2e.csv")))
    assert "| TLM@10g vs MS@64g | bert_tiny | >= 1 | 1.11 | met |" in text
    assert "| TLM@10g vs MS@64g | dcgan | >= 1 | 0.96 | missed |" in text
    assert "| TLM@0 vs MS@64g | bert_tiny | >= 0.8 | 0.83 | met |" in text
    assert "| TLM@0 vs MS@64g | dcgan | >= 0.8 | 0.56 | missed |" in text
    assert "End-to-end" not in text and "targets" in text
    # No MetaSchedule@64g column (the quick suite's 16g): no targets table.
    assert e2e_target_lines([{"workload": "x", "method": "metaschedule@16g", "e2e_ms": "1"},
                             {"workload": "x", "method": "tlm@10g", "e2e_ms": "1"}]) == []
