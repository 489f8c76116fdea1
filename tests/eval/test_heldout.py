"""The held-out subgraph benchmark (tlm.eval.heldout): task choice, contenders, rows and report
from hand-made record databases (fast), and one real run on a tiny task (TVM)."""

import csv

import pytest

from tlm.eval.heldout import (TARGETS, contenders, heldout_rows, planned_measurements, read_tasks, report_lines,
                              run_heldout, select_heldout, summed, write_tasks)
from tlm.graph.tasks import Task
from tlm.measure.database import open_db


def fake_task(name, kind, weight=1, flops=1e6):
    return Task(name=name, hash=f"{abs(hash(name)) % 16**16:016x}", weight=weight, flops=flops, kind=kind, args=[],
                mod_json="{}")


def test_select_heldout_takes_the_largest_of_every_kind_first():
    big = [fake_task(f"mm{i}", "matmul", flops=1e9 * (i + 1)) for i in range(4)]
    conv, sm, trained = fake_task("conv", "conv2d", flops=1e6), fake_task("sm", "softmax"), fake_task("t", "pool")
    tbw = {"a": big[:2] + [conv, trained], "b": big[2:] + [sm, big[0]]}  # mm0 in both: counted once
    picked = select_heldout(tbw, 4, None, min_programs=1, exclude={trained.hash})
    assert [t.name for _, t in picked] == ["mm3", "conv", "sm", "mm2"]
    assert [w for w, _ in picked] == ["b", "a", "b", "b"]
    assert len(select_heldout(tbw, 20, None, min_programs=1, exclude={trained.hash})) == 6


def test_contenders_and_planned_measurements():
    got = contenders([0, 1, 10, 32], [1, 10, 64, 256])
    assert [c[0] for c in got] == ["tlm@0", "tlm@1", "tlm@10", "tlm@32", "random", "metaschedule"]
    assert got[4][2] == [1, 10, 32] and got[5][2] == [1, 10, 64, 256]
    assert planned_measurements(20, [0, 1, 10, 32], [1, 10, 64, 256]) == 20 * 332
    assert [c[0] for c in contenders([0], [])] == ["tlm@0"]  # no random@0
    # keyed by the model: a new model never reads an older model's TLM records
    assert [c[0] for c in contenders([0, 10], [64], "abc")] == ["model-abc/tlm@0", "model-abc/tlm@10", "random",
                                                                "metaschedule"]


def test_a_new_model_is_measured_anew_and_the_earlier_one_reported_beside_it(tmp_path):
    import hashlib

    from tlm.eval.heldout import model_tag

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "model.safetensors").write_bytes(b"weights")
    assert model_tag(tmp_path / "m") == hashlib.sha256(b"weights").hexdigest()[:12]
    (tmp_path / "cm").mkdir()
    (tmp_path / "cm" / "costmodel.json").write_bytes(b"trees")
    assert model_tag(tmp_path / "m", tmp_path / "cm") == (  # a new cost model is a new TLM too
        hashlib.sha256(b"weights").hexdigest()[:12] + "-cm" + hashlib.sha256(b"trees").hexdigest()[:8])
    assert model_tag(tmp_path / "m", tmp_path / "cm", 20) == model_tag(tmp_path / "m", tmp_path / "cm") + "-a20"
    a = fake_task("fused_matmul", "matmul")
    root = tmp_path / "dbs"
    for name, us in (("model-old/tlm@10", [200]), ("model-new/tlm@10", [100]), ("metaschedule", [150] + [300] * 63)):
        with open_db(str(root / name)) as db:
            for x in us:
                db.add_record(a, "key", [], [x * 1e-6], proposer=name.split("/")[-1].split("@")[0])
    rows = heldout_rows([("bert_base", a)], str(root), "key", [10], [64], model="new")
    by = {(r["method"], r["k"]): r["best_us"] for r in rows}
    assert by[("tlm", 10)] == pytest.approx(100) and by[("tlm[old]", 10)] == pytest.approx(200)
    text = "\n".join(report_lines(rows))
    assert "TLM with earlier models" in text and "| TLM[old]@10 | 0.75 (1) |" in text and "| TLM@10 | 1.50 (1) |" in text
    assert "TLM[old]" not in text.split("TLM with earlier models")[0]  # the main tables: the current model only


def test_rows_report_and_targets_from_databases(tmp_path):
    a, b = fake_task("fused_matmul", "matmul"), fake_task("softmax", "softmax")
    picked = [("bert_base", a), ("gpt2", b)]
    write_tasks(tmp_path / "tasks.json", picked)
    assert read_tasks(tmp_path / "tasks.json", {"x": [b, a]}) == [("bert_base", a), ("gpt2", b)]
    from tlm.errors import TlmError

    with pytest.raises(TlmError, match="1 held-out tasks are no longer extracted"):  # a definition changed
        read_tasks(tmp_path / "tasks.json", {"x": [a]})
    assert read_tasks(tmp_path / "tasks.json", {"x": [a]}, skip_missing=True) == [("bert_base", a)]
    root = tmp_path / "dbs"
    lat = {  # us per task: a, b (None: no correct program)
        "tlm@0": ([300], [40]), "tlm@1": ([200], [30]), "tlm@10": ([100, 90], [20]),
        "random": ([400, 300, 250] + [500] * 7, [50, None, 45] + [90] * 7),
        "metaschedule": ([500, 120, 110], [60, 25, 24])}
    for name, per in lat.items():
        proposer = name.split("@")[0]
        with open_db(str(root / name)) as db:
            for t, xs in zip((a, b), per):
                for x in xs:
                    db.add_record(t, "key", [], [] if x is None else [x * 1e-6], error=None if x else "wrong",
                                  proposer=proposer)
    rows = heldout_rows(picked, str(root), "key", [0, 1, 10], [1, 2, 3])
    by = {(r["task"], r["method"], r["k"]): r["best_us"] for r in rows}
    assert by[("fused_matmul", "tlm", 10)] == pytest.approx(90)
    assert by[("fused_matmul", "random", 1)] == pytest.approx(400) and by[("softmax", "random", 10)] == pytest.approx(45)
    assert by[("softmax", "metaschedule", 2)] == pytest.approx(25) and by[("fused_matmul", "metaschedule", 3)] == pytest.approx(110)
    short = {(r["task"], r["k"]): r["best_us"] for r in heldout_rows(picked, str(root), "key", [], [3, 4])}
    assert short[("softmax", 3)] == pytest.approx(24) and short[("softmax", 4)] is None  # MS@4: not reached yet
    # Once the tuning has ended, a run short of k ran out of new programs: its best of all counts.
    done = {(r["task"], r["k"]): r["best_us"] for r in heldout_rows(picked, str(root), "key", [], [3, 4], complete=True)}
    assert done[("softmax", 4)] == pytest.approx(24) and done[("fused_matmul", 4)] == pytest.approx(110)
    s, n = summed(rows, "tlm@10", "metaschedule@3")
    assert n == 2 and s == pytest.approx((110 + 24) / (90 + 20))
    csv_rows = [{k: "" if v is None else str(v) for k, v in r.items()} for r in rows]  # as read back from the CSV
    text = "\n".join(report_lines(csv_rows))
    assert "| TLM@10 |" in text and "MS@3" in text and "random@10" in text
    assert "| TLM@10 vs random@10 | >= 1.3 | " in text and "per-task geomean" in text
    assert len([ln for ln in text.splitlines() if ln.startswith("| TLM@") and " vs " in ln]) == len(TARGETS)
    assert report_lines([]) == ["(no held-out subgraph results yet)"]

    # Kept in git as shards: a fresh clone (no databases) gets the same rows back.
    import shutil

    from tlm.eval.heldout import persisted

    shards = tmp_path / "records"
    with persisted(str(root), shards, [0, 1, 10], [1, 2, 3]):
        pass
    assert sorted(p.name for p in shards.iterdir()) == sorted(lat)
    shutil.rmtree(root)
    with persisted(str(root), shards, [0, 1, 10], [1, 2, 3]):
        assert heldout_rows(picked, str(root), "key", [0, 1, 10], [1, 2, 3]) == rows
    assert len(list(shards.rglob("*.jsonl.xz"))) == len(lat)  # nothing new: no new shard


def test_retimed_latencies_replace_the_tuning_time_ones_task_by_task(tmp_path):
    """A task whose winners were all re-timed together reports the re-timed latencies (the
    tuning-time ones kept as tuned_us); a task with a winner missing from retimed.csv (a new
    model since) keeps its tuning-time latencies; the report says which and shows both."""
    from tlm.eval.retime import FIELDS, apply_retimed, read_retimed

    a, b = fake_task("fused_matmul", "matmul"), fake_task("softmax", "softmax")
    root = tmp_path / "dbs"
    lat = {"tlm@10": (100, 20), "metaschedule": (200, 30)}
    for name, per in lat.items():
        with open_db(str(root / name)) as db:
            for t, x in zip((a, b), per):  # a distinct trace per program; MS: 63 slower ones after its best
                for i, us in enumerate([x] + ([900] * 63 if name == "metaschedule" else [])):
                    db.add_record(t, "key", [["Sample", name, t.name, i]], [us * 1e-6], proposer=name.split("@")[0])
    rows = heldout_rows([("bert_base", a), ("gpt2", b)], str(root), "key", [10], [64])
    prog = {(r["hash"], r["method"]): r["program"] for r in rows}
    assert len({v for (_, m), v in prog.items() if m != "random"}) == 4
    assert prog[(a.hash, "random")] == ""  # no program: nothing to re-time
    path = tmp_path / "retimed.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for h, method, us in ((a.hash, "tlm", 150), (a.hash, "metaschedule", 180), (b.hash, "tlm", 25)):
            w.writerow({"task": "x", "hash": h, "program": prog[(h, method)], "contenders": method, "retimed_us": us,
                        "error": "", "rounds": 3, "timed": "now"})
    assert len(read_retimed(path)) == 3
    assert apply_retimed(rows, path) == 1
    by = {(r["hash"], r["method"]): r for r in rows}
    assert by[(a.hash, "tlm")]["best_us"] == 150 and by[(a.hash, "tlm")]["tuned_us"] == pytest.approx(100)
    assert by[(a.hash, "metaschedule")]["best_us"] == 180 and by[(a.hash, "tlm")]["retimed"] == 1
    assert by[(b.hash, "tlm")]["best_us"] == pytest.approx(20) and by[(b.hash, "tlm")]["retimed"] == 0
    text = "\n".join(report_lines([{k: "" if v is None else str(v) for k, v in r.items()} for r in rows]))
    assert "Latencies of 1 of the 2 tasks are re-timed" in text and "as tuned, summed" in text
    # TLM@10 vs MS@64: re-timed (180 + 30) / (150 + 20); as tuned (200 + 30) / (100 + 20)
    assert "| TLM@10 vs MS@64 | >= 1 | 1.24 | 2 | met | " in text and "| 1.92 |" in text


def test_a_run_extends_to_larger_ks_but_never_changes_its_own(tmp_path):
    from tlm.errors import TlmError
    from tlm.eval.suites import EvalConfig

    def cfg(**kw):
        return EvalConfig.for_suite("heldout", str(tmp_path), hardware="hw", **kw)

    cfg(heldout_tlm_ks=[0, 1, 10], heldout_ms_ks=[1, 10, 64]).save()
    cfg(heldout_tlm_ks=[0, 1, 10, 32], heldout_ms_ks=[1, 10, 64, 256]).save()  # extended
    for bad in (dict(heldout_tlm_ks=[0, 1]), dict(heldout_ms_ks=[1, 10, 64, 256], heldout_tasks=10)):
        with pytest.raises(TlmError, match="other budgets"):
            cfg(**{"heldout_tlm_ks": [0, 1, 10, 32], "heldout_ms_ks": [1, 10, 64, 256], **bad}).save()


def test_a_run_without_the_heldout_benchmark_may_gain_it_once(tmp_path):
    from tlm.errors import TlmError
    from tlm.eval.suites import EvalConfig

    def cfg(**kw):
        return EvalConfig.for_suite("full", str(tmp_path), hardware="hw", **kw)

    cfg(heldout_tasks=0).save()
    cfg(heldout_tasks=20).save()  # gained: the end-to-end budgets are the same
    for bad in (dict(heldout_tasks=0), dict(heldout_tasks=10), dict(ms_budget="16g")):
        with pytest.raises(TlmError, match="other budgets"):
            cfg(**bad).save()


@pytest.mark.tvm
def test_run_heldout_on_a_tiny_task(tmp_path, host, matmul32):
    """Every contender tunes the task alone, for real (the shipped model, named as `tlm eval` names it, no cost
    model: random and MetaSchedule take no model); a re-run resumes."""
    from tlm.measure.config import MeasureConfig
    from tlm.search.base import TuneConfig

    from tlm.model.lm import default_model_dir

    cfg = TuneConfig(batch_size=4, cost_model="none", pick_samples=4, model=str(default_model_dir(host)),
                     measure=MeasureConfig(repeat=2, min_repeat_ms=2, remeasure_top=1, builder_workers=1))
    root, picked = str(tmp_path / "dbs"), [("toy", matmul32)]
    run_heldout(picked, root, host, [0, 1, 2], [1, 3], config=cfg, log=lambda *_: None)
    rows = heldout_rows(picked, root, host.key, [0, 1, 2], [1, 3])
    assert {(r["method"], r["k"]) for r in rows} == {("tlm", 0), ("tlm", 1), ("tlm", 2), ("random", 1),
                                                     ("random", 2), ("metaschedule", 1), ("metaschedule", 3)}
    assert all(r["best_us"] and r["best_us"] > 0 for r in rows)  # every contender has a correct program
    with open_db(f"{root}/tlm@0") as db:
        assert db.count(matmul32.hash, host.key, "tlm") == 1  # the first choice, measured once
    counts = {}
    for name in ("tlm@0", "tlm@2", "random", "metaschedule"):
        with open_db(f"{root}/{name}") as db:
            counts[name] = db.count(matmul32.hash, host.key)
    assert counts["tlm@2"] == 2 and counts["random"] == 2 and counts["metaschedule"] == 3
    run_heldout(picked, root, host, [0, 1, 2], [1, 3], config=cfg, log=lambda *_: None)
    for name, n in counts.items():
        with open_db(f"{root}/{name}") as db:
            assert db.count(matmul32.hash, host.key) == n  # resumed: nothing measured twice

    # The winners, timed again together: one row per distinct program, then nothing to do.
    from tlm.eval.retime import apply_retimed, read_retimed, retime

    path = tmp_path / "retimed.csv"
    n = retime(picked, root, host, [0, 1, 2], [1, 3], path, rounds=2, measure_config=cfg.measure,
               log=lambda *_: None)
    assert n == len({r["program"] for r in rows}) == len(read_retimed(path))
    assert all(float(r["retimed_us"]) > 0 and r["rounds"] == "2" for r in read_retimed(path).values())
    assert retime(picked, root, host, [0, 1, 2], [1, 3], path, rounds=2, measure_config=cfg.measure,
                  log=lambda *_: None) == 0
    rows = heldout_rows(picked, root, host.key, [0, 1, 2], [1, 3])
    assert apply_retimed(rows, path) == 1 and all(r["retimed"] == 1 and r["best_us"] > 0 for r in rows)
