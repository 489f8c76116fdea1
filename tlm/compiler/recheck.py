"""When a whole model built from unmeasured programs does not match: find the wrong program.

A budget-0 pick (a greedy record, `tlm.measure.database.GREEDY`) is never measured, so nothing
checked its output on its own: the whole model's check against the reference is what catches
a wrong one. TVM can lower a valid schedule into wrong code (seen: EfficientNet's depthwise conv
with its SiLU inlined, after `decompose_reduction`, 4091 of 8192 outputs wrong), so when the
records' build does not match, each applied greedy program is run once by the measurer (built,
its output checked against the task's untuned program, as every measured program is). A wrong
one is kept in the record database as a failed measurement (proposer `CHECK`, its sentence), so
`Database.compile_record` passes over it, now and in later compiles, to the task's next greedy
program or, with none left, to TVM's default schedule; the model is then built again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CHECK = "tlm-check"  # proposer of the check's failed runs
ROUNDS = 3  # checks per compile: a task's next greedy program may be wrong too


@dataclass
class Recheck:
    picks: dict[str, Any]  # task hash -> the record to apply now (None: TVM's default schedule)
    wrong: list[str] = field(default_factory=list)  # "task name: error" of each program found wrong
    checked: int = 0  # programs run


def recheck_greedy(database, tasks, info, picks: dict[str, Any]) -> Recheck:
    """Run every applied greedy program of `picks` once, checked; mark the wrong ones failed and
    pick again (`Database.compile_record`) until every applied greedy program has passed."""
    from tlm.measure.database import GREEDY
    from tlm.measure.config import MeasureConfig
    from tlm.measure.measurer import Candidate, Measurer

    by_hash = {t.hash: t for t in tasks}
    threads = info.cores if info.kind == "llvm" else 1
    out = Recheck(picks=dict(picks))
    passed: set[tuple[str, str]] = set()
    with Measurer(info, MeasureConfig(number=1, repeat=1, min_repeat_ms=0)) as measurer:
        for _ in range(ROUNDS):
            todo = [(h, rec) for h, rec in out.picks.items() if rec is not None and rec.proposer == GREEDY
                    and (h, rec.sentence) not in passed]
            if not todo:
                break
            cands = [Candidate(task=by_hash[h], trace=database.trace_of(rec, by_hash[h]), proposer=CHECK,
                               sentence=rec.sentence) for h, rec in todo]
            results = measurer.measure(cands)
            out.checked += len(results)
            failed = [r for r in results if r.error]
            if failed:
                database.add_results(failed, info.key)
            for (h, rec), r in zip(todo, results):
                if r.error:
                    out.wrong.append(f"{by_hash[h].name}: {r.error.splitlines()[0][:200]}")
                    out.picks[h] = database.compile_record(h, info.key, threads)
                else:
                    passed.add((h, rec.sentence))
    return out
