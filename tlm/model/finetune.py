"""Supervised fine-tuning (paper §5.1): TLM-base + the best measured sentences -> TLM.

The demonstrations (the fastest correct measured programs of each task, as tensor sentences)
and their tokens and masks are made in tlm.model.demos; this module trains on them.

`finetune` always starts from the base model directory (never from an earlier fine-tuned
model, so errors do not accumulate across rounds) and trains on the demonstrations tokenized
exactly like pretraining (<bos> + words + <eos>, padding not trained on), with one of two losses:

    sentence   every token (what pretraining optimizes), on demonstration sentences only
    decisions  only the value words (what the generator samples); the prompt, the contexts the
               generator writes itself, <eos> and unknown words are masked with -100

Output: a model directory (tlm.model.lm.save_model) with the base's tokenizer and metadata plus
{"finetuned_from", "demonstrations", "loss"}, and `finetune.json` (the config, losses, timing).
The directory appears in one rename when complete. Deterministic given the seed (CPU). A run
that is stopped resumes from its last checkpoint (`<out>.ckpt`, tlm.model.checkpoint) when started
again on the same base, demonstrations and config.

CLI: `tlm finetune --base MODEL --db DIR --out MODEL` (demonstrations of every task in the
database), or `python -m tlm.model.finetune --base MODEL --demos FILE.jsonl --out MODEL` (what
`tlm loop` runs in its fine-tuning process, `FinetuneJob`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tlm.errors import PARENT_PID_ENV, TlmError, die_with_parent
from tlm.model.checkpoint import checkpoint_path, drop_checkpoint, load_checkpoint, run_key, save_checkpoint
from tlm.model.demos import (Demo, as_demos, db_demos, demo_records, demonstrations, encode_demo, read_demos,
                             token_logprobs, trace_sentence, value_logprobs, value_mask, write_demos)
from tlm.model.lm import pad_batch

__all__ = ["CONFIG_FILE", "LOSSES", "Demo", "FinetuneConfig", "FinetuneJob", "FinetuneOutcome", "demo_records",
           "demonstrations", "encode_demo", "finetune", "finetune_outcome", "model_done", "read_demos",
           "trace_sentence", "value_logprobs", "value_mask", "write_demos"]

LOSSES = ("decisions", "sentence")
CONFIG_FILE = "finetune.json"


@dataclass
class FinetuneConfig:
    """One fine-tuning run; saved as `finetune.json` in the output directory."""

    steps: int = 0  # 0: `epochs` passes over the demonstrations (at least 20 steps, at most 2000)
    lr: float = 0.0  # 0: a tenth of the base preset's pretraining learning rate
    batch_size: int = 16
    loss: str = "sentence"  # or "decisions"; sentence won on held-out tasks (bench/results/sft_loss.md)
    seed: int = 0
    device: str = "cpu"
    epochs: float = 3.0  # only when steps == 0
    warmup: int = -1  # -1: a tenth of the steps
    weight_decay: float = 0.0
    threads: int = 0  # torch threads; 0: torch's default
    checkpoint_s: float = 120.0  # save a resumable checkpoint this often (tlm.model.checkpoint); <0: never

    def resolved(self, n_demos: int, preset: str | None) -> FinetuneConfig:
        from tlm.model.lm import PRESETS

        if self.loss not in LOSSES:
            raise TlmError(f"bad loss {self.loss!r}: use one of {', '.join(LOSSES)}")
        if self.batch_size < 1:
            raise TlmError("fine-tuning batch size must be at least 1")
        steps = self.steps or min(2000, max(20, math.ceil(self.epochs * n_demos / self.batch_size)))
        lr = self.lr or PRESETS.get(preset or "", PRESETS["small"])["lr"] / 10
        warmup = self.warmup if self.warmup >= 0 else steps // 10
        return FinetuneConfig(**dict(asdict(self), steps=steps, lr=lr, warmup=warmup))


# ---------------------------------------------------------------- training

def length_parts(picked: list[int], lengths: list[int]) -> list[list[int]]:
    """A batch (row indices) in at most two parts of similar lengths, each padded to its own
    longest row: the split, after sorting by length, that pads least, if it pads at least 10%
    fewer positions than the whole batch. Sentences of one batch range from a reshape's ~40
    words to a conv's ~150, so a padded batch is about a third padding; two parts take 1.31x
    fewer seconds per step on 2 cores (`finetune_speed` in bench/README.md) for the same loss and
    gradient (summed over the parts, up to float rounding)."""
    rows = sorted(picked, key=lambda i: (lengths[i], i))
    ls = [lengths[i] for i in rows]
    whole = len(rows) * ls[-1] if rows else 0
    best, cut = whole, 0
    for k in range(1, len(rows)):
        cost = k * ls[k - 1] + (len(rows) - k) * ls[-1]
        if cost < best:
            best, cut = cost, k
    if not cut or best > 0.9 * whole:
        return [list(picked)]
    return [rows[:cut], rows[cut:]]


def backward_batch(model, rows, weights: list[float], parts: list[list[int]], n: float, pad: int,
                   device: str) -> float:
    """Accumulate the gradient of a batch's loss, -sum(weight x token log-prob) / n, computed
    part by part (`length_parts`); returns the loss."""
    import torch

    total = 0.0
    for part in parts:
        ids, attn, labels = pad_batch([rows[i] for i in part], pad, device)
        logp, _ = token_logprobs(model, ids, attn, labels)
        w = torch.tensor([weights[i] for i in part], device=logp.device, dtype=logp.dtype)
        loss = -(logp.sum(-1) * w).sum() / n
        loss.backward()  # gradients add up over the parts
        total += loss.item()
    return total


def _lr_factor(step: int, cfg: FinetuneConfig) -> float:
    warm = min(1.0, (step + 1) / max(1, cfg.warmup)) if cfg.warmup else 1.0
    return warm * max(0.1, 0.5 * (1 + math.cos(math.pi * min(1.0, step / max(1, cfg.steps)))))


def finetune(base_dir: str | Path, demos, out_dir: str | Path, config: FinetuneConfig | None = None, *,
             target=None, progress: bool = False) -> Path:
    """Fine-tune the base model on demonstrations into `out_dir`; returns `out_dir`.

    `demos` are `Demo`s or (Task, sentence) pairs; for pairs the prompt length is computed for
    `target` (default: the base model's target). `target` may be a list (demonstrations of several
    CPUs, each prompt naming its own): the model's `targets` gain every one of them.
    Always starts from `base_dir`'s weights.
    """
    import random

    import torch

    from tlm.model.lm import load_model, save_model
    base_dir, out_dir = Path(base_dir), Path(out_dir)
    cfg0 = config or FinetuneConfig()
    if cfg0.device == "cuda" and not torch.cuda.is_available():
        raise TlmError("--device cuda asked for but CUDA is not available")
    if cfg0.threads > 0:
        torch.set_num_threads(cfg0.threads)
    lm = load_model(base_dir, cfg0.device)
    targets = list(target) if isinstance(target, (list, tuple)) else [] if target is None else [target]
    demos = as_demos(demos, targets[0] if targets else lm.meta.get("target"))
    if not demos:
        raise TlmError("no demonstrations to fine-tune on")
    cfg = cfg0.resolved(len(demos), lm.meta.get("preset"))
    rows = [encode_demo(lm.vocab, d, cfg.loss) for d in demos]
    weights = [float(d.weight) for d in demos]
    if any(not math.isfinite(w) or w < 0 for w in weights) or not any(weights):
        raise TlmError("demonstration weights must be finite, non-negative and not all zero")
    labelled = [sum(1 for x in lab[1:] if x != -100) for _, lab in rows]  # positions with a loss term
    trainable = sum(labelled)
    lengths = [len(ids) for ids, _ in rows]
    if not trainable:
        raise TlmError("the demonstrations have no trainable tokens")

    torch.manual_seed(cfg.seed)
    model = lm.model
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    size = min(cfg.batch_size, len(rows))
    per_epoch = max(1, len(rows) // size)
    ckpt, key = checkpoint_path(out_dir), run_key(base_dir, demos, cfg)
    resumed = load_checkpoint(ckpt, key, model, opt, cfg.device) if cfg.checkpoint_s >= 0 else None
    begin, done = resumed or (0, {"first": None, "last": None, "history": [], "seconds": 0.0})
    history: list[dict[str, float]] = done["history"]
    first, last = done["first"], done["last"]
    start = saved = time.perf_counter()
    order: list[int] = []
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn("fine-tuning"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                   TextColumn("{task.fields[info]}"), disable=not progress)
    with bar:
        job = bar.add_task("steps", total=cfg.steps, completed=begin, info="")
        for step in range(begin, cfg.steps):
            epoch, b = divmod(step, per_epoch)
            if b == 0 or not order:  # batch order: a pure function of (seed, epoch)
                order = list(range(len(rows)))
                random.Random(cfg.seed * 1000003 + epoch).shuffle(order)
            picked = order[b * size : (b + 1) * size]
            torch.manual_seed(cfg.seed * 7919 + step)  # dropout
            # a weighted mean over tokens: [B] weights times [B, T] token log-probs; all weights 1
            # gives the plain token mean
            n = sum(labelled[i] * weights[i] for i in picked)
            if n == 0:
                continue
            for group in opt.param_groups:
                group["lr"] = cfg.lr * _lr_factor(step, cfg)
            opt.zero_grad(set_to_none=True)
            last = backward_batch(model, rows, weights, length_parts(picked, lengths), n, lm.vocab.pad, cfg.device)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            first = last if first is None else first
            if step % max(1, cfg.steps // 20) == 0 or step == cfg.steps - 1:
                history.append({"step": step + 1, "loss": last})
            bar.update(job, completed=step + 1, info=f"loss {last:.3f}")
            if 0 <= cfg.checkpoint_s <= time.perf_counter() - saved and step + 1 < cfg.steps:
                seconds = done["seconds"] + time.perf_counter() - start
                save_checkpoint(ckpt, key, step + 1, model, opt,
                                {"first": first, "last": last, "history": history, "seconds": seconds})
                saved = time.perf_counter()
    model.eval()

    tmp = out_dir.with_name(f"{out_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    meta = {k: v for k, v in lm.meta.items() if k != "sentence_version"}
    meta.update(finetuned_from=str(base_dir), demonstrations=len(demos), loss=cfg.loss)
    if targets:  # demonstrations of other targets: the model now serves them too
        from tlm.model.lm import model_targets, target_summary

        known = model_targets(lm.meta)
        for new in map(target_summary, targets):
            known += [new] * all(t.get("target_id") != new["target_id"] for t in known)
        meta["targets"] = known
    save_model(model, lm.vocab.tokenizer, tmp, meta)
    report = {"config": asdict(cfg), "base": str(base_dir), "demonstrations": len(demos),
              "tasks": len({d.task_hash for d in demos}), "trainable_tokens": trainable,
              "first_loss": first, "final_loss": last, "history": history,
              "seconds": round(done["seconds"] + time.perf_counter() - start, 3), "resumed_at_step": begin}
    (tmp / CONFIG_FILE).write_text(json.dumps(report, indent=1))
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    drop_checkpoint(ckpt)
    return out_dir


# ---------------------------------------------------------------- as a background process

def model_done(path: str | Path) -> bool:
    """Whether a model directory is complete (what `finetune` writes in its final rename)."""
    path = Path(path)
    return (path / "tlm.json").is_file() and (path / "model.safetensors").is_file()


@dataclass
class FinetuneOutcome:
    """How a fine-tuning process ended: a complete model (`ok`, with the steps, final loss and
    seconds of its finetune.json when readable in `report`), or the error (its log's last line)."""

    ok: bool
    report: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def finetune_outcome(out_dir: str | Path, log_path: str | Path, rc: int) -> FinetuneOutcome:
    out, log = Path(out_dir), Path(log_path)
    if rc == 0 and model_done(out):
        try:
            rep = json.loads((out / CONFIG_FILE).read_text())
            report = dict(steps=rep["config"]["steps"], final_loss=rep["final_loss"], seconds=rep["seconds"])
        except (OSError, ValueError, KeyError):
            report = {}
        return FinetuneOutcome(True, report)
    tail = log.read_text().strip().splitlines()[-1:] if log.is_file() else []
    return FinetuneOutcome(False, error=(tail[0] if tail else f"exit status {rc}")[:300])


def idle_priority() -> None:
    """Run this process only on cores nothing else wants (Linux SCHED_IDLE; elsewhere nice 19
    alone), so timed programs beside it keep their cores (`idle_neighbour` in bench/README.md)."""
    if hasattr(os, "SCHED_IDLE"):
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        except OSError:
            pass
    os.nice(19)


class FinetuneJob:
    """`python -m tlm.model.finetune --demos FILE` in a child process with `config.threads` threads,
    its output in `log_path`; `poll` or `wait` for its outcome, `terminate` to stop it."""

    def __init__(self, base: str | Path, demos_path: str | Path, out_dir: str | Path, config: FinetuneConfig,
                 log_path: str | Path, targets: list[str] | None = None, idle: bool = False):
        """`targets`: the keys of the CPUs the demonstrations were measured on (the model's
        `targets` gain them, as `tlm finetune --db --target all` does). `idle`: the process sets
        itself to idle priority first (`--idle`, `idle_priority`)."""
        self.out_dir, self.log_path = Path(out_dir), Path(log_path)
        c = config
        cmd = [sys.executable, "-m", "tlm.model.finetune", "--base", str(base), "--demos", str(demos_path),
               "--out", str(out_dir), "--steps", str(c.steps), "--lr", repr(c.lr), "--batch-size", str(c.batch_size),
               "--epochs", repr(c.epochs), "--loss", c.loss, "--seed", str(c.seed), "--device", c.device,
               "--threads", str(c.threads)] + (["--target", *targets] if targets else []) + (["--idle"] if idle else [])
        root = str(Path(__file__).resolve().parents[2])
        # the child ends when this process dies, even by `kill -9` (tlm.errors.die_with_parent)
        env = dict(os.environ, OMP_NUM_THREADS=str(max(1, c.threads)), MKL_NUM_THREADS=str(max(1, c.threads)),
                   PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p),
                   **{PARENT_PID_ENV: str(os.getpid())})
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=root)

    def _end(self, rc: int) -> FinetuneOutcome:
        self._log.close()
        return finetune_outcome(self.out_dir, self.log_path, rc)

    def poll(self, timeout: float = 0.0) -> FinetuneOutcome | None:
        """The outcome if the process has ended (waiting up to `timeout` seconds for it), else None."""
        try:
            rc = self.proc.wait(timeout) if timeout > 0 else self.proc.poll()
        except subprocess.TimeoutExpired:
            rc = None
        return None if rc is None else self._end(rc)

    def wait(self) -> FinetuneOutcome:
        return self._end(self.proc.wait())

    def terminate(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

# ---------------------------------------------------------------- command line

def _config_from_args(args: argparse.Namespace) -> FinetuneConfig:
    return FinetuneConfig(steps=args.steps, lr=args.lr, batch_size=args.batch_size, loss=args.loss,
                          seed=args.seed, device=args.device, epochs=args.epochs, threads=args.threads)


def _cmd_finetune(args: argparse.Namespace) -> int:
    if args.idle:
        idle_priority()
    if bool(args.db) == bool(args.demos):
        raise TlmError("give either --db or --demos")
    if args.speed_power < 0 or (args.speed_power and not args.db):
        raise TlmError("--speed-power takes a number >= 0, with --db")
    cfg = _config_from_args(args)
    if args.demos:  # --target: the CPUs the demonstrations were measured on (the model's targets gain them)
        from tlm.graph.target import resolve_target

        demos = read_demos(args.demos)
        target = [resolve_target(t) for t in args.target] if args.target else None
    else:
        target, demos = db_demos(args.db, args.target or ["host"], args.per_task, args.speed_power)
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
    p.add_argument("--demos", default=None, help="demonstrations as JSON lines (tlm.model.demos.write_demos)")
    p.add_argument("--per-task", type=int, default=1, help="demonstrations per task (with --db)")
    p.add_argument("--speed-power", type=float, default=0.0,
                   help="with --db: weigh each demonstration by (its task's best / its latency) ^ this (0: all 1)")
    p.add_argument("--target", nargs="+", default=None,
                   help="targets of the records (with --db; default host; all: every target in the database); with "
                        "--demos: the CPUs they were measured on, added to the model's targets")
    p.add_argument("--loss", default="sentence", choices=LOSSES)
    p.add_argument("--steps", type=int, default=0, help="0: --epochs passes over the demonstrations")
    p.add_argument("--epochs", type=float, default=3.0)
    p.add_argument("--lr", type=float, default=0.0, help="0: a tenth of the base preset's")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    p.add_argument("--progress", action="store_true", help="show a progress bar")
    p.add_argument("--idle", action="store_true",
                   help="run at idle priority (Linux SCHED_IDLE, nice 19): only on cores nothing else wants")
    p.set_defaults(func=_cmd_finetune)


def register_cli(subparsers) -> None:
    _add_args(subparsers.add_parser("finetune", help="fine-tune a base model on the best measured programs"))


def main(argv: list[str] | None = None) -> int:
    """`python -m tlm.model.finetune ...` (the arguments of `tlm finetune`). Started by
    `FinetuneJob`, it ends when that process dies (`die_with_parent`)."""
    import warnings

    if PARENT_PID_ENV in os.environ:
        die_with_parent(os.environ.pop(PARENT_PID_ENV))
    warnings.filterwarnings("ignore")
    p = argparse.ArgumentParser(prog="python -m tlm.model.finetune", description=__doc__.split("\n")[0])
    _add_args(p)
    args = p.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except TlmError as err:
        print(f"tlm finetune: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
