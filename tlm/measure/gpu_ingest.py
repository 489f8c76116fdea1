"""A GPU run's results (tlm.measure.cuda_runner) -> records -> the corpus's shards.

Each candidate's line becomes one record of the bundle's target (the card's TVM config, `model`
included: `cuda-h200` in the corpus), its proposer (`random` unless the bundle says), its sentence
as the program. The run's device must be the bundle's card, or a card named with `card` whose
programs are the same (then the records and their prompts are that card's): a result is never
filed under the wrong hardware. The reference (TVM's dlight schedule) is not a program of the design
spaces; its timings stay in the run's folder (results.jsonl, `k: "ref"`). Ingesting the same
results twice adds nothing (their digest is kept in the database).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from tlm.errors import TlmError

_META = "gpu_ingested"


@dataclass
class GpuIngestReport:
    records: int
    ok: int
    wrong: int
    errors: int
    shards: list[str]
    skipped: str | None = None

    def __str__(self) -> str:
        if self.skipped:
            return f"nothing ingested: {self.skipped}"
        return (f"{self.records} records ({self.ok} timed, {self.wrong} wrong results, {self.errors} other errors); "
                f"shards: {', '.join(self.shards) or 'none new'}")


def card_matches(card: str, device_name: str) -> bool:
    """Whether the device's name ("NVIDIA H200", "NVIDIA H100 80GB HBM3") is the card's."""
    return bool(card) and card.lower() in device_name.lower().replace(" ", "").replace("-", "")


# What a CUDA target's generated code depends on: two cards that agree here run the same programs.
CODEGEN_KEYS = ("kind", "arch", "max_num_threads", "max_threads_per_block", "max_shared_memory_per_block",
                "thread_warp_size", "registers_per_block")


def same_code(a: dict, b: dict) -> bool:
    """Whether two CUDA targets give the same programs (they may differ in L2 size and name)."""
    return all(a.get(k) == b.get(k) for k in CODEGEN_KEYS)


def ingest_results(bundle: str | Path, results: str | Path, db_dir: str, corpus: str | None,
                   card: str | None = None, proposer: str | None = None, first: int | None = None,
                   only: str | Path | None = None) -> GpuIngestReport:
    """`card`: the card the results were measured on when it is not the bundle's (a bundle built
    for the H200 measured on an H100): allowed when both generate the same code (same_code), and
    the records are filed under that card. `proposer`: only the programs of that proposer (a
    held-out bundle holds several contenders' programs; one database each, for a whole-model plan
    of each contender's picks); `first`: only that proposer's first N programs of each task, in the
    manifest's order (the held-out report's TLM@N); `only`: a candidates file (JSON lines {task,
    proposer, sentence}): only the programs it names (TLM@10 as the tuner measures it with a cost
    model: the 10 of its 32 samples the cost model ranks first, `tlm gpu-heldout candidates --cm-top`)."""
    from tlm.measure.database import open_db
    from tlm.measure.cuda_measure import named_programs, read_lines, read_manifest
    from tlm.measure.gpu_bundle import read_tasks
    from tlm.measure.measurer import Candidate, MeasureResult
    from tlm.measure.shards import flush

    results = Path(results)
    # bench/gpu_device.sh's flattened copy (<bundle>-results.jsonl, -device.json), or the runner's --out folder
    res_file = results_file(results, bundle)
    dev_file = res_file.with_name(res_file.name.replace("results.jsonl", "device.json"))
    summary_file = dev_file.with_name(dev_file.name.replace("device.json", "summary.json"))
    if not res_file.exists() or not (dev_file.exists() or summary_file.exists()):
        raise TlmError(f"{results}: no results.jsonl and device.json (the --out folder of a GPU run)")
    manifest = read_manifest(bundle)
    device = json.loads(dev_file.read_text()) if dev_file.exists() else json.loads(summary_file.read_text())["device"]
    config = manifest["target"]
    if card:
        from tlm.graph.target import resolve_target
        from tlm.space.language import reprompt

        built, measured = resolve_target(manifest["target"]), resolve_target(card)
        config = measured.config
        if not same_code(config, manifest["target"]):
            raise TlmError(f"the bundle was built for {manifest.get('card') or manifest['arch']!r}, whose programs "
                           f"differ from {card!r}'s (arch, threads, shared memory or registers): build one for {card}")
    name = config.get("model", "")
    if not card_matches(name, device.get("name", "")):
        raise TlmError(f"the records would be for {name or config.get('arch')!r} but were measured on {device.get('name')!r}"
                       + ("" if card else " (--card names the card they were measured on)"))
    key = json.dumps(config, sort_keys=True)
    tasks = read_tasks(bundle)
    sentences = {}
    keep = named_programs(only) if only is not None else None
    for e in manifest["tasks"]:
        mine = 0  # the proposer's programs of this task so far (`first`)
        for c in e.get("candidates", []):
            by = c.get("proposer", "random")
            if keep is not None and (e["hash"], c["sentence"]) not in keep:
                continue
            mine += by == proposer
            if first is None or (by == proposer and mine <= first):
                sentences[(e["hash"], c["id"])] = (c["sentence"], by)
    text = res_file.read_bytes()
    picked = (proposer or "").encode() + (f"@{first}" if first else "").encode()
    if keep is not None:
        picked += json.dumps(sorted(keep)).encode()
    digest = hashlib.sha256(text + picked).hexdigest()[:16]
    lines = [r for r in read_lines(res_file) if r.get("k") != "ref"]
    out: list = []
    for r in lines:
        task = tasks.get(r["t"])
        sentence, by = sentences.get((r["t"], r["k"]), (None, None))
        if task is None or sentence is None or (proposer and by != proposer):
            continue
        if card:  # the prompt names the card measured on (the decisions are the same programs)
            sentence = reprompt(sentence, task, built, measured)
        cand = Candidate(task, proposer=by, sentence=sentence)
        out.append(MeasureResult(cand, None, [float(x) for x in r.get("lat") or []], r.get("err")))
    with open_db(db_dir) as db:
        if digest in db.get_meta(_META, []):
            return GpuIngestReport(0, 0, 0, 0, [], skipped=f"{res_file} was ingested before")
        db.add_results(out, key)
        db.set_meta(_META, db.get_meta(_META, []) + [digest])
        shards = flush(db, corpus).shards if corpus else []
    wrong = sum(1 for r in out if (r.error or "").startswith("WrongResult"))
    ok = sum(1 for r in out if r.ok)
    return GpuIngestReport(len(out), ok, wrong, len(out) - ok - wrong, shards)


def results_file(run: str | Path, bundle: str | Path) -> Path:
    """A GPU run's results lines of `bundle`: bench/gpu_device.sh's `<bundle>-results.jsonl`, else
    the runner's own `results.jsonl` (a call of that one bundle); the first if neither exists."""
    named = Path(run) / f"{Path(bundle).name}-results.jsonl"
    plain = Path(run) / "results.jsonl"
    return plain if not named.exists() and plain.exists() else named


def write_unmeasured(bundle: str | Path, runs: list[str | Path], out: str | Path) -> int:
    """Writes `out`, JSON lines {task, proposer, sentence} (`tlm gpu bundle --candidates`), of the
    programs of `bundle`'s manifest that none of `runs` has a line for (measured, wrong or failed
    alike): a bundle cut short by a GPU call's time is finished by a bundle of its rest, built from
    the manifest's sentences without sampling again. Returns how many programs it wrote."""
    import os

    from tlm.measure.cuda_measure import read_lines, read_manifest

    man = read_manifest(bundle)
    name = Path(bundle).name
    done = set()
    for run in runs:
        path = results_file(run, bundle)
        if not path.exists():
            raise TlmError(f"{run} has no results of {name} ({name}-results.jsonl)")
        done |= {(r.get("t"), r.get("k")) for r in read_lines(path)}
    lines = [json.dumps({"task": e["hash"], "proposer": c.get("proposer", "random"), "sentence": c["sentence"]})
             for e in man["tasks"] for c in e.get("candidates", []) if (e["hash"], c["id"]) not in done]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in lines))
    os.replace(tmp, out)
    return len(lines)
