"""One TLM for several kinds of target (issue 49 item 5): pretraining from a model of other targets
(`--init`, tlm.model.lm.warm_start) and on the measured corpus's sentences (tlm.model.sentences);
a tiny CPU model learning a GPU's sentences of a small matmul."""

import json
import lzma

import pytest
from workloads_tir import matmul

from tlm.errors import TlmError


@pytest.fixture(scope="module")
def task():
    return matmul(16)


@pytest.fixture(scope="module")
def cpu_model(tmp_path_factory, task, host):
    from tlm.model.pretrain import PretrainConfig, pretrain
    from tlm.space.sampling import sample

    data = tmp_path_factory.mktemp("cpu-data")
    sample([task], host, 24, data, jobs=1, progress=False)
    out = tmp_path_factory.mktemp("cpu-model")
    pretrain(data, out, PretrainConfig(preset="tiny", steps=6), target=host, progress=False)
    return out


@pytest.fixture(scope="module")
def gpu_data(tmp_path_factory, task):
    from tlm.graph.target import resolve_target
    from tlm.space.sampling import sample

    out = tmp_path_factory.mktemp("gpu-data")
    sample([task], resolve_target("h100"), 24, out, jobs=1, progress=False)
    return out


def test_warm_start_keeps_what_the_model_knew(cpu_model, gpu_data):
    """The grown model computes what the old one did on the old words; only new words are fresh."""
    import torch

    from tlm.model.lm import Vocab, build_tokenizer, load_model, new_model, sentence_words, warm_start
    from tlm.model.sentences import read_corpus

    old = load_model(cpu_model)
    gpu_sentences, _ = read_corpus([gpu_data])
    vocab = Vocab(build_tokenizer(sentence_words(gpu_sentences) | set(old.vocab.tokenizer.get_vocab())))
    fresh = set(vocab.tokenizer.get_vocab()) - set(old.vocab.tokenizer.get_vocab())
    model = new_model("tiny", len(vocab), seed=3)
    assert warm_start(model, vocab, old) == len(fresh) > 0  # "cuda", "sms", thread words ...
    model.eval()
    words = ["<bos>", *[w for w in sorted(old.vocab.tokenizer.get_vocab()) if not w.startswith("<")][:20]]
    with torch.no_grad():
        theirs = old.model(torch.tensor([old.vocab.encode(words)]), output_hidden_states=True).hidden_states[-1]
        ours = model(torch.tensor([vocab.encode(words)]), output_hidden_states=True).hidden_states[-1]
    assert torch.allclose(theirs, ours, atol=1e-5)
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()  # still tied
    with pytest.raises(TlmError, match="not a model of this preset"):
        warm_start(new_model("small", len(vocab)), vocab, old)


def test_pretrain_from_a_cpu_model_on_gpu_sentences(tmp_path, cpu_model, gpu_data, host):
    """One model for both: its targets are the CPU's and the GPU's, its vocabulary both's, and it
    records where it started; a resume must name the same start."""
    from tlm.graph.target import resolve_target
    from tlm.model.lm import load_model, serves
    from tlm.model.pretrain import PretrainConfig, pretrain

    out = tmp_path / "joint"
    cfg = PretrainConfig(preset="tiny", steps=2, init=str(cpu_model))
    res = pretrain([gpu_data], out, cfg, progress=False)
    joint = load_model(out)
    assert serves(joint.meta, host) and serves(joint.meta, resolve_target("h100"))
    assert joint.meta["pretrained_from"] == str(cpu_model)
    assert set(load_model(cpu_model).vocab.tokenizer.get_vocab()) <= set(joint.vocab.tokenizer.get_vocab())
    state = json.loads((out / "checkpoint" / "state.json").read_text())
    assert state["new_words"] == res["vocab"] - len(load_model(cpu_model).vocab) > 0
    assert json.loads((out / "train.json").read_text())["config"]["init"] == str(cpu_model)
    with pytest.raises(TlmError, match="another preset, seed or --init"):
        pretrain([gpu_data], out, PretrainConfig(preset="tiny", steps=3), progress=False)
    with pytest.raises(TlmError, match="is a tiny model, not small"):
        pretrain([gpu_data], tmp_path / "other", PretrainConfig(preset="small", steps=1, init=str(cpu_model)),
                 progress=False)


def _shard(path, target, records, version=2):
    key = json.dumps(target, sort_keys=True)
    lines = [{"shard": 1, "target_key": key, "target": target, "sentence_version": version, "records": len(records)}]
    lines += [dict(r, t="t1", lat=[1e-5], by="test", at=0.0) for r in records]
    path.write_bytes(lzma.compress("\n".join(json.dumps(x) for x in lines).encode() + b"\n"))


def test_corpus_folder_gives_its_correct_sentences(tmp_path, capsys):
    """A corpus hardware folder is pretraining data: its correct records' sentences, its target;
    a shard of another sentence version is skipped out loud; a folder of nothing is one error."""
    from tlm.model.sentences import read_corpus

    target = {"kind": "llvm", "mcpu": "znver4", "mtriple": "x86_64-unknown-linux-gnu", "num-cores": 2}
    hw = tmp_path / "llvm-znver4-2c"
    hw.mkdir()
    _shard(hw / "a-00000001-00000003.jsonl.xz", target,
           [{"s": "one", "err": None}, {"s": "two", "err": None}, {"s": "bad", "err": "build failed"}])
    _shard(hw / "a-00000004-00000004.jsonl.xz", target, [{"s": "old words", "err": None}], version=1)
    sentences, meta = read_corpus([hw])
    assert sentences == ["one", "two"]
    assert [t["cpu"] for t in meta["targets"]] == ["znver4"] and meta["target"]["mcpu"] == "znver4"
    assert "sentence version 1" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    with pytest.raises(TlmError, match="holds no record shards"):
        read_corpus([tmp_path / "empty"])


def test_cli_takes_init_and_corpus_folders():
    from tlm.cli import build_parser

    a = build_parser().parse_args(["pretrain", "--data", "data/corpus/llvm-znver4-2c", "data/pretrain/cuda-h100",
                                   "--out", "o", "--init", "pretrained/tlm-base-llvm-x86_64"])
    assert a.init == "pretrained/tlm-base-llvm-x86_64" and len(a.data) == 2
    assert build_parser().parse_args(["pretrain", "--data", "d", "--out", "o"]).init is None
