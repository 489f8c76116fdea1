"""Constrained generation with a tiny untrained model: only valid programs, round-tripping."""

import math

import pytest
import workloads_tir as w

from tlm.errors import TlmError


@pytest.fixture(scope="module")
def tasks():
    return {"matmul": w.matmul(16), "conv": w.conv3x3(), "softmax": w.softmax()}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tasks, host):
    from tlm.lm import build_tokenizer, new_model, save_model, space_words
    from tlm.sampling import target_id

    tok = build_tokenizer(space_words(list(tasks.values()), host, walks=2))
    out = tmp_path_factory.mktemp("untrained")
    save_model(new_model("tiny", tok.get_vocab_size(), seed=1), tok, out,
               {"preset": "tiny", "target": host.config, "target_id": target_id(host)})
    return out


@pytest.fixture(scope="module")
def gen(model_dir, host):
    from tlm.generate import Generator

    return Generator.from_dir(model_dir, host)


@pytest.mark.parametrize("name", ["matmul", "conv", "softmax"])
def test_generated_programs_are_valid_and_round_trip(gen, tasks, host, name):
    from tlm.language import parse, render
    from tlm.space import task_space

    task = tasks[name]
    out = gen.generate(task, 4, seed=3)
    assert len(out) == 4 and len({g.sentence for g in out}) == 4
    for g in out:
        assert g.error is None and g.task_hash == task.hash
        assert g.logprob <= 0 and math.isfinite(g.logprob)
        prog = parse(g.sentence, task, host, space=task_space(task, host))
        assert prog.ok and prog.space == g.space
        assert [list(d) if isinstance(d, tuple) else d for d in prog.decisions] == g.decisions
        assert render(prog, task, host) == g.sentence


def test_greedy_is_deterministic(gen, tasks):
    task = tasks["matmul"]
    a = gen.generate(task, 3, greedy=True)
    b = gen.generate(task, 3, greedy=True, seed=99)
    assert len(a) == 1 and a[0].sentence == b[0].sentence and a[0].logprob == b[0].logprob


def test_sampling_is_seeded_and_skips_seen(gen, tasks):
    task = tasks["softmax"]
    a = [g.sentence for g in gen.generate(task, 3, seed=5)]
    assert a == [g.sentence for g in gen.generate(task, 3, seed=5)]
    fresh = gen.generate(task, 3, seed=5, seen=set(a))
    assert fresh and not set(g.sentence for g in fresh) & set(a)


def test_top_k_and_temperature(gen, tasks):
    task = tasks["matmul"]
    one = gen.generate(task, 2, top_k=1)  # top-1 sampling is greedy: one distinct program
    assert len(one) == 1 and one[0].sentence == gen.generate(task, 1, greedy=True)[0].sentence
    assert len(gen.generate(task, 3, temperature=2.0, seed=1)) == 3


def test_kv_cache_matches_full_pass(gen, tasks, host):
    import torch

    from tlm.generate import _Session
    from tlm.language import render
    from tlm.space import random_program

    task = tasks["conv"]
    words = render(random_program(task, host, 0), task, host).split()
    ids = [gen.lm.vocab.bos] + gen.lm.vocab.encode(words)
    sess = _Session(gen.lm, None, 0, [])
    for start in range(0, len(ids), 7):
        sess.pending = ids[start : start + 7]
        last = sess.logits()
    with torch.no_grad():
        full = gen.lm.model(input_ids=torch.tensor([ids])).logits[0, -1]
    assert torch.allclose(last, full, atol=1e-4)


def test_vocabulary_gap_is_a_clean_error(gen, host):
    task = w.matmul(7, 11, 13)  # factors 7, 11, 13 are numerals; a new prompt word is not needed
    out = gen.generate(task, 1)
    assert len(out) == 1 and out[0].error is None
    # Unknown prompt/context words read as <unk>; choices with unknown words are left out.
    partial = gen.generate(w.matmul(2048, 16, 16), 2)
    assert len(partial) == 2 and all(2048 not in d for g in partial for d in g.decisions[:1])
    big = w.matmul(1031, 16, 16)  # a prime extent above the numerals: no tile choice is representable
    res = gen.one(big)
    assert res.error and "vocabulary" in res.error
    with pytest.raises(TlmError):
        from tlm.generate import Generator

        Generator.from_dir("/nonexistent-model-dir", host)


def test_cli_generate_and_pretrain(model_dir, tasks, host, tmp_path, monkeypatch):
    import argparse
    import json
    from types import SimpleNamespace

    import tlm.graph
    from tlm import generate, lm
    from tlm.sampling import sample

    monkeypatch.setattr(tlm.graph, "tasks_for_source", lambda source, target=None: SimpleNamespace(
        tasks=[tasks["matmul"], tasks["softmax"]], target=host))
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    generate.register_cli(sub)
    lm.register_cli(sub)
    out = tmp_path / "gen.jsonl"
    args = parser.parse_args(["generate", "toy", "--model", str(model_dir), "--per-task", "2", "--out", str(out), "--no-progress"])
    assert args.func(args) == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(recs) == 4 and {"task_hash", "sentence", "space", "decisions", "logprob", "error", "task_name"} <= set(recs[0])

    sample([tasks["matmul"]], host, 12, tmp_path / "data", jobs=1, progress=False)
    args = parser.parse_args(["pretrain", "--data", str(tmp_path / "data"), "--preset", "tiny", "--out", str(tmp_path / "m"), "--steps", "2"])
    assert args.func(args) == 0
    assert (tmp_path / "m" / "model.safetensors").is_file()
