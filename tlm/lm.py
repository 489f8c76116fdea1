"""The tensor language model: word-level tokenizer, GPT-2 presets, safe save/load, pretraining.

A model directory holds (Hugging Face format, no pickles):
    config.json, model.safetensors   GPT2LMHeadModel (save_pretrained(safe_serialization=True))
    tokenizer.json (+ HF files)      word-level vocabulary over whitespace-split words
    tlm.json                         sentence-format version, target config, preset
Pretraining also writes `train.json` (the PretrainConfig and progress) and `checkpoint/`
(model, AdamW state as safetensors, step); re-running `pretrain` on the same `--out` resumes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tlm.errors import TlmError

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<bos>", "<eos>"
SPECIALS = (PAD, UNK, BOS, EOS)
MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tlm.json")

# Named model sizes; lr is the AdamW peak learning rate used for pretraining from scratch.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"n_layer": 2, "n_head": 2, "n_embd": 64, "lr": 3e-3, "batch_size": 16, "steps": 500},
    # ~0.35 s/step (80-word sentences) to ~1.5 s/step (200 words) on 2 CPU cores: ~1-2 h.
    "small": {"n_layer": 4, "n_head": 4, "n_embd": 256, "lr": 1e-3, "batch_size": 16, "steps": 6000},
    "paper": {"n_layer": 12, "n_head": 12, "n_embd": 768, "lr": 2e-4, "batch_size": 16, "steps": 50000},
}
N_POSITIONS = 1024
_NUMERALS = 1025  # 0..1024: loop extents, tile factors, unroll steps, loop indices


# ---------------------------------------------------------------- tokenizer

def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def sentence_words(sentences: Iterable[str]) -> set[str]:
    """The words of sentences plus every divisor of every tiled loop extent they name."""
    words: set[str] = set()
    for s in sentences:
        ws = s.split()
        words.update(ws)
        for i, w in enumerate(ws):
            if w == "tile" and i + 3 < len(ws) and ws[i + 3].isdigit():
                words.update(str(d) for d in _divisors(int(ws[i + 3])))
    return words


def space_words(tasks, target, walks: int = 4, seed: int = 0) -> set[str]:
    """Prompt, context and every valid choice's value words at every point of a few walks of
    each design space of each task (the enumerated choice sets, not only sampled values)."""
    import random

    from tlm.language import context_tokens, prompt_tokens, value_tokens
    from tlm.space import task_space, walk
    from tlm.target import host_target

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
    """A word-level tokenizer over special tokens, numerals 0..1024 and `words` (sorted)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    rest = set(words) | {str(i) for i in range(_NUMERALS)}
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
    from tlm.language import SENTENCE_VERSION

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tlm.json").unlink(missing_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    _save_tokenizer(tokenizer, out)
    _write_json(out / "tlm.json", dict(meta, sentence_version=SENTENCE_VERSION))


def _save_tokenizer(tokenizer, out: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token=PAD, unk_token=UNK, bos_token=BOS, eos_token=EOS)
    hf.save_pretrained(out)


def _write_json(path: Path, data: Any) -> None:
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
    from tlm.language import SENTENCE_VERSION

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
        raise TlmError(f"corrupt tokenizer in {path}: {_line(err)}") from None
    try:
        from transformers import GPT2LMHeadModel

        _quiet()
        model = GPT2LMHeadModel.from_pretrained(path, use_safetensors=True)
    except Exception as err:
        raise TlmError(f"corrupt model in {path}: {_line(err)}") from None
    if model.config.vocab_size != len(vocab):
        raise TlmError(f"model {path}: vocabulary size {model.config.vocab_size} != tokenizer's {len(vocab)}")
    model.to(device).eval()
    return LoadedModel(model, vocab, meta, path)


def _line(err: BaseException) -> str:
    lines = [ln for ln in str(err).strip().splitlines() if ln.strip()]
    return (lines[0] if lines else type(err).__name__)[:300]


# ---------------------------------------------------------------- pretraining

@dataclass
class PretrainConfig:
    preset: str = "small"
    steps: int = 0  # 0: the preset's
    batch_size: int = 0  # 0: the preset's
    lr: float = 0.0  # 0: the preset's
    warmup: int = 200
    weight_decay: float = 0.01
    val_fraction: float = 0.02
    max_val: int = 2000  # held-out sentences at most
    eval_every: int = 500
    save_every: int = 500
    seed: int = 0
    device: str = "cpu"
    extra: dict[str, Any] = field(default_factory=dict)

    def resolved(self) -> PretrainConfig:
        if self.preset not in PRESETS:
            raise TlmError(f"unknown preset {self.preset!r} (choose {', '.join(PRESETS)})")
        p = PRESETS[self.preset]
        return PretrainConfig(**dict(asdict(self), batch_size=self.batch_size or p["batch_size"],
                                                   lr=self.lr or p["lr"], steps=self.steps or p["steps"]))


def _split(sentences: list[str], cfg: PretrainConfig) -> tuple[list[str], list[str]]:
    import random

    order = sorted(set(sentences))
    random.Random(cfg.seed).shuffle(order)
    n_val = min(cfg.max_val, int(len(order) * cfg.val_fraction)) if len(order) > 1 else 0
    n_val = max(n_val, 1) if len(order) >= 10 else n_val
    return order[n_val:], order[:n_val]


def _batch(vocab: Vocab, sentences: list[str], device: str):
    import torch

    seqs = [[vocab.bos] + vocab.encode(s.split())[: N_POSITIONS - 2] + [vocab.eos] for s in sentences]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), vocab.pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    labels = ids.masked_fill(mask == 0, -100)  # padding is not trained on
    return ids.to(device), mask.to(device), labels.to(device)


def _val_loss(model, vocab: Vocab, val: list[str], cfg: PretrainConfig) -> float | None:
    import torch

    if not val:
        return None
    model.eval()
    total = count = 0.0
    with torch.no_grad():
        for i in range(0, len(val), cfg.batch_size):
            ids, mask, labels = _batch(vocab, val[i : i + cfg.batch_size], cfg.device)
            n = int((labels[:, 1:] != -100).sum())
            total += float(model(input_ids=ids, attention_mask=mask, labels=labels).loss) * n
            count += n
    model.train()
    return total / max(count, 1)


def _save_checkpoint(model, opt, out: Path, state: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    tmp, ckpt, old = out / "checkpoint.tmp", out / "checkpoint", out / "checkpoint.old"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    sd = opt.state_dict()
    tensors = {f"{k}.{name}": v.contiguous() for k, st in sd["state"].items() for name, v in st.items()}
    save_file(tensors, str(tmp / "optimizer.safetensors"))
    _write_json(tmp / "state.json", state)
    shutil.rmtree(old, ignore_errors=True)
    if ckpt.exists():
        os.replace(ckpt, old)
    os.replace(tmp, ckpt)
    shutil.rmtree(old, ignore_errors=True)


def _load_checkpoint(model, opt, out: Path) -> dict[str, Any] | None:
    from safetensors.torch import load_file

    ckpt = out / "checkpoint"
    if not (ckpt / "state.json").is_file():
        return None
    try:
        from transformers import GPT2LMHeadModel

        saved = GPT2LMHeadModel.from_pretrained(ckpt, use_safetensors=True)
        model.load_state_dict(saved.state_dict())
        tensors = load_file(str(ckpt / "optimizer.safetensors"))
        sd = opt.state_dict()
        state: dict[int, dict[str, Any]] = {}
        for key, v in tensors.items():
            k, name = key.split(".", 1)
            state.setdefault(int(k), {})[name] = v
        sd["state"] = state
        opt.load_state_dict(sd)
        return json.loads((ckpt / "state.json").read_text())
    except Exception as err:
        raise TlmError(f"corrupt checkpoint {ckpt}: {_line(err)} (delete it to restart)") from None


def _bucketed(order: list[int], train: list[str], size: int, rnd) -> list[int]:
    """Batches of similar lengths (less padding): sort chunks of 50 batches, shuffle the batches."""
    out: list[int] = []
    span = size * 50
    for c in range(0, len(order), span):
        chunk = sorted(order[c : c + span], key=lambda i: len(train[i]))
        batches = [chunk[b : b + size] for b in range(0, len(chunk), size)]
        rnd.shuffle(batches)
        out.extend(i for b in batches for i in b)
    return out


def _lr_factor(step: int, cfg: PretrainConfig) -> float:
    warm = min(1.0, (step + 1) / max(1, cfg.warmup))
    return warm * max(0.05, 0.5 * (1 + math.cos(math.pi * min(1.0, step / max(1, cfg.steps)))))


def pretrain(data: str | Path | list[str], out: str | Path, config: PretrainConfig | None = None, *,
             tasks=None, target=None, progress: bool = True) -> dict[str, Any]:
    """Pretrain a model on sampled sentences (a sampling directory or a list of sentences).

    Resumes from `out/checkpoint` when present (the saved train.json must agree). `tasks` add
    the enumerated choices of their spaces to the vocabulary. Returns the final losses.
    """
    import torch

    from tlm.sampling import read_shards

    cfg = (config or PretrainConfig()).resolved()
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise TlmError("--device cuda asked for but CUDA is not available")
    out = Path(out)
    meta: dict[str, Any] = {"preset": cfg.preset}
    if isinstance(data, (str, Path)):
        try:
            manifest = json.loads((Path(data) / "manifest.json").read_text())
            sentences = [r["sentence"] for r in read_shards(data)]
        except (OSError, ValueError, KeyError) as err:
            raise TlmError(f"unreadable sampling directory {data}: {err}") from None
        meta.update(target=manifest.get("target"), target_id=manifest.get("target_id"))
    else:
        sentences = list(data)
    if target is not None:
        from tlm.sampling import target_id

        meta.update(target=target.config, target_id=target_id(target))
    if not sentences:
        raise TlmError(f"no sentences in {data}")
    train, val = _split(sentences, cfg)

    out.mkdir(parents=True, exist_ok=True)
    saved_cfg = out / "train.json"
    if saved_cfg.is_file() and (out / "checkpoint").exists():
        prev = json.loads(saved_cfg.read_text()).get("config", {})
        if prev.get("preset") != cfg.preset or prev.get("seed") != cfg.seed:
            raise TlmError(f"{out} holds a run with another preset or seed: use another --out")
    tok_path = out / "tokenizer.json"
    if tok_path.is_file():
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(tok_path))
    else:
        words = sentence_words(sentences)
        if tasks:
            words |= space_words(tasks, target)
        tokenizer = build_tokenizer(words)
        _save_tokenizer(tokenizer, out)
    vocab = Vocab(tokenizer)

    model = new_model(cfg.preset, len(vocab), cfg.seed).to(cfg.device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    state = _load_checkpoint(model, opt, out) or {"step": 0, "history": []}
    resumed = state["step"]
    _write_json(saved_cfg, {"config": asdict(cfg), "train": len(train), "val": len(val), "vocab": len(vocab)})

    per_epoch = max(1, math.ceil(len(train) / cfg.batch_size))
    order: list[int] = []
    epoch = -1
    first_loss = last_loss = None
    start = time.perf_counter()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn("pretraining"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                   TextColumn("{task.fields[info]}"), disable=not progress)
    with bar:
        job = bar.add_task("steps", total=cfg.steps, completed=state["step"], info="")
        while state["step"] < cfg.steps:
            step = state["step"]
            if step // per_epoch != epoch:  # batch order is a pure function of (seed, epoch)
                import random

                epoch = step // per_epoch
                order = list(range(len(train)))
                rnd = random.Random(cfg.seed * 1000003 + epoch)
                rnd.shuffle(order)
                order = _bucketed(order, train, cfg.batch_size, rnd)
            b = step % per_epoch
            batch = [train[i] for i in order[b * cfg.batch_size : (b + 1) * cfg.batch_size]]
            torch.manual_seed(cfg.seed * 7919 + step)  # dropout
            ids, mask, labels = _batch(vocab, batch, cfg.device)
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            for group in opt.param_groups:  # warmup then cosine decay: a pure function of the step
                group["lr"] = cfg.lr * _lr_factor(step, cfg)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            last_loss = loss.item()
            first_loss = last_loss if first_loss is None else first_loss
            state["step"] = step + 1
            bar.update(job, completed=state["step"], info=f"loss {last_loss:.3f}")
            done = state["step"] == cfg.steps
            if done or state["step"] % cfg.eval_every == 0:
                state["history"].append({"step": state["step"], "train_loss": last_loss,
                                         "val_loss": _val_loss(model, vocab, val, cfg)})
            if done or state["step"] % cfg.save_every == 0:
                _save_checkpoint(model, opt, out, state)
                save_model(model, tokenizer, out, dict(meta, step=state["step"]))
    if not (out / "tlm.json").is_file():  # resumed a finished run
        save_model(model, tokenizer, out, dict(meta, step=state["step"]))
    val_loss = state["history"][-1]["val_loss"] if state["history"] else None
    return {"steps": state["step"], "resumed_from": resumed, "first_loss": first_loss, "train_loss": last_loss, "val_loss": val_loss,
            "history": state["history"], "seconds": time.perf_counter() - start, "train": len(train),
            "val": len(val), "vocab": len(vocab)}


def _cmd_pretrain(args: argparse.Namespace) -> int:
    tasks, target = None, None
    if args.source:
        from tlm.graph import tasks_for_source

        tasks = []
        for source in args.source:
            ts = tasks_for_source(source, target=args.target)
            target = target or ts.target
            tasks.extend(ts.tasks)
    cfg = PretrainConfig(preset=args.preset, steps=args.steps, device=args.device, seed=args.seed,
                         batch_size=args.batch_size, lr=args.lr)
    res = pretrain(args.data, args.out, cfg, tasks=tasks, target=target)
    val = f"{res['val_loss']:.4f}" if res["val_loss"] is not None else "n/a"
    print(f"{res['steps']} steps; train loss {res['train_loss']}, val loss {val}; "
          f"{res['train']} train / {res['val']} val sentences, vocab {res['vocab']}; model in {args.out}")
    return 0


def register_cli(subparsers) -> None:
    p = subparsers.add_parser("pretrain", help="pretrain a tensor language model on sampled sentences")
    p.add_argument("--data", required=True, help="sampling directory (tlm sample --out)")
    p.add_argument("--preset", default="small", choices=list(PRESETS))
    p.add_argument("--out", required=True, help="model directory (re-running resumes)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--steps", type=int, default=0, help="default: the preset's")
    p.add_argument("--batch-size", type=int, default=0, help="default: the preset's")
    p.add_argument("--lr", type=float, default=0.0, help="default: the preset's")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--source", nargs="*", default=[], help="workloads whose spaces' choices join the vocabulary")
    p.add_argument("--target", default=None, help="target of --source tasks (default host)")
    p.set_defaults(func=_cmd_pretrain)
