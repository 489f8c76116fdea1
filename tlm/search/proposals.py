"""What a loop round measures for a task (tlm.search.loop): `candidates`, k_p programs made of
- up to `LoopConfig.transfer` programs measured on other CPUs (`transferred`; the paper's
  section 5.3: demonstration data of hardware A transferred to hardware B, then improved by the
  iterative loop), then
- the model's samples: `cm_explore` as they come and the cost model's top picks of the rest
  (`cm_pool` x k_p samples; with `cm_adapt_trees`, the cost model boosted on what this task
  measured on this CPU so far), or all as they come without a cost model.

A sentence is its prompt (the task and the hardware words) and its decisions; the decisions of
another CPU's program are said again after this CPU's prompt and parsed in this CPU's design space
(a program whose decisions this space lacks is skipped). Why: the language model conditions on the
hardware words, so what it learned on one CPU barely reaches a new one (measured on znver5, 2026-11-24:
for a resnet 1x1 conv the fine-tuned model's samples for znver5 all had an unvectorized output
channel tile, for znver3 mostly 8-32 lanes, the tiles of that CPU's best programs).
"""

from __future__ import annotations

from typing import Any

from tlm.errors import TlmError


def candidates(db, gen, task, target, config, cm, others: list | None, need: int, r: int,
               have: int) -> tuple[list, int]:
    """(up to `need` Candidates of round r, generation failures: samples that do not parse or that
    LLVM would take minutes to build, tlm.space.build_cost); `have`: programs of this round
    already measured (a resumed round samples with another seed); `cm`: the cost model or None."""
    import zlib

    from tlm.measure.measurer import Candidate
    from tlm.space.build_cost import too_slow_to_build
    from tlm.space.design import task_space
    from tlm.space.language import parse

    seed = zlib.crc32(f"{config.seed}/{r}/{task.hash}/{have}".encode())
    seen = db.sentences(task.hash, target.key)
    moved = [Candidate(task, schedule=sch, proposer="transfer", round=r, sentence=s)
             for s, sch in transferred(db, task, target, others or [], min(need, config.transfer), seen)]
    need -= len(moved)
    if need <= 0:
        return moved, 0
    want = need * max(1, config.cm_pool) if cm is not None else need
    progs = gen.generate(task, want, seen=seen, seed=seed, temperature=config.temperature, top_k=config.top_k)
    cands, bad = list(moved), 0
    for g in progs:
        sch = getattr(g, "schedule", None)
        if sch is None:
            try:
                sch = parse(g.sentence, task, target, space=task_space(task, target)).sch
            except TlmError:
                bad += 1
                continue
        if too_slow_to_build(sch.mod, target):  # its build would time out: not worth a measurement
            bad += 1
            continue
        cands.append(Candidate(task, schedule=sch, proposer="tlm", round=r, sentence=g.sentence))
    if cm is not None:
        keep = len(moved) + min(need, max(0, config.cm_explore))  # samples come in random order
        rest = cands[keep:]
        model = task_model(db, task, target, cm, config)
        ranked = [rest[i] for i in model.rank(task, [c.schedule for c in rest], target)]
        cands = cands[:keep] + ranked[:len(moved) + need - keep]
    return cands, bad


def task_model(db, task, target, cm, config):
    """The cost model boosted on the task's correct programs measured on `target`
    (`config.cm_adapt_trees` trees; features cached in WORK/features), or `cm` itself."""
    from pathlib import Path

    from tlm.search.costmodel_data import task_groups

    if config.cm_adapt_trees <= 0:
        return cm
    got = task_groups(db, target, [task], cache=Path(config.work) / "features")
    return cm.adapted(got[0][1], got[0][2], config.cm_adapt_trees) if got else cm


def transferred(db, task, target, others: list, n: int, seen: set[str]) -> list[tuple[str, Any]]:
    """Up to n (sentence, schedule) for `target`: the fastest correct programs of `task` on the
    `others`, round robin over them, fastest first, said with this target's prompt; none in `seen`
    (which gains the ones returned)."""
    from tlm.search.costmodel_data import correct_records
    from tlm.space.design import task_space
    from tlm.space.language import parse, prompt_tokens

    if n <= 0 or not others:
        return []
    prompt = prompt_tokens(task, target)
    queues = []
    for other in others:
        recs = [r for r in correct_records(db, task.hash, other) if r.sentence]
        queues.append((prompt_tokens(task, other), recs))
    out: list[tuple[str, Any]] = []
    space = None
    for i in range(max((len(q[1]) for q in queues), default=0)):
        for their_prompt, recs in queues:
            if i >= len(recs):
                continue
            words = recs[i].sentence.split()
            if words[: len(their_prompt)] != their_prompt:
                continue  # an older sentence version
            sentence = " ".join(prompt + words[len(their_prompt):])
            if sentence in seen:
                continue
            try:
                space = space or task_space(task, target)
                sch = parse(sentence, task, target, space=space).sch
            except TlmError:
                continue
            seen.add(sentence)
            out.append((sentence, sch))
            if len(out) >= n:
                return out
    return out
