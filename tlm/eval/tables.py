"""Tables of `tlm eval`: OUT/{subgraph,e2e,cost,efficiency}.csv from the record databases and
the step outputs (write_tables), the best-after-k and k-to-reach queries behind them, and the
CSV and number helpers that tlm.eval.report and tlm.eval.plots read them with.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any


# ---------------------------------------------------------------------- reading records
def best_records_after_k(db, task_hash: str, target_key: str, proposer: str, ks: list[int],
                         reached: bool = False) -> dict:
    """The best correct Record among the first k records of a proposer, in measurement order (None:
    no correct one). `reached`: None for a k beyond the records (a run not that far yet)."""
    recs = db.records(task_hash, target_key, proposer)
    return {k: None if reached and len(recs) < k else min(
        (r for r in recs[:k] if r.error is None and r.median_s is not None), key=lambda r: r.median_s, default=None)
        for k in ks}


def best_after_k(db, task_hash: str, target_key: str, proposer: str, ks: list[int],
                 reached: bool = False) -> dict[int, float | None]:
    """Best correct latency (s) among the first k records of a proposer (best_records_after_k)."""
    return {k: None if r is None else r.median_s
            for k, r in best_records_after_k(db, task_hash, target_key, proposer, ks, reached).items()}


def k_to_reach(db, task_hash: str, target_key: str, proposer: str, goal_s: float | None) -> int | None:
    """The number of measurements after which the proposer's best is <= goal_s (None: never)."""
    if goal_s is None:
        return None
    for i, r in enumerate(db.records(task_hash, target_key, proposer), 1):
        if r.error is None and r.median_s is not None and r.median_s <= goal_s * (1 + 1e-9):
            return i
    return None


def representatives(tasks_by_workload: dict[str, list]) -> list[tuple[str, Any]]:
    """(workload, task) per task type: the largest weight x flops over the workloads."""
    best: dict[str, tuple[str, Any]] = {}
    for w, tasks in tasks_by_workload.items():
        for t in tasks:
            if t.kind not in best or t.weight * t.flops > best[t.kind][1].weight * best[t.kind][1].flops:
                best[t.kind] = (w, t)
    return sorted(best.values(), key=lambda wt: -wt[1].weight * wt[1].flops)


def write_csv(path: str, rows: list[dict[str, Any]]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(path + ".tmp", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    os.replace(path + ".tmp", path)


# ---------------------------------------------------------------------- tables
def write_tables(cfg, tasks_by_workload: dict[str, list], target_key: str) -> None:
    """subgraph.csv, e2e.csv, cost.csv and efficiency.csv from what the steps left on disk
    (heldout.csv: tlm.eval.heldout)."""
    from tlm.eval.suites import COMPUTE_KINDS, db_dir, log_path, per_task, slug
    from tlm.measure.database import open_db

    out, ks, ms_k = cfg.out, cfg.subgraph_ks, per_task(cfg.ms_budget)
    if not tasks_by_workload:
        return

    def opened(path):
        return open_db(path, create=False) if os.path.isfile(os.path.join(path, "records.sqlite")) else None

    sub_rows = []
    tlm_db = opened(db_dir(cfg, "subgraph", "tlm"))
    for w, t in representatives(tasks_by_workload) if ks else []:  # no k: no representative-task table
        base = {"kind": t.kind, "task": t.name, "workload": w, "weight": t.weight, "flops": t.flops}
        ms_db = opened(db_dir(cfg, w, "metaschedule"))
        ms = best_after_k(ms_db, t.hash, target_key, "metaschedule", ks + [ms_k]) if ms_db else {}
        tl = best_after_k(tlm_db, t.hash, target_key, "tlm", ks) if tlm_db else {}
        reach = k_to_reach(tlm_db, t.hash, target_key, "tlm", ms.get(ms_k)) if tlm_db else None
        for k in ks:
            for method, got in (("tlm", tl), ("metaschedule", ms)):
                v = got.get(k)
                sub_rows.append({**base, "method": method, "k": k, "best_us": None if v is None else v * 1e6})
        v = ms.get(ms_k)
        sub_rows.append({**base, "method": "metaschedule-large", "k": ms_k,
                         "best_us": None if v is None else v * 1e6, "tlm_k_to_reach": reach})
        if ms_db:
            ms_db.close()
    if tlm_db:
        tlm_db.close()
    if sub_rows:
        write_csv(os.path.join(out, "subgraph.csv"), sub_rows)

    e2e_rows, cost_rows, eff_rows = [], [], []
    peak = json.loads(Path(out, "peak.json").read_text())["gflops"] if Path(out, "peak.json").is_file() else None
    for w in cfg.workloads:
        p = Path(out, "e2e", slug(w) + ".json")
        e2e = {r["method"]: r for r in json.loads(p.read_text())["rows"]} if p.is_file() else {}
        e2e_rows += list(e2e.values())
        ms_label = f"metaschedule@{cfg.ms_budget}"
        goal = (e2e.get(ms_label) or {}).get("e2e_ms")
        methods = [("metaschedule", cfg.ms_budget)] + [("tlm", b) for b in cfg.tlm_budgets]
        tlm_s, first = 0.0, True
        for method, b in methods:
            logp = log_path(cfg, f"tune:{w}:{method}@{b}")
            log = json.loads(Path(logp).read_text()) if os.path.isfile(logp) else {}
            wall = log.get("wall_s")
            if method == "tlm" and wall is not None:
                tlm_s += wall
                wall = tlm_s  # TLM budgets continue each other: cumulative
            lat = (e2e.get(f"{method}@{b}") or {}).get("e2e_ms")
            reaches = method == "tlm" and lat is not None and goal is not None and lat <= goal
            cost_rows.append({"workload": w, "method": method, "budget": b,
                              "measurements": log.get("total_measurements"), "tune_wall_s": wall,
                              "compile_s": (e2e.get(f"{method}@{b}") or {}).get("compile_s"), "e2e_ms": lat,
                              "reaches_ms_large": reaches, "first_to_reach": reaches and first})
            first = first and not reaches
        for method, name in (("metaschedule", "metaschedule"), ("tlm", f"tlm@{cfg.tlm_budgets[-1]}")):
            db = opened(db_dir(cfg, w, name))
            if db is None:
                continue
            best = db.best_by_task(target_key)
            db.close()
            for t in tasks_by_workload.get(w, []):
                if t.kind in COMPUTE_KINDS and t.hash in best and t.flops:
                    g = t.flops / best[t.hash] / 1e9
                    eff_rows.append({"workload": w, "task": t.name, "kind": t.kind, "weight": t.weight,
                                     "flops": t.flops, "method": method, "best_us": best[t.hash] * 1e6,
                                     "gflops": g, "peak_gflops": peak,
                                     "fraction_of_peak": g / peak if peak else None})
    write_csv(os.path.join(out, "e2e.csv"), e2e_rows)
    write_csv(os.path.join(out, "cost.csv"), cost_rows)
    write_csv(os.path.join(out, "efficiency.csv"), eff_rows)


# ---------------------------------------------------------------------- the report
def read_csv(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def num(v) -> float | None:
    try:
        return None if v in (None, "", "None") else float(v)
    except ValueError:
        return None


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown table."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(str(c) for c in r) + " |" for r in rows]


def fmt(v, digits: int = 2) -> str:
    x = num(v)
    return "-" if x is None else f"{x:.{digits}f}"
