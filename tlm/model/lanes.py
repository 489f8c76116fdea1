"""The lanes of batched generation (tlm.model.generate): up to `batch_size` walks run in lock-step,
each in a thread that blocks in the policy until one model pass has computed the next-word
logits of every waiting lane. Lanes share a key/value cache; a pass feeds only their new words,
left-padded, with padding masked and position ids counting real words only, so a lane sees what
it would see alone. One thread runs at a time (TVM replays never overlap).
"""

from __future__ import annotations

import math
import threading
from typing import Any

from tlm.errors import TlmError, first_line
from tlm.model.choices import decoder


class Lane:
    """One program's walk in its own thread; it runs only between `resume` and its next request."""

    def __init__(self, index: int, space, vocab, prompt: tuple, rng):
        self.index, self.rng, self.vocab = index, rng, vocab
        self.pending: list[int] = prompt[0][-1:]  # words the model has not seen yet
        self.length = len(prompt[0]) - 1  # words in the cache (real positions)
        self.allowed: list[int] | None = None  # the request: token ids to choose among
        self.logprob, self.program, self.done, self._reply = 0.0, None, False, None
        self._go, self._back = threading.Semaphore(0), threading.Semaphore(0)
        threading.Thread(target=self._run, args=(space,), daemon=True).start()
        self._back.acquire()

    def resume(self, reply) -> None:
        """Answer the request ((token, logprob) or an exception) and run to the next one or the end."""
        self._reply = reply
        self._go.release()
        self._back.acquire()

    def _run(self, space) -> None:
        from tlm.space.design import Program, walk

        total = [0.0]
        try:
            prog = walk(space, decoder(self.vocab, self.pending, self._ask, total))
        except BaseException as err:  # never leave the coordinator waiting
            prog = Program(space.task.hash, -1, [], error=first_line(err))
        self.allowed, self.logprob, self.program, self.done = None, total[0], prog, True
        self._back.release()

    def _ask(self, allowed: list[int]) -> tuple[int, float]:
        self.allowed = allowed
        self._back.release()
        self._go.acquire()
        if isinstance(self._reply, BaseException):
            raise self._reply
        return self._reply


class Batch:
    """Lanes of one task sharing a key/value cache; `step` is one model pass for all of them."""

    def __init__(self, gen: Any, prompt: tuple, greedy: bool, temperature: float, top_k: int):  # gen: a Generator
        self.gen, self.prompt, self.sampling = gen, prompt, (greedy, temperature, top_k)
        self.lanes: list[Lane] = []  # running, each waiting for its next word
        self.finished: list[Lane] = []
        self.cache = self.mask = None  # DynamicCache of the lanes' rows; mask: 1 where a lane has a real word

    def add(self, lane: Lane) -> None:
        import torch
        from torch.nn.functional import pad

        if lane.done:
            self.finished.append(lane)
            return
        past = self.prompt[1]  # (keys, values) per layer of <bos> + the prompt words but the last
        left = (self.mask.shape[1] if self.lanes else past[0][0].shape[2]) - past[0][0].shape[2]  # >= 0
        rows = [(pad(k, (0, 0, left, 0)), pad(v, (0, 0, left, 0))) for k, v in past]
        row = pad(torch.ones((1, past[0][0].shape[2]), dtype=torch.long, device=past[0][0].device), (left, 0))
        if not self.lanes:
            from transformers import DynamicCache

            self.cache, self.mask = DynamicCache(ddp_cache_data=rows), row
        else:
            for layer, (k, v) in zip(self.cache.layers, rows):
                layer.keys, layer.values = torch.cat([layer.keys, k]), torch.cat([layer.values, v])
            self.mask = torch.cat([self.mask, row])
        self.lanes.append(lane)

    def step(self) -> None:
        """One model pass: every lane gets its next word and runs to its next request or its end."""
        import torch

        model, limit = self.gen.lm.model, self.gen.lm.model.config.n_positions
        for lane in self.lanes:
            if lane.length + len(lane.pending) > limit:
                lane.resume(TlmError(f"sentence longer than the model's {limit} positions"))
        self._retire()
        if not self.lanes:
            return
        lanes, dev = self.lanes, model.device
        width, pad = max(len(lane.pending) for lane in lanes), self.gen.lm.vocab.pad
        # Left-padded, so every lane's last word is in the last column; pads are masked, positions real.
        ids = torch.tensor([[pad] * (width - len(ln.pending)) + ln.pending for ln in lanes], device=dev)
        pos = torch.tensor([[0] * (width - len(ln.pending)) + list(range(ln.length, ln.length + len(ln.pending)))
                            for ln in lanes], device=dev)
        self.mask = torch.cat([self.mask, (ids != pad).long()], 1)  # <pad> is never a real word
        for lane in lanes:
            lane.length += len(lane.pending)
            lane.pending.clear()  # the lane's policy appends to this very list
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=self.mask, position_ids=pos,
                        past_key_values=self.cache, use_cache=True, logits_to_keep=1)
        self.gen.forward_calls, self.cache = self.gen.forward_calls + 1, out.past_key_values
        replies = [self._pick(out.logits[i, -1].float(), lane) for i, lane in enumerate(lanes)]
        for lane, reply in zip(lanes, replies):
            lane.resume(reply)
        self._retire()

    def _pick(self, logits, lane: Lane) -> tuple[int, float]:
        import torch

        greedy, temperature, top_k = self.sampling
        sub = logits[torch.tensor(lane.allowed, device=logits.device)]
        if greedy:
            pick = int(torch.argmax(sub))
        else:
            scores = sub / max(temperature, 1e-6)
            if 0 < top_k < len(sub):
                scores = scores.masked_fill(scores < torch.topk(scores, top_k).values[-1], -math.inf)
            pick = int(torch.multinomial(torch.softmax(scores, -1).cpu(), 1, generator=lane.rng))
        return lane.allowed[pick], float(torch.log_softmax(sub, -1)[pick])

    def _retire(self) -> None:
        """Move finished lanes out: keep the others' rows, drop cache columns no lane uses."""
        rows = [i for i, lane in enumerate(self.lanes) if not lane.done]
        if len(rows) == len(self.lanes):
            return
        self.finished += [lane for lane in self.lanes if lane.done]
        self.lanes = [self.lanes[i] for i in rows]
        if not rows:
            self.cache = self.mask = None
            return
        self.mask = self.mask[rows]
        cols = self.mask.any(0).nonzero().squeeze(1)
        self.mask = self.mask[:, cols]
        for layer in self.cache.layers:
            layer.keys, layer.values = layer.keys[rows][:, :, cols], layer.values[rows][:, :, cols]

    def close(self) -> None:
        """End the walks of lanes still waiting (after an error in the coordinator)."""
        for lane in [lane for lane in self.lanes if not lane.done]:
            lane.resume(TlmError("generation aborted"))
        self.lanes = []
