"""Constrained, batched generation with a tiny untrained model: only valid programs, round-tripping,
the same programs and log-probabilities at any batch size."""

import math

import pytest
import workloads_tir as w

from tlm.errors import TlmError


@pytest.fixture(scope="module")
def tasks():
    return {"matmul": w.matmul(16), "conv": w.conv3x3(), "softmax": w.softmax(), "transpose": w.transpose()}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tasks, host):
    from tlm.model.lm import build_tokenizer, new_model, save_model, space_words
    from tlm.space.sampling import target_id

    tok = build_tokenizer(space_words(list(tasks.values()), host, walks=2))
    out = tmp_path_factory.mktemp("untrained")
    save_model(new_model("tiny", tok.get_vocab_size(), seed=1), tok, out,
               {"preset": "tiny", "target": host.config, "target_id": target_id(host)})
    return out


@pytest.fixture(scope="module")
def gen(model_dir, host):
    from tlm.model.generate import Generator

    return Generator.from_dir(model_dir, host)


@pytest.mark.parametrize("name", ["matmul", "conv", "softmax"])
def test_generated_programs_are_valid_and_round_trip(gen, tasks, host, name):
    import tvm

    from tlm.space.design import task_space
    from tlm.space.language import parse, render

    task = tasks[name]
    out = gen.generate(task, 6, seed=3, batch_size=4)  # more programs than lanes: lanes are refilled
    assert len(out) == 6 and len({g.sentence for g in out}) == 6
    for g in out:
        assert g.error is None and g.task_hash == task.hash
        assert g.logprob <= 0 and math.isfinite(g.logprob)
        prog = parse(g.sentence, task, host, space=task_space(task, host))
        assert prog.ok and prog.space == g.space
        assert [list(d) if isinstance(d, tuple) else d for d in prog.decisions] == g.decisions
        assert render(prog, task, host) == g.sentence
        assert g.schedule is not None
        tvm.ir.assert_structural_equal(g.schedule.mod, prog.sch.mod)
        assert "schedule" not in g.to_json() and "schedule" not in repr(g)


@pytest.mark.parametrize("name,batch", [("conv", 4), ("softmax", 16)])
def test_batched_equals_unbatched(gen, tasks, name, batch):
    """Batch size changes nothing: same programs, and log-probabilities equal to one plain forward pass."""
    task = tasks[name]
    calls = gen.forward_calls
    one = gen.generate(task, 6, seed=7, batch_size=1)
    calls, single = gen.forward_calls, gen.forward_calls - calls
    many = gen.generate(task, 6, seed=7, batch_size=batch)
    assert len(one) == 6 and [g.sentence for g in many] == [g.sentence for g in one]
    assert all(abs(a.logprob - b.logprob) < 1e-4 for a, b in zip(one, many))
    assert gen.forward_calls - calls < single / 2  # one pass serves several programs
    for g in one:
        assert abs(gen.logprob(task, g.sentence) - g.logprob) < 1e-4


def test_one_program_task_takes_one_try(gen, tasks, host):
    """A task whose one design space has no decisions has one program: generation says it once,
    and when it is already seen, gives nothing after one try (not 4n + 10 replays of it)."""
    from tlm.space.design import task_space

    task = tasks["transpose"]
    space = task_space(task, host)
    assert len(space) == 1 and space.statics == [[]]
    calls = gen.forward_calls
    (only,) = gen.generate(task, 5, seed=1)
    assert only.error is None and only.logprob == 0.0  # every word forced
    assert gen.generate(task, 5, seed=2, seen={only.sentence}) == []
    assert gen.forward_calls - calls <= 2  # the prompt of each call; no word to choose
    assert [g.sentence for g in gen.sample(task, 3, seed=1)] == [only.sentence] * 3  # sampling is not capped


def test_logprob_of_any_sentence(gen, tasks, host):
    from tlm.space.design import random_program
    from tlm.space.language import render

    task = tasks["matmul"]
    sentence = render(random_program(task, host, 4), task, host)
    lp = gen.logprob(task, sentence)
    assert lp < 0 and math.isfinite(lp)
    words = sentence.split()
    with pytest.raises(TlmError, match="prompt"):
        gen.logprob(tasks["softmax"], sentence)
    with pytest.raises(TlmError):
        gen.logprob(task, " ".join(words[:-1]))  # ends early
    with pytest.raises(TlmError):
        gen.logprob(task, sentence + " 4")
    i = words.index("tile") + 4  # the first tile factor: 1000 divides no extent here
    with pytest.raises(TlmError):
        gen.logprob(task, " ".join(words[:i] + ["1000"] + words[i + 1 :]))


def test_overlong_and_aborted_batches_end_cleanly(gen, tasks, monkeypatch):
    import threading

    task = tasks["conv"]
    before = threading.active_count()
    monkeypatch.setattr(gen.lm.model.config, "n_positions", 40)  # the prompt fits, a program does not
    assert gen.generate(task, 3, batch_size=2, max_tries=4) == []
    res = gen.one(task)
    assert res.error and "positions" in res.error and res.schedule is None
    monkeypatch.undo()
    real, calls = gen.lm.model.forward, [0]

    def failing(*args, **kwargs):
        calls[0] += 1
        if calls[0] > 3:
            raise RuntimeError("boom")
        return real(*args, **kwargs)

    monkeypatch.setattr(gen.lm.model, "forward", failing)
    with pytest.raises(RuntimeError, match="boom"):
        gen.generate(task, 8, batch_size=4)
    monkeypatch.undo()
    import time

    for _ in range(100):  # the lanes' threads end (aborted walks)
        if threading.active_count() <= before:
            break
        time.sleep(0.05)
    assert threading.active_count() <= before
    assert len(gen.generate(task, 2, seed=1)) == 2


def test_greedy_is_deterministic(gen, tasks):
    task = tasks["matmul"]
    a = gen.generate(task, 3, greedy=True)
    b = gen.generate(task, 3, greedy=True, seed=99)
    assert len(a) == 1 and a[0].sentence == b[0].sentence and a[0].logprob == b[0].logprob


def test_sampling_is_seeded_and_skips_seen(gen, tasks):
    task = tasks["softmax"]
    a = [g.sentence for g in gen.generate(task, 3, seed=5)]
    assert a == [g.sentence for g in gen.generate(task, 3, seed=5)]
    assert a != [g.sentence for g in gen.generate(task, 3, seed=6)]
    fresh = gen.generate(task, 3, seed=5, seen=set(a))
    assert fresh and not set(g.sentence for g in fresh) & set(a)


def test_top_k_and_temperature(gen, tasks):
    task = tasks["matmul"]
    one = gen.generate(task, 2, top_k=1)  # top-1 sampling is greedy: one distinct program
    assert len(one) == 1 and one[0].sentence == gen.generate(task, 1, greedy=True)[0].sentence
    raw = gen.sample(task, 3, top_k=1, batch_size=3)  # the raw tries: duplicates kept
    assert [g.sentence for g in raw] == [one[0].sentence] * 3
    assert len(gen.generate(task, 3, temperature=2.0, seed=1)) == 3


def _lm(words, meta=None):
    """An untrained tiny model over build_tokenizer(words), in memory (no files)."""
    from pathlib import Path

    from tlm.model.lm import LoadedModel, Vocab, build_tokenizer, new_model

    vocab = Vocab(build_tokenizer(words))
    return LoadedModel(new_model("tiny", len(vocab), seed=2).eval(), vocab, meta or {}, Path("in-memory"))


def test_every_extent_is_sayable(gen, host):
    """Extents no training task had (2048, the prime 1031) are generated like any other."""
    from tlm.space.language import parse

    for task in (w.matmul(7, 11, 13), w.matmul(2048, 16, 16), w.matmul(1031, 16, 16)):
        out = gen.generate(task, 2, seed=1)
        assert len(out) == 2 and all(g.error is None for g in out)
        assert all(parse(g.sentence, task, host).ok for g in out)
    assert " n4 1 0 3 1 " in out[0].sentence  # 1031 in the prompt and the tile contexts


def test_vocabulary_gap_is_a_clean_error(host):
    """A tokenizer that lacks number words (hand-made: build_tokenizer never makes one) leaves
    out the choices it cannot say, and a decision with none left is a one-line error."""
    from tlm.model.generate import Generator
    from tlm.model.lm import LoadedModel, Vocab

    lm = _lm({"x"})
    tok = lm.vocab.tokenizer
    vocab = tok.get_vocab()
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    kept = [w for w in sorted(vocab, key=vocab.get) if not w.startswith("n") or not w[1:].isdigit()]
    small = Tokenizer(WordLevel({w: i for i, w in enumerate(kept)}, unk_token="<unk>"))
    res = Generator(LoadedModel(lm.model, Vocab(small), {}, lm.path), host).one(w.matmul(1031, 16, 16))
    assert res.error and "vocabulary" in res.error and "\n" not in res.error
    with pytest.raises(TlmError):
        Generator.from_dir("/nonexistent-model-dir", host)


@pytest.mark.tvm
@pytest.mark.parametrize("task", [w.matmul(1, 1031, 64), w.dense_bias(1, 64, 1031)], ids=["matmul", "dense"])
def test_prime_extent_every_choice_is_reachable(task, host):
    """Issue 14 point 2: a task with the prime extent 1031; at every decision of random walks of
    every design space, every enumerated choice encodes, decodes, and is a leaf of the
    generator's trie under a tokenizer built from unrelated words; then the constrained
    generator (an untrained model over that tokenizer) writes valid programs of it."""
    import random

    from tlm.model.choices import choice_trie
    from tlm.model.generate import Generator
    from tlm.model.lm import Vocab, build_tokenizer
    from tlm.space.design import task_space, walk
    from tlm.space.language import choice_from_tokens, parse, value_tokens

    vocab = Vocab(build_tokenizer({"unrelated", "words"}))
    space, rng, big = task_space(task, host), random.Random(0), []

    def leaves(node, path):
        for key, sub in node.items():
            yield from [(path, sub)] if key is None else leaves(sub, path + [key])

    def policy(point, idx):
        choices = point.choices
        found = list(leaves(choice_trie(point, vocab), []))
        assert sorted(map(str, (c for _, c in found))) == sorted(map(str, choices)), point
        for ids, choice in found:
            assert vocab.unk not in ids and choice_from_tokens(point, vocab.decode(ids)) == choice
            assert vocab.decode(ids) == value_tokens(point, choice)
        if point.kind == "tile" and point.context["extent"] == 1031:
            big.append(point)
        return idx if point.kind == "space" else choices[rng.randrange(len(choices))]

    for idx in range(len(space)):
        for _ in range(3):
            walk(space, lambda p, idx=idx: policy(p, idx), postproc=False)
    assert big  # the prime extent was tiled
    out = Generator(_lm({"unrelated", "words"}), host).generate(task, 3, seed=0)
    assert len(out) == 3 and all(parse(g.sentence, task, host).ok for g in out)


def test_cli_generate_and_pretrain(model_dir, tasks, host, tmp_path, monkeypatch):
    import argparse
    import json
    from types import SimpleNamespace

    import tlm.graph.extract
    from tlm.model import generate, pretrain
    from tlm.space.sampling import sample

    monkeypatch.setattr(tlm.graph.extract, "tasks_for_source", lambda source, target=None: SimpleNamespace(
        tasks=[tasks["matmul"], tasks["softmax"]], target=host))
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    generate.register_cli(sub)
    pretrain.register_cli(sub)
    out = tmp_path / "gen.jsonl"
    args = parser.parse_args(["generate", "toy", "--model", str(model_dir), "--per-task", "2", "--out", str(out), "--no-progress"])
    assert args.func(args) == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(recs) == 4 and {"task_hash", "sentence", "space", "decisions", "logprob", "error", "task_name"} <= set(recs[0])
    assert "schedule" not in recs[0]

    sample([tasks["matmul"]], host, 12, tmp_path / "data", jobs=1, progress=False)
    args = parser.parse_args(["pretrain", "--data", str(tmp_path / "data"), "--preset", "tiny", "--out", str(tmp_path / "m"), "--steps", "2"])
    assert args.func(args) == 0
    assert (tmp_path / "m" / "model.safetensors").is_file()


def test_a_cpu_model_generates_on_one_torch_thread():
    """Generation's many small ops run on one PyTorch thread (tlm.model.generate.one_thread), and
    the caller's thread count comes back after."""
    import torch

    from tlm.model.generate import one_thread

    class Model:
        device = torch.device("cpu")

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with one_thread(Model()):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_a_small_space_stops_after_tries_that_give_nothing_new(gen, host, monkeypatch):
    """A task of few programs (a chain of activations: 3) asked for more than it has stops after
    STALE_TRIES tries in a row without a new program, not after 4n + 10 (a GRU's gate tasks made a
    budget-0 compile 4x slower); the result is the same at any batch size."""
    from tlm.model import generate

    task = w.elu_chain(2, 1, 4)
    tries = []
    real_run = generate.Generator._run

    def counted(self, *args, **kwargs):
        out = real_run(self, *args, **kwargs)
        tries.append(len(out))
        return out

    monkeypatch.setattr(generate.Generator, "_run", counted)
    n = 40
    one = gen.generate(task, n, seed=3, batch_size=1)
    many = gen.generate(task, n, seed=3, batch_size=16)
    assert 0 < len(one) < n and [g.sentence for g in many] == [g.sentence for g in one]
    assert tries[0] < 4 * n + 10 and tries[0] <= len(one) * 8 + max(generate.STALE_TRIES, n // 2), tries
