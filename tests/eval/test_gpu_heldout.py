"""The held-out GPU benchmark's bookkeeping: proposals in order, best of the first k, the report.

The report's numbers here are made up (no GPU measured them): a unit test of the arithmetic."""

import gzip
import json

import pytest

from tlm.eval.gpu_heldout_report import best_of, contenders, heldout_report, report_markdown


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


def test_the_cost_models_top_k_as_candidates_and_their_parts(tmp_path, capsys):
    """`--cm-top N` adds the proposals a cost model ranks in its first N to the slice (in proposal
    order); `--except FILE` leaves out another part's; the GPU side reads the file with --only."""
    from tlm.cli import main
    from tlm.eval.gpu_heldout import write_candidates
    from tlm.measure.cuda_measure import named_programs

    (tmp_path / "proposals").mkdir()
    (tmp_path / "tasks.json").write_text(json.dumps({"calls": {"a": {"t1": 1.0}}}))
    for proposer, n in (("tlm", 6), ("metaschedule", 2)):
        (tmp_path / "proposals" / f"t1-{proposer}.json").write_text(json.dumps(
            {"task": "t1", "proposer": proposer, "sentences": [f"t1 {proposer} {i}" for i in range(n)], "error": None}))
    ranked = {"t1": [4, 1, 5, 0, 2, 3]}  # the cost model's order of the six TLM proposals
    top = write_candidates(tmp_path, tmp_path / "top.jsonl", None, {"tlm": (0, 0), "metaschedule": (0, 0)}, ranked, 2)
    assert [json.loads(x)["sentence"] for x in top.read_text().splitlines()] == ["t1 tlm 1", "t1 tlm 4"]
    main_part = write_candidates(tmp_path, tmp_path / "main.jsonl", None, {"tlm": (0, 2)}, ranked, 3)
    got = [json.loads(x)["sentence"] for x in main_part.read_text().splitlines()]
    assert got == ["t1 metaschedule 0", "t1 metaschedule 1", "t1 tlm 0", "t1 tlm 1", "t1 tlm 4", "t1 tlm 5"]
    rest = write_candidates(tmp_path, tmp_path / "rest.jsonl", None, {"tlm": (2, None), "metaschedule": (0, 0)},
                            exclude=named_programs(main_part))
    assert [json.loads(x)["sentence"] for x in rest.read_text().splitlines()] == ["t1 tlm 2", "t1 tlm 3"]
    assert named_programs(top) == {("t1", "t1 tlm 1"), ("t1", "t1 tlm 4")}
    with pytest.raises(Exception, match="no cost-model order"):
        write_candidates(tmp_path, tmp_path / "x.jsonl", None, None, {}, 2)
    assert main(["gpu-heldout", "candidates", str(tmp_path), "--cm-top", "2", "--out", str(tmp_path / "y")]) != 0
    assert "--cm-top needs --cost-model" in capsys.readouterr().err
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(Exception, match="names no program"):
        named_programs(tmp_path / "empty.jsonl")


def test_report_tlm10_as_the_tuner_measures_it(tmp_path):
    """tlm@0+cm is the cost model's first, tlm@10+cm the best of its first ten (orders given: made up)."""
    cands = [{"id": i, "proposer": "tlm"} for i in range(12)]
    a = {"hash": "a", "name": "matmul", "kind": "matmul", "flops": 1.0, "candidates": cands}
    lat = [20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 3, 2]  # us; the first ten's best is 11, the last two faster
    bundle, results = _bundle(tmp_path / "p", [a], [{"t": "a", "k": "ref", "lat": [10e-6], "err": None}]
                              + [{"t": "a", "k": i, "lat": [x * 1e-6], "err": None} for i, x in enumerate(lat)])
    props = tmp_path / "props"
    props.mkdir()
    (props / "tasks.json").write_text(json.dumps({"calls": {"m": {"a": 1.0}}, "tasks": {}}))
    order = [3, 10, 0, 1, 2, 4, 5, 6, 7, 8, 9, 11]
    rep = heldout_report(bundle, results, bundle, results, props, {"a": order})
    (row,) = [r["us"] for r in rep["tasks"]]
    assert row["tlm@10"] == pytest.approx(11) and row["tlm@0+cm"] == pytest.approx(17)
    assert row["tlm@10+cm"] == pytest.approx(3)  # the 11th proposal is in the cost model's top ten
    (check,) = [t for t in rep["targets"] if t["row"] == "tlm@10+cm"]
    assert check["col"] == "metaschedule@64" and check["need"] == 1.0


@pytest.mark.tvm
def test_the_shipped_gpu_cost_model_orders_a_tasks_proposals(tmp_path):
    """tlm.eval.gpu_ranked: every proposal once, the ones that name no program last."""
    import workloads_tir as W

    from tlm.eval.gpu_ranked import proposal_orders
    from tlm.graph.target import resolve_target
    from tlm.model.lm import repo_root
    from tlm.measure.gpu_bundle import sample_programs

    h100 = resolve_target("h100")
    task = W.matmul(64)
    sentences = [s for _, s, _ in sample_programs(task, h100, 4, seed=1, seconds=60, max_tries=50)[0]]
    assert len(sentences) >= 2
    (tmp_path / "proposals").mkdir()
    (tmp_path / "config.json").write_text(json.dumps({"target": "h100", "workloads": []}))
    (tmp_path / "proposals" / f"{task.hash}-tlm.json").write_text(json.dumps(
        {"task": task.hash, "proposer": "tlm", "sentences": sentences[:1] + ["not a program"] + sentences[1:]}))
    (order,) = proposal_orders(tmp_path, repo_root() / "pretrained" / "costmodel-cuda-sm90", {task.hash: task}).values()
    assert sorted(order) == list(range(len(sentences) + 1)) and order[-1] == 1


def test_report_with_donors_measured(tmp_path):
    """tlm@0+cm+donors: the measured donor where the cost model put one first (a wrong one is
    charged dlight's), else tlm@0+cm (made-up latencies)."""
    a = {"hash": "a", "name": "matmul", "kind": "matmul", "flops": 1.0,
         "candidates": [{"id": 0, "proposer": "tlm"}, {"id": 1, "proposer": "tlm"}]}
    b = dict(a, hash="b")
    c = dict(a, hash="c")
    rows = [{"t": h, "k": "ref", "lat": [10e-6], "err": None} for h in "abc"]
    rows += [{"t": h, "k": k, "lat": [x * 1e-6], "err": None} for h in "abc" for k, x in ((0, 8), (1, 6))]
    bundle, results = _bundle(tmp_path / "p", [a, b, c], rows)
    da, db_ = (dict(a, candidates=[{"id": 0, "proposer": "donor"}]), dict(b, candidates=[{"id": 0, "proposer": "donor"}]))
    dbundle, dresults = _bundle(tmp_path / "d", [da, db_], [{"t": "a", "k": 0, "lat": [3e-6], "err": None},
                                                            {"t": "b", "k": 0, "lat": [], "err": "WrongResult: x"}])
    props = tmp_path / "props"
    props.mkdir()
    (props / "tasks.json").write_text(json.dumps({"calls": {"m": {"a": 1.0, "b": 1.0, "c": 1.0}}, "tasks": {}}))
    rep = heldout_report(bundle, results, bundle, results, props, {h: [0, 1] for h in "abc"}, donors=(dbundle, dresults))
    by = {r["task"]: r["us"] for r in rep["tasks"]}
    assert by["a"]["tlm@0+cm+donors"] == pytest.approx(3) and by["a"]["tlm@0+cm"] == pytest.approx(8)
    assert by["b"]["tlm@0+cm+donors"] == pytest.approx(10)  # its donor was wrong: dlight's
    assert by["c"]["tlm@0+cm+donors"] == pytest.approx(8)  # no donor first: the cost model's pick
    assert any(t["row"] == "tlm@0+cm+donors" for t in rep["targets"])


def test_proposals_of_training_workloads_leave_the_test_tasks_out(monkeypatch, tmp_path):
    """`propose --hold-out test --kinds`: a GPU training round's tasks. Extraction is replaced by
    made-up task lists (a unit test of the selection, not of TVM's extraction)."""
    from types import SimpleNamespace as NS

    import tlm.graph.sources as sources
    import tlm.graph.zoo as zoo
    from tlm.eval.gpu_heldout import ProposeConfig, heldout_tasks, propose

    def task(h, kind, flops=1.0, weight=1):
        return NS(hash=h, name=f"{kind}_{h}", kind=kind, flops=flops, weight=weight)

    lists = {"test-w": [task("a0a0a0a0a0a0a0a0", "matmul"), task("b1b1b1b1b1b1b1b1", "softmax")],
             "train-w": [task("a0a0a0a0a0a0a0a0", "matmul", 9.0), task("c2c2c2c2c2c2c2c2", "matmul", 2.0), task("d3d3d3d3d3d3d3d3", "softmax", 5.0),
                         task("e4e4e4e4e4e4e4e4", "reshape")]}
    monkeypatch.setattr(zoo, "list_workloads", lambda split=None: [NS(name="test-w")])
    monkeypatch.setattr(sources, "tasks_for_sources", lambda ws, target: [NS(tasks=lists[w]) for w in ws])
    hashes = lambda ts: [t.hash[0] for t in ts]  # noqa: E731
    tasks, calls = heldout_tasks(["train-w"], None)
    assert hashes(tasks) == ["a", "d", "c", "e"]  # calls x flops, largest first
    tasks, calls = heldout_tasks(["train-w"], None, "test")
    assert hashes(tasks) == ["d", "c", "e"] and sorted(h[0] for h in calls["train-w"]) == ["c", "d", "e"]
    tasks, _ = heldout_tasks(["train-w"], None, "test", ["matmul", "layer_norm"])
    assert hashes(tasks) == ["c"]
    with pytest.raises(Exception, match="unknown --hold-out"):
        heldout_tasks(["train-w"], None, "all")
    # a folder proposed before hold_out and kinds existed resumes with their defaults, not with others
    import dataclasses
    old = {k: v for k, v in dataclasses.asdict(ProposeConfig(workloads=["train-w"], tlm=0, metaschedule=0)).items()
           if k not in ("hold_out", "kinds")}
    (tmp_path / "config.json").write_text(json.dumps(old))
    monkeypatch.setattr("tlm.graph.target.resolve_target", lambda t: t)
    assert propose(ProposeConfig(workloads=["train-w"], tlm=0, metaschedule=0), tmp_path, progress=False).exists()
    with pytest.raises(Exception, match="another config"):
        propose(ProposeConfig(workloads=["train-w"], tlm=0, metaschedule=0, kinds=["matmul"]), tmp_path, progress=False)
