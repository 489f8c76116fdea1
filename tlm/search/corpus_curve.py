"""The corpus' convergence curve (paper Figure 9): `tlm corpus --curve DIR`.

Per hardware, the committed records in the order they were measured (their time), and the
normalized total latency after each: the sum over tasks of weight x best median latency so
far, divided by its value at the reference point. As in the loop (tlm.search.loop_state), the
reference point is the first record after which every task the corpus measured (on any
hardware) has a measurement on this one; tasks without a correct program there stay out of the sum, so the
curve counts a fixed set of tasks and never rises. A hardware whose first pass over its tasks
is not complete has no curve yet: the CSV then holds the coverage (tasks measured so far) only.

Writes DIR/convergence-<hardware>.csv (one row per --step records, and the last) and
DIR/convergence.png (one line per hardware with a curve). Reads shards only: no measurement.
"""

from __future__ import annotations

import csv
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

COLUMNS = ("measurements", "tasks_measured", "tasks_in_sum", "total_latency_s", "normalized")


@dataclass
class Curve:
    hardware: str
    records: int = 0
    tasks: int = 0
    reference: int | None = None  # measurements at the reference point (None: first pass not complete)
    points: list[dict[str, Any]] = field(default_factory=list)

    @property
    def final(self) -> float | None:
        return self.points[-1]["normalized"] if self.points and self.reference else None


def corpus_records(corpus: str | os.PathLike) -> dict[str, tuple[dict[str, float], list[dict[str, Any]]]]:
    """Per hardware folder: (task weights by hash, records sorted by measurement time)."""
    from tlm.measure.shards import readable_shards

    out: dict[str, tuple[dict[str, float], list[dict[str, Any]]]] = {}
    for path, tasks, records in readable_shards(corpus):
        weights, recs = out.setdefault(path.parent.name, ({}, []))
        weights.update({t["hash"]: float(t.get("weight") or 1) for t in tasks})
        recs += records
    for _, recs in out.values():
        recs.sort(key=lambda r: float(r.get("at") or 0))
    return out


def curve(hardware: str, weights: dict[str, float], records: list[dict[str, Any]], step: int = 500,
          universe: set[str] | None = None) -> Curve:
    """The convergence curve of one hardware's records (in measurement order); `universe`: the
    tasks a first pass must cover (default: those in `records`)."""
    everything = set(universe) if universe is not None else {r["t"] for r in records}
    c = Curve(hardware, records=len(records), tasks=len(everything))
    best: dict[str, float] = {}
    seen: set[str] = set()
    fixed: list[str] = []
    ref_total = 0.0
    for i, r in enumerate(records, 1):
        seen.add(r["t"])
        if not r.get("err") and r.get("lat"):
            x = statistics.median(r["lat"])
            if x < best.get(r["t"], float("inf")):
                best[r["t"]] = x
        if c.reference is None and everything <= seen:
            c.reference, fixed = i, sorted(best)
            ref_total = sum(weights.get(h, 1.0) * best[h] for h in fixed)
        if i % step == 0 or i == len(records) or i == c.reference:
            total = sum(weights.get(h, 1.0) * best[h] for h in fixed) if fixed else None
            c.points.append({"measurements": i, "tasks_measured": len(seen), "tasks_in_sum": len(fixed),
                             "total_latency_s": total,
                             "normalized": total / ref_total if total is not None and ref_total else None})
    return c


def write_curves(corpus: str | os.PathLike, out: str | os.PathLike, step: int = 500,
                 data: dict[str, tuple[dict[str, float], list[dict[str, Any]]]] | None = None) -> list[Curve]:
    """DIR/convergence-<hardware>.csv for every hardware and DIR/convergence.png; returns the curves.
    `data`: the corpus as `corpus_records` read it (read here when None)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    data = corpus_records(corpus) if data is None else data
    # A first pass covers every task the corpus measured on any hardware of the same kind (the
    # training tasks; a new CPU has not finished its first pass while it lacks one of them). CPU
    # and GPU tasks differ (their extraction differs): `llvm-*` and `cuda-*` folders apart.
    universes: dict[str, set[str]] = {}
    for hw, (_, recs) in data.items():
        universes.setdefault(hw.split("-")[0], set()).update(r["t"] for r in recs)
    curves = [curve(hw, w, recs, step, universes[hw.split("-")[0]]) for hw, (w, recs) in sorted(data.items())]
    for c in curves:
        tmp = out / f"convergence-{c.hardware}.csv.tmp"
        with open(tmp, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(COLUMNS)
            for p in c.points:
                w.writerow(["" if p[k] is None else p[k] for k in COLUMNS])
        os.replace(tmp, out / f"convergence-{c.hardware}.csv")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (cov, ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    drawn = 0
    for c in curves:
        cov.plot([p["measurements"] for p in c.points], [p["tasks_measured"] for p in c.points], lw=1.5,
                  label=c.hardware)
        pts = [p for p in c.points if p["normalized"] is not None]
        if len(pts) > 1 and pts[-1]["measurements"] - pts[0]["measurements"] >= step:  # a visible span
            ax.plot([p["measurements"] for p in pts], [p["normalized"] for p in pts], lw=1.5,
                    label=f"{c.hardware} ({pts[-1]['tasks_in_sum']} tasks)")
            drawn += 1
    cov.set_xlabel("measurements (in measurement order)")
    cov.set_ylabel("tasks with a measurement")
    cov.set_title("First pass: coverage of the training tasks", fontsize=9)
    cov.grid(alpha=0.3)
    if curves:
        cov.legend(fontsize=8)
    if not drawn:
        ax.text(0.5, 0.5, f"no curve yet: no hardware has gone {step} measurements\npast its first pass over "
                "every task", ha="center",
                va="center", transform=ax.transAxes)
    else:
        ax.legend(fontsize=8)
    ax.set_xlabel("measurements (all tasks of the hardware)")
    ax.set_ylabel("normalized total latency")
    ax.set_title("Convergence after the first pass (paper Figure 9)", fontsize=9)
    ax.ticklabel_format(axis="y", useOffset=False)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "convergence.tmp.png", dpi=110)
    plt.close(fig)
    os.replace(out / "convergence.tmp.png", out / "convergence.png")
    return curves
