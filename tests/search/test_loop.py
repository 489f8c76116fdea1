"""Iterative optimization (tlm.search.loop): batching, the stop rule, two tiny rounds, resuming."""

import csv
import json

import pytest

from tlm.errors import TlmError
from tlm.graph.tasks import Task
from tlm.search.loop import LoopConfig, converged, run_loop, select_tasks, split_batches
from tlm.search.loop_state import round_order


def _fake(name, kind, weight=1, flops=1.0, h=None):
    return Task(name, h or f"{abs(hash((name, kind))) & 0xFFFFFFFFFFFFFFFF:016x}", weight, flops, kind, [], "")


def test_batches_sorted_by_kind_one_every_kb():
    tasks = [_fake(f"fused_{k}{i}_add", k) for k in ("softmax", "conv2d", "matmul") for i in range(3)]
    batches = split_batches(tasks, 3)
    assert [len(b) for b in batches] == [3, 3, 3]
    assert all(sorted(t.kind for t in b) == ["conv2d", "matmul", "softmax"] for b in batches)
    assert sorted(t.hash for b in batches for t in b) == sorted(t.hash for t in tasks)
    assert split_batches(tasks, 3) == batches  # deterministic
    assert len(split_batches(tasks[:2], 4)) == 2  # never an empty batch


def test_task_cap_spreads_across_kinds():
    tasks = [_fake(f"c{i}", "conv2d", flops=10.0 + i) for i in range(6)] + [_fake("m", "matmul", flops=1.0)] + \
            [_fake(f"s{i}", "softmax", flops=0.5) for i in range(2)]
    got = select_tasks(tasks, 4)
    assert [t.name for t in got] == ["c5", "m", "s0", "c4"] or [t.name for t in got] == ["c5", "m", "s1", "c4"]
    assert select_tasks(tasks, 0) == tasks and select_tasks(tasks, 100) == tasks


def test_round_order_shares_time_between_kinds_lightest_first():
    g = 1e9  # task_seconds: 1 + GFLOPs
    tasks = [_fake(f"c{i}", "conv2d", flops=(10.0 - i) * g) for i in range(4)] + [_fake("m", "matmul", flops=5 * g)] + \
            [_fake(f"s{i}", "softmax", flops=0.0, h=f"{i:016x}") for i in range(3)]
    got = [t.name for t in round_order(tasks)]
    # one task of each kind (kinds by name on a tie), then the kind that has had the least time:
    # softmax (1 s per task) until it is done, then conv2d (8 s spent) lightest first
    assert got == ["c3", "m", "s0", "s1", "s2", "c2", "c1", "c0"]
    assert [t.name for t in round_order(list(reversed(tasks)))] == got and round_order([]) == []
    assert sorted(got) == sorted(t.name for t in tasks)


def test_stop_rule():
    pts = lambda *xs: [{"measurements": m, "normalized": v} for m, v in xs]  # noqa: E731
    assert converged(pts((10, None), (20, 1.0), (30, 0.8)), 10, 0.01) is None  # 20% gain
    assert converged(pts((20, 1.0), (30, 0.995)), 10, 0.01).startswith("converged")
    assert converged(pts((20, 1.0), (30, 0.995)), 20, 0.01) is None  # not N measurements yet
    assert converged(pts((10, 1.0), (20, 0.9), (30, 0.895)), 10, 0.01).startswith("converged")
    assert converged([], 10, 0.01) is None


def _config(base, work, **kw):
    from tlm.measure.config import MeasureConfig

    opts = dict(base=str(base), work=str(work), kb=2, kp=2, ft_steps=3, ft_lr=3e-3, ft_batch_size=2,
                measure=MeasureConfig(repeat=2, min_repeat_ms=1, remeasure_top=0))
    opts.update(kw)
    return LoopConfig(**opts)


def _records(work):
    from tlm.measure.database import open_db

    with open_db(str(work / "db")) as db:
        return [(r.id, r.task_hash, r.round, r.proposer, r.sentence) for r in db.records()]


@pytest.mark.tvm
def test_two_rounds_stop_and_resume(base_dir, tasks, tmp_path, measurer):
    work = tmp_path / "work"
    res = run_loop(_config(base_dir, work, rounds=1), tasks, progress=False, measurer=measurer)
    assert res["rounds"] == 1 and res["stopped"].startswith("reached") and res["measured_now"] == 2
    first = _records(work)
    assert len(first) == 2 and {r[2] for r in first} == {0} and all(r[3] == "tlm" and r[4] for r in first)
    assert (work / "models" / "round-0" / "tlm.json").is_file()  # the stop waits for the fine-tuning
    meta = json.loads((work / "models" / "round-0" / "tlm.json").read_text())
    assert meta["finetuned_from"] == str(base_dir) and meta["demonstrations"] == 1

    # The same command again: nothing left to do, nothing measured.
    res = run_loop(_config(base_dir, work, rounds=1), progress=False, measurer=measurer)
    assert res["measured_now"] == 0 and _records(work) == first

    # Two rounds: only round 1 is measured (the other batch), with the round-0 model.
    res = run_loop(_config(base_dir, work, rounds=2), progress=False, measurer=measurer)
    recs = _records(work)
    assert recs[:2] == first and len(recs) == 4 and {r[2] for r in recs[2:]} == {1}
    assert {r[1] for r in recs} == {t.hash for t in tasks}
    state = json.loads((work / "state.json").read_text())
    assert [x["model"] for x in state["rounds"]] == ["base", "round-0"]
    assert state["finetune"]["round"] == 1 and state["finetune"]["status"] == "done"
    assert (work / "models" / "round-1" / "tlm.json").is_file()
    for f in ("demos/round-0.jsonl", "logs/finetune-round-1.log", "config.json", "tasks.json"):
        assert (work / f).is_file(), f
    with open(work / "convergence.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["measurements"]) for r in rows] == [2, 4]
    assert rows[0]["normalized"] == "" and float(rows[1]["normalized"]) == 1.0  # reference: every task measured
    assert (work / "convergence.png").stat().st_size > 1000
    assert res["normalized"] == 1.0 and res["model"].endswith("round-1")

    with pytest.raises(TlmError, match="kb"):  # the batching of a work directory cannot change
        run_loop(_config(base_dir, work, rounds=3, kb=1), progress=False, measurer=measurer)

    # The gain schedule: after the first cycle, round 2 takes the task expected to gain most (its
    # choice saved in the state, so a resumed round measures the same task).
    run_loop(_config(base_dir, work, rounds=3, schedule="gain"), progress=False, measurer=measurer)
    state = json.loads((work / "state.json").read_text())
    assert list(state["chosen"]) == ["2"] and len(state["chosen"]["2"]) == 1
    recs = _records(work)
    assert len(recs) == 6 and {r[2] for r in recs[4:]} == {2} and {r[1] for r in recs[4:]} == set(state["chosen"]["2"])
    assert state["rounds"][-1]["batch"] == -1 and state["rounds"][-1]["measure_s"] > 0


@pytest.mark.tvm
def test_interrupted_round_is_not_measured_again(base_dir, tasks, tmp_path, monkeypatch, measurer):
    from tlm.measure.measurer import Measurer

    work = tmp_path / "work"
    real = Measurer.finish
    calls = []

    def finish_then_die(self, pending, best_s=None):
        calls.append(len(pending.results))
        results = real(self, pending, best_s)
        if len(calls) == 2:
            raise KeyboardInterrupt  # killed while measuring the second task of round 0
        return results

    monkeypatch.setattr(Measurer, "finish", finish_then_die)
    with pytest.raises(KeyboardInterrupt):
        run_loop(_config(base_dir, work, kb=1, rounds=1, pipeline=False), tasks, progress=False, measurer=measurer)
    partial = _records(work)
    assert len(partial) == 2 and len({r[1] for r in partial}) == 1
    assert json.loads((work / "state.json").read_text())["next_round"] == 0  # round 0 not committed

    monkeypatch.setattr(Measurer, "finish", real)
    res = run_loop(_config(base_dir, work, kb=1, rounds=1, pipeline=False), progress=False, measurer=measurer)
    recs = _records(work)
    assert recs[:2] == partial and len(recs) == 4 and res["measured_now"] == 2
    assert {r[1] for r in recs[2:]} != {partial[0][1]} and {r[2] for r in recs} == {0}
    assert res["normalized"] == 1.0 and (work / "models" / "round-0" / "tlm.json").is_file()


@pytest.mark.tvm
def test_next_task_is_generated_while_the_last_one_builds(base_dir, tasks, tmp_path, monkeypatch, measurer):
    from tlm.measure.measurer import Measurer
    from tlm.search.loop import _Loop

    events = []
    for cls, name in ((_Loop, "_candidates"), (Measurer, "start"), (Measurer, "finish")):
        real = getattr(cls, name)
        monkeypatch.setattr(cls, name, lambda self, *a, _r=real, _n=name, **k: (events.append(_n), _r(self, *a, **k))[1])
    res = run_loop(_config(base_dir, tmp_path / "work", kb=1, rounds=1, pipeline=False), tasks, progress=False,
                   measurer=measurer)
    assert events == ["_candidates", "start", "_candidates", "finish", "start", "finish"]
    assert res["measured_now"] == 4 and len(_records(tmp_path / "work")) == 4


@pytest.mark.tvm
def test_a_round_switches_to_a_fine_tuning_that_ends_during_it(base_dir, tasks, tmp_path, monkeypatch, measurer):
    """Pipelined: round 1 starts with the base while round 0's fine-tuning runs; when it ends
    (here: at the first poll after the round's first task), the rest of the round uses its model."""
    from tlm.model.finetune import FinetuneJob

    polls = []
    real_poll = FinetuneJob.poll

    def poll(self, timeout=0.0):
        polls.append(1)
        return None if len(polls) == 1 else self.wait()  # running at round 1's start, then done

    work = tmp_path / "work"
    monkeypatch.setattr(FinetuneJob, "poll", poll)
    run_loop(_config(base_dir, work, kb=1, rounds=2, kp=1), tasks, progress=False, measurer=measurer)
    monkeypatch.setattr(FinetuneJob, "poll", real_poll)
    state = json.loads((work / "state.json").read_text())
    assert state["rounds"][0]["models"] == ["base"]
    assert state["rounds"][1]["model"] == "base" and state["rounds"][1]["models"] == ["base", "round-0"]


@pytest.mark.tvm
def test_a_round_that_changes_no_demonstration_starts_no_fine_tuning(base_dir, tasks, tmp_path, monkeypatch,
                                                                      measurer):
    """A round that measures nothing new (its tasks measured before, as on a fresh machine resuming
    from the corpus) leaves the demonstrations as they were: the fine-tuning done (or running) on
    them is neither waited for nor started again."""
    from tlm.model.finetune import FinetuneJob
    from tlm.search.loop import _Loop

    work = tmp_path / "work"
    run_loop(_config(base_dir, work, kb=1, rounds=1), tasks, progress=False, measurer=measurer)
    assert json.loads((work / "state.json").read_text())["finetune"]["status"] == "done"
    launched = []
    real = FinetuneJob.__init__
    monkeypatch.setattr(FinetuneJob, "__init__", lambda self, *a, **k: (launched.append(a), real(self, *a, **k))[1])
    monkeypatch.setattr(_Loop, "_candidates", lambda self, *a: ([], 0))  # nothing new to measure
    res = run_loop(_config(base_dir, work, kb=1, rounds=2), progress=False, measurer=measurer)
    state = json.loads((work / "state.json").read_text())
    assert res["measured_now"] == 0 and state["next_round"] == 2 and launched == []
    assert state["finetune"]["round"] == 0 and state["finetune"]["status"] == "done"
    assert not (work / "models" / "round-1").exists() and res["model"].endswith("round-0")


@pytest.mark.tvm
def test_a_task_with_no_program_is_marked_barren(base_dir, tasks, tmp_path, monkeypatch, measurer):
    """A task for which no program can be generated (every sample fails TVM's checks) is said once
    and remembered: it no longer keeps the convergence curve's reference point from being fixed."""
    from tlm.search.loop import _Loop

    real = _Loop._candidates
    dead = tasks[0].hash
    monkeypatch.setattr(_Loop, "_candidates",
                        lambda self, gen, task, *a: ([], 2) if task.hash == dead else real(self, gen, task, *a))
    work = tmp_path / "work"
    res = run_loop(_config(base_dir, work, kb=1, rounds=1, ft_steps=1), tasks, progress=False, measurer=measurer)
    state = json.loads((work / "state.json").read_text())
    assert state["barren"] == [dead] and res["measured_now"] == 2
    assert res["normalized"] == 1.0 and dead not in state["reference"]["tasks"]


@pytest.mark.tvm
def test_waiting_for_a_fine_tuning_keeps_checking_in(base_dir, tasks, tmp_path, monkeypatch, measurer):
    """The checkpoint callback (the collector's flushes, --hours and SIGTERM) keeps being called
    while the loop waits for a fine-tuning; what it raises stops the wait, and the fine-tuning is
    left to be relaunched on resume."""
    from tlm.model.finetune import FinetuneJob

    class Stop(Exception):
        pass

    calls = []

    def after_task(db):
        calls.append(1)
        if len(calls) == 5:  # the start, two tasks, then the wait's second check
            raise Stop

    monkeypatch.setattr(FinetuneJob, "poll", lambda self, timeout=0.0: None)  # never ends
    work = tmp_path / "work"
    with pytest.raises(Stop):
        run_loop(_config(base_dir, work, kb=1, rounds=1, pipeline=False), tasks, progress=False, measurer=measurer,
                 after_task=after_task)
    state = json.loads((work / "state.json").read_text())
    assert state["next_round"] == 1 and state["finetune"]["status"] == "running"

    # Resumed, it goes on with the stopped run's demonstrations (its checkpoint's run), not new ones.
    import shutil

    import tlm.model.demos

    shutil.rmtree(work / "models" / "round-0", ignore_errors=True)  # in case it ended before it was stopped
    monkeypatch.undo()
    for name in ("demo_records", "every_target_demos"):
        monkeypatch.setattr(tlm.model.demos, name, lambda *a, **k: pytest.fail("demonstrations recomputed"))
    run_loop(_config(base_dir, work, kb=1, rounds=1, pipeline=False), progress=False, measurer=measurer)
    state = json.loads((work / "state.json").read_text())
    assert state["finetune"]["status"] == "done" and (work / "models" / "round-0" / "tlm.json").is_file()


def test_cli_loop_errors(tmp_path):
    from tlm.cli import main

    assert main(["loop", "--base", str(tmp_path / "none"), "--work", str(tmp_path / "w")]) == 2
    assert main(["loop", "--base", str(tmp_path), "--work", str(tmp_path / "w"), "--kb", "0"]) == 2


def test_gain_batch_prefers_heavy_improving_tasks():
    from tlm.search.loop_state import gain_batch

    heavy, light, fresh, failing = (_fake("heavy", "conv2d", weight=4), _fake("light", "matmul"),
                                    _fake("fresh", "softmax"), _fake("failing", "pool"))
    bests = {heavy.hash: 1e-3, light.hash: 1e-3}
    prev = {heavy.hash: 1e-3, light.hash: 2e-3}  # light just halved its latency, heavy did not move
    counts = {heavy.hash: 8, light.hash: 8, fresh.hash: 0, failing.hash: 16}
    got = gain_batch([heavy, light, fresh, failing], 4, bests, prev, counts, kp=8)
    # No program yet first; then light (1e-3 x 100% gain) before heavy (4 x 1e-3 x 2% floor); the
    # task whose 2 k_p programs all failed last.
    assert [t.name for t in got] == ["fresh", "light", "heavy", "failing"]
    assert [t.name for t in gain_batch([heavy, light], 1, bests, {}, counts, kp=8)] == ["heavy"]
    # a barren task (no program could be generated for it) goes last, not first
    got = gain_batch([heavy, light, fresh, failing], 2, bests, prev, counts, kp=8, barren={fresh.hash})
    assert [t.name for t in got] == ["light", "heavy"]


def test_a_barren_task_does_not_hold_back_the_reference_point(tmp_path):
    from tlm.search.loop_state import WorkDir

    a, b, barren = _fake("a", "matmul"), _fake("b", "conv2d", weight=2), _fake("pool", "adaptive_avg_pool2d")
    wd = WorkDir(tmp_path)
    wd.load_state("key")
    counts, bests = {a.hash: 8, b.hash: 8}, {a.hash: 1e-3, b.hash: 2e-3}
    assert wd.point(0, 0, "base", [a, b, barren], counts, bests)["normalized"] is None
    assert wd.mark_barren(barren.hash) and not wd.mark_barren(barren.hash)
    point = wd.point(1, 1, "base", [a, b, barren], counts, bests)
    assert point["normalized"] == 1.0 and wd.state["reference"]["tasks"] == [a.hash, b.hash]
    wd.save()
    again = WorkDir(tmp_path)
    again.load_state("key")
    assert again.barren() == {barren.hash}


@pytest.mark.tvm
def test_a_cost_model_chooses_what_a_round_measures(base_dir, tasks, host, tmp_path, measurer, monkeypatch):
    """With a cost model, a task's k_p programs are cm_explore plain samples and the cost model's
    top picks of the other samples (cm_pool x k_p in all). The cost model is real XGBoost, fitted
    here on real features of random programs with made-up latencies: this checks which samples
    are measured, not how well it ranks."""
    from tlm.search.costmodel import CostModel, CostModelConfig, features
    from tlm.space.design import random_program

    groups = []
    for t in tasks:
        progs = [p for p in (random_program(t, host, s) for s in range(12)) if p.ok][:6]
        groups.append((features(t, [p.sch for p in progs], host), [1e-3 * (1 + i) for i in range(len(progs))]))
    CostModel(CostModelConfig(trees=5)).fit(groups).save(tmp_path / "cm")
    real, ranked = CostModel.rank, []

    def spy(self, task, schs, target):
        order = real(self, task, schs, target)
        ranked.append((task.hash, [schs[i] for i in order]))
        return order

    monkeypatch.setattr(CostModel, "rank", spy)
    measured = []
    monkeypatch.setattr(type(measurer), "start", lambda self, cands, _m=type(measurer).start: (
        measured.append(cands), _m(self, cands))[1])
    cfg = _config(base_dir, tmp_path / "work", kb=1, kp=3, rounds=1, pipeline=False, cost_model=str(tmp_path / "cm"),
                  cm_pool=3, cm_explore=1)
    res = run_loop(cfg, tasks, progress=False, measurer=measurer)
    assert res["measured_now"] == 6 and len(ranked) == 2 and [len(c) for c in measured] == [3, 3]
    for cands, (h, order) in zip(measured, ranked):
        assert 2 <= len(order) <= 8 and cands[0].task.hash == h
        assert cands[0].schedule not in order and [c.schedule for c in cands[1:]] == order[:2]
    state = json.loads((tmp_path / "work" / "state.json").read_text())
    assert state["rounds"][0]["cost_model"]["path"] == str(tmp_path / "cm")


@pytest.mark.tvm
def test_transfer_proposes_other_cpus_fastest_programs(base_dir, tasks, host, tmp_path, measurer):
    """LoopConfig.transfer (tlm collect's default 1): of a task's k_p programs, one is the fastest
    of another CPU in the database, said with this CPU's prompt, measured once."""
    from tlm.graph.target import resolve_target
    from tlm.measure.database import open_db
    from tlm.space.design import plain_json, random_program
    from tlm.space.language import prompt_tokens, render

    other = resolve_target(dict(host.config, mcpu="znver3" if host.cpu != "znver3" else "icelake-server"))
    work, want = tmp_path / "work", {}
    with open_db(str(work / "db")) as db:
        for t in tasks:
            fast, slow = [p for p in (random_program(t, host, s) for s in range(20)) if p.ok][:2]
            for prog, lat in ((slow, 2e-5), (fast, 1e-5)):
                mine = render(prog, t, host)
                theirs = " ".join(prompt_tokens(t, other) + mine.split()[len(prompt_tokens(t, host)):])
                db.add_record(t, other.key, plain_json(prog.sch.trace.as_json()), [lat], proposer="tlm",
                              sentence=theirs)
            want[t.hash] = render(fast, t, host)
    run_loop(_config(base_dir, work, kb=1, kp=2, rounds=1, pipeline=False, transfer=1), tasks, progress=False,
             measurer=measurer)
    with open_db(str(work / "db")) as db:
        moved = db.records(target_key=host.key, proposer="transfer")
        assert {r.task_hash: r.sentence for r in moved} == want  # the fastest, with this CPU's prompt
        assert all(len(db.records(t.hash, host.key)) == 2 for t in tasks)  # k_p in all: 1 moved + 1 sampled
    run_loop(_config(base_dir, work, kb=1, kp=2, rounds=2, pipeline=False, transfer=1), progress=False,
             measurer=measurer)
    with open_db(str(work / "db")) as db:  # next round: the next fastest, never the same one again
        moved = db.records(target_key=host.key, proposer="transfer")
        assert len(moved) == 4 and len({(r.task_hash, r.sentence) for r in moved}) == 4


@pytest.mark.tvm
def test_measuring_does_not_wait_for_a_slow_fine_tuning(base_dir, tasks, tmp_path, monkeypatch, measurer):
    """Pipelined: round 0's fine-tuning still runs when rounds 1 and 2 end; they are measured
    without waiting for it, and the newest round's fine-tuning starts when it ends (at the run's
    end here)."""
    from pathlib import Path

    from tlm.model.finetune import FinetuneJob

    work = tmp_path / "work"
    launched, waits = [], []
    real_init, real_poll = FinetuneJob.__init__, FinetuneJob.poll

    def init(self, base, demos_path, out_dir, *a, **k):
        launched.append(Path(out_dir).name)
        real_init(self, base, demos_path, out_dir, *a, **k)

    def poll(self, timeout=0.0):
        if self.out_dir.name == "round-0" and timeout == 0.0:
            return None  # busy as long as nobody waits for it
        waits.append(json.loads((work / "state.json").read_text())["next_round"])
        return real_poll(self, timeout)

    monkeypatch.setattr(FinetuneJob, "__init__", init)
    monkeypatch.setattr(FinetuneJob, "poll", poll)
    # two batches (a round of new programs each) and no convergence stop: three rounds whatever is measured
    run_loop(_config(base_dir, work, kb=2, rounds=3, ft_steps=1, min_gain=-1.0), tasks, progress=False,
             measurer=measurer)
    state = json.loads((work / "state.json").read_text())
    assert state["next_round"] == 3 and [x["model"] for x in state["rounds"]] == ["base"] * 3
    assert waits and min(waits) == 3  # the first wait for a fine-tuning: after the last round
    assert launched == ["round-0", "round-2"]
    assert state["finetune"]["round"] == 2 and state["finetune"]["status"] == "done"
    assert (work / "models" / "round-2" / "tlm.json").is_file()
