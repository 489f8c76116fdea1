"""Supervised fine-tuning (paper §5.1): TLM-base + the best measured sentences -> TLM.

Demonstrations are the fastest correct measured programs of each task, as tensor sentences
(`demonstrations`). Records proposed by the language model store their sentence; records of
other proposers (MetaSchedule, random) store only a trace, which is turned into a sentence when
it is exactly a program of one of the task's design spaces (`trace_sentence`).

`finetune` always starts from the base model directory (never from an earlier fine-tuned
model, so errors do not accumulate across rounds) and trains on the demonstrations tokenized
exactly like pretraining (<bos> + words + <eos>, padding not trained on), with one of two losses:

    sentence   every token (what pretraining optimizes), on demonstration sentences only
    decisions  only the value words (what the generator samples); the prompt, the contexts the
               generator writes itself, <eos> and unknown words are masked with -100

Output: a model directory (tlm.lm.save_model) with the base's tokenizer and metadata plus
{"finetuned_from", "demonstrations", "loss"}, and `finetune.json` (the config, losses, timing).
The directory appears in one rename when complete. Deterministic given the seed (CPU).

CLI: `tlm finetune --base MODEL --db DIR --out MODEL` (demonstrations of every task in the
database), or `python -m tlm.finetune --base MODEL --demos FILE.jsonl --out MODEL` (what
`tlm loop` runs in its fine-tuning process).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tlm.errors import TlmError

LOSSES = ("decisions", "sentence")
CONFIG_FILE = "finetune.json"

# Words that start a decision, and how many context words follow them before the value.
_CONTEXT_WORDS = {"space": 1, "tile": 3, "cat": 1, "loc": 1}


@dataclass
class FinetuneConfig:
    """One fine-tuning run; saved as `finetune.json` in the output directory."""

    steps: int = 0  # 0: `epochs` passes over the demonstrations (at least 20 steps, at most 2000)
    lr: float = 0.0  # 0: a tenth of the base preset's pretraining learning rate
    batch_size: int = 16
    loss: str = "decisions"  # "decisions" | "sentence"
    seed: int = 0
    device: str = "cpu"
    epochs: float = 3.0  # only when steps == 0
    warmup: int = -1  # -1: a tenth of the steps
    weight_decay: float = 0.0
    threads: int = 0  # torch threads; 0: torch's default

    def resolved(self, n_demos: int, preset: str | None) -> FinetuneConfig:
        from tlm.lm import PRESETS

        if self.loss not in LOSSES:
            raise TlmError(f"bad loss {self.loss!r}: use one of {', '.join(LOSSES)}")
        if self.batch_size < 1:
            raise TlmError("fine-tuning batch size must be at least 1")
        steps = self.steps or min(2000, max(20, math.ceil(self.epochs * n_demos / self.batch_size)))
        lr = self.lr or PRESETS.get(preset or "", PRESETS["small"])["lr"] / 10
        warmup = self.warmup if self.warmup >= 0 else steps // 10
        return FinetuneConfig(**dict(asdict(self), steps=steps, lr=lr, warmup=warmup))


@dataclass
class Demo:
    """One demonstration: a sentence and where its prompt ends (words)."""

    task_hash: str
    sentence: str
    prompt_len: int
    task_name: str = ""
    kind: str = ""
    median_s: float | None = None
    proposer: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------- demonstrations

_TRACE_CACHE: dict[tuple[str, int, str], str | None] = {}


def trace_sentence(task, trace_json, target) -> str | None:
    """The sentence of a measured trace, or None when it is not a program of the task's spaces.

    The trace's instructions before the postprocessors must equal one design space's trace
    instruction for instruction (so mutated annotations the language cannot express fail),
    and its decisions must replay on that space without TVM repairing any of them.
    """
    from tlm.language import render
    from tlm.measure import plain_json
    from tlm.space import replay, task_space

    try:
        insts, decisions = trace_json[0], dict((int(i), d) for i, d in trace_json[1])
    except (TypeError, ValueError, IndexError, KeyError):
        return None
    space = task_space(task, target)
    for idx, trace in enumerate(space.traces):
        prefix = plain_json(trace.as_json())[0]
        if insts[: len(prefix)] != prefix:
            continue
        picks = []
        for k, inst in enumerate(prefix):
            if inst[0].startswith("Sample"):
                if k not in decisions:
                    return None
                d = decisions[k]
                picks.append(tuple(int(x) for x in d) if isinstance(d, list) else int(d))
        prog = replay(space, idx, picks, postproc=False)
        if prog.error or prog.sch is None:
            continue
        return render(prog, task, target)
    return None


def _target_info(target):
    from tlm.target import resolve_target

    if isinstance(target, str) and target.strip().startswith("{"):
        return resolve_target(json.loads(target))
    return resolve_target(target)


def demo_records(db, tasks, target, per_task: int = 1) -> list[Demo]:
    """The `per_task` fastest correct records of each task that have (or yield) a sentence.

    `target` is a TargetInfo, a target key (the database's target column) or anything
    `resolve_target` takes. Records are taken in order of median latency; a record without a
    sentence is converted from its trace (`trace_sentence`) and skipped if that fails; a
    sentence whose prompt is not this task's on this target is skipped.
    """
    from tlm.language import prompt_tokens

    info = _target_info(target)
    out: list[Demo] = []
    for task in tasks:
        prompt = prompt_tokens(task, info)
        best = db.best(task.hash, info.key)
        if best is None:
            continue
        if per_task == 1 and best.sentence:  # fast path: the common case
            recs = [best]
        else:
            recs = sorted((r for r in db.records(task.hash, info.key) if r.error is None and r.median_s is not None),
                          key=lambda r: (r.median_s, r.id))
        got: set[str] = set()
        for rec in recs:
            if len(got) >= per_task:
                break
            sentence = rec.sentence
            if not sentence and rec.trace_json is not None:
                key = (db.path, rec.id, info.key)
                if key not in _TRACE_CACHE:
                    try:
                        _TRACE_CACHE[key] = trace_sentence(task, rec.trace_json, info)
                    except Exception:  # a trace TVM cannot replay is not a demonstration
                        _TRACE_CACHE[key] = None
                sentence = _TRACE_CACHE[key]
            if not sentence or sentence in got or sentence.split()[: len(prompt)] != prompt:
                continue
            got.add(sentence)
            out.append(Demo(task.hash, sentence, len(prompt), task.name, task.kind, rec.median_s, rec.proposer))
    return out


def demonstrations(db, tasks, target_key, per_task: int = 1) -> list[tuple[Any, str]]:
    """(task, sentence) of the `per_task` best measured programs of each task (see demo_records)."""
    by_hash = {t.hash: t for t in tasks}
    return [(by_hash[d.task_hash], d.sentence) for d in demo_records(db, tasks, target_key, per_task)]


def write_demos(demos: list[Demo], path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        for d in demos:
            f.write(json.dumps(d.to_json()) + "\n")
    os.replace(tmp, path)


def read_demos(path: str | Path) -> list[Demo]:
    try:
        return [Demo(**json.loads(line)) for line in Path(path).read_text().splitlines() if line.strip()]
    except (OSError, ValueError, TypeError) as err:
        raise TlmError(f"unreadable demonstrations file {path}: {err}") from None


def _as_demos(demos, target) -> list[Demo]:
    """Demo objects from Demos or (Task, sentence) pairs (prompts computed for `target`)."""
    from tlm.language import prompt_tokens

    out: list[Demo] = []
    info = None
    for d in demos:
        if isinstance(d, Demo):
            out.append(d)
            continue
        task, sentence = d
        info = info or _target_info(target)
        prompt = prompt_tokens(task, info)
        if sentence.split()[: len(prompt)] != prompt:
            raise TlmError(f"demonstration of task {task.name} does not start with its prompt on {info.key}")
        out.append(Demo(task.hash, sentence, len(prompt), task.name, task.kind))
    return out


# ---------------------------------------------------------------- tokens and masks

def value_mask(words: list[str], prompt_len: int) -> list[bool]:
    """Which words of a sentence are decision values (what the generator samples).

    The grammar after the prompt is (context value)*: `space N` I, `tile B A E` F1..Fn,
    `cat USE` V, `loc B` L. Values are numbers, `#k`, `inline` or `root`, never a word that
    starts a decision, so a tile's factors run to the next such word.
    """
    mask = [False] * len(words)
    i = prompt_len
    while i < len(words):
        word = words[i]
        if word not in _CONTEXT_WORDS:
            raise TlmError(f"word {i} ({word!r}) of the sentence starts no decision")
        i += 1 + _CONTEXT_WORDS[word]
        if i >= len(words) or words[i] in _CONTEXT_WORDS:
            raise TlmError(f"decision {word!r} at word {i} has no value")
        mask[i] = True
        i += 1
        while word == "tile" and i < len(words) and words[i] not in _CONTEXT_WORDS:
            mask[i] = True
            i += 1
    return mask


def encode_demo(vocab, demo: Demo, loss: str) -> tuple[list[int], list[int]]:
    """(input ids, labels) of one demonstration: <bos> words <eos> as in pretraining; labels
    are the ids (loss "sentence") or -100 except at value words (loss "decisions")."""
    from tlm.lm import N_POSITIONS

    words = demo.sentence.split()
    ids = [vocab.bos] + vocab.encode(words[: N_POSITIONS - 2]) + [vocab.eos]
    if loss == "sentence":
        return ids, list(ids)
    mask = value_mask(words, demo.prompt_len)[: N_POSITIONS - 2]
    labels = [-100] + [i if m and i != vocab.unk else -100 for i, m in zip(ids[1:-1], mask)] + [-100]
    return ids, labels


def _pad(rows: list[tuple[list[int], list[int]]], pad: int, device: str):
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


def _token_logprobs(model, ids, attn, labels):
    """log p(label) at every labelled position (0 elsewhere) and the label mask; shifted."""
    import torch

    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
    target = labels[:, 1:]
    mask = target != -100
    logp = torch.log_softmax(logits, -1).gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return logp * mask, mask


def value_logprobs(lm, demos, batch_size: int = 8) -> list[float]:
    """Per demonstration: the summed log-probability of its value words under a loaded model
    (teacher forcing, the full vocabulary: no renormalisation over the valid choices)."""
    import torch

    demos = _as_demos(demos, lm.meta.get("target"))
    out: list[float] = []
    lm.model.eval()
    with torch.no_grad():
        for b in range(0, len(demos), batch_size):
            rows = [encode_demo(lm.vocab, d, "decisions") for d in demos[b : b + batch_size]]
            ids, attn, labels = _pad(rows, lm.vocab.pad, str(lm.model.device))
            logp, _ = _token_logprobs(lm.model, ids, attn, labels)
            out.extend(float(x) for x in logp.sum(-1))
    return out


# ---------------------------------------------------------------- training

def _lr_factor(step: int, cfg: FinetuneConfig) -> float:
    warm = min(1.0, (step + 1) / max(1, cfg.warmup)) if cfg.warmup else 1.0
    return warm * max(0.1, 0.5 * (1 + math.cos(math.pi * min(1.0, step / max(1, cfg.steps)))))


def finetune(base_dir: str | Path, demos, out_dir: str | Path, config: FinetuneConfig | None = None, *,
             target=None, progress: bool = False) -> Path:
    """Fine-tune the base model on demonstrations into `out_dir`; returns `out_dir`.

    `demos` are `Demo`s or (Task, sentence) pairs; for pairs the prompt length is computed for
    `target` (default: the base model's target). Always starts from `base_dir`'s weights.
    """
    import random

    import torch

    from tlm.lm import load_model, save_model

    base_dir, out_dir = Path(base_dir), Path(out_dir)
    cfg0 = config or FinetuneConfig()
    if cfg0.device == "cuda" and not torch.cuda.is_available():
        raise TlmError("--device cuda asked for but CUDA is not available")
    if cfg0.threads > 0:
        torch.set_num_threads(cfg0.threads)
    lm = load_model(base_dir, cfg0.device)
    demos = _as_demos(demos, target if target is not None else lm.meta.get("target"))
    if not demos:
        raise TlmError("no demonstrations to fine-tune on")
    cfg = cfg0.resolved(len(demos), lm.meta.get("preset"))
    rows = [encode_demo(lm.vocab, d, cfg.loss) for d in demos]
    trainable = sum(sum(1 for x in lab[1:] if x != -100) for _, lab in rows)
    if not trainable:
        raise TlmError("the demonstrations have no trainable tokens")

    torch.manual_seed(cfg.seed)
    model = lm.model
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    size = min(cfg.batch_size, len(rows))
    per_epoch = max(1, len(rows) // size)
    history: list[dict[str, float]] = []
    first = last = None
    start = time.perf_counter()
    order: list[int] = []
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn("fine-tuning"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                   TextColumn("{task.fields[info]}"), disable=not progress)
    with bar:
        job = bar.add_task("steps", total=cfg.steps, info="")
        for step in range(cfg.steps):
            epoch, b = divmod(step, per_epoch)
            if b == 0:  # batch order: a pure function of (seed, epoch)
                order = list(range(len(rows)))
                random.Random(cfg.seed * 1000003 + epoch).shuffle(order)
            batch = [rows[i] for i in order[b * size : (b + 1) * size]]
            torch.manual_seed(cfg.seed * 7919 + step)  # dropout
            ids, attn, labels = _pad(batch, lm.vocab.pad, cfg.device)
            logp, mask = _token_logprobs(model, ids, attn, labels)
            n = int(mask.sum())
            if n == 0:
                continue
            loss = -logp.sum() / n
            for group in opt.param_groups:
                group["lr"] = cfg.lr * _lr_factor(step, cfg)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            last = loss.item()
            first = last if first is None else first
            if step % max(1, cfg.steps // 20) == 0 or step == cfg.steps - 1:
                history.append({"step": step + 1, "loss": last})
            bar.update(job, completed=step + 1, info=f"loss {last:.3f}")
    model.eval()

    tmp = out_dir.with_name(f"{out_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    meta = {k: v for k, v in lm.meta.items() if k != "sentence_version"}
    meta.update(finetuned_from=str(base_dir), demonstrations=len(demos), loss=cfg.loss)
    save_model(model, lm.vocab.tokenizer, tmp, meta)
    report = {"config": asdict(cfg), "base": str(base_dir), "demonstrations": len(demos),
              "tasks": len({d.task_hash for d in demos}), "trainable_tokens": trainable,
              "first_loss": first, "final_loss": last, "history": history,
              "seconds": round(time.perf_counter() - start, 3)}
    (tmp / CONFIG_FILE).write_text(json.dumps(report, indent=1))
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    return out_dir


# ---------------------------------------------------------------- command line

def _config_from_args(args: argparse.Namespace) -> FinetuneConfig:
    return FinetuneConfig(steps=args.steps, lr=args.lr, batch_size=args.batch_size, loss=args.loss,
                          seed=args.seed, device=args.device, epochs=args.epochs, threads=args.threads)


def _cmd_finetune(args: argparse.Namespace) -> int:
    if bool(args.db) == bool(args.demos):
        raise TlmError("give either --db or --demos")
    cfg = _config_from_args(args)
    if args.demos:
        demos = read_demos(args.demos)
        target = None
    else:
        from tlm.database import open_db

        target = _target_info(args.target)
        with open_db(args.db, create=False) as db:
            hashes = sorted({r.task_hash for r in db.records(target_key=target.key)})
            tasks = [t for t in (db.task(h) for h in hashes) if t is not None]
            demos = demo_records(db, tasks, target, args.per_task)
    out = finetune(args.base, demos, args.out, cfg, target=target, progress=args.progress)
    report = json.loads((out / CONFIG_FILE).read_text())
    print(f"fine-tuned {args.base} on {report['demonstrations']} demonstrations of {report['tasks']} tasks "
          f"({report['config']['loss']} loss, {report['config']['steps']} steps): loss {report['first_loss']:.4f} -> "
          f"{report['final_loss']:.4f} in {report['seconds']:.1f} s; model in {out}")
    return 0


def _add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base", required=True, help="the pretrained model directory (TLM-base)")
    p.add_argument("--out", required=True, help="output model directory (replaced when done)")
    p.add_argument("--db", default=None, help="record database: demonstrations of every task in it")
    p.add_argument("--demos", default=None, help="demonstrations as JSON lines (tlm.finetune.write_demos)")
    p.add_argument("--per-task", type=int, default=1, help="demonstrations per task (with --db)")
    p.add_argument("--target", default=None, help="target of the records (with --db; default host)")
    p.add_argument("--loss", default="decisions", choices=LOSSES)
    p.add_argument("--steps", type=int, default=0, help="0: --epochs passes over the demonstrations")
    p.add_argument("--epochs", type=float, default=3.0)
    p.add_argument("--lr", type=float, default=0.0, help="0: a tenth of the base preset's")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    p.add_argument("--progress", action="store_true", help="show a progress bar")
    p.set_defaults(func=_cmd_finetune)


def register_cli(subparsers) -> None:
    _add_args(subparsers.add_parser("finetune", help="fine-tune a base model on the best measured programs"))


def main(argv: list[str] | None = None) -> int:
    """`python -m tlm.finetune ...` (the arguments of `tlm finetune`)."""
    import warnings

    warnings.filterwarnings("ignore")
    p = argparse.ArgumentParser(prog="python -m tlm.finetune", description=__doc__.split("\n")[0])
    _add_args(p)
    args = p.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except TlmError as err:
        print(f"tlm finetune: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
