"""The TLM tuner: `tlm tune SOURCE --tuner tlm --budget B|Kg [--model DIR]`.

The language model proposes valid programs of the design space; they go through the same
`Measurer` into the same `Database` as the baselines (proposer "tlm", round and sentence stored).

How the budget is spent (it is a total over the tasks: `B`, or `K x tasks` for `Kg`):
1. every task first gets the model's first choice (`TuneConfig.pick`: by default the cost
   model's top pick of 32 distinct samples; "logprob": the most likely one by generation
   log-prob; "greedy": word-by-word argmax) plus samples, up to half of its even share (at least
   one program);
2. the rest goes in rounds: each round ranks the tasks by weight x best latency (their share of
   the model's time; a task without a valid program yet ranks with the slowest known latency)
   and gives the top ones `round_size` new samples each, one measurement batch per round.
With a cost model, a task's n programs are the n it ranks first among `cm_pool` x n samples
(tlm.search.ranking: boosted on the task's measured programs, parallel loops counted on the
target's cores). A task whose space is exhausted drops out. Programs in the database are never
measured again and the budget counts what it holds: a rerun resumes.

`--budget 0` measures nothing: each task gets the model's first choice, stored as an unmeasured
record with proposer "tlm-greedy" (no latency, so `Database.best()` ignores it), which
`tlm compile` applies only to a task that has no measured record.

No task is left on TVM's naive default: when the model proposes no valid program for a task
(every try of a generation fails, e.g. a word it lacks), the tuner says so in a one-line
`tlm: warning:` on stderr and proposes random valid programs of the task's design space instead
(same proposer, budget and sentences; the database's meta `tlm-fallback/TARGET-ID/TASK` and the
summary row's `fallback` field record it).
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass, field
from typing import Any

from tlm.errors import TlmError
from tlm.graph.tasks import Task
from tlm.measure.database import GREEDY
from tlm.measure.measurer import Candidate
from tlm.model.lm import default_model_dir
from tlm.search.base import Tuner, TuneConfig, parse_budget, progress_bar, seeds, summarize
from tlm.search.ranking import CostRanking
from tlm.space.design import plain_json

PROPOSER = "tlm"
_MAX_MISSES = 3  # proposal rounds that give only duplicates before a task drops out


@dataclass
class _State:
    """What the tuner knows of one task during a run."""

    task: Task
    share: int  # the task's even share of the budget
    done: int  # measurements with proposer tlm (this run and earlier ones)
    seen: set[str] = field(default_factory=set)  # sentences measured or skipped
    traces: set[str] = field(default_factory=set)  # traces measured by any proposer
    exhausted: bool = False
    misses: int = 0
    model_ok: bool = False  # the model has proposed a valid program of this task
    fallback: bool = False  # the model proposed none: random programs of the design space instead


class TlmTuner(Tuner):
    """The language-model tuner over a Measurer and a Database; `run()` returns summary rows."""

    allow_zero = True  # budget 0: each task's first choice (`pick`), unmeasured

    def __init__(self, tasks: list[Task], db, target, config: TuneConfig, progress: bool = True,
                 generator=None):
        super().__init__(tasks, db, target, config, progress)
        if config.pick not in ("cost", "logprob", "greedy"):
            raise TlmError(f"unknown pick {config.pick!r} (cost, logprob or greedy)")
        if config.donors < 0:
            raise TlmError(f"bad --donors {config.donors}: a number of corpus tasks, 0 or more")
        self.total = sum(self.budgets)
        self._generator = generator
        self.ranking = CostRanking(db, self.target, config)

    @property
    def cost_model(self):
        """The cost model ranking samples (TuneConfig.cost_model), or None."""
        return self.ranking.model

    # ------------------------------------------------------------------ the model
    @property
    def generator(self):
        if self._generator is None:
            from tlm.model.generate import Generator

            path = self.config.model or default_model_dir(self.target)
            self._generator = Generator.from_dir(path, self.target)
        return self._generator

    def schedule(self, task: Task, g):
        """The tvm Schedule of a generated program (Generated.schedule once generation has it)."""
        sch = getattr(g, "schedule", None)
        if sch is not None:
            return sch
        from tlm.space.design import task_space
        from tlm.space.language import parse

        space = task_space(task, self.target)
        return parse(g.sentence, task, self.target, space=space).sch

    def pick(self, task: Task, seen: set[str] | None = None) -> list:
        """[the model's first choice] among programs not in `seen` (TuneConfig.pick), or []: the
        first in the pick's order without a flaw an unmeasured program would keep (`first_choice`)."""
        gen, cfg = self.generator, self.config
        if cfg.pick == "greedy":
            first = gen.generate(task, 1, greedy=True, seen=seen)
            if not first or (self._build_cost(task, first[0]) == 0 and self._lean(task, first[0])):
                return first
        return self.first_choice(task, self.choices(task, seen))

    def choices(self, task: Task, seen: set[str] | None = None) -> list:
        """The model's `pick_samples` samples of a task (not in `seen`) in the pick's order: the cost
        model's ranking, else by log-prob."""
        gen, cfg = self.generator, self.config
        seed = seeds(cfg.seed, task, 0, 2)[1]  # not round 0's sampling seed (the first of the two)
        samples = gen.generate(task, max(1, cfg.pick_samples), seen=seen, seed=seed)
        if samples and cfg.pick == "cost" and self.cost_model is not None:
            from tlm.search.donors import donor_samples

            extra = donor_samples(task, self.target, cfg.donors, set(seen or ()) | {g.sentence for g in samples})
            return self.ranking.ranked(task, samples + extra, lambda g: self.schedule(task, g))
        return sorted(samples, key=lambda g: -g.logprob)

    def _build_cost(self, task: Task, g) -> int:
        """The odd-width vector lanes of a program when too many for LLVM (tlm.space.build_cost), else 0."""
        from tlm.space.build_cost import too_slow_to_build

        try:
            return too_slow_to_build(self.schedule(task, g).mod, self.target)
        except Exception:  # noqa: BLE001 - TVM's lowering refused it: the build says why, not this check
            return 0

    def _lean(self, task: Task, g) -> bool:
        """Whether a program redoes no work by the absolute limit (tlm.space.build_cost.REDUNDANCY_LIMIT)."""
        from tlm.space.build_cost import REDUNDANCY_LIMIT, redundancy

        return redundancy(self._judged_ratio(task, g), REDUNDANCY_LIMIT) is None

    def _judged_ratio(self, task: Task, g) -> float | None:
        """The flops ratio the redone-work check judges, or None (not judged) with `TuneConfig.lean_check` off."""
        return self._redone_work(task, g) if self.config.lean_check else None

    def _redone_work(self, task: Task, g) -> float | None:
        """How many times over a program does its task's work (tlm.space.build_cost.redone_work:
        TVM's flop estimate over the task's, or a sizeable reduction's runs), or None."""
        from tlm.space.build_cost import redone_work

        try:
            return redone_work(self.schedule(task, g).mod, task.flops)
        except Exception:  # noqa: BLE001 - no program to count: the build says why, not this check
            return None

    def _lowering_error(self, task: Task, g) -> str | None:
        """CUDA lowering's error for a program, or None when it lowers to CUDA C."""
        from tlm.measure.cuda_build import lower_cuda

        try:
            return lower_cuda(self.schedule(task, g).mod, self.target).error
        except TlmError as e:
            return str(e)

    def first_choice(self, task: Task, ranked: list) -> list:
        """[the first of `ranked` without a flaw an unmeasured pick would keep] (tlm.space.build_cost):
        one that redoes work (its flop count far above the leanest ranked program's), one LLVM
        builds in minutes, or for CUDA one TVM's CUDA lowering refuses (nothing else would catch
        that before the whole-model plan)."""
        from tlm.space.build_cost import first_fine, lean_limit, lowering_problem, odd_lanes_problem, redundancy

        ratios = {id(g): self._judged_ratio(task, g) for g in ranked}
        limit = lean_limit(list(ratios.values()))

        def problem(g) -> str | None:
            why = redundancy(ratios[id(g)], limit)
            if why is None and self.target.kind == "cuda":
                why = lowering_problem(self._lowering_error(task, g))
            elif why is None:
                why = odd_lanes_problem(self._build_cost(task, g))
            return why

        return first_fine(task.name, ranked, problem)

    def greedy(self, task: Task):
        """(Generated, Schedule) of the model's first choice (`pick`), or None."""
        out = self.pick(task)
        if not out:
            return None
        try:
            return out[0], self.schedule(task, out[0])
        except TlmError:
            return None

    # ------------------------------------------------------------------ the fallback
    def _fallback_key(self, task: Task) -> str:
        from tlm.space.sampling import target_id

        return f"tlm-fallback/{target_id(self.target)}/{task.hash}"

    def _fall_back(self, task: Task) -> None:
        """Say out loud that the model proposed no valid program of a task (with the reason the
        greedy try gives), and record it; its programs are random from here on."""
        one = getattr(self.generator, "one", None)
        try:
            reason = (one(task, greedy=True).error if one else None) or "no valid program in its tries"
        except Exception as err:  # noqa: BLE001 - the note must not fail the run
            reason = (str(err).splitlines() or [type(err).__name__])[0]
        print(f"tlm: warning: the model proposed no valid program for {task.name} ({reason}); "
              f"tuning it with random programs of its design space", file=sys.stderr)
        self.db.set_meta(self._fallback_key(task), {"programs": "random", "reason": reason})

    def _random(self, task: Task, n: int, seed: int, seen: set[str]) -> list:
        """Up to `n` random valid programs of a task (Programs, with sentences not in `seen`)."""
        from tlm.space.design import random_policy, task_space, walk
        from tlm.space.language import render

        space = task_space(task, self.target)
        policy, out = random_policy(random.Random(seed)), []
        for _ in range(4 * n + 10):
            if len(out) >= n:
                break
            prog = walk(space, policy)
            sentence = render(prog, task, self.target) if prog.ok else None
            if sentence and sentence not in seen:
                seen.add(sentence)
                out.append((prog, sentence))
        return out

    # ------------------------------------------------------------------ proposals
    def _state(self, task: Task, share: int) -> _State:
        st = _State(task, share, self.done(task))
        marked = bool(self.db.get_meta(self._fallback_key(task)))  # earlier programs may be random ones
        for r in self.db.records(task.hash, self.target.key):
            if r.proposer == GREEDY:
                continue  # unmeasured: the greedy program is still worth measuring
            st.model_ok = st.model_ok or (r.proposer == PROPOSER and bool(r.sentence) and not marked)
            if r.sentence:
                st.seen.add(r.sentence)
            if r.trace_json is not None:
                st.traces.add(json.dumps(r.trace_json))
        return st

    def _propose(self, st: _State, n: int, rnd: int, greedy: bool) -> list[Candidate]:
        """Up to `n` new programs of a task (its greedy one first when `greedy`)."""
        if n <= 0 or st.exhausted:
            return []
        gen, task = self.generator, st.task
        seed = seeds(self.config.seed, task, rnd, 1)[0]
        want = n * max(1, self.config.cm_pool) if self.cost_model is not None else n
        first = None  # the model's first choice stays first, whatever the ranking
        if st.fallback:
            got = [(p.sch, s) for p, s in self._random(task, want, seed, st.seen)]
        else:
            got = self.pick(task, st.seen) if greedy else []
            first = got[0].sentence if got else None
            got += gen.generate(task, want - len(got), seen=st.seen | {g.sentence for g in got}, seed=seed) if want > len(got) else []
            if not got and not st.model_ok:  # not one valid program from the model: random ones
                st.fallback = True
                self._fall_back(task)
                return self._propose(st, n, rnd, greedy)
            st.model_ok = st.model_ok or bool(got)
        if not got:
            st.exhausted = True
            return []
        cands = []
        for g in got:
            sentence = g[1] if st.fallback else g.sentence
            st.seen.add(sentence)
            try:
                sch = g[0] if st.fallback else self.schedule(task, g)
            except TlmError:
                continue
            key = json.dumps(plain_json(sch.trace.as_json()))
            if key in st.traces:  # the same program measured by another proposer
                continue
            st.traces.add(key)
            cands.append(Candidate(task, schedule=sch, proposer=PROPOSER, round=rnd, sentence=sentence))
        if len(cands) > n:  # ranked by the cost model: measure its top n
            head = cands[:1] if first is not None and cands[0].sentence == first else []
            cands = (head + self.ranking.ranked(task, cands[len(head):], lambda c: c.schedule))[:n]
        if cands:
            st.misses = 0
        else:
            st.misses += 1
            st.exhausted = st.misses >= _MAX_MISSES
        return cands

    def _score(self, st: _State, slowest: float) -> float:
        best = self.db.best(st.task.hash, self.target.key)
        return st.task.weight * (best.median_s if best else slowest)

    # ------------------------------------------------------------------ the run
    def run(self) -> list[dict[str, Any]]:
        self._start()
        try:
            if self.total == 0:
                self._run_greedy()
            else:
                self._run_budget()
        finally:
            self.measurer.close()
        return summarize_tlm(self.tasks, self.db, self.target)

    def _run_greedy(self) -> None:
        """--budget 0: store each task's greedy program unmeasured (what compile applies)."""
        for task in self.tasks:
            got = self.greedy(task)
            latest = self.db.greedy_records(task.hash, self.target.key)
            if got is None:
                stored = latest and self.db.get_meta(self._fallback_key(task))
                self._fall_back(task)  # said again when resumed: compile still runs a random program
                if stored:
                    continue  # resumed: the random program is stored
                rand = self._random(task, 1, seeds(self.config.seed, task, 0, 1)[0], set())
                if not rand:
                    continue  # no valid program at all: compile names the task as untuned
                prog, sentence = rand[0]
                got = (sentence, prog.sch)
            else:
                got = (got[0].sentence, got[1])
                if self.db.get_meta(self._fallback_key(task)):
                    self.db.set_meta(self._fallback_key(task), None)  # this model proposes it again
            sentence, sch = got
            if latest and latest[0].sentence == sentence:
                continue  # resumed: already stored
            self.db.add_record(task, self.target.key, plain_json(sch.trace.as_json()), [],
                               proposer=GREEDY, round=0, sentence=sentence)

    def _run_budget(self) -> None:
        states = [self._state(t, b) for t, b in zip(self.tasks, self.budgets)]
        by_hash = {st.task.hash: st for st in states}
        left = self.total - sum(st.done for st in states)
        if left <= 0:
            return
        rnd = max(self.db.last_round(t.hash, self.target.key, PROPOSER) for t in self.tasks) + 1
        batch = max(1, self.config.batch_size)
        with progress_bar(disable=not self.progress) as bar:
            job = bar.add_task("tlm", total=self.total, completed=self.total - left, status="")

            def measure(cands: list[Candidate], what: str) -> int:
                results = self.measurer.measure(cands)
                self._commit(results)
                for r in results:
                    by_hash[r.candidate.task.hash].done += 1
                errs = sum(1 for r in results if not r.ok)
                bar.update(job, advance=len(results),
                           status=what + (f" ({errs} errors in batch)" if errs else ""))
                return len(results)

            # 1. Every task: its greedy program plus samples, up to half its share.
            pending: list[Candidate] = []
            for st in states:
                if left - len(pending) <= 0:
                    break
                first = max(1, st.share // 2) if st.share else 0
                want = min(first - st.done, left - len(pending))
                pending += self._propose(st, want, rnd, greedy=True) if want > 0 else []
                while len(pending) >= batch:
                    left -= measure(pending[:batch], f"round {rnd}: first programs")
                    pending = pending[batch:]
            if pending:
                left -= measure(pending, f"round {rnd}: first programs")
            rnd += 1
            # 2. Rounds to the tasks that take the most time.
            size = max(1, self.config.round_size)
            while left > 0:
                active = [st for st in states if not st.exhausted]
                if not active:
                    break
                known = [b.median_s for st in states if (b := self.db.best(st.task.hash, self.target.key))]
                slowest = max(known) if known else 1.0
                active.sort(key=lambda st: (-self._score(st, slowest), st.done))
                cands: list[Candidate] = []
                quota = min(batch, left)
                for st in active:
                    if len(cands) >= quota:
                        break
                    # A task left out of the first programs (budget < tasks) starts with its greedy one.
                    cands += self._propose(st, min(size, quota - len(cands)), rnd, greedy=st.done == 0)
                if cands:
                    top = active[0].task.name[:28]
                    left -= measure(cands, f"round {rnd}: top task {top}")
                rnd += 1


def summarize_tlm(tasks: list[Task], db, target) -> list[dict[str, Any]]:
    """`search.base.summarize` rows (measurements of proposer tlm) plus `status`: tuned (a measured
    record exists), greedy (only the unmeasured greedy program) or untuned; and `fallback`:
    "random" when the model proposed no valid program of the task (random programs instead)."""
    from tlm.space.sampling import target_id

    rows = summarize(tasks, db, target, PROPOSER)
    for t, row in zip(tasks, rows):
        row["rounds"] = db.last_round(t.hash, target.key, PROPOSER) + 1
        rec = db.compile_record(t.hash, target.key)
        row["status"] = "untuned" if rec is None else "greedy" if rec.proposer == GREEDY else "tuned"
        mark = db.get_meta(f"tlm-fallback/{target_id(target)}/{t.hash}")
        row["fallback"] = mark.get("programs") if isinstance(mark, dict) else None
    return rows


def total_budget(budget: str | int, num_tasks: int) -> int:
    """Total measurements of a budget over `num_tasks` tasks (0 for `--budget 0`)."""
    return sum(parse_budget(budget, num_tasks, allow_zero=True))
