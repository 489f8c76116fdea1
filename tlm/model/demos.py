"""Demonstrations for supervised fine-tuning (tlm.model.finetune): the best measured programs as
tensor sentences, and how a sentence is tokenized and masked for training.

Demonstrations are the fastest correct measured programs of each task, as tensor sentences
(`demonstrations`, `demo_records`). Records proposed by the language model store their
sentence; records of other proposers (MetaSchedule, random) store only a trace, which is turned
into a sentence when it is exactly a program of one of the task's design spaces
(`trace_sentence`). A demonstration is tokenized exactly like pretraining (<bos> + words +
<eos>, padding not trained on); `value_mask` marks the value words (what the generator samples),
the only words the "decisions" loss trains on. `value_logprobs` scores demonstrations under a
model (bench/sft_loss.py).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tlm.errors import TlmError
from tlm.graph.target import resolve_target
from tlm.model.lm import N_POSITIONS, pad_batch

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
    weight: float = 1.0  # how much its tokens count in the fine-tuning loss (tlm.model.finetune)

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
    from tlm.space.design import plain_json, replay, task_space
    from tlm.space.language import render

    try:
        insts, decisions = trace_json[0], dict((int(i), d) for i, d in trace_json[1])
    except (TypeError, ValueError, IndexError, KeyError):
        return None
    space = task_space(task, target)
    for idx, trace in enumerate(space.traces):
        full = plain_json(trace.as_json())[0]
        samples = sum(inst[0].startswith("Sample") for inst in full)
        # MetaSchedule's search keeps its traces simplified: instructions whose results nothing
        # uses (a GetSBlock of the root block, say) are gone, the program is the same
        def prefixes(full=full, trace=trace):  # the simplified trace only when the full one fails
            yield full
            yield plain_json(trace.simplified(remove_postproc=True).as_json())[0]

        for prefix in prefixes():
            if insts[: len(prefix)] != prefix:
                continue
            picks = []
            for k, inst in enumerate(prefix):
                if inst[0].startswith("Sample"):
                    if k not in decisions:
                        return None
                    d = decisions[k]
                    picks.append(tuple(int(x) for x in d) if isinstance(d, list) else int(d))
            if len(picks) != samples:  # a decision the simplification dropped: not this space
                continue
            prog = replay(space, idx, picks, postproc=False)
            if prog.error or prog.sch is None:
                continue
            return render(prog, task, target)
    return None


def demo_records(db, tasks, target, per_task: int = 1, speed_power: float = 0.0) -> list[Demo]:
    """The `per_task` fastest correct records of each task that have (or yield) a sentence.

    `speed_power` > 0: each demonstration is weighted by (its task's fastest / its latency) ^ power
    (the best 1, slower ones less; bench/learning.py's `speed` method), else all weigh 1.

    `target` is a TargetInfo, a target key (the database's target column) or anything
    `resolve_target` takes. Records are taken in order of median latency; a record without a
    sentence, or with one of an older sentence version (its prompt is not this task's on this
    target), is converted from its trace (`trace_sentence`) and skipped if that fails.
    """
    from tlm.space.language import prompt_tokens

    info = resolve_target(target)
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
            if sentence and sentence.split()[: len(prompt)] != prompt:
                sentence = None  # written for an older sentence version: the trace says it anew
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
            if not got:
                top = rec.median_s  # the task's fastest demonstration
            got.add(sentence)
            weight = (top / rec.median_s) ** speed_power if speed_power else 1.0
            out.append(Demo(task.hash, sentence, len(prompt), task.name, task.kind, rec.median_s, rec.proposer,
                            weight))
    return out


def other_targets(db, target) -> list:
    """The other targets of the same kind with records in `db` (TargetInfo, by target key)."""
    info, out = resolve_target(target), []
    for key in db.target_keys():
        if key == info.key:
            continue
        try:
            other = resolve_target(json.loads(key))
        except Exception:  # noqa: BLE001 - a target this TVM cannot make: no demonstration or transfer source
            continue
        if other.kind == info.kind:
            out.append(other)
    return out


def every_target_demos(db, tasks, target, per_task: int = 1,
                       speed_power: float = 0.0) -> tuple[list[Demo], dict[str, int]]:
    """Demonstrations of `tasks` on `target` and on every other target of the same kind in the
    database (each prompt names its own CPU; see demo_records); and how many came from each target key."""
    info = resolve_target(target)
    out = demo_records(db, tasks, info, per_task, speed_power)
    counts = {info.key: len(out)}
    for other in other_targets(db, info):
        got = demo_records(db, tasks, other, per_task, speed_power)
        out += got
        counts[other.key] = len(got)
    return out, counts


def db_demos(db_dir: str, specs: list[str], per_task: int, speed_power: float = 0.0) -> tuple[list, list[Demo]]:
    """(targets, demonstrations) of a record database for each target of `specs` (a target, or
    "all": every CPU target the database has records of); see demo_records."""
    from tlm.measure.database import open_db

    with open_db(db_dir, create=False) as db:
        if "all" in specs:
            # "all" is every CPU: GPU records (cuda-*) are another language's demonstrations
            specs = [s for s in specs if s != "all"] + [c for k in db.target_keys()
                                                        if (c := json.loads(k)).get("kind") == "llvm"]
        targets = list({t.key: t for t in map(resolve_target, specs)}.values())
        out: list[Demo] = []
        for target in targets:
            hashes = sorted({r.task_hash for r in db.records(target_key=target.key)})
            tasks = [t for t in (db.task(h) for h in hashes) if t is not None]
            out += demo_records(db, tasks, target, per_task, speed_power)
    return targets, out


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


def as_demos(demos, target) -> list[Demo]:
    """Demo objects from Demos or (Task, sentence) pairs (prompts computed for `target`)."""
    from tlm.space.language import prompt_tokens

    out: list[Demo] = []
    info = None
    for d in demos:
        if isinstance(d, Demo):
            out.append(d)
            continue
        task, sentence = d
        info = info or resolve_target(target)
        prompt = prompt_tokens(task, info)
        if sentence.split()[: len(prompt)] != prompt:
            raise TlmError(f"demonstration of task {task.name} does not start with its prompt on {info.key}")
        out.append(Demo(task.hash, sentence, len(prompt), task.name, task.kind))
    return out


# ---------------------------------------------------------------- tokens and masks

def value_mask(words: list[str], prompt_len: int) -> list[bool]:
    """Which words of a sentence are decision values (what the generator samples):
    `tlm.space.language.value_mask`, which knows the number encoding."""
    from tlm.space.language import value_mask as mask

    return mask(words, prompt_len)


def encode_demo(vocab, demo: Demo, loss: str) -> tuple[list[int], list[int]]:
    """(input ids, labels) of one demonstration: <bos> words <eos> as in pretraining; labels
    are the ids (loss "sentence") or -100 except at value words (loss "decisions")."""
    words = demo.sentence.split()
    ids = [vocab.bos] + vocab.encode(words[: N_POSITIONS - 2]) + [vocab.eos]
    if loss == "sentence":
        return ids, list(ids)
    mask = value_mask(words, demo.prompt_len)[: N_POSITIONS - 2]
    labels = [-100] + [i if m and i != vocab.unk else -100 for i, m in zip(ids[1:-1], mask)] + [-100]
    return ids, labels


def token_logprobs(model, ids, attn, labels):
    """log p(label) at every labelled position (0 elsewhere) and the label mask; shifted."""
    import torch

    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
    target = labels[:, 1:]
    mask = target != -100
    logp = torch.log_softmax(logits, -1).gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return logp * mask, mask


def value_logprobs(lm, demos, batch_size: int = 8, with_words: bool = False) -> list:
    """Per demonstration: the summed log-probability of its value words under a loaded model
    (teacher forcing, the full vocabulary: no renormalisation over the valid choices); with
    `with_words`, (that sum, the number of its value words) pairs (a per-word mean's denominator)."""
    import torch

    demos = as_demos(demos, lm.meta.get("target"))
    out: list = []
    lm.model.eval()
    with torch.no_grad():
        for b in range(0, len(demos), batch_size):
            rows = [encode_demo(lm.vocab, d, "decisions") for d in demos[b : b + batch_size]]
            ids, attn, labels = pad_batch(rows, lm.vocab.pad, str(lm.model.device))
            logp, _ = token_logprobs(lm.model, ids, attn, labels)
            sums = [float(x) for x in logp.sum(-1)]
            out.extend(zip(sums, [sum(1 for x in r[1] if x != -100) for r in rows]) if with_words else sums)
    return out
