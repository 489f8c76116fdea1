"""A GPU cost model's order of the language model's proposals (issue 49), for the held-out
benchmark: TLM@0+cm (its first) and TLM@10+cm (its first 10, best measured).

Why TLM@10+cm: the tuner (tlm.search.tlm_tuner) does not measure the model's first 10 samples;
with a cost model it measures the n it ranks first among `TuneConfig.cm_pool` x n samples. The
held-out benchmark proposes 32 samples a task (greedy first) and measures them all, so the cost
model's top 10 of those 32 is what a tuner with 10 measurements a task would have measured, judged
with no new GPU time. `tlm gpu-heldout candidates --cm-top 10` writes them as a candidates file,
which `tlm gpu ingest --only` and `python -m tlm.measure.plan_assemble --only` read (the latter on
the GPU machine, no TVM).
"""

from __future__ import annotations

import json
from pathlib import Path

from tlm.errors import TlmError


def _order(model, task, sentences: list[str], target) -> list[int]:
    """Indices of `sentences` (programs of `task`), the cost model's best first; a sentence that
    names no program goes last."""
    from tlm.space.language import parse

    schs, ok = [], []
    for i, s in enumerate(sentences):
        try:
            prog = parse(s, task, target)
        except TlmError:
            continue
        if prog.error is None:
            schs.append(prog.sch)
            ok.append(i)
    ranked = [ok[j] for j in model.rank(task, schs, target)] if len(schs) > 1 else ok
    done = set(ranked)
    return ranked + [i for i in range(len(sentences)) if i not in done]


def _cost_model(target_config, cost_model: str | Path):
    """(the target, the cost model loaded for it)."""
    from tlm.graph.target import resolve_target
    from tlm.search.costmodel import CostModel

    target = resolve_target(target_config)
    return target, CostModel.load(cost_model, target)


def _tlm_proposals(proposals: Path, tasks: dict):
    """(task, proposal record) of a propose folder's TLM proposals whose task is in `tasks` and that
    has any sentence."""
    for path in sorted((proposals / "proposals").glob("*-tlm.json")):
        p = json.loads(path.read_text())
        if p["task"] in tasks and p["sentences"]:
            yield tasks[p["task"]], p


def cost_model_orders(bundle: str | Path, cost_model: str | Path, more: list[str | Path] = ()) -> dict[str, list[int]]:
    """Per task of a held-out bundle: the model's measured proposals (their index in the order the
    report reads them: the bundle's, then each of `more`'s) as the cost model ranks them."""
    from tlm.measure.cuda_measure import read_manifest
    from tlm.measure.gpu_bundle import read_tasks

    manifest = read_manifest(bundle)
    target, model = _cost_model(manifest["target"], cost_model)
    tasks = read_tasks(bundle)
    later: dict[str, list] = {}
    for b in more:
        for e in read_manifest(b)["tasks"]:
            later.setdefault(e["hash"], []).extend(c for c in e.get("candidates", []) if c.get("proposer") == "tlm")
    out: dict[str, list[int]] = {}
    for e in manifest["tasks"]:
        mine = [c for c in e.get("candidates", []) if c.get("proposer") == "tlm"] + later.get(e["hash"], [])
        if mine:
            out[e["hash"]] = _order(model, tasks[e["hash"]], [c["sentence"] for c in mine], target)
    return out


def proposal_orders(proposals: str | Path, cost_model: str | Path, tasks: dict) -> dict[str, list[int]]:
    """Per task of a `tlm gpu-heldout propose` folder: its TLM proposals' indices (proposal order)
    as the cost model ranks them; `tasks`: hash -> Task (tlm.eval.gpu_heldout.heldout_tasks)."""
    proposals = Path(proposals)
    target, model = _cost_model(json.loads((proposals / "config.json").read_text())["target"], cost_model)
    return {task.hash: _order(model, task, p["sentences"], target) for task, p in _tlm_proposals(proposals, tasks)}


def donor_picks(proposals: str | Path, cost_model: str | Path, tasks: dict, k_tasks: int = 3) -> tuple[list[dict], dict]:
    """The GPU donors that would change a first choice (tlm.search.donors: the fastest measured
    programs of the nearest corpus tasks, their decisions carried over): per task of a propose
    folder, the cost model ranks the model's proposals and the donor programs together, and where a
    donor comes first it is a candidates line {task, proposer: "donor", sentence}, to be measured
    beside the proposals (the report's tlm@0+cm+donors). Returns the lines and counts."""
    from tlm.search.donors import donor_programs, load_index
    from tlm.space.language import parse

    proposals = Path(proposals)
    target, model = _cost_model(json.loads((proposals / "config.json").read_text())["target"], cost_model)
    index = load_index()
    if index is None:
        raise TlmError("no corpus (data/corpus): no donors")
    lines, counts = [], {"tasks": 0, "with_donors": 0, "donor_first": 0}
    for task, p in _tlm_proposals(proposals, tasks):
        counts["tasks"] += 1
        mine = [prog.sch for s in p["sentences"] if (prog := parse(s, task, target)).error is None]
        own = set(p["sentences"])
        donors = [(d, prog, s) for d, prog, s in donor_programs(task, target, index, k_tasks) if s not in own]
        if not donors or not mine:
            continue
        counts["with_donors"] += 1
        first = model.rank(task, mine + [prog.sch for _, prog, _ in donors], target)[0]
        if first >= len(mine):
            counts["donor_first"] += 1
            lines.append({"task": task.hash, "proposer": "donor", "sentence": donors[first - len(mine)][2]})
    return lines, counts
