"""The held-out benchmark's winners, timed again together (`tlm eval`, issue 15, item 4).

Each contender times its programs while it tunes, and the contenders tune one after another,
minutes to hours apart. On a shared machine one program's latency drifts by up to 2x over such
times while its repeats within one timing agree to a few percent (`retime` in bench/README.md), so
latencies timed at different hours compare the machine as much as the tuners. After the tuning,
every task's winners (each contender's best program after each k, the earlier models' TLM
programs too) are built once and timed together in interleaved rounds (MeasureConfig.rounds:
each round times every program once, `repeat` times, starting one program later than the last);
the median of all those readings is the contender's latency in the report, and the tuning-time
one stays beside it (heldout.csv: `tuned_us`). The winners are chosen by their tuning-time
latency, as a user of each tuner gets them.

OUT/heldout/retimed.csv: one row per (task, program) of the task's last re-timing: the program's
`program_id`, the contenders it won for, its re-timed median (us) or error, and the rounds. A task
is re-timed (all its programs, together) when one of its current winners is not in that file: a
new model or a larger k; a resumed run re-times only those.
"""

from __future__ import annotations

import csv
import os
import time
from pathlib import Path
from typing import Any

FIELDS = ["task", "hash", "program", "contenders", "retimed_us", "error", "rounds", "timed"]


def read_retimed(path: str | Path) -> dict[tuple[str, str], dict[str, str]]:
    """{(task hash, program_id): its row} of OUT/heldout/retimed.csv (empty when absent)."""
    if not os.path.isfile(path):
        return {}
    with open(path, newline="") as f:
        return {(r["hash"], r["program"]): r for r in csv.DictReader(f)}


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, path)


def retime(picked: list[tuple[str, Any]], db_root: str, target, tlm_ks: list[int], ms_ks: list[int],
           path: str | Path, rounds: int = 3, model: str | None = None, measure_config=None, log=print) -> int:
    """Re-time every task whose winners are not all in PATH (see the module's doc); the programs
    timed. `measure_config`: the measurer's (default MeasureConfig()), with `rounds` set here."""
    from dataclasses import replace

    from tlm.eval.heldout import program_id, winners
    from tlm.measure.config import MeasureConfig
    from tlm.measure.measurer import Candidate, Measurer

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    done = read_retimed(path)
    wins = winners(picked, db_root, target.key, tlm_ks, ms_ks, model, traces=True, complete=True)  # runs after the tuning
    by_task: dict[str, dict[str, tuple[Any, list[str]]]] = {}  # hash -> program_id -> (record, contenders)
    for (h, method, k), rec in wins.items():
        if rec is not None and rec.trace_json is not None:
            by_task.setdefault(h, {}).setdefault(program_id(rec), (rec, []))[1].append(f"{method}@{k}")
    todo = [(t, by_task[t.hash]) for _, t in picked
            if any((t.hash, p) not in done for p in by_task.get(t.hash, {}))]
    if not todo:
        return 0
    measurer = Measurer(target, replace(measure_config or MeasureConfig(), rounds=rounds))
    again = {t.hash for t, _ in todo}
    kept = [r for r in done.values() if r["hash"] not in again]
    timed = 0
    try:
        for i, (t, progs) in enumerate(todo):
            log(f"[retime] task {i + 1}/{len(todo)} {t.name}: {len(progs)} programs, {rounds} rounds")
            results = measurer.measure([Candidate(t, trace=rec.trace_json, proposer="retime", sentence=rec.sentence)
                                        for rec, _ in progs.values()])
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            for (pid, (_, names)), res in zip(progs.items(), results):
                kept.append({"task": t.name, "hash": t.hash, "program": pid, "contenders": " ".join(names),
                             "retimed_us": f"{res.median_s * 1e6:.3f}" if res.ok else "",
                             "error": (res.error or "")[:300], "rounds": rounds, "timed": stamp})
            timed += len(progs)
            _write(path, kept)  # after every task: an interrupted run keeps what it timed
    finally:
        measurer.close()
    return timed


def apply_retimed(rows: list[dict[str, Any]], path: str | Path) -> int:
    """Give heldout_rows' rows their re-timed latency: `tuned_us` keeps the tuning-time one,
    `best_us` becomes the re-timed one, for the tasks whose winners were all re-timed together
    (`retimed` 1; the others keep their tuning-time latency, `retimed` 0). The tasks re-timed."""
    done = read_retimed(path)
    tasks = {}
    for r in rows:  # a task counts when every winner of it is in the file
        if r.get("program"):
            tasks[r["hash"]] = tasks.get(r["hash"], True) and (r["hash"], r["program"]) in done
    for r in rows:
        r["tuned_us"] = r["best_us"]
        r["retimed"] = int(bool(tasks.get(r["hash"])))
        if r["retimed"] and r.get("program"):
            got = done[(r["hash"], r["program"])]["retimed_us"]
            r["best_us"] = float(got) if got else None  # an error when re-timed: no program
    return sum(1 for v in tasks.values() if v)
