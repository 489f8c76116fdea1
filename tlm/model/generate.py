"""Constrained generation (paper Algorithm 2, improved): valid programs by construction.

The generator walks a task's decisions with the model as the policy. It writes the prompt and
every context itself and lets the model choose only value words, with logits masked to the
words that continue some valid choice of the pending decision (a trie over the token sequences
of the valid choices: multi-word values like tile factors are constrained word by word).

Batched: up to `batch_size` walks ("lanes", tlm.model.lanes) run in lock-step, sharing one
key/value cache; try i draws from its own random stream, so results do not depend on the batch
size. Log-probabilities are those of the constrained distribution (temperature 1, renormalised
over the allowed words), summed; forced words add 0 and cost no pass.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import warnings
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from tlm.errors import TlmError, TlmWarning
from tlm.model.choices import decoder
from tlm.model.lanes import Batch, Lane

BATCH_SIZE = 16
# `generate` stops after this many tries in a row (or n / 2, if more) gave a program it had: a task
# of a small space (a GRU cell's gates: 3 distinct programs in 32 samples) ran all 4n + 10 tries
# for n it could never fill (bigru's budget-0 compile: 687 of its 851 s).
STALE_TRIES = 16


@dataclass
class Generated:
    task_hash: str
    sentence: str
    space: int
    decisions: list[Any]
    logprob: float
    error: str | None = None
    schedule: Any = field(default=None, repr=False, compare=False)  # the s_tir.Schedule (postprocessed) if valid

    def to_json(self) -> dict[str, Any]:
        """The record without the schedule (use this, not `dataclasses.asdict`: a Schedule cannot be copied)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "schedule"}


def generated(task_hash: str, prog, sentence: str, logprob: float) -> Generated:
    """The Generated record of a walked program (tlm.space.design.Program) and its sentence."""
    decisions = [list(d) if isinstance(d, tuple) else d for d in prog.decisions]
    return Generated(task_hash, sentence, prog.space, decisions, logprob, prog.error, prog.sch if prog.ok else None)


@contextlib.contextmanager
def one_thread(model):
    """PyTorch on one thread while a CPU model generates: its passes are many small ops, each a
    round of the thread pool, and a round waits for the slowest thread; with anything else running
    (the tuner's builds, another job) that took 6 tasks' 32 samples from 3.5 to 20 s on 2 cores
    (2.5 s with either on a quiet host; the same words)."""
    import torch

    if model.device.type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _rngs(seed: int):
    """Try i's random stream: a function of (seed, i) only."""
    import torch

    return lambda i: torch.Generator().manual_seed((seed * 1_000_003 + i) % 2**64)


class Generator:
    """Generates programs of tasks with a loaded model (see `tlm.model.lm.load_model`)."""

    def __init__(self, lm, target=None):
        from tlm.graph.target import host_target
        from tlm.model.lm import model_targets, serves

        self.lm, self.target = lm, target or host_target()
        self.forward_calls = 0  # model passes so far (generation and scoring)
        # Silent when tlm.json lists this target or one of its kind, arch and ISA (a model
        # trained on several CPUs serves each of their classes).
        if model_targets(lm.meta) and not serves(lm.meta, self.target):
            warnings.warn(f"model {lm.path} was trained for another target than {self.target.key}",
                          stacklevel=2, category=TlmWarning)

    @classmethod
    def from_dir(cls, path: str | Path, target=None, device: str = "cpu") -> Generator:
        from tlm.model.lm import load_model

        return cls(load_model(path, device), target)

    def _prompt(self, task) -> tuple[list[int], list]:
        """<bos> + prompt words, and the key/value cache of all but the last (once per task)."""
        import torch

        from tlm.space.language import prompt_tokens

        ids = [self.lm.vocab.bos] + self.lm.vocab.encode(prompt_tokens(task, self.target))
        with torch.no_grad():
            out = self.lm.model(input_ids=torch.tensor([ids[:-1]], device=self.lm.model.device), use_cache=True)
        self.forward_calls += 1
        return ids, [(layer.keys, layer.values) for layer in out.past_key_values.layers]

    def _generated(self, task, lane: Lane) -> Generated:
        from tlm.space.language import render

        prog = lane.program
        return generated(task.hash, prog, "" if prog.sch is None else render(prog, task, self.target), lane.logprob)

    def _run(self, task, sampling: tuple, rngs, batch_size: int, more, space=None, prompt=None) -> list[Generated]:
        """Programs of tries 0, 1, ... in try order (try i samples with `rngs(i)`), starting a try
        while fewer than `batch_size` run and `more(tries started, tries running, results so far)`."""
        with one_thread(self.lm.model):
            return self._walk(task, sampling, rngs, batch_size, more, space, prompt)

    def _walk(self, task, sampling: tuple, rngs, batch_size: int, more, space=None, prompt=None) -> list[Generated]:
        from tlm.space.design import task_space

        space, prompt = space or task_space(task, self.target), prompt or self._prompt(task)
        batch = Batch(self, prompt, *sampling)
        results: dict[int, Generated] = {}
        tries = 0  # started
        try:
            while True:
                for lane in batch.finished:
                    results[lane.index] = self._generated(task, lane)
                batch.finished = []
                if len(batch.lanes) < max(1, batch_size) and more(tries, len(batch.lanes), results):
                    batch.add(Lane(tries, space, self.lm.vocab, prompt, rngs(tries)))
                    tries += 1
                elif batch.lanes:
                    batch.step()
                else:
                    return [results[i] for i in sorted(results)]
        finally:
            batch.close()

    def one(self, task, space=None, *, greedy: bool = False, temperature: float = 1.0, top_k: int = 0,
            rng=None, prompt=None) -> Generated:
        """One program of `task` (check `.error`: a postprocessor may still reject it)."""
        return self._run(task, (greedy, temperature, top_k), lambda i: rng, 1, lambda t, a, r: t < 1, space, prompt)[0]

    def sample(self, task, n: int, *, greedy: bool = False, temperature: float = 1.0, top_k: int = 0, seed: int = 0,
               batch_size: int = BATCH_SIZE) -> list[Generated]:
        """`n` programs with duplicates and rejected ones: the model's own distribution (= generate's tries)."""
        return self._run(task, (greedy, temperature, top_k), _rngs(seed), batch_size, lambda t, a, r: t < n)

    def generate(self, task, n: int, *, greedy: bool = False, temperature: float = 1.0, top_k: int = 0,
                 seen: set[str] | None = None, seed: int = 0, max_tries: int | None = None,
                 batch_size: int = BATCH_SIZE) -> list[Generated]:
        """Up to `n` distinct valid programs of `task` whose sentences are not in `seen`.

        Greedy decoding is deterministic, so it gives at most one program (the most likely
        one under word-by-word argmax). Rejected programs (postprocessor) are retried, up to 4n +
        10 tries, or until STALE_TRIES (or n / 2) tries in a row gave programs already had. Try i samples
        from its own stream of (seed, i) and the result is the first `n` accepted tries in try
        order (extra tries run ahead are dropped): the same for any `batch_size`.
        """
        from tlm.space.design import task_space

        seen = set(seen or ())
        max_tries = max_tries or (1 if greedy else 4 * n + 10)
        space = task_space(task, self.target)
        if space.one_program:  # one try gives it (a concatenate, a reshape): not 4n + 10 replays
            max_tries = 1

        stale = max(STALE_TRIES, n // 2)

        def cut(results: dict[int, Generated]) -> int | None:
            """Tries from this index on are not used: n new programs, or `stale` programs in a row
            seen already, over the tries finished in order from 0 (so the same for any batch size)."""
            new, fresh, run, i = set(seen), 0, 0, 0
            while i in results:
                g = results[i]
                i += 1
                if g.error is None and g.sentence not in new:
                    new.add(g.sentence)
                    fresh, run = fresh + 1, 0
                elif g.error is None:  # a program seen already (a rejected one is retried, as before)
                    run += 1
                if fresh >= n or run >= stale:
                    return i
            return None

        def more(tries: int, running: int, results: dict[int, Generated]) -> bool:
            """Enough tries running to fill the missing programs at the rate tries have given new ones."""
            if cut(results) is not None:
                return False
            fresh = len({g.sentence for g in results.values() if g.error is None and g.sentence not in seen})
            return tries < max_tries and running < math.ceil((n - fresh) * (len(results) + 1) / (fresh + 1))

        out: list[Generated] = []
        results = self._run(task, (greedy, temperature, top_k), _rngs(seed), batch_size, more, space)
        end = cut(dict(enumerate(results)))
        for g in results[:end]:
            if len(out) < n and g.error is None and g.sentence not in seen:
                seen.add(g.sentence)
                out.append(g)
        return out

    def logprob(self, task, sentence: str) -> float:
        """The model's log-probability of a sentence as generation scores it (`Generated.logprob`):
        the sum over value words of log-softmax over the words allowed there (forced words add 0).
        One plain forward pass over the whole sentence: no cache, no batching."""
        import torch

        from tlm.space.design import task_space, walk
        from tlm.space.language import prompt_tokens

        vocab, model = self.lm.vocab, self.lm.model
        head = [vocab.bos] + vocab.encode(prompt_tokens(task, self.target))
        ids = [vocab.bos] + vocab.encode(sentence.split())
        if ids[: len(head)] != head:
            raise TlmError("sentence prompt does not match the task and target")
        if len(ids) > model.config.n_positions:
            raise TlmError(f"sentence longer than the model's {model.config.n_positions} positions")
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids], device=model.device)).logits[0].float()
        self.forward_calls += 1
        tokens, total = [], [0.0]  # the decoder appends to tokens and adds to total

        def choose(allowed: list[int]) -> tuple[int, float]:
            at = len(head) + len(tokens)  # logits[at - 1] predicts ids[at]
            if at >= len(ids) or ids[at] not in allowed:
                raise TlmError(f"word {at - 1} of the sentence continues no valid choice")
            logp = torch.log_softmax(logits[at - 1][torch.tensor(allowed, device=logits.device)], -1)
            return ids[at], float(logp[allowed.index(ids[at])])

        prog = walk(task_space(task, self.target), decoder(vocab, tokens, choose, total), postproc=False)
        if prog.sch is None or head + tokens != ids:
            raise TlmError(f"the sentence names no program of the task: {prog.error or 'words differ'}")
        return total[0]


def _cmd_generate(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from tlm.graph.extract import tasks_for_source

    ts = tasks_for_source(args.source, target=args.target)
    gen = Generator.from_dir(args.model, ts.target, args.device)
    lines = Path(args.seen).read_text().splitlines() if args.seen else []
    seen = {json.loads(line)["sentence"] for line in lines if line.strip()}
    count, out = 0, Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    with open(tmp, "w") as f, Progress(disable=not args.progress) as bar:
        job = bar.add_task("generating", total=len(ts.tasks))
        for i, task in enumerate(ts.tasks):
            progs = gen.generate(task, args.per_task, greedy=args.greedy, temperature=args.temperature,
                                 top_k=args.top_k, seen=seen, seed=args.seed + i, batch_size=args.batch_size)
            for g in progs:
                f.write(json.dumps(dict(g.to_json(), task_name=task.name)) + "\n")
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
    p.add_argument("--batch-size", type=int, default=BATCH_SIZE, help="programs decoded together")
    p.add_argument("--seen", default=None, help="JSON-lines file of sentences to skip (already measured)")
    p.add_argument("--target", default=None)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--no-progress", dest="progress", action="store_false")
    p.set_defaults(func=_cmd_generate)
