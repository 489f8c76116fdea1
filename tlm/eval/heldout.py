"""The held-out subgraph benchmark of `tlm eval` (issue 15, item 4).

Tasks: of the evaluation workloads (the test split: none of their tasks is in any training or
fine-tuning data, tlm.graph.extract.training_tasks), the largest task (weight x flops) of every
kind, then the largest others, up to `heldout_tasks`; a task found in the corpus (a training
task) is refused, and so is one whose space has fewer than the largest random k distinct
programs (a reshape: nothing to search). The choice is written once to OUT/heldout/tasks.json
and kept on resume.

Contenders, each tuning every task alone, each in its own database (OUT/dbs/heldout/NAME):
- TLM@0: what `tlm compile --budget 0` applies (the tuner's first choice, unmeasured by the
  tuner), measured once here to know its latency;
- TLM@k: `tlm tune --tuner tlm --budget kg` for each k, in its own database (what a user of that
  budget gets; the first k of a larger run would not be). TLM's databases are keyed by the
  content of the model, of the cost model ranking its samples and the tuner's online update
  (OUT/dbs/heldout/model-TAG/tlm@k, `model_tag`): when one changes, TLM is measured anew while
  random and MetaSchedule are kept, and the earlier TLMs' results stay in the report beside it;
- random@k and MetaSchedule@k: the best of the first k records, in measurement order, of one
  run at the largest k (`tlm tune --tuner random|metaschedule`).
Every program is built, checked against the reference and timed by the same measurer.
OUT/heldout.csv holds one row per (task, contender, k): its best program's latency, re-timed
together with the task's other winners after the tuning (tlm.eval.retime), and as timed while
tuning (`tuned_us`). The records are kept in git as shards
(OUT/heldout/records, `persisted`): a run resumes from a fresh clone on the same hardware, and
larger ks extend a finished run (TLM@k: a new database; random and MetaSchedule continue theirs,
so their first k records stay the same).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from tlm.eval.suites import contenders, planned_measurements  # noqa: F401 - the plan's part of this benchmark

# The targets: (row contender, column contender, minimum speedup = column total / row total).
TARGETS = (("tlm@10", "metaschedule@64", 1.0), ("tlm@10", "metaschedule@256", 0.95),
           ("tlm@1", "metaschedule@64", 0.8), ("tlm@10", "random@10", 1.3))


def random_sentences(task, target, k: int, seed: int) -> list[str]:
    """Up to k distinct random programs of the task's space (fewer when the space is smaller)."""
    from tlm.space.sampling import sample_task, task_seed

    return [r["sentence"] for r in sample_task(task, target, k, task_seed(seed, task.hash)).records]


def select_heldout(tasks_by_workload: dict[str, list], n: int, target, min_programs: int, seed: int = 0,
                   exclude: set[str] | frozenset = frozenset()) -> list[tuple[str, Any]]:
    """Up to n (workload, task): per kind the largest (weight x flops), then the largest others;
    a task in `exclude` (training tasks) or with fewer than `min_programs` programs is left out.
    A task found in several workloads counts once (its first workload)."""
    seen: dict[str, tuple[str, Any]] = {}
    for w, tasks in tasks_by_workload.items():
        for t in tasks:
            if t.hash not in exclude:
                seen.setdefault(t.hash, (w, t))
    size = sorted(seen.values(), key=lambda wt: -wt[1].weight * wt[1].flops)
    firsts: dict[str, tuple[str, Any]] = {}
    for wt in size:
        firsts.setdefault(wt[1].kind, wt)
    picked: list[tuple[str, Any]] = []
    for wt in list(firsts.values()) + [wt for wt in size if wt not in firsts.values()]:
        if len(picked) >= n:
            break
        if min_programs <= 1 or len(random_sentences(wt[1], target, min_programs, seed)) >= min_programs:
            picked.append(wt)
    return picked


def write_tasks(path: Path, picked: list[tuple[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([{"workload": w, "hash": t.hash, "name": t.name, "kind": t.kind,
                                "weight": t.weight, "flops": t.flops} for w, t in picked], indent=1))
    os.replace(tmp, path)


def read_tasks(path: Path, tasks_by_workload: dict[str, list], skip_missing: bool = False) -> list[tuple[str, Any]]:
    """The chosen (workload, task) of an earlier run, looked up in today's tasks by hash (with
    skip_missing, those still extracted: a benchmark that only compares contenders among
    themselves may go on without the tasks whose definitions changed)."""
    from tlm.errors import TlmError

    by_hash = {t.hash: (w, t) for w, ts in tasks_by_workload.items() for t in ts}
    rows = json.loads(path.read_text())
    missing = [r["name"] for r in rows if r["hash"] not in by_hash]
    if skip_missing:
        if missing:  # said, not silent
            print(f"note: {len(missing)} of {len(rows)} held-out tasks of {path} are no longer extracted "
                  f"(task definitions changed, e.g. {missing[0]}); the others are kept", file=sys.stderr)
        rows = [r for r in rows if r["hash"] in by_hash]
    elif missing:
        raise TlmError(f"{path}: {len(missing)} held-out tasks are no longer extracted (e.g. {missing[0]}); "
                       "task definitions changed: use another --out")
    return [(r["workload"], by_hash[r["hash"]][1]) for r in rows]


def _first_choice_measured(db, task, target) -> bool:
    return db.count(task.hash, target.key, "tlm") > 0


def measure_first_choice(task, db, target, measure_config=None) -> None:
    """TLM@0: measure the program `--budget 0` stored unmeasured (once; resumable)."""
    from tlm.measure.measurer import Candidate, Measurer

    if _first_choice_measured(db, task, target):
        return
    rec = next(iter(db.greedy_records(task.hash, target.key)), None)
    if rec is None or db.trace_of(rec, task) is None:  # restored from shards: its sentence names it
        return
    measurer = Measurer(target, measure_config)
    try:
        db.add_results(measurer.measure([Candidate(task, trace=rec.trace_json, proposer="tlm",
                                                   sentence=rec.sentence)]), target.key)
    finally:
        measurer.close()


def model_tag(model_dir: str | Path, cost_model_dir: str | Path | None = None, adapt_trees: int = 0) -> str:
    """A TLM's short content digest, the key of its held-out databases: its weights' sha256 (12 hex
    digits), then "-cm" and the sha256 of the cost model that ranks its samples (8), if any, then
    "-a" and the tuner's online cost model update (TuneConfig.cm_adapt_trees), if on."""
    import hashlib

    def digest(path: Path, n: int) -> str:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()[:n]

    from tlm.search.costmodel import MODEL_FILE, model_file

    tag = digest(Path(model_dir) / "model.safetensors", 12)
    if cost_model_dir:
        booster = model_file(cost_model_dir) or Path(cost_model_dir) / MODEL_FILE
        tag += f"-cm{digest(booster, 8)}" + (f"-a{adapt_trees}" if adapt_trees else "")
    return tag


def model_contenders(root: str | Path, skip: str | None = None) -> list[tuple[str, str, list[int]]]:
    """(database or shard folder name, method "tlm[TAG]", [k]) of every model's TLM folder under
    ROOT/model-TAG/tlm@k (a record database root or a shard root), but model `skip`'s."""
    root = Path(root)
    models = sorted(root.glob("model-*")) if root.is_dir() else []
    return [(f"{d.name}/{t.name}", f"tlm[{d.name[len('model-'):]}]", [int(t.name.split("@")[1])])
            for d in models if d.name != f"model-{skip}"
            for t in sorted(d.glob("tlm@*"), key=lambda t: int(t.name.split("@")[1]))]


def persisted(db_root: str, shards: Path, tlm_ks: list[int], ms_ks: list[int], model: str | None = None):
    """The contenders' databases, kept in git as append-only record shards (SHARDS/NAME/,
    tlm.measure.shards.kept_in_git): a fresh clone resumes the run."""
    from tlm.measure.shards import kept_in_git

    names = [name for name, _, _ in contenders(tlm_ks, ms_ks, model) + model_contenders(shards, model)]
    return kept_in_git(db_root, shards, names)


def run_heldout(picked: list[tuple[str, Any]], db_root: str, target, tlm_ks: list[int], ms_ks: list[int],
                config=None, log=print, model: str | None = None) -> None:
    """Tune every task alone with every contender (resumable: each tuner counts what its database
    holds). `config`: the TuneConfig every tuner starts from (default: a user's defaults, seed 0);
    `model`: the tag of its TLM model (`model_tag`), naming TLM's databases."""
    from dataclasses import replace

    from tlm.measure.database import open_db
    from tlm.search.base import TuneConfig
    from tlm.search.tune import tune

    config = config or TuneConfig()
    for name, tuner, ks in contenders(tlm_ks, ms_ks, model):
        db = os.path.join(db_root, name)
        for i, (w, t) in enumerate(picked):
            log(f"[heldout] {name}: task {i + 1}/{len(picked)} {t.name} ({w})")
            if tuner == "tlm" and ks == [0] and os.path.isdir(db):
                with open_db(db) as d:
                    if _first_choice_measured(d, t, target):
                        continue  # done (a resumed --budget 0 would generate it again)
            tune([t], tuner, f"{max(ks)}g" if max(ks) else "0", db, target=target, progress=False,
                 config=replace(config, measure=replace(config.measure), model=config.model if tuner == "tlm" else None))
            if tuner == "tlm" and ks == [0]:
                with open_db(db) as d:
                    measure_first_choice(t, d, target, config.measure)


def winners(picked: list[tuple[str, Any]], db_root: str, target_key: str, tlm_ks: list[int], ms_ks: list[int],
            model: str | None = None, traces: bool = False, complete: bool = False) -> dict[tuple[str, str, int], Any]:
    """{(task hash, method, k): the contender's best correct Record after k measurements}, in the
    order of the contenders, then the tasks; None: no program (or a run not that far yet).
    TLM's is the best of its database (one per k); random's and MetaSchedule's the best of the
    first k records of their one run. The TLM contenders of the models other than `model` found
    in DB_ROOT/model-*/ follow, as method "tlm[TAG]". `traces`: give every record its trace
    (recovered from its sentence when restored from shards). `complete`: the tuning has ended, so
    a run with fewer than k records stopped because its search found no new program (MetaSchedule
    on a small space): its best of all is its best after k, as a user asking for k gets it."""
    from tlm.eval.tables import best_records_after_k
    from tlm.measure.database import open_db

    out: dict[tuple[str, str, int], Any] = {}
    for name, tuner, ks in contenders(tlm_ks, ms_ks, model) + model_contenders(db_root, model):
        path = os.path.join(db_root, name)
        db = open_db(path, create=False) if os.path.isfile(os.path.join(path, "records.sqlite")) else None
        try:
            for _, t in picked:
                if db is None:
                    got: dict[int, Any] = {k: None for k in ks}
                elif tuner.startswith("tlm"):
                    got = {ks[0]: db.best(t.hash, target_key)}
                else:
                    got = best_records_after_k(db, t.hash, target_key, tuner, ks, reached=not complete)
                for k, rec in got.items():
                    if traces and rec is not None:
                        rec.trace_json = db.trace_of(rec, t)
                    out[(t.hash, tuner, k)] = rec
        finally:
            if db is not None:
                db.close()
    return out


def program_id(rec) -> str:
    """A measured program's short content digest: its sentence's (a language model's program, as
    record shards keep it), else its trace's; stable across a restore from shards."""
    import hashlib

    text = rec.sentence or json.dumps(rec.trace_json, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def heldout_rows(picked: list[tuple[str, Any]], db_root: str, target_key: str, tlm_ks: list[int],
                 ms_ks: list[int], model: str | None = None, complete: bool = False) -> list[dict[str, Any]]:
    """One row per (task, contender, k) with the best correct latency (us; None: no program) and
    its program's `program_id` (tlm.eval.retime re-times them together); rows as `winners`
    (`complete`: the tuning has ended)."""
    tasks = {t.hash: (w, t) for w, t in picked}
    rows = []
    for (h, method, k), rec in winners(picked, db_root, target_key, tlm_ks, ms_ks, model, complete=complete).items():
        w, t = tasks[h]
        rows.append({"task": t.name, "hash": t.hash, "workload": w, "kind": t.kind, "weight": t.weight,
                     "flops": t.flops, "method": method, "k": k,
                     "best_us": None if rec is None else rec.median_s * 1e6,
                     "program": "" if rec is None else program_id(rec)})
    return rows


def _pairs(rows: list[dict[str, Any]], a: str, b: str) -> list[tuple[float, float]]:
    """(a's, b's) best latency of every task where both contenders ("tlm@10", "metaschedule@64")
    have a correct program."""
    from tlm.eval.tables import num

    by = {(r["hash"], f"{r['method']}@{r['k']}"): num(r["best_us"]) for r in rows}
    return [(by[(h, a)], by[(h, b)]) for h in dict.fromkeys(r["hash"] for r in rows) if by.get((h, a)) and by.get((h, b))]


def summed(rows: list[dict[str, Any]], a: str, b: str) -> tuple[float | None, int]:
    """Speedup of contender a over b: b's summed best latency over a's, over the tasks where both
    have a correct program; and that task count."""
    pairs = _pairs(rows, a, b)
    sa = sum(x for x, _ in pairs)
    return (sum(y for _, y in pairs) / sa if sa else None), len(pairs)


def per_task_geomean(rows: list[dict[str, Any]], a: str, b: str) -> tuple[float | None, int]:
    """Geometric mean over tasks of b's best latency over a's (each task counts the same; the
    summed figure is ruled by the slowest tasks); and the task count."""
    import math

    pairs = _pairs(rows, a, b)
    return (math.exp(sum(math.log(y / x) for x, y in pairs) / len(pairs)) if pairs else None), len(pairs)


def report_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The held-out section of summary.md: per-task latencies, the speedup matrix and the targets."""
    from tlm.eval.tables import fmt, num, table

    if not rows:
        return ["(no held-out subgraph results yet)"]
    earlier = [r for r in rows if r["method"].startswith("tlm[")]  # earlier models' TLM rows
    rows = [r for r in rows if r not in earlier]
    cols = list(dict.fromkeys(f"{r['method']}@{r['k']}" for r in rows))
    by = {(r["hash"], f"{r['method']}@{r['k']}"): num(r["best_us"]) for r in rows}
    tasks = list(dict.fromkeys((r["hash"], r["task"], r["workload"], r["kind"]) for r in rows))
    short = {c: _short(c) for c in cols}

    out = [f"{len(tasks)} held-out tasks (of the test workloads; none in any training data), each tuned alone "
           "by every contender. Best latency (us) after k measurements; TLM@0 is the program "
           "`--budget 0` compiles, measured once.", ""]
    retimed = {r["hash"] for r in rows if str(r.get("retimed", "")) == "1"}
    if retimed:
        out += [f"Latencies of {len(retimed)} of the {len(tasks)} tasks are re-timed (tlm.eval.retime): each "
                "contender's best program, chosen by its tuning-time latency, timed again together with the "
                "task's other winners in interleaved rounds, so that no contender gains from the hour it tuned "
                "in; heldout.csv keeps the tuning-time latency (`tuned_us`)"
                + ("." if len(retimed) == len(tasks) else "; the other tasks show the tuning-time latency."), ""]
    out += table(["task", "workload", "kind"] + [short[c] for c in cols],
                 [[name[:44], w, kind] + [fmt(by.get((h, c)), 1) for c in cols] for h, name, w, kind in tasks])
    tlm_cols = [c for c in cols if c.startswith("tlm@")]
    other = [c for c in cols if not c.startswith("tlm@")]
    out += ["", "Speedup of the row over the column: the column's summed best latency over the row's, over the "
            "tasks where both have a program (tasks in brackets); above 1, TLM is faster.", ""]
    body = []
    for a in tlm_cols:
        cells = []
        for b in other:
            s, n = summed(rows, a, b)
            cells.append(f"{fmt(s)} ({n})")
        body.append([short[a]] + cells)
    out += table(["row / column"] + [short[c] for c in other], body)
    out += ["", "The same, as the geometric mean over tasks of the column's best latency over the row's (every "
            "task counts the same):", ""]
    out += table(["row / column"] + [short[c] for c in other],
                 [[short[a]] + [fmt(per_task_geomean(rows, a, b)[0]) for b in other] for a in tlm_cols])
    out += ["", "The issue's targets (summed best latency)" + (", and the same from the latencies timed "
            "while tuning" if retimed else "") + ":", ""]
    tuned = [dict(r, best_us=r["tuned_us"]) for r in rows] if retimed else []
    body = []
    for a, b, goal in TARGETS:
        s, n = summed(rows, a, b)
        verdict = "-" if s is None else ("met" if s >= goal else "missed")
        g = per_task_geomean(rows, a, b)[0]
        body.append([f"{_short(a)} vs {_short(b)}", f">= {goal:g}", fmt(s), n, verdict, fmt(g)]
                    + ([fmt(summed(tuned, a, b)[0])] if retimed else []))
    out += table(["contenders", "target", "speedup", "tasks", "", "per-task geomean"]
                 + (["as tuned, summed"] if retimed else []), body)
    if earlier:
        out += ["", "TLM with earlier models (in brackets the `model_tag`: weights, cost model, online update; "
                "the same tasks, random and MetaSchedule runs), against the current model: speedup over MS@64, "
                "summed (tasks) / per-task geomean:", ""]
        both, body = rows + earlier, []
        for a in tlm_cols + list(dict.fromkeys(f"{r['method']}@{r['k']}" for r in earlier)):
            s, n = summed(both, a, "metaschedule@64")
            body.append([_short(a), f"{fmt(s)} ({n})", fmt(per_task_geomean(both, a, "metaschedule@64")[0])])
        out += table(["contender", "vs MS@64, summed", "vs MS@64, geomean"], body)
    return out


def _short(name: str) -> str:
    return name.replace("metaschedule", "MS").replace("tlm", "TLM")

