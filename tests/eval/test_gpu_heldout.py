"""The held-out GPU benchmark's bookkeeping: proposals in order, best of the first k, the report.

The report's numbers here are made up (no GPU measured them): a unit test of the arithmetic."""

import gzip
import json

import pytest

from tlm.eval.gpu_heldout import best_of, contenders, heldout_report, report_markdown


def test_best_of_the_first_k_in_measured_order():
    lat = [3.0, None, 1.0, 2.0]
    assert best_of(lat, 0) == 3.0 and best_of(lat, 1) == 3.0 and best_of(lat, 2) == 3.0
    assert best_of(lat, 3) == 1.0 and best_of(lat, 32) == 1.0
    assert best_of([None], 1) is None and best_of([], 10) is None


def test_contenders_of_a_task():
    row = contenders({"tlm": [4.0, 2.0], "metaschedule": [5.0, 3.0]}, {"random": [9.0] * 12}, 6.0)
    assert row["dlight"] == 6.0 and row["tlm@0"] == 4.0 and row["tlm@1"] == 4.0 and row["tlm@10"] == 2.0
    assert row["metaschedule@64"] == 3.0 and row["random@10"] == 9.0
    assert contenders({}, {}, 1.0)["tlm@10"] is None


def _bundle(path, tasks, results):
    path.mkdir(parents=True)
    with gzip.open(path / "manifest.json.gz", "wt") as f:
        json.dump({"tasks": tasks}, f)
    (path.parent / f"{path.name}-results").mkdir()
    (path.parent / f"{path.name}-results" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    return path, path.parent / f"{path.name}-results"


def test_report_sums_per_workload_and_charges_dlight_where_a_contender_has_nothing(tmp_path):
    a = {"hash": "a", "name": "matmul", "kind": "matmul", "flops": 1.0,
         "candidates": [{"id": 0, "proposer": "tlm"}, {"id": 1, "proposer": "tlm"}, {"id": 2, "proposer": "metaschedule"}]}
    b = {"hash": "b", "name": "softmax", "kind": "softmax", "flops": 1.0, "candidates": [{"id": 0, "proposer": "metaschedule"}]}
    rows = [{"t": "a", "k": "ref", "lat": [10e-6], "err": None}, {"t": "a", "k": 0, "lat": [8e-6], "err": None},
            {"t": "a", "k": 1, "lat": [4e-6], "err": None}, {"t": "a", "k": 2, "lat": [5e-6], "err": None},
            {"t": "b", "k": "ref", "lat": [2e-6], "err": None}, {"t": "b", "k": 0, "lat": [], "err": "WrongResult: x"}]
    bundle, results = _bundle(tmp_path / "p", [a, b], rows)
    rb, rr = _bundle(tmp_path / "r", [dict(a, candidates=[{"id": 0, "proposer": "random"}]), dict(b, candidates=[])],
                     [{"t": "a", "k": 0, "lat": [20e-6], "err": None}])
    props = tmp_path / "props"
    props.mkdir()
    (props / "tasks.json").write_text(json.dumps({"calls": {"m": {"a": 2.0, "b": 1.0}}, "tasks": {}}))
    rep = heldout_report(bundle, results, rb, rr, props)
    by = {r["task"]: r["us"] for r in rep["tasks"]}
    assert by["a"]["tlm@0"] == pytest.approx(8) and by["a"]["tlm@1"] == pytest.approx(8)
    assert "tlm@10" not in by["a"]  # two proposals a task: no column claims ten
    assert by["b"]["metaschedule@64"] == pytest.approx(2)  # its only program was wrong: dlight's
    assert rep["charged_dlight"]["metaschedule@64"] == 1 and rep["charged_dlight"]["tlm@0"] == 1
    assert rep["summed_ms"]["m"]["tlm@1"] == pytest.approx((2 * 8 + 2) / 1e3)
    assert rep["summed_ms"]["m"]["random@10"] == pytest.approx((2 * 20 + 2) / 1e3)
    text = report_markdown(rep, "tlm gpu-heldout report ...")
    assert "| m (2/2 tasks) |" in text and "tlm@1 vs metaschedule@64" in text

    # a new model's proposals measured alone, MetaSchedule's taken from the earlier run of the same tasks
    nb, nr = _bundle(tmp_path / "n", [dict(a, candidates=[{"id": 0, "proposer": "tlm"}]), dict(b, candidates=[])],
                     [{"t": "a", "k": "ref", "lat": [10e-6], "err": None}, {"t": "a", "k": 0, "lat": [3e-6], "err": None},
                      {"t": "b", "k": "ref", "lat": [2e-6], "err": None}])
    rep = heldout_report(nb, nr, rb, rr, props, metaschedule=(bundle, results))
    by = {r["task"]: r["us"] for r in rep["tasks"]}
    assert by["a"]["tlm@0"] == pytest.approx(3) and by["a"]["metaschedule@64"] == pytest.approx(5)
    assert by["b"]["metaschedule@64"] == pytest.approx(2)  # wrong there too: dlight's

    # a held-out bundle without random programs, given as its own random bundle: that target is not judged
    a10 = dict(a, candidates=[{"id": i, "proposer": "tlm"} for i in range(10)])
    tb, tr = _bundle(tmp_path / "t", [a10], [{"t": "a", "k": "ref", "lat": [10e-6], "err": None}]
                     + [{"t": "a", "k": i, "lat": [(20 - i) * 1e-6], "err": None} for i in range(10)])
    rep = heldout_report(tb, tr, tb, tr, props)
    assert rep["charged_dlight"]["random@10"] == 1 == len(rep["tasks"])
    (check,) = [t for t in rep["targets"] if t["col"] == "random@10"]
    assert check["got"] is None and check["absent"] == ["random@10"]
    assert "- tlm@10 vs random@10: not measured (random@10: no program in this run)" in report_markdown(rep, "...")

    # the same tasks' later proposals from a second bundle and run, appended in order: TLM@32 of two parts
    later = dict(a, candidates=[{"id": i, "proposer": "tlm"} for i in range(22)])
    lb, lr = _bundle(tmp_path / "l", [later], [{"t": "a", "k": i, "lat": [(30 - i) * 1e-6], "err": None} for i in range(22)])
    rep = heldout_report(tb, tr, tb, tr, props, more=[(lb, lr)])
    (row,) = [r["us"] for r in rep["tasks"]]
    assert row["tlm@10"] == pytest.approx(11) and row["tlm@32"] == pytest.approx(9)  # 30 - 21, the 32nd program


@pytest.mark.tvm
def test_metaschedule_first_round_gives_programs_of_the_spaces():
    """MetaSchedule's first candidates on a GPU task, without a GPU, as sentences of tlm's spaces."""
    import workloads_tir as W

    from tlm.eval.gpu_heldout import _ms_sentences
    from tlm.graph.target import resolve_target
    from tlm.space.language import parse

    h100 = resolve_target("h100")
    # the transpose's MetaSchedule traces are simplified (its unused root block is gone): the same programs
    for task in (W.matmul(64), W.transpose()):
        sentences, error = _ms_sentences(task, h100, 8, seed=3)
        assert error is None and 1 <= len(sentences) <= 8 and len(set(sentences)) == len(sentences)
        for s in sentences:
            assert parse(s, task, h100).ok


def test_a_part_of_the_proposals_as_bundle_candidates(tmp_path, capsys):
    """`tlm gpu-heldout candidates`: one workload's tasks, each proposer's slice in proposal order."""
    from tlm.cli import main
    from tlm.eval.gpu_heldout import write_candidates

    (tmp_path / "proposals").mkdir()
    (tmp_path / "tasks.json").write_text(json.dumps({"calls": {"a": {"t1": 1.0}, "b": {"t1": 1.0, "t2": 2.0}}}))
    for t in ("t1", "t2"):
        for proposer, n in (("tlm", 5), ("metaschedule", 3)):
            (tmp_path / "proposals" / f"{t}-{proposer}.json").write_text(json.dumps(
                {"task": t, "proposer": proposer, "sentences": [f"{t} {proposer} {i}" for i in range(n)], "error": None}))
    path = write_candidates(tmp_path, tmp_path / "a.jsonl", ["a"], {"tlm": (0, 2)})
    got = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["sentence"] for x in got] == ["t1 metaschedule 0", "t1 metaschedule 1", "t1 metaschedule 2",
                                            "t1 tlm 0", "t1 tlm 1"]
    assert len(write_candidates(tmp_path).read_text().splitlines()) == 16  # all, as propose writes them
    assert main(["gpu-heldout", "candidates", str(tmp_path), "--workloads", "b", "--tlm", "2:",
                 "--metaschedule", ":0", "--out", str(tmp_path / "b.jsonl")]) == 0
    got = [json.loads(x)["sentence"] for x in (tmp_path / "b.jsonl").read_text().splitlines()]
    assert got == [f"{t} tlm {i}" for t in ("t1", "t2") for i in (2, 3, 4)]
    assert main(["gpu-heldout", "candidates", str(tmp_path), "--workloads", "c", "--out", str(tmp_path / "c")]) != 0
    assert "proposed no task of ['c']" in capsys.readouterr().err
