"""The report's corpus section and end-to-end targets (issue 15): what the shipped models learned
from, and whether the end-to-end figures meet the issue's goals.

The corpus is read from its committed record shards (data/corpus; nothing is measured) each time
`tlm eval` writes its tables, so the report states the corpus as it is then: per CPU, the
records, the correct ones, the training tasks, the convergence curve (paper Figure 9,
tlm.search.corpus_curve, written to OUT/corpus/), and how many of the evaluated tasks (the
suite's workloads' and the held-out benchmark's) occur in it, which must be none: the corpus is
the fine-tuning and cost-model data.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tlm.eval.tables import fmt, num, table, write_csv

RECORDS_TARGET = 100_000  # measured programs committed
TASKS_TARGET = 1_000  # distinct training tasks
# End to end, against MetaSchedule at the budget: (contender, minimum speedup).
E2E_MS = "metaschedule@64g"
E2E_TARGETS = (("tlm@10g", 1.0), ("tlm@0", 0.8))


def write_corpus_table(out: str | os.PathLike, corpus: str | os.PathLike, evaluated: set[str]) -> list[dict[str, Any]]:
    """OUT/corpus.csv (one row per hardware, then "all") and OUT/corpus/ (the curves); `evaluated`:
    the hashes of the tasks the run evaluates."""
    from tlm.search.corpus_curve import corpus_records, write_curves

    data = corpus_records(corpus) if Path(corpus).is_dir() else {}
    curves = {c.hardware: c for c in write_curves(corpus, Path(out) / "corpus", data=data)} if data else {}
    rows, everything = [], set()
    for hw, (_, recs) in sorted(data.items()):
        tasks = {r["t"] for r in recs}
        everything |= tasks
        c = curves[hw]
        rows.append({"hardware": hw, "records": len(recs), "correct": sum(1 for r in recs if not r.get("err")),
                     "tasks": len(tasks), "first_pass_at": c.reference, "normalized": c.final,
                     "evaluated_tasks": len(evaluated), "evaluated_in_corpus": len(tasks & evaluated)})
    if rows:
        rows.append({"hardware": "all", "records": sum(r["records"] for r in rows),
                     "correct": sum(r["correct"] for r in rows), "tasks": len(everything), "first_pass_at": None,
                     "normalized": None, "evaluated_tasks": len(evaluated),
                     "evaluated_in_corpus": len(everything & evaluated)})
    write_csv(os.path.join(out, "corpus.csv"), rows)
    return rows


def _verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("met" if ok else "missed")


def corpus_lines(rows: list[dict[str, str]], out: str | os.PathLike) -> list[str]:
    """Section 6 of summary.md, from OUT/corpus.csv's rows."""
    lines = ["", "## 6. The corpus (data engine)", ""]
    if not rows:
        return lines + ["(no corpus: no record shards under data/corpus)"]
    per_hw = [r for r in rows if r["hardware"] != "all"]
    total = next((r for r in rows if r["hardware"] == "all"), per_hw[-1])
    lines += ["Measured programs committed under `data/corpus` (record shards, read when this report was "
              "written), per CPU. Normalized total latency: the convergence curve's last point (paper Figure 9: "
              "the weighted sum of every task's best latency so far over its value when the CPU's first pass "
              "over the training tasks ended; below 1, later rounds found faster programs).", ""]
    lines += table(["hardware", "records", "correct", "training tasks", "first pass complete at",
                    "normalized total latency now"],
                   [[r["hardware"], r["records"], r["correct"], r["tasks"], r["first_pass_at"] or ("-" if r["hardware"] == "all" else "not yet"),
                     fmt(r["normalized"], 3)] for r in rows])
    n, tasks, leak = (int(num(total[k]) or 0) for k in ("records", "tasks", "evaluated_in_corpus"))
    lines += ["", "The issue's corpus targets:", ""]
    lines += table(["target", "goal", "now", ""],
                   [["measured programs committed", f">= {RECORDS_TARGET:,}", f"{n:,}", _verdict(n >= RECORDS_TARGET)],
                    ["training tasks", f">= {TASKS_TARGET:,}", f"{tasks:,}", _verdict(tasks >= TASKS_TARGET)],
                    [f"evaluated tasks in the corpus (of {total['evaluated_tasks']})", "0", str(leak),
                     _verdict(leak == 0)]])
    if (Path(out) / "corpus" / "convergence.png").is_file():
        lines += ["", "![corpus/convergence.png](corpus/convergence.png)"]
    return lines


def e2e_target_lines(e2e: list[dict[str, str]]) -> list[str]:
    """The issue's end-to-end targets against MetaSchedule@64g, per workload (none without that column)."""
    by = {(r["workload"], r["method"]): num(r["e2e_ms"]) for r in e2e}
    workloads = [w for w in dict.fromkeys(r["workload"] for r in e2e) if by.get((w, E2E_MS))]
    if not workloads:
        return []
    body = []
    for m, goal in E2E_TARGETS:
        for w in workloads:
            if (lat := by.get((w, m))) is None:
                continue
            s = by[(w, E2E_MS)] / lat
            body.append([f"{m.replace('tlm', 'TLM')} vs MS@64g", w, f">= {goal:g}", f"{s:.2f}", _verdict(s >= goal)])
    if not body:
        return []
    return ["", "The issue's end-to-end targets (MetaSchedule@64g's latency over the contender's, same "
            "interleaved run):", ""] + table(["contenders", "workload", "target", "speedup", ""], body)
