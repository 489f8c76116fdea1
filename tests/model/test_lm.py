"""Tokenizer, model presets, safe save/load (tlm.model.lm) and pretraining (tlm.model.pretrain; tiny model, a few steps)."""

import json
import random

import pytest
from workloads_tir import matmul

from tlm.errors import TlmError


@pytest.fixture(scope="module")
def task():
    return matmul(16)


@pytest.fixture(scope="module")
def data(tmp_path_factory, task, host):
    from tlm.space.sampling import sample

    out = tmp_path_factory.mktemp("data")
    sample([task], host, 48, out, jobs=1, progress=False)
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory, data, task, host):
    from tlm.model.lm import space_words
    from tlm.model.pretrain import PretrainConfig, pretrain

    out = tmp_path_factory.mktemp("model")
    cfg = PretrainConfig(preset="tiny", steps=30, eval_every=10, save_every=10)
    return out, pretrain(data, out, cfg, words=space_words([task], host), target=host, progress=False)


def _walk_choices(task, host, seed):
    """(point, choice) of every valid choice at every point of random walks of every space."""
    from tlm.space.design import task_space, walk

    rng = random.Random(seed)
    space = task_space(task, host)
    seen = []
    for idx in range(len(space)):
        def policy(point, idx=idx):
            seen.extend((point, c) for c in point.choices)
            return idx if point.kind == "space" else point.choices[rng.randrange(len(point.choices))]

        for _ in range(3):
            walk(space, policy, postproc=False)
    return seen


def test_tokenizer_covers_every_enumerated_choice(task, host, data):
    from tlm.model.lm import SPECIALS, Vocab, build_tokenizer, sentence_words, space_words
    from tlm.space.language import context_tokens, prompt_tokens, value_tokens
    from tlm.space.sampling import read_shards

    sentences = [r["sentence"] for r in read_shards(data)]
    for words in (space_words([task], host), sentence_words(sentences)):  # from spaces; from data only
        vocab = Vocab(build_tokenizer(words))
        assert [vocab.id(s) for s in SPECIALS] == [0, 1, 2, 3]
        assert vocab.unk not in vocab.encode(prompt_tokens(task, host))
        for point, choice in _walk_choices(task, host, seed=123):
            assert vocab.unk not in vocab.encode(context_tokens(point) + value_tokens(point, choice)), (point, choice)
        assert vocab.decode(vocab.encode(sentences[0].split())) == sentences[0].split()


def test_presets_and_unknown_preset():
    from tlm.model.lm import PRESETS, new_model

    assert {"tiny", "small", "medium", "paper"} <= set(PRESETS)
    m = new_model("tiny", 100)
    assert (m.config.n_layer, m.config.n_head, m.config.n_embd, m.config.n_positions) == (2, 2, 64, 1024)
    assert PRESETS["paper"]["n_layer"] == 12 and PRESETS["paper"]["n_embd"] == 768
    with pytest.raises(TlmError):
        new_model("huge", 100)


def test_pretrain_loss_drops_and_model_loads(trained):
    from tlm.model.lm import load_model
    from tlm.space.language import SENTENCE_VERSION

    out, res = trained
    assert res["steps"] == 30 and res["resumed_from"] == 0
    assert res["val"] >= 1 and res["val_loss"] is not None
    assert res["history"][-1]["val_loss"] < res["history"][0]["val_loss"]
    assert res["train_loss"] < res["first_loss"]
    assert (out / "model.safetensors").is_file() and not list(out.glob("*.bin"))
    meta = json.loads((out / "tlm.json").read_text())
    assert meta["sentence_version"] == SENTENCE_VERSION and meta["target"] and meta["preset"] == "tiny"
    assert meta["step"] == 30 and meta["val_loss"] == res["val_loss"] and meta["val_sentences"] == res["val"]
    assert json.loads((out / "train.json").read_text())["config"]["seed"] == 0
    lm = load_model(out)
    assert lm.model.config.vocab_size == len(lm.vocab) == res["vocab"]
    # loaded with PyTorch's fused tanh GELU: the same function as the saved config's gelu_new
    import torch
    from transformers.activations import ACT2FN

    assert lm.model.config.activation_function == "gelu_new"
    assert all(type(b.mlp.act).__name__ != type(ACT2FN["gelu_new"]).__name__ for b in lm.model.transformer.h)
    ids = torch.randint(0, len(lm.vocab), (3, 12))
    with torch.no_grad():
        fused = lm.model(input_ids=ids).logits
        for b in lm.model.transformer.h:
            b.mlp.act = ACT2FN["gelu_new"]
        plain = lm.model(input_ids=ids).logits
    assert torch.allclose(fused, plain, atol=1e-5)


def test_pretrain_resumes(tmp_path, data):
    from tlm.model.pretrain import PretrainConfig, pretrain

    cfg = PretrainConfig(preset="tiny", steps=4, eval_every=2, save_every=2)
    first = pretrain(data, tmp_path, cfg, progress=False)
    assert first["steps"] == 4
    more = pretrain(data, tmp_path, PretrainConfig(preset="tiny", steps=6, eval_every=2, save_every=2), progress=False)
    assert more["resumed_from"] == 4 and more["steps"] == 6
    with pytest.raises(TlmError, match="another preset, seed or --init"):
        pretrain(data, tmp_path, PretrainConfig(preset="tiny", steps=8, seed=1), progress=False)


def _copy(src, dst):
    import shutil

    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("checkpoint*"))
    return dst


def test_corrupt_or_mismatched_model_dir(trained, tmp_path):
    from tlm.model.lm import load_model

    src, _ = trained
    with pytest.raises(TlmError, match="not a tlm model directory"):
        load_model(tmp_path / "nothing")
    d = _copy(src, tmp_path / "version")
    meta = json.loads((d / "tlm.json").read_text())
    (d / "tlm.json").write_text(json.dumps(dict(meta, sentence_version=-1)))
    with pytest.raises(TlmError, match="sentence version"):
        load_model(d)
    d = _copy(src, tmp_path / "garbage")
    (d / "model.safetensors").write_bytes(b"\x00garbage" * 100)
    with pytest.raises(TlmError, match="corrupt model") as err:
        load_model(d)
    assert "\n" not in str(err.value)
    d = _copy(src, tmp_path / "json")
    (d / "tlm.json").write_text("{not json")
    with pytest.raises(TlmError, match="unreadable"):
        load_model(d)
    d = _copy(src, tmp_path / "tok")
    (d / "tokenizer.json").write_text("[]")
    with pytest.raises(TlmError, match="corrupt tokenizer"):
        load_model(d)
    d = _copy(src, tmp_path / "missing")
    (d / "config.json").unlink()
    with pytest.raises(TlmError, match="missing config.json"):
        load_model(d)


def test_cli_registers():
    import argparse

    from tlm.model import generate, pretrain

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    pretrain.register_cli(sub)
    generate.register_cli(sub)
    a = parser.parse_args(["pretrain", "--data", "d", "--preset", "tiny", "--out", "o", "--steps", "5"])
    assert (a.preset, a.steps, a.device) == ("tiny", 5, "cpu")
    a = parser.parse_args(["generate", "resnet_18", "--model", "m", "--per-task", "3", "--out", "f", "--greedy", "--top-k", "5"])
    assert a.greedy and a.top_k == 5 and a.per_task == 3


def test_pretraining_lives_in_its_own_module():
    import tlm.model.lm
    import tlm.model.pretrain
    from tlm.cli import _STAGE_CLIS, build_parser

    assert not hasattr(tlm.model.lm, "pretrain") and not hasattr(tlm.model.lm, "PretrainConfig")
    assert not hasattr(tlm.model.lm, "register_cli") and "tlm.model.pretrain" in _STAGE_CLIS and "tlm.model.lm" not in _STAGE_CLIS
    a = build_parser().parse_args(["pretrain", "--data", "d", "--out", "o", "--batch-size", "8", "--lr", "0.01",
                                   "--source", "x", "y", "--device", "cpu", "--seed", "3"])
    assert a.func is tlm.model.pretrain._cmd_pretrain and a.preset == "small"
    assert (a.batch_size, a.lr, a.source, a.seed, a.steps, a.target) == (8, 0.01, ["x", "y"], 3, 0, None)
    assert tlm.model.pretrain.PretrainConfig(preset="tiny").resolved().steps == tlm.model.lm.PRESETS["tiny"]["steps"]


def test_pretrain_on_several_targets(tmp_path, data, task):
    """Two sampling directories (host and an AVX-512 CPU): one model, both targets in tlm.json."""
    from tlm.graph.target import resolve_target
    from tlm.model.lm import load_model, serves
    from tlm.model.pretrain import PretrainConfig, pretrain
    from tlm.space.sampling import sample

    other = resolve_target({"kind": "llvm", "mcpu": "icelake-server", "num-cores": 2,
                            "mtriple": "x86_64-unknown-linux-gnu"})
    more = tmp_path / "avx512"
    sample([task], other, 8, more, jobs=1, progress=False)
    res = pretrain([data, more], tmp_path / "model", PretrainConfig(preset="tiny", steps=2), progress=False)
    assert res["train"] + res["val"] > 48
    meta = load_model(tmp_path / "model").meta
    assert len(meta["targets"]) == 2 and serves(meta, other)
    assert {t["isa"] for t in meta["targets"]} >= {"avx512"}


def test_vocab_here_train_there(tmp_path, data, task, host):
    """`--vocab-only` writes the tokenizer and a packed corpus; training on the packed file (what a
    GPU machine without TVM gets) keeps that tokenizer, the same split and the targets."""
    from tlm.model.lm import load_model, space_words
    from tlm.model.pretrain import PACKED, PretrainConfig, pretrain

    out = tmp_path / "model"
    extra = space_words([task], host)
    res = pretrain(data, out, PretrainConfig(preset="tiny"), words=extra, vocab_only=True, progress=False)
    assert res["steps"] == 0 and (out / "tokenizer.json").is_file() and not (out / "checkpoint").exists()
    tok = (out / "tokenizer.json").read_bytes()
    direct = pretrain(data, tmp_path / "direct", PretrainConfig(preset="tiny", steps=2), progress=False)
    there = pretrain([out / PACKED], out, PretrainConfig(preset="tiny", steps=2), progress=False)
    assert (out / "tokenizer.json").read_bytes() == tok
    assert (there["train"], there["val"]) == (direct["train"], direct["val"])
    assert there["vocab"] == res["vocab"] >= direct["vocab"]
    assert load_model(out).meta["targets"] == load_model(tmp_path / "direct").meta["targets"]
    bad = tmp_path / PACKED
    bad.write_bytes(b"not xz")
    with pytest.raises(TlmError, match="unreadable"):
        pretrain([bad], tmp_path / "bad", PretrainConfig(preset="tiny", steps=1), progress=False)
