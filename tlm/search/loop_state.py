"""The iterative loop's bookkeeping (tlm.search.loop): which tasks, in which batches, the resumable
work directory, the convergence curve and the stop rule.

Work directory (everything needed to resume; re-running the same command continues):
    config.json        the LoopConfig (batching fields must stay the same on a re-run)
    tasks.json         the training tasks (with their TIR), in the order batches are dealt from
    state.json         next round, per-round summaries, the convergence points, the fine-tuning
                       in flight; written atomically after every step
    db/                the record database (tlm.measure.database)
    demos/round-<r>.jsonl, models/round-<r>/, logs/finetune-round-<r>.log
    convergence.csv, convergence.png

Convergence (paper Figure 9): total latency = sum over tasks of weight x best median latency.
It is normalized by its value at the reference point, the first round end at which every task
has at least one measurement (or is barren: a round generated no program for it,
`WorkDir.barren`); the tasks without any correct program at that point are left out of the sum
at every later point too (so the curve only counts a fixed set of tasks and never rises).
"""

from __future__ import annotations

import csv
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tlm.errors import TlmError, read_json

STATE_VERSION = 1
# Fields that decide which programs a round measures: a re-run must not change them.
_IDENTITY = ("base", "sources", "kb", "max_tasks", "seed")

CSV_COLUMNS = ("round", "batch", "model", "measurements", "tasks_measured", "tasks_with_program",
               "total_latency_s", "normalized", "wall_s")


# ---------------------------------------------------------------- task choice and batches

def batch_key(task) -> tuple:
    """Sort key of the batching: task kind, then the subgraph's operator words (paper §5.3)."""
    from tlm.graph.tasks import op_names

    return (task.kind, "_".join(op_names(task.name)), task.name, task.hash)


def select_tasks(tasks: list, max_tasks: int) -> list:
    """At most `max_tasks` tasks, deterministically, spread across kinds: round robin over the
    kinds (most total work first), each kind's tasks by weight x FLOPs."""
    tasks = list(tasks)
    if not max_tasks or len(tasks) <= max_tasks:
        return tasks
    by_kind: dict[str, list] = {}
    for t in tasks:
        by_kind.setdefault(t.kind, []).append(t)
    for group in by_kind.values():
        group.sort(key=lambda t: (-t.weight * t.flops, t.hash))
    kinds = sorted(by_kind, key=lambda k: (-sum(t.weight * t.flops for t in by_kind[k]), k))
    out: list = []
    depth = 0
    while len(out) < max_tasks:
        for k in kinds:
            if depth < len(by_kind[k]) and len(out) < max_tasks:
                out.append(by_kind[k][depth])
        depth += 1
    return out


def split_batches(tasks: list, kb: int) -> list[list]:
    """k_b batches: tasks sorted by `batch_key`, one every k_b (no empty batch)."""
    ordered = sorted(tasks, key=batch_key)
    kb = max(1, min(kb, len(ordered)))
    return [ordered[i::kb] for i in range(kb)]


def task_seconds(task) -> float:
    """Rough measuring time of one program of a task: a fixed second (build, checks, timing
    protocol) plus its FLOPs at 1 GFLOPS, what random programs of heavy tasks reach here."""
    return 1.0 + task.flops / 1e9


def round_order(tasks: list) -> list:
    """The order a cycle round measures its batch in: each task kind gets an equal share of the
    measuring time (the next task is the lightest one left of the kind that has had the least
    time, `task_seconds`). A session that stops half-way through a round has then measured every
    kind, and a kind of heavy tasks (3-D convs, batch-8 CNNs: seconds per program) cannot take
    most of the time from the many light ones."""
    import heapq

    by_kind: dict[str, list] = {}
    for t in tasks:
        by_kind.setdefault(t.kind, []).append(t)
    queues = {k: sorted(g, key=lambda t: (t.flops, t.hash), reverse=True) for k, g in by_kind.items()}
    heap = [(0.0, k) for k in sorted(queues)]
    out = []
    while heap:
        spent, k = heapq.heappop(heap)
        task = queues[k].pop()
        out.append(task)
        if queues[k]:
            heapq.heappush(heap, (spent + task_seconds(task), k))
    return out


def gain_batch(tasks: list, size: int, bests: dict[str, float], previous: dict[str, float],
               counts: dict[str, int], kp: int, floor: float = 0.02,
               barren: set[str] | frozenset = frozenset()) -> list:
    """The `size` tasks where the next measurements are expected to cut the weighted total
    latency most (the `gain` schedule, after a first pass over every task).

    Expected gain of a task: weight x best x (its relative gain in its last round, at least
    `floor`): a task that just improved is likely to improve again, and a heavy one gains more
    per measurement. Tasks without a correct program come first until they have 2 k_p
    measurements, then last (their programs keep failing), as do the `barren` ones (no program
    could be generated for them: their whole space fails TVM's checks). Ties: fewer measurements first."""
    def key(t):
        n = counts.get(t.hash, 0)
        best = bests.get(t.hash)
        if best is None:
            return (0 if n < 2 * kp and t.hash not in barren else 2, 0.0, n, t.hash)
        prev = previous.get(t.hash)
        rel = max(floor, (prev / best - 1.0) if prev else floor)
        return (1, -t.weight * best * rel, n, t.hash)

    return sorted(tasks, key=key)[:max(1, size)]


# ---------------------------------------------------------------- the stop rule

def converged(curve: list[dict[str, Any]], patience: int, min_gain: float) -> str | None:
    """The stop reason when the last `patience` measurements gained less than `min_gain`."""
    pts = [p for p in curve if p.get("normalized") is not None]
    if not pts:
        return None
    now = pts[-1]
    earlier = [p for p in pts if p["measurements"] <= now["measurements"] - patience]
    if not earlier:
        return None
    then = earlier[-1]
    gain = (then["normalized"] - now["normalized"]) / then["normalized"]
    if gain < min_gain:
        return (f"converged: {gain * 100:.2f}% gain over the last {now['measurements'] - then['measurements']} "
                f"measurements (< {min_gain * 100:g}%)")
    return None


def stop_reason(state: dict[str, Any], rounds: int, patience: int, min_gain: float, n_batches: int) -> str | None:
    """Why the loop stops now: --rounds reached, converged, or no new program in k_b rounds."""
    if rounds and state["next_round"] >= rounds:
        return f"reached {rounds} rounds"
    reason = converged(state["curve"], patience, min_gain)
    if reason:
        return reason
    recent = sorted(state["rounds"], key=lambda x: x["round"])[-n_batches:]
    if len(recent) == n_batches and state["next_round"] >= n_batches and all(x["measured"] == 0 for x in recent):
        return f"no new programs in the last {n_batches} rounds"
    return None


# ---------------------------------------------------------------- files

def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (a temporary file, then one rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def write_convergence(work: Path, curve: list[dict[str, Any]], title: str, stop: str | None = None) -> None:
    """convergence.csv (one row per round) and convergence.png (normalized latency vs measurements)."""
    tmp = work / "convergence.csv.tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for p in curve:
            w.writerow(["" if p.get(c) is None else p[c] for c in CSV_COLUMNS])
    os.replace(tmp, work / "convergence.csv")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [p for p in curve if p.get("normalized") is not None]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    if pts:
        ax.plot([p["measurements"] for p in pts], [p["normalized"] for p in pts], marker="o", ms=3, lw=1.5,
                label="TLM (demonstration data)")
        if stop and stop.startswith("converged"):
            ax.axvline(pts[-1]["measurements"], color="gray", ls="--", lw=1)
            ax.annotate("gain < 1%", (pts[-1]["measurements"], pts[-1]["normalized"]), textcoords="offset points",
                        xytext=(-60, 12), fontsize=8)
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no reference point yet\n(not every task measured)", ha="center", va="center",
                transform=ax.transAxes)
    ax.set_xlabel("measurements (all tasks)")
    ax.set_ylabel("normalized total latency")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    tmp_png = work / "convergence.tmp.png"
    fig.savefig(tmp_png, dpi=110)
    plt.close(fig)
    os.replace(tmp_png, work / "convergence.png")


class WorkDir:
    """A loop's work directory: config.json, tasks.json, state.json and the loop's wall clock
    (time spent in earlier runs plus this one's)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        for sub in ("models", "demos", "logs"):
            (self.path / sub).mkdir(exist_ok=True)
        self.state: dict[str, Any] = {}
        self._mark = time.perf_counter()

    def model_dir(self, r: int) -> Path:
        return self.path / "models" / f"round-{r}"

    def newest_model(self, before: int) -> Path | None:
        """The complete fine-tuned model of the latest round before `before`, if any."""
        from tlm.model.finetune import model_done

        for k in range(before - 1, -1, -1):
            if model_done(self.model_dir(k)):
                return self.model_dir(k)
        return None

    def check_config(self, config: dict[str, Any]) -> None:
        """Refuse a config whose batching fields or target differ from the saved one; save it."""
        path = self.path / "config.json"
        if path.is_file():
            old = read_json(path)
            for k in _IDENTITY:
                a, b = old.get(k), config.get(k)
                if k == "base":
                    a, b = str(Path(a).resolve()) if a else a, str(Path(b).resolve())
                if a != b:
                    raise TlmError(f"{self.path} holds a loop with {k}={old.get(k)!r}, not {config.get(k)!r}: "
                                   "use another --work (or the same settings)")
            if old.get("target") != config["target"]:
                raise TlmError(f"{self.path} holds a loop for another target: use another --work")
        write_json(path, config)

    def tasks(self, given: list | None, max_tasks: int, load: Callable[[], list]) -> list:
        """The saved training tasks, else `select_tasks` of `given` (or of `load()`), saved."""
        from tlm.graph.tasks import Task

        path = self.path / "tasks.json"
        if path.is_file():
            try:
                saved = [Task.from_json(t) for t in read_json(path)]
            except KeyError as err:
                raise TlmError(f"unreadable {path}: missing {err}") from None
            if given is not None and [t.hash for t in select_tasks(given, max_tasks)] != [t.hash for t in saved]:
                raise TlmError(f"{self.path} holds a loop over other tasks: use another --work")
            return saved
        tasks = select_tasks(load() if given is None else given, max_tasks)
        if not tasks:
            raise TlmError("no training tasks")
        write_json(path, [t.to_json(with_mod=True) for t in tasks])
        return tasks

    def load_state(self, target_key: str) -> dict[str, Any]:
        path = self.path / "state.json"
        if path.is_file():
            state = read_json(path)
            if state.get("version") != STATE_VERSION:
                raise TlmError(f"{path} has state version {state.get('version')}, not {STATE_VERSION}")
        else:
            state = {"version": STATE_VERSION, "target_key": target_key, "next_round": 0, "rounds": [],
                     "curve": [], "reference": None, "finetune": None, "wall_s": 0.0, "stopped": None}
            write_json(path, state)
        self.state = state
        self._mark = time.perf_counter()
        return state

    def save(self) -> None:
        now = time.perf_counter()
        self.state["wall_s"] = self.state.get("wall_s", 0.0) + (now - self._mark)
        self._mark = now
        write_json(self.path / "state.json", self.state)

    def barren(self) -> set[str]:
        """Tasks for which a round generated no program at all while none was measured (every
        sample failed TVM's checks, e.g. an adaptive pool whose windows are dynamic loops that
        DisallowDynamicLoop rejects): said once, left out of the reference point, chosen last."""
        return set(self.state.get("barren", []))

    def mark_barren(self, task_hash: str) -> bool:
        """Remember a barren task (saved with the state); True the first time."""
        got = self.state.setdefault("barren", [])
        if task_hash in got:
            return False
        got.append(task_hash)
        return True

    def wall(self) -> float:
        return self.state.get("wall_s", 0.0) + (time.perf_counter() - self._mark)

    def commit_round(self, summary: dict[str, Any], point: dict[str, Any]) -> None:
        """Record round `summary["round"]` (its summary and convergence point) and save: committed."""
        r = summary["round"]
        self.state["rounds"] = [x for x in self.state["rounds"] if x["round"] != r] + [summary]
        self.state["curve"] = [p for p in self.state["curve"] if p["round"] != r] + [point]
        self.state["next_round"] = r + 1
        self.save()

    def point(self, r: int, b: int, model: str, tasks: list, counts: dict[str, int],
              bests: dict[str, float]) -> dict[str, Any]:
        """The convergence point at the end of round r (fixing the reference point when every
        task has a measurement, or is barren: no program could be generated for it); `counts`
        and `bests` by task hash, absent tasks have none."""
        hashes = [t.hash for t in tasks]
        weight = {t.hash: t.weight for t in tasks}
        have = [h for h in hashes if bests.get(h) is not None]
        measurements = sum(counts.get(h, 0) for h in hashes)
        barren = self.barren()
        if self.state["reference"] is None and all(counts.get(h, 0) > 0 or h in barren for h in hashes):
            total = sum(weight[h] * bests[h] for h in have)
            if have and total > 0:
                self.state["reference"] = {"round": r, "measurements": measurements, "tasks": have,
                                           "total_latency_s": total}
        ref = self.state["reference"]
        normalized = None
        if ref is not None:
            normalized = sum(weight[h] * bests[h] for h in ref["tasks"] if bests.get(h) is not None) / ref["total_latency_s"]
        return {"round": r, "batch": b, "model": model, "measurements": measurements,
                "tasks_measured": sum(1 for h in hashes if counts.get(h, 0) > 0),
                "tasks_with_program": len(have),
                "total_latency_s": sum(weight[h] * bests[h] for h in have),
                "normalized": normalized, "wall_s": round(self.wall(), 3)}
