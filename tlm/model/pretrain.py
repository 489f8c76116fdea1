"""Pretraining a tensor language model on sampled sentences (resumable).

A pretraining run writes a model directory (see `tlm.model.lm`) plus
    train.json     the PretrainConfig, split sizes and vocabulary size
    checkpoint/    model, AdamW state as safetensors, and state.json (step, loss history)
Re-running `pretrain` on the same `--out` resumes from the checkpoint; the batch order, the
learning rate and dropout are pure functions of (seed, step), so a resumed run matches an
uninterrupted one.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tlm.errors import TlmError, first_line
from tlm.model.lm import (N_POSITIONS, PRESETS, Vocab, build_tokenizer, new_model, pad_batch, save_model,
                          save_tokenizer, sentence_words, space_words, write_json)
from tlm.model.sentences import PACKED, is_data_dirs, pack_corpus, read_corpus  # noqa: F401 (re-exported)


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
    init: str = ""  # a model directory to start from (its weights; its words join the vocabulary)
    extra: dict[str, Any] = field(default_factory=dict)

    def resolved(self) -> PretrainConfig:
        if self.preset not in PRESETS:
            raise TlmError(f"unknown preset {self.preset!r} (choose {', '.join(PRESETS)})")
        p = PRESETS[self.preset]
        return PretrainConfig(**dict(asdict(self), batch_size=self.batch_size or p["batch_size"],
                                                   lr=self.lr or p["lr"], steps=self.steps or p["steps"]))


def split_sentences(sentences: list[str], cfg: PretrainConfig) -> tuple[list[str], list[str]]:
    """(training, validation) sentences: distinct ones, shuffled with the config's seed."""
    import random

    order = sorted(set(sentences))
    random.Random(cfg.seed).shuffle(order)
    n_val = min(cfg.max_val, int(len(order) * cfg.val_fraction)) if len(order) > 1 else 0
    n_val = max(n_val, 1) if len(order) >= 10 else n_val
    return order[n_val:], order[:n_val]


def sentence_batch(vocab: Vocab, sentences: list[str], device: str):
    """(ids, attention mask, labels) [batch, longest sentence] of <bos> words <eos> sequences."""
    seqs = [[vocab.bos] + vocab.encode(s.split())[: N_POSITIONS - 2] + [vocab.eos] for s in sentences]
    return pad_batch([(s, s) for s in seqs], vocab.pad, device)


def _val_loss(model, vocab: Vocab, val: list[str], cfg: PretrainConfig) -> float | None:
    import torch

    if not val:
        return None
    model.eval()
    total = count = 0.0
    with torch.no_grad():
        for i in range(0, len(val), cfg.batch_size):
            ids, mask, labels = sentence_batch(vocab, val[i : i + cfg.batch_size], cfg.device)
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
    write_json(tmp / "state.json", state)
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
        raise TlmError(f"corrupt checkpoint {ckpt}: {first_line(err, last=False)} (delete it to restart)") from None


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


def _progress(state: dict[str, Any], val: list[str]) -> dict[str, Any]:
    """What tlm.json records of training: step, last losses (mean per word, nats), val size."""
    last = state["history"][-1] if state["history"] else {}
    return {"step": state["step"], "train_loss": last.get("train_loss"), "val_loss": last.get("val_loss"),
            "val_sentences": len(val)}


def optimizer_step(model, opt, loss, lr: float) -> float:
    """One AdamW step at learning rate `lr` with gradients clipped to norm 1; the loss value."""
    import torch

    for group in opt.param_groups:
        group["lr"] = lr
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.item()


def pretrain(data: str | Path | list[str], out: str | Path, config: PretrainConfig | None = None, *,
             target=None, progress: bool = True, meta: dict[str, Any] | None = None,
             words: set[str] | None = None, vocab_only: bool = False) -> dict[str, Any]:
    """Pretrain a model on sampled sentences: a sampling directory, a list of them (several
    targets: one model for all), or a list of sentences.

    Resumes from `out/checkpoint` when present (the saved train.json must agree). `words` join
    the vocabulary (`tlm.model.lm.space_words`: the enumerated choices of tasks' spaces, for one
    target or several); `meta` joins tlm.json (e.g. the `targets` of sentences given as a list).
    `vocab_only`: write `out/tokenizer.json` and stop (build the vocabulary where TVM is, train
    where the GPU is: a later run on `out` keeps that tokenizer). `config.init`: start from that
    model (tlm.model.lm.warm_start; a TLM-base of other targets learning new ones): its words join
    the vocabulary and its `targets` the new model's, which serves both.
    Returns the final losses.
    """
    import torch

    cfg = (config or PretrainConfig()).resolved()
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise TlmError("--device cuda asked for but CUDA is not available")
    out = Path(out)
    meta = {"preset": cfg.preset, **(meta or {})}
    packable = is_data_dirs(data)
    if packable:
        sentences, sampled_for = read_corpus([data] if isinstance(data, (str, Path)) else list(data))
        meta.update(sampled_for)
    else:
        sentences = list(data)
    if target is not None and not meta.get("target"):  # sampled data says what it was sampled for
        from tlm.space.sampling import target_id

        meta.update(target=target.config, target_id=target_id(target))
    if not sentences:
        raise TlmError(f"no sentences in {data}")
    train, val = split_sentences(sentences, cfg)
    packed_meta = {k: meta.get(k) for k in ("target", "target_id", "targets")}  # the data's, not --init's
    init = _init_model(cfg, meta) if cfg.init else None

    out.mkdir(parents=True, exist_ok=True)
    saved_cfg = out / "train.json"
    if saved_cfg.is_file() and (out / "checkpoint").exists():
        prev = json.loads(saved_cfg.read_text()).get("config", {})
        if (prev.get("preset"), prev.get("seed"), prev.get("init", "")) != (cfg.preset, cfg.seed, cfg.init):
            raise TlmError(f"{out} holds a run with another preset, seed or --init: use another --out")
    tok_path = out / "tokenizer.json"
    if tok_path.is_file():
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(tok_path))
    else:
        known = set(init.vocab.tokenizer.get_vocab()) if init else set()
        tokenizer = build_tokenizer(sentence_words(sentences) | (words or set()) | known)
        save_tokenizer(tokenizer, out)
    vocab = Vocab(tokenizer)
    if vocab_only:
        if packable:
            pack_corpus(sentences, packed_meta, out / PACKED)
        return {"steps": 0, "train": len(train), "val": len(val), "vocab": len(vocab)}

    model = new_model(cfg.preset, len(vocab), cfg.seed).to(cfg.device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    state = _load_checkpoint(model, opt, out)
    if state is None:
        state = {"step": 0, "history": []}
        if init is not None:
            from tlm.model.lm import warm_start

            state["new_words"] = warm_start(model, vocab, init)
    resumed = state["step"]
    write_json(saved_cfg, {"config": asdict(cfg), "train": len(train), "val": len(val), "vocab": len(vocab)})

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
            ids, mask, labels = sentence_batch(vocab, batch, cfg.device)
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            # warmup then cosine decay: a pure function of the step
            last_loss = optimizer_step(model, opt, loss, cfg.lr * _lr_factor(step, cfg))
            first_loss = last_loss if first_loss is None else first_loss
            state["step"] = step + 1
            bar.update(job, completed=state["step"], info=f"loss {last_loss:.3f}")
            done = state["step"] == cfg.steps
            if done or state["step"] % cfg.eval_every == 0:
                state["history"].append({"step": state["step"], "train_loss": last_loss,
                                         "val_loss": _val_loss(model, vocab, val, cfg)})
            if done or state["step"] % cfg.save_every == 0:
                _save_checkpoint(model, opt, out, state)
                save_model(model, tokenizer, out, dict(meta, **_progress(state, val)))
    if not (out / "tlm.json").is_file():  # resumed a finished run
        save_model(model, tokenizer, out, dict(meta, **_progress(state, val)))
    val_loss = state["history"][-1]["val_loss"] if state["history"] else None
    return {"steps": state["step"], "resumed_from": resumed, "first_loss": first_loss, "train_loss": last_loss, "val_loss": val_loss,
            "history": state["history"], "seconds": time.perf_counter() - start, "train": len(train),
            "val": len(val), "vocab": len(vocab)}


def _init_model(cfg: PretrainConfig, meta: dict[str, Any]):
    """The model `cfg.init` names, loaded; `meta` gains its targets and `pretrained_from`."""
    from tlm.model.lm import load_model, model_targets

    init = load_model(cfg.init)
    if init.meta.get("preset", cfg.preset) != cfg.preset:
        raise TlmError(f"--init {cfg.init} is a {init.meta.get('preset')} model, not {cfg.preset} (--preset)")
    ids = {t.get("target_id") for t in meta.get("targets", [])}
    meta["targets"] = list(meta.get("targets", [])) + [t for t in model_targets(init.meta) if t.get("target_id") not in ids]
    meta["pretrained_from"] = cfg.init
    return init


def _cmd_pretrain(args: argparse.Namespace) -> int:
    words: set[str] = set()
    if args.source:
        from tlm.graph.sources import tasks_for_sources

        for spec in args.target or [None]:  # the space words of every target the model serves
            sets = tasks_for_sources(args.source, spec)
            words |= space_words([t for ts in sets for t in ts.tasks], sets[0].target)
    cfg = PretrainConfig(preset=args.preset, steps=args.steps, device=args.device, seed=args.seed,
                         batch_size=args.batch_size, lr=args.lr, init=args.init or "")
    res = pretrain(args.data, args.out, cfg, words=words, vocab_only=args.vocab_only)
    if args.vocab_only:
        print(f"vocabulary of {res['vocab']} words in {Path(args.out) / 'tokenizer.json'} "
              f"({res['train']} train / {res['val']} val sentences)")
        return 0
    val = f"{res['val_loss']:.4f}" if res["val_loss"] is not None else "n/a"
    print(f"{res['steps']} steps; train loss {res['train_loss']}, val loss {val}; "
          f"{res['train']} train / {res['val']} val sentences, vocab {res['vocab']}; model in {args.out}")
    return 0


def register_cli(subparsers) -> None:
    p = subparsers.add_parser("pretrain", help="pretrain a tensor language model on sampled sentences")
    p.add_argument("--data", required=True, nargs="+",
                   help="sampling directories (tlm sample --out), GPU bundles, packed corpus files or corpus "
                        "hardware folders (data/corpus/llvm-znver4-2c: measured programs); several: one model for all "
                        "their targets")
    p.add_argument("--preset", default="small", choices=list(PRESETS))
    p.add_argument("--out", required=True, help="model directory (re-running resumes)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--steps", type=int, default=0, help="default: the preset's")
    p.add_argument("--batch-size", type=int, default=0, help="default: the preset's")
    p.add_argument("--lr", type=float, default=0.0, help="default: the preset's")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--init", default=None,
                   help="a model directory to start from: its weights, its words and targets join (e.g. a CPU "
                        "TLM-base learning GPU sentences: one model for both)")
    p.add_argument("--source", nargs="*", default=[], help="workloads whose spaces' choices join the vocabulary")
    p.add_argument("--target", nargs="*", default=None,
                   help="targets of --source tasks, each adding its space words (default host)")
    p.add_argument("--vocab-only", action="store_true",
                   help="write OUT/tokenizer.json and stop; a later run on OUT (a GPU's, say) keeps it")
    p.set_defaults(func=_cmd_pretrain)
