"""Iterative optimization (paper Algorithm 1 and §5.3): generate -> measure -> SFT, in rounds.

    tlm loop --base MODEL --work DIR [--sources pretrain-set ...] [--kb 4] [--kp 8] [--rounds N]

The training tasks (the sources' tasks minus every task of the held-out test workloads,
optionally capped with --max-tasks, spread across task kinds) are sorted by task kind and dealt
into k_b batches, one every k_b. Round r takes batch r mod k_b: the newest finished model (round
0: the base) generates k_p new programs per task (sentences already in the database are
skipped), they are measured and committed (proposer "tlm", round r), then the demonstrations
(the best measured program of every training task, over all records) fine-tune the BASE model
into work/models/round-<r>. Fine-tuning runs in its own process (`python -m tlm.finetune`, one
torch thread) while the next round is measured with the previous model: the paper's
two-process pipeline, where demonstrations i give TLM i+2. `--no-pipeline` waits instead
(quieter timings on a machine with few cores, since the fine-tuning process competes with the
measurement for CPU).

Work directory (everything needed to resume; re-running the same command continues):
    config.json        the LoopConfig (batching fields must stay the same on a re-run)
    tasks.json         the training tasks (with their TIR), in the order batches are dealt from
    state.json         next round, per-round summaries, the convergence points, the fine-tuning
                       in flight; written atomically after every step
    db/                the record database (tlm.database)
    demos/round-<r>.jsonl, models/round-<r>/, logs/finetune-round-<r>.log
    convergence.csv, convergence.png
A program is never measured twice: a round's per-task count of committed records is kept, so a
round killed half-way measures only what it lacks, and a committed round is never redone.

Convergence (paper Figure 9): total latency = sum over tasks of weight x best median latency.
It is normalized by its value at the reference point, the first round end at which every task
has at least one measurement; the tasks without any correct program at that point are left
out of the sum at every later point too (so the curve only counts a fixed set of tasks and
never rises). The loop stops when the normalized latency improved by less than `min_gain`
(1%) over the last --patience-measurements measurements (default: k_p per task, one pass over
all tasks), after --rounds rounds, or when the model finds no new program in k_b rounds.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from tlm.errors import TlmError
from tlm.measure import MeasureConfig

STATE_VERSION = 1
# Fields that decide which programs a round measures: a re-run must not change them.
_IDENTITY = ("base", "sources", "kb", "max_tasks", "seed")


@dataclass
class LoopConfig:
    base: str
    work: str
    sources: list[str] = field(default_factory=list)  # zoo names / .onnx / "pretrain-set"
    kb: int = 4  # batches of tasks (one batch per round, cyclically)
    kp: int = 8  # programs generated and measured per task and round
    rounds: int = 0  # stop after this many rounds (0: only the convergence rule)
    max_tasks: int = 0  # 0: every training task
    patience_measurements: int = 0  # 0: kp * number of tasks
    min_gain: float = 0.01
    ft_steps: int = 0  # 0: FinetuneConfig's default (epochs over the demonstrations)
    ft_lr: float = 0.0
    ft_batch_size: int = 16
    ft_epochs: float = 3.0
    ft_loss: str = "decisions"
    ft_threads: int = 1
    per_task_demos: int = 1
    pipeline: bool = True
    temperature: float = 1.0
    top_k: int = 0
    seed: int = 0
    target: Any = None  # None: host
    device: str = "cpu"
    measure: MeasureConfig = field(default_factory=MeasureConfig)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LoopConfig:
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in data.items() if k in known}
        data["measure"] = MeasureConfig(**data.get("measure", {}))
        return cls(**data)


# ---------------------------------------------------------------- task choice and batches

def batch_key(task) -> tuple:
    """Sort key of the batching: task kind, then the subgraph's operator words (paper §5.3)."""
    from tlm.tasks import op_names

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


# ---------------------------------------------------------------- database queries

class _Records:
    """The few aggregate queries the loop needs; SQL on the database's connection when it has
    one (counting via `Database.records` parses every trace), else the public API."""

    def __init__(self, db, key: str):
        self.db, self.key = db, key
        self.conn = getattr(db, "_conn", None)

    def _sql(self, sql: str, args: tuple) -> list | None:
        if self.conn is None:
            return None
        try:
            return list(self.conn.execute(sql, args))
        except Exception:  # schema drift: fall back to the public API
            self.conn = None
            return None

    def counts(self, hashes: list[str]) -> dict[str, int]:
        rows = self._sql("SELECT task_hash, COUNT(*) FROM records WHERE target_key = ? GROUP BY task_hash", (self.key,))
        if rows is None:
            return {h: self.db.count(h, self.key) for h in hashes}
        got = {r[0]: int(r[1]) for r in rows}
        return {h: got.get(h, 0) for h in hashes}

    def bests(self, hashes: list[str]) -> dict[str, float | None]:
        rows = self._sql("SELECT task_hash, MIN(median_s) FROM records WHERE target_key = ? AND error IS NULL"
                         " AND median_s IS NOT NULL GROUP BY task_hash", (self.key,))
        if rows is None:
            out = {}
            for h in hashes:
                best = self.db.best(h, self.key)
                out[h] = best.median_s if best else None
            return out
        got = {r[0]: float(r[1]) for r in rows}
        return {h: got.get(h) for h in hashes}

    def in_round(self, task_hash: str, round_: int) -> int:
        rows = self._sql("SELECT COUNT(*) FROM records WHERE task_hash = ? AND target_key = ? AND proposer = 'tlm'"
                         " AND round = ?", (task_hash, self.key, round_))
        if rows is None:
            return sum(1 for r in self.db.records(task_hash, self.key, "tlm") if r.round == round_)
        return int(rows[0][0])

    def sentences(self, task_hash: str) -> set[str]:
        rows = self._sql("SELECT sentence FROM records WHERE task_hash = ? AND target_key = ? AND sentence IS NOT NULL",
                         (task_hash, self.key))
        if rows is None:
            return {r.sentence for r in self.db.records(task_hash, self.key) if r.sentence}
        return {r[0] for r in rows}


# ---------------------------------------------------------------- files

def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


CSV_COLUMNS = ("round", "batch", "model", "measurements", "tasks_measured", "tasks_with_program",
               "total_latency_s", "normalized", "wall_s")


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


def _model_done(path: Path) -> bool:
    return (path / "tlm.json").is_file() and (path / "model.safetensors").is_file()


# ---------------------------------------------------------------- the loop

class _Loop:
    def __init__(self, config: LoopConfig, tasks: list | None, progress: bool, measurer=None):
        from rich.console import Console

        from tlm.database import open_db
        from tlm.lm import MODEL_FILES
        from tlm.target import resolve_target

        self.config = config
        self.progress = progress
        self.console = Console(stderr=True, quiet=not progress)
        self.work = Path(config.work)
        self.base = Path(config.base)
        if config.kb < 1 or config.kp < 1:
            raise TlmError("--kb and --kp must be at least 1")
        missing = [f for f in MODEL_FILES if not (self.base / f).is_file()]
        if missing:
            raise TlmError(f"--base {self.base} is not a model directory (missing {', '.join(missing)})")
        self.target = resolve_target(config.target)
        self.work.mkdir(parents=True, exist_ok=True)
        for sub in ("models", "demos", "logs"):
            (self.work / sub).mkdir(exist_ok=True)
        self._check_config()
        self.tasks = self._tasks(tasks)
        self.by_hash = {t.hash: t for t in self.tasks}
        self.hashes = [t.hash for t in self.tasks]
        self.batches = split_batches(self.tasks, config.kb)
        self.patience = config.patience_measurements or config.kp * len(self.tasks)
        self.state = self._load_state()
        self.db = open_db(str(self.work / "db"))
        self.q = _Records(self.db, self.target.key)
        self._mark = time.perf_counter()
        self._proc: subprocess.Popen | None = None
        self._log = None
        self._measurer = measurer
        self._own_measurer = measurer is None
        self._gen: tuple[str, Any] | None = None
        self.measured_now = 0

    # ------------------------------------------------------------ setup and state
    def _check_config(self) -> None:
        path = self.work / "config.json"
        new = self.config.to_json()
        new["target"] = self.target.config
        if path.is_file():
            try:
                old = json.loads(path.read_text())
            except (OSError, ValueError) as err:
                raise TlmError(f"unreadable {path}: {err}") from None
            for k in _IDENTITY:
                a, b = old.get(k), new.get(k)
                if k == "base":
                    a, b = str(Path(a).resolve()) if a else a, str(Path(b).resolve())
                if a != b:
                    raise TlmError(f"{self.work} holds a loop with {k}={old.get(k)!r}, not {new.get(k)!r}: "
                                   "use another --work (or the same settings)")
            if old.get("target") != new["target"]:
                raise TlmError(f"{self.work} holds a loop for another target: use another --work")
        _write_json(path, new)

    def _tasks(self, given: list | None) -> list:
        from tlm.tasks import Task

        path = self.work / "tasks.json"
        if path.is_file():
            try:
                saved = [Task.from_json(t) for t in json.loads(path.read_text())]
            except (OSError, ValueError, KeyError) as err:
                raise TlmError(f"unreadable {path}: {err}") from None
            if given is not None and [t.hash for t in select_tasks(given, self.config.max_tasks)] != [t.hash for t in saved]:
                raise TlmError(f"{self.work} holds a loop over other tasks: use another --work")
            return saved
        if given is None:
            if not self.config.sources:
                raise TlmError("no tasks: give --sources (e.g. pretrain-set)")
            from tlm.sampling import corpus_tasks

            with self.console.status("loading the training tasks"):
                given, _ = corpus_tasks(list(self.config.sources), hold_out="test", target=self.target)
        tasks = select_tasks(given, self.config.max_tasks)
        if not tasks:
            raise TlmError("no training tasks")
        _write_json(path, [t.to_json(with_mod=True) for t in tasks])
        return tasks

    def _load_state(self) -> dict[str, Any]:
        path = self.work / "state.json"
        if path.is_file():
            try:
                state = json.loads(path.read_text())
            except (OSError, ValueError) as err:
                raise TlmError(f"unreadable {path}: {err}") from None
            if state.get("version") != STATE_VERSION:
                raise TlmError(f"{path} has state version {state.get('version')}, not {STATE_VERSION}")
            return state
        state = {"version": STATE_VERSION, "target_key": self.target.key, "next_round": 0, "rounds": [],
                 "curve": [], "reference": None, "finetune": None, "wall_s": 0.0, "stopped": None}
        _write_json(path, state)
        return state

    def _save(self) -> None:
        now = time.perf_counter()
        self.state["wall_s"] = self.state.get("wall_s", 0.0) + (now - self._mark)
        self._mark = now
        _write_json(self.work / "state.json", self.state)

    def _wall(self) -> float:
        return self.state.get("wall_s", 0.0) + (time.perf_counter() - self._mark)

    # ------------------------------------------------------------ models
    def _model_dir(self, r: int) -> Path:
        return self.work / "models" / f"round-{r}"

    def _newest_model(self, before: int) -> Path:
        self._poll_finetune()
        for k in range(before - 1, -1, -1):
            if _model_done(self._model_dir(k)):
                return self._model_dir(k)
        return self.base

    def _generator(self, model: Path):
        from tlm.generate import Generator

        if self._gen is None or self._gen[0] != str(model):
            self._gen = (str(model), Generator.from_dir(model, self.target, self.config.device))
        return self._gen[1]

    def _label(self, model: Path) -> str:
        return "base" if model == self.base else model.name

    # ------------------------------------------------------------ fine-tuning process
    def _launch_finetune(self, r: int) -> None:
        from tlm.finetune import demo_records, write_demos

        self._wait_finetune()
        demos = demo_records(self.db, self.tasks, self.target, self.config.per_task_demos)
        if not demos:
            self.state["finetune"] = {"round": r, "status": "skipped", "demonstrations": 0}
            self._save()
            self.console.print(f"  round {r}: no demonstrations yet, no fine-tuning")
            return
        demos_path = self.work / "demos" / f"round-{r}.jsonl"
        write_demos(demos, demos_path)
        out = self._model_dir(r)
        c = self.config
        cmd = [sys.executable, "-m", "tlm.finetune", "--base", str(self.base), "--demos", str(demos_path),
               "--out", str(out), "--steps", str(c.ft_steps), "--lr", repr(c.ft_lr), "--batch-size", str(c.ft_batch_size),
               "--epochs", repr(c.ft_epochs), "--loss", c.ft_loss, "--seed", str(c.seed + r), "--device", c.device,
               "--threads", str(c.ft_threads)]
        root = str(Path(__file__).resolve().parents[1])
        env = dict(os.environ, OMP_NUM_THREADS=str(max(1, c.ft_threads)), MKL_NUM_THREADS=str(max(1, c.ft_threads)),
                   PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
        log_path = self.work / "logs" / f"finetune-round-{r}.log"
        self._log = open(log_path, "w")
        self._proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=root)
        self.state["finetune"] = {"round": r, "status": "running", "demonstrations": len(demos),
                                  "out": str(out), "log": str(log_path), "started_wall_s": round(self._wall(), 3)}
        self._save()
        mode = "in the background" if c.pipeline else "now"
        self.console.print(f"  fine-tuning the base on {len(demos)} demonstrations into {out.name} {mode}")
        if not c.pipeline:
            self._wait_finetune()

    def _finish_finetune(self, rc: int) -> None:
        ft = self.state["finetune"]
        if self._log is not None:
            self._log.close()
            self._log = None
        self._proc = None
        out = Path(ft["out"])
        if rc == 0 and _model_done(out):
            ft["status"] = "done"
            try:
                rep = json.loads((out / "finetune.json").read_text())
                ft.update(steps=rep["config"]["steps"], final_loss=rep["final_loss"], seconds=rep["seconds"])
            except (OSError, ValueError, KeyError):
                pass
        else:
            ft["status"] = "failed"
            tail = Path(ft["log"]).read_text().strip().splitlines()[-1:] if Path(ft["log"]).is_file() else []
            ft["error"] = (tail[0] if tail else f"exit status {rc}")[:300]
            self.console.print(f"  [red]fine-tuning of round {ft['round']} failed[/red]: {ft['error']} "
                               f"(see {ft['log']}); the previous model stays in use")
        self._save()

    def _poll_finetune(self) -> None:
        if self._proc is not None and (rc := self._proc.poll()) is not None:
            self._finish_finetune(rc)

    def _wait_finetune(self) -> None:
        if self._proc is not None:
            with self.console.status(f"waiting for the fine-tuning of round {self.state['finetune']['round']}"):
                rc = self._proc.wait()
            self._finish_finetune(rc)

    def _resume_finetune(self) -> None:
        """Relaunch the fine-tuning of the last committed round if a previous run did not finish it."""
        last = self.state["next_round"] - 1
        if last < 0:
            return
        ft = self.state.get("finetune")
        if ft and ft["round"] == last and ft["status"] != "running":
            return
        if ft and ft["round"] == last and _model_done(Path(ft["out"])):
            self._finish_finetune(0)
            return
        self.console.print(f"  resuming the fine-tuning of round {last}")
        self._launch_finetune(last)

    # ------------------------------------------------------------ measuring
    def _get_measurer(self):
        from tlm.measure import Measurer

        if self._measurer is None:
            self._measurer = Measurer(self.target, self.config.measure)
        return self._measurer

    def _candidates(self, gen, task, need: int, r: int, have: int) -> tuple[list, int]:
        import zlib

        from tlm.language import parse
        from tlm.measure import Candidate
        from tlm.space import task_space

        seed = zlib.crc32(f"{self.config.seed}/{r}/{task.hash}/{have}".encode())
        progs = gen.generate(task, need, seen=self.q.sentences(task.hash), seed=seed,
                             temperature=self.config.temperature, top_k=self.config.top_k)
        cands, bad = [], 0
        for g in progs:
            sch = getattr(g, "schedule", None)
            if sch is None:
                try:
                    sch = parse(g.sentence, task, self.target, space=task_space(task, self.target)).sch
                except TlmError:
                    bad += 1
                    continue
            cands.append(Candidate(task, schedule=sch, proposer="tlm", round=r, sentence=g.sentence))
        return cands, bad

    def _round(self, r: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        b = r % len(self.batches)
        batch = self.batches[b]
        model = self._newest_model(r)
        gen = self._generator(model)
        kp = self.config.kp
        todo = [(t, self.q.in_round(t.hash, r)) for t in batch]
        start_wall = self._wall()
        new = errors = gen_fail = 0
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("{task.fields[status]}"), console=self.console, disable=not self.progress,
                      transient=True) as bar:
            job = bar.add_task(f"round {r} (batch {b + 1}/{len(self.batches)}, {self._label(model)})",
                               total=kp * len(batch), completed=sum(min(kp, h) for _, h in todo), status="")
            for i, (task, have) in enumerate(todo):
                need = kp - have
                if need <= 0:
                    continue
                bar.update(job, status=f"task {i + 1}/{len(batch)} {task.name[:32]}: generating")
                try:
                    cands, bad = self._candidates(gen, task, need, r, have)
                except TlmError as err:
                    cands, bad = [], need
                    self.console.print(f"  [yellow]{task.name}[/yellow]: no programs generated: {err}")
                gen_fail += bad
                if cands:
                    bar.update(job, status=f"task {i + 1}/{len(batch)} {task.name[:32]}: measuring {len(cands)}")
                    results = self._get_measurer().measure(cands)
                    self.db.add_results(results, self.target.key)
                    new += len(results)
                    errors += sum(1 for res in results if not res.ok)
                    self.measured_now += len(results)
                self._poll_finetune()
                bar.update(job, advance=need)
        point = self._point(r, b, model)
        self.state["rounds"] = [x for x in self.state["rounds"] if x["round"] != r] + [{
            "round": r, "batch": b, "tasks": len(batch), "model": self._label(model), "measured": new,
            "errors": errors, "generation_failures": gen_fail, "seconds": round(self._wall() - start_wall, 3)}]
        self.state["curve"] = [p for p in self.state["curve"] if p["round"] != r] + [point]
        self.state["next_round"] = r + 1
        self._save()  # the round is committed
        write_convergence(self.work, self.state["curve"], self._title())
        norm = f"{point['normalized']:.4f}" if point["normalized"] is not None else "n/a (not every task measured yet)"
        self.console.print(
            f"round {r}: batch {b + 1}/{len(self.batches)} ({len(batch)} tasks) with {self._label(model)}: "
            f"{new} programs measured ({errors} failed); {point['measurements']} measurements in all; "
            f"total latency {point['total_latency_s'] * 1e3:.3f} ms over {point['tasks_with_program']} tasks; "
            f"normalized {norm}")

    def _point(self, r: int, b: int, model: Path) -> dict[str, Any]:
        counts = self.q.counts(self.hashes)
        bests = self.q.bests(self.hashes)
        weight = {t.hash: t.weight for t in self.tasks}
        if self.state["reference"] is None and all(counts[h] > 0 for h in self.hashes):
            covered = [h for h in self.hashes if bests[h] is not None]
            total = sum(weight[h] * bests[h] for h in covered)
            if covered and total > 0:
                self.state["reference"] = {"round": r, "measurements": sum(counts.values()), "tasks": covered,
                                           "total_latency_s": total}
        ref = self.state["reference"]
        normalized = None
        if ref is not None:
            normalized = sum(weight[h] * bests[h] for h in ref["tasks"] if bests.get(h) is not None) / ref["total_latency_s"]
        return {"round": r, "batch": b, "model": self._label(model), "measurements": sum(counts.values()),
                "tasks_measured": sum(1 for h in self.hashes if counts[h] > 0),
                "tasks_with_program": sum(1 for h in self.hashes if bests[h] is not None),
                "total_latency_s": sum(weight[h] * bests[h] for h in self.hashes if bests[h] is not None),
                "normalized": normalized, "wall_s": round(self._wall(), 3)}

    def _title(self) -> str:
        c = self.config
        return f"tlm loop: {len(self.tasks)} tasks, k_b={len(self.batches)}, k_p={c.kp}, {self.target.cpu}"

    # ------------------------------------------------------------ driver
    def _stop_reason(self) -> str | None:
        c = self.config
        if c.rounds and self.state["next_round"] >= c.rounds:
            return f"reached {c.rounds} rounds"
        reason = converged(self.state["curve"], self.patience, c.min_gain)
        if reason:
            return reason
        recent = sorted(self.state["rounds"], key=lambda x: x["round"])[-len(self.batches):]
        if len(recent) == len(self.batches) and self.state["next_round"] >= len(self.batches) \
                and all(x["measured"] == 0 for x in recent):
            return f"no new programs in the last {len(self.batches)} rounds"
        return None

    def run(self) -> dict[str, Any]:
        c = self.config
        kinds = sorted({t.kind for t in self.tasks})
        self.console.print(
            f"[bold]tlm loop[/bold] in {self.work}: {len(self.tasks)} tasks of {len(kinds)} kinds in "
            f"{len(self.batches)} batches ({', '.join(str(len(b)) for b in self.batches)} tasks), k_p={c.kp}; "
            f"base {self.base}; stop after {c.rounds or 'unlimited'} rounds or < {c.min_gain * 100:g}% gain over "
            f"{self.patience} measurements; {'pipelined' if c.pipeline else 'sequential'} fine-tuning")
        if self.state["next_round"]:
            self.console.print(f"  resuming at round {self.state['next_round']}")
        self._resume_finetune()
        self.state["stopped"] = None
        while (reason := self._stop_reason()) is None:
            r = self.state["next_round"]
            self._round(r)
            self._launch_finetune(r)
        self._wait_finetune()
        self.state["stopped"] = reason
        self._save()
        write_convergence(self.work, self.state["curve"], self._title(), reason)
        last = self.state["curve"][-1] if self.state["curve"] else {}
        model = self._newest_model(self.state["next_round"] + 1)
        self.console.print(f"[bold]stopped[/bold]: {reason}; newest model {model}; "
                           f"curve in {self.work / 'convergence.csv'} and convergence.png")
        return {"work": str(self.work), "rounds": self.state["next_round"], "stopped": reason,
                "measured_now": self.measured_now, "measurements": last.get("measurements", 0),
                "normalized": last.get("normalized"), "total_latency_s": last.get("total_latency_s"),
                "tasks": len(self.tasks), "model": str(model), "finetune": self.state.get("finetune"),
                "wall_s": round(self.state["wall_s"], 3)}

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:  # interrupted: a re-run relaunches it
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._log is not None:
            self._log.close()
        if self._measurer is not None and self._own_measurer:
            self._measurer.close()
        self.db.close()


def run_loop(config: LoopConfig, tasks: list | None = None, progress: bool = True, *,
             measurer=None) -> dict[str, Any]:
    """Run (or resume) the iterative optimization in `config.work`; returns a summary.

    `tasks` replaces `config.sources` (tests, notebooks); a re-run may omit them (tasks.json).
    `measurer`: a `tlm.measure.Measurer` for `config.target` to use (and leave open) instead
    of starting one from `config.measure` (its worker pools take a while to start).
    """
    loop = _Loop(config, tasks, progress, measurer)
    try:
        return loop.run()
    finally:
        loop.close()


# ---------------------------------------------------------------- command line

def _cmd_loop(args: argparse.Namespace) -> int:
    from tlm.tune import measure_config_from_args

    cfg = LoopConfig(
        base=args.base, work=args.work, sources=list(args.sources), kb=args.kb, kp=args.kp, rounds=args.rounds,
        max_tasks=args.max_tasks, patience_measurements=args.patience_measurements, ft_steps=args.ft_steps,
        ft_lr=args.ft_lr, ft_batch_size=args.ft_batch_size, ft_loss=args.ft_loss, pipeline=args.pipeline,
        temperature=args.temperature, top_k=args.top_k, seed=args.seed, target=args.target, device=args.device,
        per_task_demos=args.per_task_demos, measure=measure_config_from_args(args))
    res = run_loop(cfg, progress=args.progress)
    if args.json:
        json.dump(res, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        norm = f"{res['normalized']:.4f}" if res["normalized"] is not None else "n/a"
        print(f"{res['rounds']} rounds, {res['measurements']} measurements ({res['measured_now']} now) over "
              f"{res['tasks']} tasks; normalized total latency {norm}; stopped: {res['stopped']}; "
              f"model {res['model']}")
    return 0


def register_cli(sub) -> None:
    from tlm.tune import add_measure_args

    p = sub.add_parser("loop", help="iterative optimization: generate, measure, fine-tune (paper Alg. 1)")
    p.add_argument("--base", required=True, help="the pretrained model directory (TLM-base)")
    p.add_argument("--work", required=True, help="work directory (re-running the same command resumes)")
    p.add_argument("--sources", nargs="+", default=["pretrain-set"],
                   help="workloads whose training tasks are optimized (held-out test tasks are removed)")
    p.add_argument("--kb", type=int, default=4, help="task batches (one per round, cyclically)")
    p.add_argument("--kp", type=int, default=8, help="programs per task and round")
    p.add_argument("--rounds", type=int, default=0, help="stop after N rounds (0: only the convergence rule)")
    p.add_argument("--max-tasks", type=int, default=0, help="cap on the tasks (spread across kinds; 0: all)")
    p.add_argument("--patience-measurements", type=int, default=0,
                   help="stop when these many measurements gained < 1%% (0: kp x tasks)")
    p.add_argument("--ft-steps", type=int, default=0, help="fine-tuning steps (0: 3 epochs of demonstrations)")
    p.add_argument("--ft-lr", type=float, default=0.0, help="0: a tenth of the base preset's")
    p.add_argument("--ft-batch-size", type=int, default=16)
    p.add_argument("--ft-loss", default="decisions", choices=["decisions", "sentence"])
    p.add_argument("--per-task-demos", type=int, default=1, help="demonstrations per task")
    p.add_argument("--no-pipeline", dest="pipeline", action="store_false",
                   help="wait for each fine-tuning instead of measuring meanwhile")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", default=None, help="'host' (default), or a TVM target as JSON")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="for generation and fine-tuning")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    add_measure_args(p)
    p.set_defaults(func=_cmd_loop)
