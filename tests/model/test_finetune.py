"""Supervised fine-tuning (tlm.model.finetune): value masks, demonstrations from a database, one tiny SFT round."""

import json

import pytest
import workloads_tir as w

from tlm.errors import TlmError
from tlm.model.finetune import Demo, FinetuneConfig, encode_demo, value_mask

# A hand-written sentence: 13 prompt words, then space / tile / cat / loc decisions.
_PROMPT = "matmul float32 16 16 float32 16 16 float32 16 16 llvm cpu 2 avx2 256".split()
_SENTENCE = " ".join(_PROMPT + "space 3 0 tile C 0 16 2 8 tile C 1 16 16 1 cat unroll_explicit 64 loc C root".split())


def test_value_mask_grammar():
    words = _SENTENCE.split()
    mask = value_mask(words, len(_PROMPT))
    values = [wd for wd, m in zip(words, mask) if m]
    assert values == ["0", "2", "8", "16", "1", "64", "root"]
    assert not any(mask[: len(_PROMPT)])
    with pytest.raises(TlmError):
        value_mask(words, len(_PROMPT) - 1)  # "256" starts no decision
    with pytest.raises(TlmError):
        value_mask(words[:-1], len(_PROMPT))  # ends inside a decision


def test_decisions_loss_masks_prompt_and_contexts():
    from tlm.model.lm import Vocab, build_tokenizer, sentence_words

    vocab = Vocab(build_tokenizer(sentence_words([_SENTENCE])))
    demo = Demo("h", _SENTENCE, len(_PROMPT))
    ids, labels = encode_demo(vocab, demo, "decisions")
    words = _SENTENCE.split()
    assert ids == [vocab.bos] + vocab.encode(words) + [vocab.eos]  # tokenized as in pretraining
    assert labels[0] == -100 and labels[-1] == -100  # <bos>, <eos>
    assert all(x == -100 for x in labels[1 : 1 + len(_PROMPT)])  # the prompt
    kept = [vocab.decode([x])[0] for x in labels if x != -100]
    assert kept == ["0", "2", "8", "16", "1", "64", "root"]  # values only, no contexts
    ids2, labels2 = encode_demo(vocab, demo, "sentence")
    assert ids2 == ids and labels2 == ids  # every token (padding is masked when batching)

    from tlm.model.lm import pad_batch

    _, attn, lab = pad_batch([encode_demo(vocab, demo, "decisions"), (ids[:5], ids[:5])], vocab.pad, "cpu")
    assert int(attn[1].sum()) == 5 and (lab[1, 5:] == -100).all()


@pytest.fixture(scope="module")
def tasks():
    return [w.matmul(16), w.softmax()]


@pytest.mark.tvm
def test_value_mask_matches_a_rewalk(tasks, host):
    from tlm.space.design import random_program
    from tlm.space.language import context_tokens, prompt_tokens, render, value_tokens

    for task in tasks + [w.conv3x3()]:
        for seed in range(3):
            prog = random_program(task, host, seed)
            assert prog.ok
            want = [False] * len(prompt_tokens(task, host))
            for point, choice in zip(prog.points, [prog.space] + list(prog.decisions)):
                want += [False] * len(context_tokens(point)) + [True] * len(value_tokens(point, choice))
            assert value_mask(render(prog, task, host).split(), len(prompt_tokens(task, host))) == want


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory, tasks, host):
    from tlm.model.lm import build_tokenizer, new_model, save_model, space_words
    from tlm.space.sampling import target_id

    tok = build_tokenizer(space_words(tasks, host, walks=2))
    out = tmp_path_factory.mktemp("base")
    save_model(new_model("tiny", tok.get_vocab_size(), seed=1), tok, out,
               {"preset": "tiny", "target": host.config, "target_id": target_id(host), "step": 7})
    return out


def _demos(tasks, host, seed=0):
    from tlm.space.design import random_program
    from tlm.space.language import render

    return [(t, render(random_program(t, host, seed), t, host)) for t in tasks]


def _scores(model_dir, demos):
    from tlm.model.finetune import value_logprobs
    from tlm.model.lm import load_model

    return value_logprobs(load_model(model_dir), demos)


@pytest.mark.tvm
def test_one_round_raises_demonstration_logprob(base_dir, tasks, host, tmp_path):
    from tlm.model.finetune import finetune
    from tlm.model.lm import load_model

    demos = _demos(tasks, host)
    before = _scores(base_dir, demos)
    cfg = FinetuneConfig(steps=12, lr=3e-3, batch_size=2, loss="decisions", seed=3)
    out = finetune(base_dir, demos, tmp_path / "ft", cfg)
    after = _scores(out, demos)
    assert all(a > b + 5 for a, b in zip(after, before)), (before, after)

    lm = load_model(out)
    assert lm.meta["finetuned_from"] == str(base_dir) and lm.meta["demonstrations"] == 2
    assert lm.meta["loss"] == "decisions" and lm.meta["preset"] == "tiny" and lm.meta["step"] == 7
    from tlm.space.sampling import target_id

    assert [(t["target_id"], t["isa"]) for t in lm.meta["targets"]] == [(target_id(host), host.isa)]  # the base's
    assert json.loads((base_dir / "tokenizer.json").read_text()) == json.loads((out / "tokenizer.json").read_text())
    report = json.loads((out / "finetune.json").read_text())
    assert report["config"]["steps"] == 12 and report["config"]["loss"] == "decisions"
    assert report["final_loss"] < report["first_loss"]
    assert not list(tmp_path.glob("ft.tmp-*"))

    from tlm.model.generate import Generator

    if hasattr(Generator, "logprob"):  # the log-probability generation gives the demonstrations rises too
        g0, g1 = Generator.from_dir(base_dir, host), Generator.from_dir(out, host)
        assert all(g1.logprob(t, s) > g0.logprob(t, s) for t, s in demos)

    # Deterministic given the seed, and always from the base (re-running replaces the output).
    again = finetune(base_dir, demos, tmp_path / "ft", cfg)
    assert _scores(again, demos) == after
    # The sentence loss trains on every token, and also raises the values' likelihood.
    sent = finetune(base_dir, demos, tmp_path / "ft-sent", FinetuneConfig(steps=12, lr=3e-3, batch_size=2, loss="sentence"))
    assert json.loads((sent / "finetune.json").read_text())["trainable_tokens"] > report["trainable_tokens"]
    assert all(a > b for a, b in zip(_scores(sent, demos), before))
    with pytest.raises(TlmError):
        finetune(base_dir, [], tmp_path / "none", cfg)
    with pytest.raises(TlmError):
        finetune(base_dir, demos, tmp_path / "bad", FinetuneConfig(loss="everything"))


@pytest.mark.tvm
def test_weighted_demonstrations(base_dir, tasks, host, tmp_path):
    """Weights scale each demonstration's share of the loss: a common factor changes nothing, a
    zero-weight demonstration is not learned, bad weights are refused."""
    from dataclasses import replace

    from tlm.model.finetune import as_demos, finetune

    demos = as_demos(_demos(tasks, host), host)
    cfg = FinetuneConfig(steps=6, lr=3e-3, batch_size=2, seed=3)
    plain = _scores(finetune(base_dir, demos, tmp_path / "plain", cfg), demos)
    doubled = _scores(finetune(base_dir, [replace(d, weight=2.0) for d in demos], tmp_path / "x2", cfg), demos)
    assert doubled == pytest.approx(plain, rel=1e-4)
    before = _scores(base_dir, demos)
    zero = _scores(finetune(base_dir, [demos[0], replace(demos[1], weight=0.0)], tmp_path / "z", cfg), demos)
    assert zero[0] > before[0] + 1 and abs(zero[1] - before[1]) < abs(plain[1] - before[1])
    for bad in (-1.0, float("nan")):
        with pytest.raises(TlmError):
            finetune(base_dir, [replace(d, weight=bad) for d in demos], tmp_path / "bad", cfg)


@pytest.mark.tvm
def test_demonstrations_pick_the_best_and_convert_traces(tasks, host, tmp_path):
    from tlm.measure.database import open_db
    from tlm.model.finetune import demo_records, demonstrations
    from tlm.space.design import plain_json, random_program
    from tlm.space.language import render

    mm, sm = tasks
    progs = [p for p in (random_program(mm, host, s) for s in range(6)) if p.ok]
    with open_db(str(tmp_path / "db")) as db:
        def add(prog, secs, sentence=True, error=None, proposer="tlm"):
            return db.add_record(mm, host.key, plain_json(prog.sch.trace.as_json()), secs, error=error, proposer=proposer,
                                 sentence=render(prog, mm, host) if sentence else None)

        add(progs[0], [3e-5])
        add(progs[1], [1e-6], error="WrongResult: mismatch")  # fastest but wrong: never a demonstration
        add(progs[2], [2e-5])
        add(progs[3], [1e-5], sentence=False, proposer="metaschedule")  # best: only its trace
        got = demonstrations(db, [mm, sm], host.key)
        assert got == [(mm, render(progs[3], mm, host))]  # converted from the trace; sm has none
        two = demo_records(db, [mm], host, per_task=2)
        assert [d.sentence for d in two] == [render(p, mm, host) for p in (progs[3], progs[2])]
        assert two[0].proposer == "metaschedule" and two[0].median_s == pytest.approx(1e-5)
        assert [d.weight for d in two] == [1.0, 1.0]
        # `tlm finetune --speed-power P`: weighted by (task's fastest / latency) ^ P
        weighted = demo_records(db, [mm], host, per_task=3, speed_power=2.0)
        assert [d.weight for d in weighted] == pytest.approx([1.0, 0.25, 1 / 9])
        # A trace that is no program of the task's spaces is skipped, not fatal.
        db.add_record(mm, host.key, [[["GetSBlock", [], ["C", "main"], ["b0"]]], []], [1e-7], proposer="import")
        assert demonstrations(db, [mm], host.key) == [(mm, render(progs[3], mm, host))]
        # A sentence of an older version (another prompt) is said anew from its trace.
        old = "matmul float32 16 16 llvm znver3 2 avx2 256 " + render(progs[4], mm, host).split(" space ", 1)[1]
        db.add_record(mm, host.key, plain_json(progs[4].sch.trace.as_json()), [1e-8], proposer="tlm", sentence=old)
        assert demonstrations(db, [mm], host.key) == [(mm, render(progs[4], mm, host))]


@pytest.mark.tvm
def test_demonstrations_of_every_cpu_in_a_database(base_dir, tasks, host, tmp_path):
    """`tlm finetune --db DB --target all`: each CPU's best programs, each prompt naming its CPU,
    and the model then lists every one of them in its targets."""
    from tlm.graph.target import resolve_target
    from tlm.measure.database import open_db
    from tlm.model.demos import every_target_demos
    from tlm.model.finetune import db_demos, finetune
    from tlm.model.lm import load_model
    from tlm.space.design import plain_json, random_program
    from tlm.space.language import prompt_tokens, render
    from tlm.space.sampling import target_id

    mm = tasks[0]
    other = resolve_target(dict(host.config, mcpu="znver3" if host.cpu != "znver3" else "icelake-server"))
    with open_db(str(tmp_path / "db")) as db:
        for target in (host, other):
            prog = random_program(mm, target, 1)
            db.add_record(mm, target.key, plain_json(prog.sch.trace.as_json()), [1e-5], proposer="tlm",
                          sentence=render(prog, mm, target))
    targets, demos = db_demos(str(tmp_path / "db"), ["all"], 1)
    assert {t.key for t in targets} == {host.key, other.key} and len(demos) == 2
    assert {tuple(d.sentence.split()[: d.prompt_len]) for d in demos} == {
        tuple(prompt_tokens(mm, t)) for t in (host, other)}
    with open_db(str(tmp_path / "db")) as db:  # the loop's `demo_targets="all"` (tlm collect's default)
        mine, counts = every_target_demos(db, [mm], host, 1)
        assert counts == {host.key: 1, other.key: 1} and {d.sentence for d in mine} == {d.sentence for d in demos}
        assert mine[0].sentence.split()[: mine[0].prompt_len] == prompt_tokens(mm, host)  # its own first
    only_targets, only = db_demos(str(tmp_path / "db"), [json.dumps(other.config)], 1)
    assert [t.key for t in only_targets] == [other.key]
    assert len(only) == 1
    out = finetune(base_dir, demos, tmp_path / "ft", FinetuneConfig(steps=2, batch_size=2), target=targets)
    assert {t["target_id"] for t in load_model(out).meta["targets"]} == {target_id(host), target_id(other)}

    # the collector's fine-tuning process (tlm.search.loop, demo_targets="all") names the CPUs too
    from tlm.model.demos import write_demos
    from tlm.model.finetune import FinetuneJob

    write_demos(demos, tmp_path / "demos.jsonl")
    job = FinetuneJob(base_dir, tmp_path / "demos.jsonl", tmp_path / "ft2", FinetuneConfig(steps=2, batch_size=2),
                      tmp_path / "ft2.log", [host.key, other.key])
    assert job.wait().ok, (tmp_path / "ft2.log").read_text()[-2000:]
    assert {t["target_id"] for t in load_model(tmp_path / "ft2").meta["targets"]} == {target_id(host), target_id(other)}


def test_cli_finetune_needs_one_source(tmp_path):
    from tlm.cli import main

    assert main(["finetune", "--base", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    for bad in (["--db", str(tmp_path), "--speed-power", "-1"], ["--demos", str(tmp_path), "--speed-power", "2"]):
        assert main(["finetune", "--base", str(tmp_path), "--out", str(tmp_path / "o"), *bad]) == 2


def test_config_resolution():
    cfg = FinetuneConfig().resolved(100, "small")
    assert cfg.steps == 20 and cfg.lr == pytest.approx(1e-4) and cfg.warmup == 2
    assert FinetuneConfig(epochs=3).resolved(3000, "paper").steps == 563
    assert FinetuneConfig(steps=5, lr=1e-3).resolved(1, "tiny").steps == 5


@pytest.mark.tvm
def test_sft_loss_bench_on_tiny_data(base_dir, tasks, host, tmp_path):
    import importlib.util
    from pathlib import Path

    from tlm.measure.database import open_db
    from tlm.space.design import plain_json, random_program

    with open_db(str(tmp_path / "db")) as db:
        for task, secs in zip(tasks + [w.matmul(16, 32, 16)], (1e-5, 2e-5, 3e-5)):
            prog = random_program(task, host, 1)
            db.add_record(task, host.key, plain_json(prog.sch.trace.as_json()), [secs], proposer="metaschedule")
    path = Path(__file__).resolve().parents[2] / "bench" / "sft_loss.py"
    spec = importlib.util.spec_from_file_location("sft_loss_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "results"
    assert bench.main(["--db", str(tmp_path / "db"), "--base", str(base_dir), "--steps", "3", "--lr", "3e-3",
                       "--out", str(out), "--work", str(tmp_path / "models")]) == 0
    res = json.loads((out / "sft_loss.json").read_text())
    assert res["train_tasks"] + res["heldout_tasks"] == 3 and res["heldout_tasks"] >= 1
    assert set(res["heldout"]) == {"base", "sentence", "decisions"} and res["verdict"]
    assert "| decisions |" in (out / "sft_loss.md").read_text()


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=1, max_size=32), st.randoms(use_true_random=False))
def test_length_parts_partition_the_batch(lengths, rnd):
    from tlm.model.finetune import length_parts

    picked = list(range(len(lengths)))
    rnd.shuffle(picked)
    parts = length_parts(picked, lengths)
    assert 1 <= len(parts) <= 2 and all(parts)
    assert sorted(i for p in parts for i in p) == sorted(picked)  # every row once
    whole = len(picked) * max(lengths)
    padded = sum(len(p) * max(lengths[i] for i in p) for p in parts)
    assert padded <= whole and (len(parts) == 1 or padded <= 0.9 * whole)
    if len(parts) == 2:  # shorter rows first
        assert max(lengths[i] for i in parts[0]) <= min(lengths[i] for i in parts[1])


def test_parts_give_the_batch_gradient():
    """Computed part by part, a batch's loss and gradient are the whole batch's (dropout off)."""
    import torch

    from tlm.model.finetune import backward_batch
    from tlm.model.lm import new_model

    torch.manual_seed(0)
    model = new_model("tiny", 50, seed=0)
    model.eval()
    rng = torch.Generator().manual_seed(1)
    rows = []
    for n in (5, 40, 7, 33, 6, 38):  # short and long sentences, as in a real batch
        ids = [1] + torch.randint(4, 50, (n,), generator=rng).tolist() + [2]
        rows.append((ids, list(ids)))
    weights = [1.0, 2.0, 1.0, 0.5, 1.0, 1.0]
    n = sum((len(ids) - 1) * w for (ids, _), w in zip(rows, weights))

    def grads(parts):
        model.zero_grad(set_to_none=True)
        loss = backward_batch(model, rows, weights, parts, n, 0, "cpu")
        return loss, [p.grad.clone() for p in model.parameters()]

    whole_loss, whole = grads([[0, 1, 2, 3, 4, 5]])
    part_loss, parted = grads([[0, 2, 4], [1, 3, 5]])
    assert abs(whole_loss - part_loss) < 1e-5
    assert all(torch.allclose(a, b, atol=1e-6, rtol=1e-4) for a, b in zip(whole, parted))


def test_idle_priority_in_a_child():
    """`--idle` (the collector's fine-tuning beside its measuring): the process drops to
    SCHED_IDLE and nice 19 (Linux), where it only gets cores nothing else wants."""
    import os
    import subprocess
    import sys

    code = ("import os; from tlm.model.finetune import idle_priority; idle_priority(); "
            "print(os.sched_getscheduler(0) == getattr(os, 'SCHED_IDLE', -1), os.nice(0))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[1] == "19" and (out[0] == "True" or not hasattr(os, "SCHED_IDLE"))


@pytest.mark.tvm
def test_a_stopped_fine_tuning_resumes_from_its_checkpoint(base_dir, tasks, host, tmp_path, monkeypatch):
    """Stopped mid-run (here in its 6th step, mid-epoch), a fine-tuning started again on the same
    base, demonstrations and config goes on from its checkpoint and ends with the weights of an
    uninterrupted run; a checkpoint of another run is not used."""
    from dataclasses import replace

    import torch
    from safetensors.torch import load_file

    import tlm.model.finetune as ft
    from tlm.model.checkpoint import checkpoint_path, run_key

    demos = _demos(tasks, host)
    cfg = FinetuneConfig(steps=8, lr=3e-3, batch_size=1, seed=3, checkpoint_s=0)  # a checkpoint every step
    whole = ft.finetune(base_dir, demos, tmp_path / "whole", cfg)
    assert not checkpoint_path(whole).exists()
    real = ft._lr_factor

    def stop(at):
        def lr_factor(step, c):
            if step == at:
                raise KeyboardInterrupt
            return real(step, c)
        monkeypatch.setattr(ft, "_lr_factor", lr_factor)
        with pytest.raises(KeyboardInterrupt):
            ft.finetune(base_dir, demos, tmp_path / "cut", cfg)
        monkeypatch.setattr(ft, "_lr_factor", real)
        assert checkpoint_path(tmp_path / "cut").is_file()

    stop(5)
    assert not (tmp_path / "cut").exists()
    out = ft.finetune(base_dir, demos, tmp_path / "cut", cfg)
    report = json.loads((out / "finetune.json").read_text())
    assert report["resumed_at_step"] == 5 and not checkpoint_path(out).exists()
    assert report["history"] == json.loads((whole / "finetune.json").read_text())["history"]
    a, b = load_file(str(whole / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)

    stop(3)
    other = ft.finetune(base_dir, demos, tmp_path / "cut", replace(cfg, seed=4))
    assert json.loads((other / "finetune.json").read_text())["resumed_at_step"] == 0
    # The threads, device and checkpoint interval are how a run is run, not which run it is.
    d = ft.as_demos(demos, host)
    assert run_key(base_dir, d, cfg) == run_key(base_dir, d, replace(cfg, threads=1, device="cuda", checkpoint_s=9))
    assert run_key(base_dir, d, cfg) != run_key(base_dir, d[:1], cfg)


_FT_PARENT = """
import sys, time
from tlm.model.finetune import FinetuneConfig, FinetuneJob

base, demos, out = sys.argv[1:4]
job = FinetuneJob(base, demos, out, FinetuneConfig(steps=100000, batch_size=2), out + ".log", idle=True)
print(job.proc.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.tvm
def test_the_fine_tuning_child_dies_with_its_killed_parent(base_dir, tasks, host, tmp_path):
    """`kill -9` of the process that started a fine-tuning (`tlm collect`'s loop, `FinetuneJob`)
    ends the fine-tuning too (issue 48, item 8): it watches for its parent's death
    (tlm.errors.die_with_parent)."""
    import signal
    import subprocess
    import sys
    import time

    import psutil

    from tlm.model.demos import write_demos
    from tlm.model.finetune import as_demos

    write_demos(as_demos(_demos(tasks, host), host), tmp_path / "demos.jsonl")
    parent = subprocess.Popen([sys.executable, "-c", _FT_PARENT, str(base_dir), str(tmp_path / "demos.jsonl"),
                               str(tmp_path / "ft")], stdout=subprocess.PIPE, text=True)
    child = None

    def alive(pid):
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    try:
        child = int(parent.stdout.readline())
        # torch loaded: the child is past the start of its main(), where it arms the parent-death signal
        deadline = time.time() + 120
        while alive(child) and time.time() < deadline and not any(
                "torch" in m.path for m in psutil.Process(child).memory_maps()):
            time.sleep(0.2)
        assert alive(child), (tmp_path / "ft.log").read_text()[-2000:]
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.time() + 10
        while alive(child) and time.time() < deadline:
            time.sleep(0.1)
        assert not alive(child), "the fine-tuning process outlived its killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if child is not None and alive(child):
            psutil.Process(child).kill()
