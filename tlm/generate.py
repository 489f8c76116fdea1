"""Constrained generation (paper Algorithm 2, improved): valid programs by construction.

The generator walks a task's decisions with the model as the policy. It writes the prompt and
every context itself and lets the model choose only value words, with logits masked to the
words that continue some valid choice of the pending decision (a trie over the token
sequences of the valid choices, so multi-word values like tile factors are constrained word by
word). One model pass per program with the key/value cache: each step feeds only new words.

Log-probabilities are those of the constrained distribution (temperature 1, renormalised over
the allowed words), summed over the program; forced words (one valid choice) add 0.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tlm.errors import TlmError


@dataclass
class Generated:
    task_hash: str
    sentence: str
    space: int
    decisions: list[Any]
    logprob: float
    error: str | None = None


def choice_trie(point, vocab) -> dict:
    """{token id: subtrie}; a leaf holds {None: choice}. Choices with an unknown word are left out."""
    from tlm.language import value_tokens

    root: dict = {}
    for choice in point.choices:
        ids = [vocab.id(w) for w in value_tokens(point, choice)]
        if any(i is None for i in ids):
            continue
        node = root
        for i in ids:
            node = node.setdefault(i, {})
        node[None] = choice
    return root


class _Session:
    """One program's token stream over the model with its key/value cache."""

    def __init__(self, lm, prefix_cache, prefix_len: int, pending: list[int]):
        self.lm, self.past, self.length, self.pending = lm, prefix_cache, prefix_len, list(pending)

    def logits(self):
        import torch

        if self.length + len(self.pending) > self.lm.model.config.n_positions:
            raise TlmError(f"sentence longer than the model's {self.lm.model.config.n_positions} positions")
        ids = torch.tensor([self.pending], dtype=torch.long, device=self.lm.model.device)
        with torch.no_grad():
            out = self.lm.model(input_ids=ids, past_key_values=self.past, use_cache=True)
        self.past = out.past_key_values
        self.length += len(self.pending)
        self.pending = []
        return out.logits[0, -1].float()


class Generator:
    """Generates programs of tasks with a loaded model (see `tlm.lm.load_model`)."""

    def __init__(self, lm, target=None):
        from tlm.target import host_target

        self.lm = lm
        self.target = target or host_target()
        want = lm.meta.get("target_id")
        if want:
            from tlm.sampling import target_id

            if want != target_id(self.target):
                import warnings

                warnings.warn(f"model {lm.path} was trained for another target than {self.target.key}", stacklevel=2)

    @classmethod
    def from_dir(cls, path: str | Path, target=None, device: str = "cpu") -> Generator:
        from tlm.lm import load_model

        return cls(load_model(path, device), target)

    def _prompt(self, task):
        """The key/value cache after <bos> + prompt words, computed once per task."""
        import torch

        from tlm.language import prompt_tokens

        vocab = self.lm.vocab
        ids = [vocab.bos] + vocab.encode(prompt_tokens(task, self.target))
        with torch.no_grad():
            out = self.lm.model(input_ids=torch.tensor([ids[:-1]], device=self.lm.model.device), use_cache=True)
        return out.past_key_values, len(ids) - 1, ids[-1:]

    def one(self, task, space=None, *, greedy: bool = False, temperature: float = 1.0, top_k: int = 0,
            rng=None, prompt=None) -> Generated:
        """One program of `task` (check `.error`: a postprocessor may still reject it)."""
        import copy

        import torch

        from tlm.language import context_tokens, render
        from tlm.space import task_space, walk

        space = space or task_space(task, self.target)
        past, length, pending = prompt or self._prompt(task)
        sess = _Session(self.lm, copy.deepcopy(past), length, pending)
        vocab = self.lm.vocab
        total = [0.0]

        def policy(point):
            sess.pending += vocab.encode(context_tokens(point))
            node = choice_trie(point, vocab)
            if not node:
                raise TlmError(f"no valid choice of {point.kind} {point.context} is in the model's vocabulary")
            while None not in node:
                allowed = list(node)
                if len(allowed) == 1:
                    tok = allowed[0]
                else:
                    logits = sess.logits()
                    idx = torch.tensor(allowed, device=logits.device)
                    sub = logits[idx]
                    logp = torch.log_softmax(sub, -1)
                    if greedy:
                        pick = int(torch.argmax(sub))
                    else:
                        scores = sub / max(temperature, 1e-6)
                        if 0 < top_k < len(allowed):
                            kth = torch.topk(scores, top_k).values[-1]
                            scores = scores.masked_fill(scores < kth, -math.inf)
                        probs = torch.softmax(scores, -1).cpu()
                        pick = int(torch.multinomial(probs, 1, generator=rng))
                    tok = allowed[pick]
                    total[0] += float(logp[pick])
                sess.pending.append(tok)
                node = node[tok]
            return node[None]

        prog = walk(space, policy)
        decisions = [list(d) if isinstance(d, tuple) else d for d in prog.decisions]
        if prog.sch is None:
            return Generated(task.hash, "", prog.space, decisions, total[0], prog.error)
        return Generated(task.hash, render(prog, task, self.target), prog.space, decisions, total[0], prog.error)

    def generate(self, task, n: int, *, greedy: bool = False, temperature: float = 1.0, top_k: int = 0,
                 seen: set[str] | None = None, seed: int = 0, max_tries: int | None = None) -> list[Generated]:
        """Up to `n` distinct valid programs of `task` whose sentences are not in `seen`.

        Greedy decoding is deterministic, so it gives at most one program (the most likely
        one under word-by-word argmax). Rejected programs (postprocessor) are retried.
        """
        import torch

        from tlm.space import task_space

        space = task_space(task, self.target)
        prompt = self._prompt(task)
        rng = torch.Generator().manual_seed(seed)
        seen = set(seen or ())
        out: list[Generated] = []
        max_tries = max_tries or (1 if greedy else 4 * n + 10)
        for _ in range(max_tries):
            if len(out) >= n:
                break
            g = self.one(task, space, greedy=greedy, temperature=temperature, top_k=top_k, rng=rng, prompt=prompt)
            if g.error or g.sentence in seen:
                continue
            seen.add(g.sentence)
            out.append(g)
        return out


def _cmd_generate(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from tlm.graph import tasks_for_source

    ts = tasks_for_source(args.source, target=args.target)
    gen = Generator.from_dir(args.model, ts.target, args.device)
    seen: set[str] = set()
    if args.seen:
        for line in Path(args.seen).read_text().splitlines():
            if line.strip():
                seen.add(json.loads(line)["sentence"])
    count = 0
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    with open(tmp, "w") as f, Progress(disable=not args.progress) as bar:
        job = bar.add_task("generating", total=len(ts.tasks))
        for i, task in enumerate(ts.tasks):
            progs = gen.generate(task, args.per_task, greedy=args.greedy, temperature=args.temperature,
                                 top_k=args.top_k, seen=seen, seed=args.seed + i)
            for g in progs:
                f.write(json.dumps(dict(asdict(g), task_name=task.name)) + "\n")
            count += len(progs)
            bar.advance(job)
    tmp.replace(out)
    print(f"{count} programs for {len(ts.tasks)} tasks of {args.source} in {args.out}")
    return 0


def register_cli(subparsers) -> None:
    p = subparsers.add_parser("generate", help="generate programs of a workload's tasks with a model")
    p.add_argument("source", help="zoo workload name or .onnx path")
    p.add_argument("--model", required=True, help="model directory (tlm pretrain --out)")
    p.add_argument("--per-task", type=int, default=16)
    p.add_argument("--out", required=True, help="output JSON-lines file")
    p.add_argument("--greedy", action="store_true", help="the single most likely program per task")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0, help="0: off")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seen", default=None, help="JSON-lines file of sentences to skip (already measured)")
    p.add_argument("--target", default=None)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--no-progress", dest="progress", action="store_false")
    p.set_defaults(func=_cmd_generate)
