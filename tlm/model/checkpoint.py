"""Resumable fine-tuning: the training state (next step, weights, optimizer, losses so far) saved
beside the output directory every few minutes, so that a fine-tuning that is stopped (the
collector's SIGTERM, kill -9, a session's end) resumes where it was rather than from the base.

A resumed run is the same run: `tlm.model.finetune` draws its batch order from (seed, epoch) and
its dropout from (seed, step), and the learning-rate schedule is a function of the step. The
checkpoint is keyed by what the run learns from (the base's weights, the encoded demonstrations
and their weights, the resolved config less its thread count, device and checkpoint interval): a
checkpoint of any other run is ignored and replaced. Written in one rename, so a kill during a
write leaves the previous checkpoint whole.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

_NOT_KEYED = ("threads", "device", "checkpoint_s")


def checkpoint_path(out_dir: str | Path) -> Path:
    """Where the fine-tuning into `out_dir` keeps its checkpoint (a file beside the directory)."""
    out_dir = Path(out_dir)
    return out_dir.with_name(f"{out_dir.name}.ckpt")


def run_key(base_dir: str | Path, demos: list, config: Any) -> str:
    """16 hex digits naming one fine-tuning run: the base's weights and tokenizer, the
    demonstrations (`Demo`: sentence, prompt length, weight, in order) and the resolved config."""
    h = hashlib.sha256()
    for name in ("model.safetensors", "tokenizer.json"):
        with open(Path(base_dir) / name, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    cfg = {k: v for k, v in asdict(config).items() if k not in _NOT_KEYED}
    h.update(json.dumps(cfg, sort_keys=True).encode())
    for d in demos:
        h.update(f"{d.prompt_len} {d.weight!r} {d.sentence}\n".encode())
    return h.hexdigest()[:16]


def save_checkpoint(path: Path, key: str, step: int, model, opt, progress: dict[str, Any]) -> None:
    """Save the state after `step` steps (the next step to run is `step`)."""
    import torch

    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    torch.save({"key": key, "step": step, "model": model.state_dict(), "opt": opt.state_dict(),
                "progress": progress}, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path, key: str, model, opt, device: str) -> tuple[int, dict[str, Any]] | None:
    """(next step, progress) of this run's checkpoint, its weights and optimizer state loaded
    into `model` and `opt`; None when there is none, it is another run's, or it is unreadable."""
    import torch

    if not path.is_file():
        return None
    try:
        state = torch.load(path, map_location=device, weights_only=True)
        if state.get("key") != key:
            return None
        step, progress = int(state["step"]), dict(state["progress"])
    except Exception:  # noqa: BLE001 - a damaged checkpoint only costs the steps it held
        return None
    before = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])  # checks before it changes anything
    except Exception:  # noqa: BLE001
        model.load_state_dict(before)
        return None
    return step, progress


def drop_checkpoint(path: Path) -> None:
    path.unlink(missing_ok=True)
