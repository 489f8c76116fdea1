"""The tensor language model: word-level tokenizer, GPT-2 presets, safe save/load.

A model directory holds (Hugging Face format, no pickles):
    config.json, model.safetensors   GPT2LMHeadModel (save_pretrained(safe_serialization=True))
    tokenizer.json (+ HF files)      word-level vocabulary over whitespace-split words
    tlm.json                         sentence-format version, preset, target config (`target`,
                                     `target_id`) and `targets`: every target it was trained for
                                     (kind, arch, isa, cpu, target_id, target; `model_targets`)
Pretraining (`tlm.model.pretrain`) also writes `train.json` and `checkpoint/` there.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tlm.errors import TlmError, first_line

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<bos>", "<eos>"
SPECIALS = (PAD, UNK, BOS, EOS)
MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tlm.json")

# Named model sizes; lr is the AdamW peak learning rate used for pretraining from scratch.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"n_layer": 2, "n_head": 2, "n_embd": 64, "lr": 3e-3, "batch_size": 16, "steps": 500},
    # ~0.35 s/step (80-word sentences) to ~1.5 s/step (200 words) on 2 CPU cores: ~1-2 h.
    "small": {"n_layer": 4, "n_head": 4, "n_embd": 256, "lr": 1e-3, "batch_size": 16, "steps": 6000},
    # ~3x small's parameters (11M): the "larger preset" of the data-engine issue; a GPU's to train.
    "medium": {"n_layer": 6, "n_head": 8, "n_embd": 384, "lr": 6e-4, "batch_size": 16, "steps": 12000},
    "paper": {"n_layer": 12, "n_head": 12, "n_embd": 768, "lr": 2e-4, "batch_size": 16, "steps": 50000},
}
N_POSITIONS = 1024


# ---------------------------------------------------------------- tokenizer

def sentence_words(sentences: Iterable[str]) -> set[str]:
    """The words of sentences. Every other number a task may need (e.g. the divisors of a tiled
    extent: other tile factors) is written with `closed_words`, which every tokenizer has."""
    words: set[str] = set()
    for s in sentences:
        words.update(s.split())
    return words


def space_words(tasks, target, walks: int = 4, seed: int = 0) -> set[str]:
    """Prompt, context and every valid choice's value words at every point of a few walks of
    each design space of each task (the enumerated choice sets, not only sampled values)."""
    import random

    from tlm.graph.target import host_target
    from tlm.space.design import task_space, walk
    from tlm.space.language import context_tokens, prompt_tokens, value_tokens

    target = target or host_target()
    words: set[str] = set()
    rng = random.Random(seed)
    for task in tasks:
        words.update(prompt_tokens(task, target))
        space = task_space(task, target)
        for idx in range(len(space)):
            for _ in range(walks):
                def policy(point, idx=idx):
                    words.update(context_tokens(point))
                    for c in point.choices:
                        words.update(value_tokens(point, c))
                    if point.kind == "space":
                        return idx
                    return point.choices[rng.randrange(len(point.choices))]

                walk(space, policy, postproc=False)
    return words


def build_tokenizer(words: Iterable[str]):
    """A word-level tokenizer over special tokens, every number and value word of the tensor
    language (`closed_words`: any integer is sayable) and `words` (sorted)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    from tlm.space.language import closed_words

    rest = set(words) | closed_words()
    rest -= set(SPECIALS)
    ordered = list(SPECIALS) + sorted(rest, key=lambda w: (not w.isdigit(), int(w) if w.isdigit() else 0, w))
    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(ordered)}, unk_token=UNK))
    tok.pre_tokenizer = WhitespaceSplit()
    return tok


class Vocab:
    """Word <-> id over a `tokenizers.Tokenizer` (words are whole tokens, no subwords)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.pad, self.unk, self.bos, self.eos = (tokenizer.token_to_id(s) for s in SPECIALS)
        if None in (self.pad, self.unk, self.bos, self.eos):
            raise TlmError("tokenizer lacks the special tokens")

    def __len__(self) -> int:
        return self.tokenizer.get_vocab_size()

    def id(self, word: str) -> int | None:
        return self.tokenizer.token_to_id(word)

    def encode(self, words: list[str]) -> list[int]:
        return [self.unk if (i := self.tokenizer.token_to_id(w)) is None else i for w in words]

    def decode(self, ids: list[int]) -> list[str]:
        return [self.tokenizer.id_to_token(i) for i in ids]


# ---------------------------------------------------------------- model

def _quiet() -> None:
    """No per-save progress bars or config notes from transformers."""
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


def new_model(preset: str, vocab_size: int, seed: int = 0):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    if preset not in PRESETS:
        raise TlmError(f"unknown preset {preset!r} (choose {', '.join(PRESETS)})")
    p = PRESETS[preset]
    cfg = GPT2Config(vocab_size=vocab_size, n_positions=N_POSITIONS, n_embd=p["n_embd"], n_layer=p["n_layer"],
                     n_head=p["n_head"], bos_token_id=SPECIALS.index(BOS), eos_token_id=SPECIALS.index(EOS),
                     pad_token_id=SPECIALS.index(PAD))
    _quiet()
    torch.manual_seed(seed)
    return GPT2LMHeadModel(cfg)


def save_model(model, tokenizer, out: str | Path, meta: dict[str, Any]) -> None:
    """Write a model directory; `tlm.json` last so a half-written directory fails to load."""
    from tlm.space.language import SENTENCE_VERSION

    out = Path(out)
    if "targets" not in meta and isinstance(meta.get("target"), dict):
        meta = dict(meta, targets=model_targets(meta))
    out.mkdir(parents=True, exist_ok=True)
    (out / "tlm.json").unlink(missing_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    save_tokenizer(tokenizer, out)
    write_json(out / "tlm.json", dict(meta, sentence_version=SENTENCE_VERSION))


def save_tokenizer(tokenizer, out: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token=PAD, unk_token=UNK, bos_token=BOS, eos_token=EOS)
    hf.save_pretrained(out)


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


@dataclass
class LoadedModel:
    model: Any  # GPT2LMHeadModel in eval mode
    vocab: Vocab
    meta: dict[str, Any]  # tlm.json
    path: Path


def load_model(path: str | Path, device: str = "cpu") -> LoadedModel:
    """Load a model directory (safetensors only); any defect is a one-line TlmError."""
    from tlm.space.language import SENTENCE_VERSION

    path = Path(path)
    missing = [f for f in MODEL_FILES if not (path / f).is_file()]
    if missing:
        raise TlmError(f"{path} is not a tlm model directory (missing {', '.join(missing)})")
    try:
        meta = json.loads((path / "tlm.json").read_text())
        if not isinstance(meta, dict):
            raise ValueError("not an object")
    except (OSError, ValueError) as err:
        raise TlmError(f"unreadable {path / 'tlm.json'}: {err}") from None
    if meta.get("sentence_version") != SENTENCE_VERSION:
        raise TlmError(f"model {path} was trained on sentence version {meta.get('sentence_version')}, "
                       f"this tlm writes version {SENTENCE_VERSION}: retrain it")
    try:
        from tokenizers import Tokenizer

        vocab = Vocab(Tokenizer.from_file(str(path / "tokenizer.json")))
    except TlmError:
        raise
    except Exception as err:
        raise TlmError(f"corrupt tokenizer in {path}: {first_line(err, last=False)}") from None
    try:
        from transformers import GPT2LMHeadModel

        _quiet()
        model = GPT2LMHeadModel.from_pretrained(path, use_safetensors=True)
    except Exception as err:
        raise TlmError(f"corrupt model in {path}: {first_line(err, last=False)}") from None
    if model.config.vocab_size != len(vocab):
        raise TlmError(f"model {path}: vocabulary size {model.config.vocab_size} != tokenizer's {len(vocab)}")
    fused_gelu(model)
    model.to(device).eval()
    return LoadedModel(model, vocab, meta, path)


def fused_gelu(model) -> None:
    """GPT-2's tanh GELU (`gelu_new`) as PyTorch's one fused op instead of transformers' seven
    elementwise ones: the same function (within 3e-7; generation picks the same words), a forward
    pass of 32 sequences of 40 words ~1.2x faster on 2 cores, and more when other work contends for
    them (each op is one round of the thread pool). The config keeps `gelu_new`: saved models are
    unchanged."""
    from transformers.activations import ACT2FN

    if model.config.activation_function == "gelu_new":
        for block in model.transformer.h:
            block.mlp.act = ACT2FN["gelu_pytorch_tanh"]


def pad_batch(rows: list[tuple[list[int], list[int]]], pad: int, device: str):
    """(ids, attention mask, labels) tensors [rows, longest row] of (ids, labels) rows: ids padded
    with `pad`, labels with -100 (padding is never trained on)."""
    import torch

    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    for k, (i, lab) in enumerate(rows):
        ids[k, : len(i)] = torch.tensor(i)
        labels[k, : len(lab)] = torch.tensor(lab)
        attn[k, : len(i)] = 1
    return ids.to(device), attn.to(device), labels.to(device)


def warm_start(model, vocab: Vocab, init: LoadedModel) -> int:
    """Start `model` (a new model over `vocab`, a superset of `init`'s words) from `init`'s
    weights: every layer as it is, and the embedding row of each word `init` knows (the output
    layer is tied to it); a word new to it keeps its fresh row. Returns how many words are new.
    A TlmError when the two are not of one size (preset)."""
    import torch

    own, theirs = model.state_dict(), init.model.state_dict()  # tensors sharing the parameters' storage
    emb = "transformer.wte.weight"
    bad = [n for n, w in theirs.items() if n not in own or (own[n].shape != w.shape and n not in (emb, "lm_head.weight"))]
    if bad:
        raise TlmError(f"--init {init.path}: not a model of this preset ({bad[0]})")
    new = 0
    with torch.no_grad():
        for name, w in theirs.items():
            if name not in (emb, "lm_head.weight"):
                own[name].copy_(w)
        for word, i in vocab.tokenizer.get_vocab().items():
            j = init.vocab.id(word)
            if j is None:
                new += 1
            else:
                own[emb][i] = theirs[emb][j]
    model.tie_weights()
    return new


# ---------------------------------------------------------------- shipped models
def repo_root() -> Path:
    """The checkout (or install) that holds `pretrained/`."""
    return Path(__file__).resolve().parents[2]


def target_summary(target) -> dict[str, Any]:
    """One entry of tlm.json's `targets`: what model selection and the other-target warning
    compare (kind, arch, ISA), the CPU, the target id and the full config."""
    from tlm.graph.target import resolve_target
    from tlm.space.sampling import target_id

    info = resolve_target(target)
    return {"kind": info.kind, "arch": info.arch, "isa": info.isa, "cpu": info.cpu,
            "target_id": target_id(info), "target": info.config}


def model_targets(meta: dict[str, Any]) -> list[dict[str, Any]]:
    """The targets a model was trained for: tlm.json's `targets` list, or for an older model its
    single `target` (resolved here; kept as it is if this machine's LLVM cannot resolve it)."""
    if isinstance(meta.get("targets"), list):
        return [t for t in meta["targets"] if isinstance(t, dict)]
    cfg = meta.get("target")
    if not isinstance(cfg, dict):
        return []
    try:
        out = target_summary(cfg)
    except TlmError:
        out = {"kind": cfg.get("kind"), "cpu": cfg.get("mcpu"), "target": cfg}
    return [dict(out, target_id=meta.get("target_id") or out.get("target_id"))]


def serves(meta: dict[str, Any], target) -> bool:
    """Whether a model was trained for this target, or for one of the same kind, arch and ISA (and,
    for a GPU, the same SM architecture: sm_80's limits are not sm_90a's)."""
    from tlm.space.sampling import target_id

    tid = target_id(target)
    gpu = target.kind == "cuda"
    return any(t.get("target_id") == tid or (t.get("kind"), t.get("arch"), t.get("isa"), gpu and t.get("cpu"))
               == (target.kind, target.arch, target.isa, gpu and target.cpu) for t in model_targets(meta))


def read_meta(path: Path) -> dict[str, Any]:
    try:
        meta = json.loads((path / "tlm.json").read_text())
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


_NOTED: set[tuple[str, str]] = set()  # notes already printed (a command resolves the default model twice)


def default_model_dir(target) -> Path:
    """The shipped model for a target, from `pretrained/tlm-{ft,base}-KIND-*`.

    Exact first: `tlm-ft-KIND-ISA`, `tlm-base-KIND-ISA` or a model whose tlm.json lists the
    target's kind, arch and ISA (fine-tuned before base, then the one named for the ISA). Else
    the nearest model of the kind, with a one-line note on stderr: one trained for several
    targets of the same arch, then any of the same arch, then one for several targets, then any
    (fine-tuned before base). A model of the current sentence version beats an older one. A
    TlmError only when no model of the kind exists.
    """
    from tlm.graph.target import resolve_target
    from tlm.space.language import SENTENCE_VERSION

    info = resolve_target(target)
    root = repo_root() / "pretrained"
    ranked = []
    for path in sorted(root.glob(f"tlm-*-{info.kind}-*")) if root.is_dir() else []:
        if not path.is_dir():
            continue
        meta, exact_name = read_meta(path), path.name.split("-", 2)[2] == f"{info.kind}-{info.isa}"
        trained = model_targets(meta)
        exact = exact_name or serves(meta, info)
        same_arch = any(t.get("arch") == info.arch for t in trained)
        several = len({(t.get("arch"), t.get("isa")) for t in trained}) > 1
        ft = path.name.startswith("tlm-ft-")
        near = () if exact else (not (several and same_arch), not same_arch, not several)
        key = (meta.get("sentence_version", SENTENCE_VERSION) != SENTENCE_VERSION, not exact, *near, not ft,
               not exact_name, path.name)
        ranked.append((key, path, trained))
    if not ranked:
        raise TlmError(f"no TLM model for {info.kind}/{info.isa}: {root} has no tlm-ft-{info.kind}-* or "
                       f"tlm-base-{info.kind}-* model (train one, or pass --model DIR)")
    key, path, trained = min(ranked, key=lambda r: r[0])
    if key[1] and (info.key, str(path)) not in _NOTED:
        _NOTED.add((info.key, str(path)))
        what = ", ".join(sorted({f"{t.get('kind')}/{t.get('isa')} {t.get('cpu')}" for t in trained})) or "unknown targets"
        label = f"{info.kind}/{info.cpu}" if info.kind == "cuda" else f"{info.kind}/{info.isa}"  # a GPU: its SM arch
        print(f"tlm: note: no model for {label}; using {path.relative_to(repo_root())} "
              f"(trained for {what})", file=sys.stderr)
    return path
