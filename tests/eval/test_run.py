"""`tlm eval` (tlm.eval: suites, run, tables, report): fast tests only, no TVM build, no measurement.

The real steps tune, compile and time; here a fake step runner, injected into `run_plan` /
`evaluate`, stands in for the measurer (it only creates each step's outputs), and record
databases are built by hand with `tlm.measure.database` (`add_record`).
"""

import csv
import json
import shutil
import os

import pytest

from tlm.errors import TlmError
from tlm.eval.report import speedup_matrix, subgraph_speedups, write_report
from tlm.eval.run import evaluate, snapshot
from tlm.eval.suites import EvalConfig, build_plan, describe_plan, run_plan
from tlm.eval.tables import best_after_k, k_to_reach, representatives
from tlm.graph.tasks import Task
from tlm.measure.database import open_db


def fake_task(name, kind, weight=1, flops=1e6, h=None):
    return Task(name=name, hash=h or f"{abs(hash(name)) % 16**16:016x}", weight=weight, flops=flops,
                kind=kind, args=[], mod_json="{}")


def test_quick_and_full_plans(tmp_path):
    quick, std = EvalConfig.for_suite("quick", str(tmp_path)), EvalConfig.for_suite("standard", str(tmp_path))
    assert set(quick.workloads) < set(std.workloads) and len(std.workloads) == 5
    assert all(getattr(quick, k) == getattr(std, k) for k in ("ms_budget", "tlm_budgets", "subgraph_ks", "seed"))
    quick.workloads = ["mobilenet_v2", "bert_tiny"]
    assert (quick.ms_budget, quick.tlm_budgets, quick.subgraph_ks) == ("16g", ["0", "1g", "10g"], [1, 10])
    steps = build_plan(quick, {"mobilenet_v2": 52, "bert_tiny": 10}, num_types=7)
    ids = [s.id for s in steps]
    assert ids[0] == "peak" and ids[-2:] == ["subgraph:mobilenet_v2+bert_tiny", "generator"]
    assert ids[1:6] == ["tune:mobilenet_v2:metaschedule@16g", "tune:mobilenet_v2:tlm@0",
                        "tune:mobilenet_v2:tlm@1g", "tune:mobilenet_v2:tlm@10g", "e2e:mobilenet_v2"]
    est = {s.id: s.measurements for s in steps}
    assert est["tune:mobilenet_v2:metaschedule@16g"] == 52 * 16
    assert est["tune:mobilenet_v2:tlm@0"] == 0
    assert est["tune:mobilenet_v2:tlm@1g"] == 52 and est["tune:mobilenet_v2:tlm@10g"] == 52 * 9  # incremental
    assert est["subgraph:mobilenet_v2+bert_tiny"] == 7 * 10
    by = {s.id: s for s in steps}
    assert by["tune:mobilenet_v2:tlm@10g"].deps == ["tune:mobilenet_v2:tlm@1g"]
    assert set(by["e2e:bert_tiny"].deps) == {"tune:bert_tiny:metaschedule@16g", "tune:bert_tiny:tlm@0",
                                            "tune:bert_tiny:tlm@1g", "tune:bert_tiny:tlm@10g"}
    assert "estimated measurements" in describe_plan(quick, steps)

    full = EvalConfig.for_suite("full", str(tmp_path))
    assert len(full.workloads) == 6 and full.ms_budget == "64g" and full.tlm_budgets == ["0", "1g", "10g", "32g"]
    steps = build_plan(full)
    assert sum(s.kind == "e2e" for s in steps) == 6 and sum(s.kind == "tune" for s in steps) == 6 * 5
    assert any(s.measurements is None for s in steps)  # unknown without task counts
    assert [s.id for s in steps if s.kind in ("subgraph", "heldout")] == ["heldout"]
    # The held-out benchmark alone: 20 tasks x (TLM@0 1 + TLM@1,10,32 + random 32 + MetaSchedule 256).
    held = build_plan(EvalConfig.for_suite("heldout", str(tmp_path)))
    assert [s.id for s in held] == ["peak", "heldout", "heldout-retime", "generator"]
    assert held[2].deps == ["heldout"] and held[2].measurements == 0  # timings again: no new program
    assert "heldout-retime" not in [s.id for s in build_plan(EvalConfig.for_suite(
        "heldout", str(tmp_path), heldout_retime_rounds=0))]
    assert held[1].measurements == 20 * (1 + 1 + 10 + 32 + 32 + 256)
    with pytest.raises(TlmError):
        EvalConfig.for_suite("quick", str(tmp_path), ms_budget="4g")  # subgraph k 10 > 4 per task
    with pytest.raises(TlmError):
        EvalConfig.for_suite("nope", str(tmp_path))


def test_resume_skips_steps_whose_outputs_exist(tmp_path):
    """The fake runner stands in for the measurer: it only writes each step's outputs."""
    cfg = EvalConfig.for_suite("quick", str(tmp_path), workloads=["mobilenet_v2"])
    steps = build_plan(cfg)
    ran = []

    def fake_runner(st, fail_on=None):
        if st.id == fail_on:
            raise RuntimeError("interrupted measurement")
        ran.append(st.id)
        for p in st.outputs:
            if p.endswith((".json", ".csv")):
                os.makedirs(os.path.dirname(p), exist_ok=True)
                open(p, "w").write("{}")
            else:
                os.makedirs(p, exist_ok=True)

    status = run_plan(steps, lambda st: fake_runner(st, "tune:mobilenet_v2:tlm@1g"), log=lambda *_: None)
    assert status["tune:mobilenet_v2:tlm@1g"] == "failed"
    assert status["tune:mobilenet_v2:tlm@10g"] == "blocked" and status["e2e:mobilenet_v2"] == "blocked"
    assert status["subgraph:mobilenet_v2"] == "done"  # independent steps still run
    first = list(ran)
    ran.clear()
    status = run_plan(build_plan(cfg), fake_runner, log=lambda *_: None)
    assert ran == ["tune:mobilenet_v2:tlm@1g", "tune:mobilenet_v2:tlm@10g", "e2e:mobilenet_v2"]
    assert all(status[s] == "skipped" for s in first)
    ran.clear()
    assert set(run_plan(build_plan(cfg), fake_runner, log=lambda *_: None).values()) == {"skipped"} and not ran

    # evaluate() with the fake runner: config saved, report written; other budgets refused.
    assert evaluate(cfg, runner=fake_runner, log=lambda *_: None) == 0
    assert json.load(open(tmp_path / "config.json"))["ms_budget"] == "16g"
    assert (tmp_path / "summary.md").is_file()
    (tmp_path / "summary.md").unlink()
    shutil.rmtree(tmp_path / "logs")  # every step to run again, but --report-only measures nothing
    assert evaluate(cfg, runner=lambda st: ran.append(st.id), log=lambda *_: None, report_only=True) == 0
    assert not ran and (tmp_path / "summary.md").is_file()
    other = EvalConfig.for_suite("quick", str(tmp_path), workloads=["mobilenet_v2"], tlm_budgets=["0", "2g"])
    with pytest.raises(TlmError):
        evaluate(other, runner=fake_runner, log=lambda *_: None)
    # Keyed by the machine: a run measured on one CPU is never resumed on another.
    assert json.load(open(tmp_path / "config.json"))["hardware"]
    moved = EvalConfig.for_suite("quick", str(tmp_path), workloads=["mobilenet_v2"], hardware="llvm-other-cpu-2c")
    with pytest.raises(TlmError, match="not on this llvm-other-cpu-2c"):
        evaluate(moved, runner=fake_runner, log=lambda *_: None)


def test_ms_after_k_from_records_in_measurement_order(tmp_path):
    t = fake_task("fused_conv2d_add", "conv2d")
    db = open_db(str(tmp_path / "db"))
    lat = [5e-3, None, 3e-3, 4e-3, 1e-3]  # None: a failed measurement (still counts as one)
    for x in lat:
        db.add_record(t, "key", [], [] if x is None else [x], error=None if x else "build failed",
                      proposer="metaschedule")
    db.add_record(t, "key", [], [0.5e-3], proposer="tlm")  # another proposer: not counted
    db.add_record(t, "other-target", [], [0.1e-3], proposer="metaschedule")  # another target: ignored
    got = best_after_k(db, t.hash, "key", "metaschedule", [1, 2, 3, 10])
    assert got == {1: 5e-3, 2: 5e-3, 3: 3e-3, 10: 1e-3}
    assert best_after_k(db, "0" * 16, "key", "metaschedule", [1]) == {1: None}
    assert k_to_reach(db, t.hash, "key", "metaschedule", 3e-3) == 3
    assert k_to_reach(db, t.hash, "key", "metaschedule", 1e-4) is None
    db.close()

    dst = tmp_path / "snap"
    snapshot(str(tmp_path / "db"), str(dst))
    with open_db(str(dst), create=False) as copy:
        assert copy.count(t.hash, "key") == 6


def test_representatives_pick_largest_weight_times_flops():
    a = fake_task("fused_conv2d_a", "conv2d", weight=1, flops=10)
    b = fake_task("fused_conv2d_b", "conv2d", weight=4, flops=5)
    c = fake_task("fused_softmax", "softmax", weight=1, flops=1)
    reps = representatives({"w1": [a, c], "w2": [b]})
    assert [(w, t.name) for w, t in reps] == [("w2", "fused_conv2d_b"), ("w1", "fused_softmax")]


def _write(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def test_report_from_synthetic_csvs(tmp_path):
    json.dump({"suite": "quick", "workloads": ["mobilenet_v2"], "ms_budget": "16g", "tlm_budgets": ["0", "1g"],
               "rounds": 3}, open(tmp_path / "config.json", "w"))
    json.dump({"gflops": 100.0, "n": 2048, "threads": 2, "cpu": "test"}, open(tmp_path / "peak.json", "w"))
    sub = []
    for task, kind, tl, ms in (("t_conv", "conv2d", (50, 20), (80, 30)), ("t_sm", "softmax", (5, 4), (6, 5))):
        for k, a, b in zip((1, 10), tl, ms):
            sub.append({"kind": kind, "task": task, "workload": "mobilenet_v2", "method": "tlm", "k": k,
                        "best_us": a, "tlm_k_to_reach": ""})
            sub.append({"kind": kind, "task": task, "workload": "mobilenet_v2", "method": "metaschedule", "k": k,
                        "best_us": b, "tlm_k_to_reach": ""})
        sub.append({"kind": kind, "task": task, "workload": "mobilenet_v2", "method": "metaschedule-large",
                    "k": 16, "best_us": ms[1] - 1, "tlm_k_to_reach": 7})
    _write(tmp_path / "subgraph.csv", sub)
    _write(tmp_path / "e2e.csv", [
        {"workload": "mobilenet_v2", "method": m, "e2e_ms": v, "matches": ok}
        for m, v, ok in (("metaschedule@16g", 4.0, True), ("tlm@0", 6.0, True), ("tlm@1g", 3.9, True),
                         ("pytorch", 5.0, ""), ("onnxruntime", 3.0, ""))])
    _write(tmp_path / "cost.csv", [
        {"workload": "mobilenet_v2", "method": "metaschedule", "budget": "16g", "measurements": 832,
         "tune_wall_s": 900, "e2e_ms": 4.0, "reaches_ms_large": False, "first_to_reach": False},
        {"workload": "mobilenet_v2", "method": "tlm", "budget": "1g", "measurements": 52,
         "tune_wall_s": 80, "e2e_ms": 3.9, "reaches_ms_large": True, "first_to_reach": True}])
    _write(tmp_path / "efficiency.csv", [
        {"workload": "mobilenet_v2", "task": "t_conv", "kind": "conv2d", "weight": 2, "flops": 2e6,
         "method": m, "best_us": us, "gflops": 2e6 / us / 1e3, "peak_gflops": 100.0,
         "fraction_of_peak": 2e6 / us / 1e3 / 100} for m, us in (("metaschedule", 30), ("tlm", 20))])
    _write(tmp_path / "generator.csv", [
        {"workload": "mobilenet_v2", "task": "t_conv", "kind": "conv2d", "mode": "sampled", "requested": 16,
         "valid": 16, "model_passes": 400, "seconds": 2.0, "passes_per_program": 25.0, "ms_per_program": 125.0}])

    speed = {s["k"]: s for s in subgraph_speedups(list(csv.DictReader(open(tmp_path / "subgraph.csv"))))}
    assert speed[1]["speedup_vs_ms_k"] == pytest.approx(86 / 55)
    assert speed[10]["speedup_vs_ms_large"] == pytest.approx((29 + 4) / 24)
    header, body, n = speedup_matrix(list(csv.DictReader(open(tmp_path / "subgraph.csv"))))
    assert n == 2 and header == ["MetaSchedule@1", "MetaSchedule@10", "MetaSchedule@16", "TLM@10"]
    rows = dict(body)
    assert list(rows) == ["TLM@1", "TLM@10", "MetaSchedule@16"]
    assert rows["TLM@1"][0] == pytest.approx(86 / 55) and rows["TLM@10"][3] == pytest.approx(1.0)
    assert rows["MetaSchedule@16"][2] == pytest.approx(1.0) and rows["TLM@10"][2] == pytest.approx(33 / 24)

    text = open(write_report(str(tmp_path))).read()
    for heading in ("Subgraph benchmark", "End-to-end", "Compilation cost", "Efficiency", "Generator cost"):
        assert heading in text
    assert "TLM reaches MetaSchedule's 16g latency at 1g (52 vs 832 measurements)" in text
    assert "| mobilenet_v2 | 4.00 | 6.00 | 3.90 | 5.00 | 3.00 |" in text
    assert "| TLM@1 | 1.56 |" in text
    assert "| mobilenet_v2 | 4.00 (832, 15.0 min) | 3.90 (52, 1.3 min) | 1.03x | 5.00 | 3.00 |" in text
    for png in ("e2e-mobilenet_v2.png", "subgraph.png", "efficiency.png"):
        assert (tmp_path / png).stat().st_size > 1000


def test_report_of_an_empty_run(tmp_path):
    text = open(write_report(str(tmp_path))).read()
    assert "(no end-to-end results yet)" in text


def test_cli_dry_run(tmp_path, capsys):
    from tlm.cli import main

    code = main(["eval", "--suite", "quick", "--out", str(tmp_path / "r"), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    assert "tune:dcgan:metaschedule@16g" in out and "e2e:bert_tiny" in out
    assert "estimated measurements" in out
    assert not (tmp_path / "r").exists()  # nothing run, nothing written
    # Without --out: one folder per suite and hardware; the held-out benchmark's estimate.
    assert main(["eval", "--suite", "heldout", "--heldout-ks", "0", "1", "--heldout-ms-ks", "4", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "--out results/heldout-llvm-" in out and "heldout" in out and f"{20 * (1 + 1 + 1 + 4)}" in out
    assert main(["eval", "--suite", "heldout", "--heldout-ms-ks", "0", "--dry-run"]) == 2
    assert main(["eval", "--suite", "heldout", "--heldout-retime-rounds", "-1", "--dry-run"]) == 2
    assert "--heldout-retime-rounds must be >= 0" in capsys.readouterr().err
    assert main(["eval", "--suite", "heldout", "--heldout-generator", str(tmp_path), "--dry-run"]) == 2
    assert "--heldout-generator" in capsys.readouterr().err


def test_heldout_generator_names_the_tlm(tmp_path):
    """--heldout-generator: that model's weights key TLM's held-out records (not the shipped model's)."""
    from tlm.eval.heldout import model_tag
    from tlm.eval.run import Runner

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "model.safetensors").write_bytes(b"candidate")
    cfg = EvalConfig.for_suite("heldout", str(tmp_path / "r"), heldout_generator=str(tmp_path / "m"),
                               heldout_adapt_trees=0)
    tc, tag = Runner(cfg).heldout_tlm()
    assert tc.model == str(tmp_path / "m") and tag.startswith(model_tag(tmp_path / "m"))


def test_write_tables_from_databases_and_step_outputs(tmp_path):
    """write_tables on hand-made record databases, step logs and an e2e file (no measurement)."""
    from tlm.eval.suites import db_dir, log_path
    from tlm.eval.tables import write_tables

    cfg = EvalConfig.for_suite("quick", str(tmp_path), workloads=["w1"])
    conv, sm = fake_task("fused_conv2d", "conv2d", weight=2, flops=2e6), fake_task("fused_softmax", "softmax")
    with open_db(db_dir(cfg, "w1", "metaschedule")) as ms:
        for x in [5e-3, 4e-3] + [3e-3] * 8 + [1e-3] + [2e-3] * 5:  # 16 records: best 3e-3 after 10, 1e-3 after 16
            ms.add_record(conv, "key", [], [x], proposer="metaschedule")
        ms.add_record(sm, "key", [], [1e-5], proposer="metaschedule")
    with open_db(db_dir(cfg, "subgraph", "tlm")) as tl:
        for x in [4e-3, 2e-3, 0.9e-3]:
            tl.add_record(conv, "key", [], [x], proposer="tlm")
    with open_db(db_dir(cfg, "w1", "tlm@10g")) as snap:
        snap.add_record(conv, "key", [], [2.5e-3], proposer="tlm")
    json.dump({"gflops": 100.0}, open(tmp_path / "peak.json", "w"))
    os.makedirs(tmp_path / "e2e")
    json.dump({"rows": [{"workload": "w1", "method": m, "e2e_ms": v, "matches": True, "compile_s": 1.0}
                        for m, v in (("metaschedule@16g", 4.0), ("tlm@0", 6.0), ("tlm@1g", 3.9), ("tlm@10g", 3.5))]},
              open(tmp_path / "e2e" / "w1.json", "w"))
    for sid, wall, n in (("tune:w1:metaschedule@16g", 100.0, 17), ("tune:w1:tlm@0", 5.0, 0),
                         ("tune:w1:tlm@1g", 10.0, 2), ("tune:w1:tlm@10g", 20.0, 20)):
        os.makedirs(os.path.dirname(log_path(cfg, sid)), exist_ok=True)
        json.dump({"wall_s": wall, "total_measurements": n}, open(log_path(cfg, sid), "w"))

    write_tables(cfg, {"w1": [conv, sm]}, "key")
    sub = {(r["task"], r["method"], r["k"]): r for r in csv.DictReader(open(tmp_path / "subgraph.csv"))}
    assert float(sub[("fused_conv2d", "tlm", "1")]["best_us"]) == pytest.approx(4000)
    assert float(sub[("fused_conv2d", "tlm", "10")]["best_us"]) == pytest.approx(900)
    assert float(sub[("fused_conv2d", "metaschedule", "10")]["best_us"]) == pytest.approx(3000)
    large = sub[("fused_conv2d", "metaschedule-large", "16")]
    assert float(large["best_us"]) == pytest.approx(1000) and large["tlm_k_to_reach"] == "3"
    assert sub[("fused_softmax", "tlm", "1")]["best_us"] == ""  # no TLM record: empty, not an error
    cost = {(r["method"], r["budget"]): r for r in csv.DictReader(open(tmp_path / "cost.csv"))}
    assert cost[("tlm", "0")]["first_to_reach"] == "False" and cost[("tlm", "1g")]["first_to_reach"] == "True"
    assert cost[("tlm", "10g")]["reaches_ms_large"] == "True" and cost[("tlm", "10g")]["first_to_reach"] == "False"
    assert float(cost[("tlm", "1g")]["tune_wall_s"]) == pytest.approx(15.0)  # TLM budgets are cumulative
    assert cost[("metaschedule", "16g")]["measurements"] == "17"
    eff = {r["method"]: r for r in csv.DictReader(open(tmp_path / "efficiency.csv"))}
    assert set(eff) == {"metaschedule", "tlm"}  # softmax is not compute-bound: left out
    assert float(eff["tlm"]["gflops"]) == pytest.approx(2e6 / 2.5e-3 / 1e9)
    assert float(eff["metaschedule"]["fraction_of_peak"]) == pytest.approx(2e6 / 1e-3 / 1e9 / 100)
    assert len(list(csv.DictReader(open(tmp_path / "e2e.csv")))) == 4


def test_tuning_databases_kept_in_git_as_shards(tmp_path):
    """The workloads' tuning databases go to OUT/records as shards; a fresh clone (no OUT/dbs)
    gets them back, per-budget snapshots included, and runs no step again."""
    from tlm.eval.suites import db_dir, log_path
    from tlm.measure.shards import shard_paths

    cfg = EvalConfig.for_suite("quick", str(tmp_path), workloads=["w1"])
    conv = fake_task("fused_conv2d", "conv2d")
    ran = []

    def fake_runner(st):  # tuning adds records: MetaSchedule 3, TLM 1 more per budget
        ran.append(st.id)
        if st.kind == "tune":
            live = db_dir(cfg, "w1", st.method)
            with open_db(live) as db:
                for _ in range(3 if st.method == "metaschedule" else 1):
                    db.add_record(conv, "key", [], [1e-3], proposer=st.method)
            if st.method == "tlm":
                snapshot(live, st.outputs[0])
        for p in st.outputs:
            if p.endswith((".json", ".csv")):
                os.makedirs(os.path.dirname(p), exist_ok=True)
                open(p, "w").write("{}")

    def counts():
        out = {}
        for name in ("metaschedule", "tlm", "tlm@0", "tlm@1g", "tlm@10g"):
            with open_db(db_dir(cfg, "w1", name)) as db:
                out[name] = db.count(None, "key", None)
        return out

    assert evaluate(cfg, runner=fake_runner, log=lambda *_: None) == 0
    assert counts() == {"metaschedule": 3, "tlm": 3, "tlm@0": 1, "tlm@1g": 2, "tlm@10g": 3}
    assert {p.parent.parent.name for p in shard_paths(tmp_path / "records" / "w1" / "tlm@1g")} == {"tlm@1g"}
    shutil.rmtree(tmp_path / "dbs")  # a fresh clone: the logs and shards are committed, the databases not
    ran.clear()
    assert evaluate(cfg, runner=fake_runner, log=lambda *_: None) == 0
    assert not ran and counts() == {"metaschedule": 3, "tlm": 3, "tlm@0": 1, "tlm@1g": 2, "tlm@10g": 3}
    # An interrupted step resumes from its records; a rerun writes only new shards.
    before = set(shard_paths(tmp_path / "records" / "w1" / "metaschedule"))
    os.unlink(log_path(cfg, "tune:w1:metaschedule@16g"))
    assert evaluate(cfg, runner=fake_runner, log=lambda *_: None) == 0
    assert ran == ["tune:w1:metaschedule@16g"] and counts()["metaschedule"] == 6
    assert before < set(shard_paths(tmp_path / "records" / "w1" / "metaschedule"))


def test_snapshot_is_a_database_of_its_own(tmp_path):
    """A snapshot of a database that has flushed shards still writes all its records."""
    from tlm.measure.shards import flush

    t = fake_task("fused_dense", "dense")
    with open_db(str(tmp_path / "live")) as live:
        live.add_record(t, "key", [], [1e-3], proposer="tlm")
        assert flush(live, tmp_path / "shards-live").records == 1
        live.add_record(t, "key", [], [2e-3], proposer="tlm")
    snapshot(str(tmp_path / "live"), str(tmp_path / "snap"))
    with open_db(str(tmp_path / "snap")) as snap:
        assert flush(snap, tmp_path / "shards-snap").records == 2


def test_new_models_retire_the_end_to_end_tlm(tmp_path):
    """A run resumed with other models (generator or cost model, `model_tag`) moves TLM's results to
    OUT/retired/TAG, then tunes and times TLM again; MetaSchedule's tuning stays. A report alone
    changes nothing."""
    cfg = EvalConfig.for_suite("quick", str(tmp_path), workloads=["w1"], subgraph_ks=[])
    ran = []

    class Fake:  # stands in for the Runner: writes each step's outputs; its models' tag can change
        tag = "m1"

        def e2e_model(self):
            return self.tag

        def __call__(self, st):
            ran.append(st.id)
            for p in st.outputs:
                os.makedirs(os.path.dirname(p), exist_ok=True)
                if p.endswith((".json", ".csv")):
                    open(p, "w").write("{}")
                else:
                    os.makedirs(p, exist_ok=True)

    fake, quiet = Fake(), (lambda *_: None)
    os.makedirs(tmp_path / "dbs" / "heldout" / "model-m1" / "tlm@0")  # keyed by its own tag: never retired
    assert evaluate(cfg, runner=fake, log=quiet) == 0
    assert json.load(open(tmp_path / "config.json"))["e2e_model"] == "m1"
    assert "`m1`" in (tmp_path / "summary.md").read_text()
    ran.clear()
    assert evaluate(cfg, runner=fake, log=quiet) == 0 and not ran  # same models: all done
    fake.tag, logs = "m2", []
    assert evaluate(cfg, runner=fake, log=logs.append) == 0
    assert ran == ["tune:w1:tlm@0", "tune:w1:tlm@1g", "tune:w1:tlm@10g", "e2e:w1", "generator"]
    retired = tmp_path / "retired" / "m1"
    assert (retired / "logs" / "tune_w1_tlm@10g.json").is_file()
    assert (tmp_path / "dbs" / "retired" / "m1" / "w1" / "tlm@1g").is_dir()  # git ignores OUT/dbs
    assert (retired / "e2e" / "w1.json").is_file() and not (retired / "logs" / "tune_w1_metaschedule@16g.json").exists()
    assert (tmp_path / "dbs" / "heldout" / "model-m1" / "tlm@0").is_dir()
    assert any("moved to" in line and "`m1`" in line for line in logs)
    fake.tag = "m3"
    ran.clear()
    assert evaluate(cfg, runner=fake, log=quiet, report_only=True) == 0 and not ran
    assert json.load(open(tmp_path / "config.json"))["e2e_model"] == "m2"


def test_interleaved_rotates_the_order_and_settles_each_contender():
    """Every contender runs untimed before its timed calls, and the order rotates by one each
    round: in a fixed order the first of two identical builds ran 1.2-1.35x slower (znver3)."""
    from tlm.eval.timing import interleaved

    calls = []
    fns = {k: (lambda k=k: calls.append(k)) for k in "abc"}
    times = interleaved(fns, rounds=3, min_ms=0, settle_ms=0)
    assert calls[:3] == list("abc")  # the warm-up
    assert "".join(calls[3:]) == "aabbcc" + "bbccaa" + "ccaabb"
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3, "c": 3}
