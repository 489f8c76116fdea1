"""Budget-0 picks judged by the reduction blocks' runs as well as by TVM's flop estimate
(tlm.space.build_cost.redone_work, 2026-12-06) against an earlier check (`--before`): the flop
estimate alone (`flops`, before commit cbc61f9) or the runs of long reductions only (`long`, from
cbc61f9 until short reductions redone around a loop they depend on counted too).

For each model, every task's budget-0 choice is made both ways from the same ranked samples of the
shipped TLM for this host; where they differ, both programs are compiled, checked against TVM's
unscheduled program and timed alone in interleaved rounds (bench/lean_pick.py's timer).

    python bench/redo_pick.py --models gn_decoder,poolformer,bert_base-b1-s128 [--rounds 5] [--before long]

Rows go to bench/results/redo-pick.json (appended, keyed by host and commit) and redo-pick.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"


def long_redo_ratio(mod, task_flops: float) -> float | None:
    """The redone-work ratio as judged from commit cbc61f9 on until short reductions counted: the flop
    ratio or, if more, the runs over its domain of a reduction of at least REDO_MIN_VALUES values
    (today's `redone_work` with no short reduction running often enough to count)."""
    from unittest import mock

    import tlm.space.build_cost as bc

    with mock.patch.object(bc, "REDO_MIN_RUNS", math.inf):
        return bc.redone_work(mod, task_flops)


def before_ratio(name: str):
    """The ratio(mod, task_flops) of the check compared against (see the top)."""
    from tlm.space.build_cost import flops_ratio

    return {"flops": flops_ratio, "long": long_redo_ratio}[name]


def choice_by(ratio, tuner, task, ranked: list) -> list:
    """The budget-0 first choice (TlmTuner.first_choice) judging redone work by `ratio(mod, task_flops)`."""
    from unittest import mock

    from tlm.search.tlm_tuner import TlmTuner

    def judged(task, g):
        return ratio(tuner.schedule(task, g).mod, task.flops)

    with mock.patch.object(tuner, "_judged_ratio", judged, create=True):
        return TlmTuner.first_choice(tuner, task, ranked)


def run_model(model: str, host, rounds: int, before: str = "flops", top: int = 8) -> tuple[list[dict], int]:
    """One row per task whose budget-0 choice the check changes (`changed`), or else whose ranking
    holds, among its first `top`, a program only the reduction-run check refuses (timed against
    the pick: what the check would save were it ranked first)."""
    from lean_pick import _tasks, _time_pair

    from tlm.measure.database import open_db
    from tlm.search.base import TuneConfig
    from tlm.search.tlm_tuner import TlmTuner
    from tlm.space.build_cost import lean_limit, reduction_redo, redundancy, redone_work

    tasks = _tasks(model, host)
    tuner = TlmTuner(tasks, open_db(tempfile.mkdtemp(prefix="redo-pick-")), host,
                     TuneConfig(tuner="tlm", budget="0"), progress=False)
    rows = []
    for task in tasks:
        ranked = tuner.choices(task)
        old_ratio = before_ratio(before)
        new, old = tuner.first_choice(task, ranked), choice_by(old_ratio, tuner, task, ranked)
        if not new or not old:
            continue
        other, changed = old[0], new[0] is not old[0]
        if not changed:
            mods = [tuner.schedule(task, g).mod for g in ranked[:top]]
            new_r, old_r = [redone_work(m, task.flops) for m in mods], [old_ratio(m, task.flops) for m in mods]
            new_limit, old_limit = lean_limit(new_r), lean_limit(old_r)
            only = [g for g, n, o in zip(ranked, new_r, old_r)
                    if redundancy(n, new_limit) and not redundancy(o, old_limit)]
            if not only:
                continue
            other = only[0]
        old_s, new_s = tuner.schedule(task, other), tuner.schedule(task, new[0])
        (old_us, new_us), diff = _time_pair(task, [old_s.mod, new_s.mod], host, rounds)
        rows.append({"model": model, "task": task.name, "weight": task.weight, "changed": changed,
                     "rank": ranked.index(other) + 1, "old_redo": reduction_redo(old_s.mod),
                     "new_redo": reduction_redo(new_s.mod), "old_us": round(old_us, 2), "new_us": round(new_us, 2),
                     "max_abs_diff": diff})
    return rows, len(tasks)


def main() -> None:
    from outside_zoo import _commit

    from tlm.graph.target import resolve_target
    from tlm.measure.shards import host_label

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--before", choices=("flops", "long"), default="flops", help="the earlier check compared against")
    args = ap.parse_args()
    host = resolve_target(None)
    run = {"date": time.strftime("%Y-%m-%d %H:%M"), "hardware": host_label(host), "commit": _commit(),
           "command": "python bench/redo_pick.py " + " ".join(sys.argv[1:]), "before": args.before, "models": [],
           "rows": []}
    for model in args.models.split(","):
        rows, count = run_model(model, host, args.rounds, args.before)
        run["models"].append({"model": model, "tasks": count, "changed": sum(r["changed"] for r in rows)})
        run["rows"] += rows
        print(f"{model}: {count} tasks, {len(rows)} changed", file=sys.stderr)
    path = RESULTS / "redo-pick.json"
    runs = json.loads(path.read_text()) if path.exists() else []
    runs.append(run)
    path.write_text(json.dumps(runs, indent=1) + "\n")
    (RESULTS / "redo-pick.md").write_text(report(runs))


def report(runs: list[dict]) -> str:
    """Every run: its models (tasks, changed) and one row per changed task."""
    lines = ["# Budget-0 picks judged by redone reductions' runs (tlm.space.build_cost.redone_work)", "",
             "Each run: the budget-0 choice with the reduction-run check of its commit against an earlier check "
             "(`before`: the flop ratio alone, or long reductions' runs only), from the same ranked samples. A row: "
             "a task whose pick the check changes, or whose first 8 ranked programs hold one only the new check "
             "refuses (its rank given); that program and the pick timed alone on the host (us, median of the "
             "rounds), outputs checked against TVM's unscheduled program. `redo`: the most a reduction runs over "
             "(tlm.space.build_cost.reduction_redo of the commit).", ""]
    for r in runs:
        lines += [f"## {r['date']}, {r['hardware']}, commit {r['commit']}", "", f"Command: `{r['command']}`; "
                  f"before: {r.get('before', 'flops')}", "", *([f"Note: {r['note']}.", ""] if r.get("note") else []),
                  "Models (tasks, changed): " + ", ".join(f"{m['model']} ({m['tasks']}, {m['changed']})"
                                                          for m in r["models"]), "",
                  "| model | task | weight | pick changed | refused program's rank | its redo | pick's redo | "
                  "refused us | pick us | refused / pick | max abs diff |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {x['model']} | {x['task'][:60]} | {x['weight']} | {'yes' if x.get('changed', True) else 'no'} | "
                  f"{x.get('rank', 1)} | {x['old_redo']:.0f} | {x['new_redo']:.0f} | {x['old_us']} | {x['new_us']} | "
                  f"{x['old_us'] / x['new_us']:.2f}x | {x['max_abs_diff']:.1e} |" for x in r["rows"]]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
