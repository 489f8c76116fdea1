"""Iterative optimization (paper Algorithm 1 and §5.3): generate -> measure -> SFT, in rounds.

    tlm loop --base MODEL --work DIR [--sources pretrain-set ...] [--kb 4] [--kp 8] [--rounds N]

The training tasks (the sources' tasks minus every task of the held-out test workloads,
optionally capped with --max-tasks, spread across task kinds) are sorted by task kind and dealt
into k_b batches, one every k_b. Round r takes batch r mod k_b, measured so that every task kind
gets an equal share of the time, lightest tasks first (tlm.search.loop_state.round_order);
`--schedule gain`: after the first k_b rounds, the tasks where the weighted total latency is
expected to gain most (tlm.search.loop_state.gain_batch). The newest finished model (round
0: the base) generates k_p new programs per task (sentences already in the database are
skipped; with a cost model, `LoopConfig.cost_model`, k_p of cm_pool x k_p samples: cm_explore
plain samples and the cost model's top picks), they are measured and committed (proposer "tlm",
round r; a task's programs build in the measurer's worker processes while the next task's are
generated, `LoopConfig.overlap`; the timed runs still have the machine to themselves), then the
demonstrations
(the best measured program of every training task, over all records) fine-tune the BASE model
into work/models/round-<r>. Fine-tuning runs in its own process (tlm.search.loop_finetune:
`python -m tlm.model.finetune`, one torch thread) while the next round is measured with the
previous model: the paper's two-process pipeline, where demonstrations i give TLM i+2.
`--no-pipeline` waits instead (quieter timings on a machine with few cores, since the
fine-tuning process competes with the measurement for CPU), unless the fine-tuning runs at idle
priority (`LoopConfig.ft_idle`: it gets only the cores the measuring leaves idle).

The work directory (tlm.search.loop_state) holds everything needed to resume. A program is never
measured twice: a round killed half-way measures only what it lacks (per-task counts of its
committed records), and a committed round is never redone. The loop stops when the normalized
total latency (tlm.search.loop_state, paper Figure 9) improved by less than `min_gain` (1%) over the
last --patience-measurements measurements (default: k_p per task, one pass over all tasks),
after --rounds rounds, or when the model finds no new program in k_b rounds.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from tlm.errors import TlmError, read_json
from tlm.measure.config import MeasureConfig
from tlm.search.loop_finetune import FinetuneProcess
from tlm.search.loop_state import (CSV_COLUMNS, STATE_VERSION, WorkDir, batch_key, converged, select_tasks,
                                   split_batches, stop_reason, write_convergence)

__all__ = ["CSV_COLUMNS", "STATE_VERSION", "LoopConfig", "batch_key", "converged", "run_loop",
           "select_tasks", "split_batches", "write_convergence"]


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
    ft_loss: str = "sentence"  # bench/results/sft_loss.md
    ft_threads: int = 1
    # The fine-tuning process at idle priority (Linux SCHED_IDLE, nice 19): with `pipeline`, it
    # trains on the cores the measuring leaves idle (`idle_neighbour` in bench/README.md).
    ft_idle: bool = True
    # PyTorch threads of this process's generation (0: PyTorch's default, one per core). 1 by
    # default: beside another busy process, PyTorch's threads wait for one another's time slices
    # (`generation` in bench/README.md: 1.6x faster beside two busy processes, 3.5x beside a PyTorch
    # job, 3% slower on a quiet machine); fine-tuning runs in its own process with ft_threads.
    gen_threads: int = 1
    per_task_demos: int = 1
    demo_targets: str = "self"  # "all": also every other CPU's demonstrations in the database
    # Which tasks a round measures: "cycle" (batch r mod k_b, the paper's) or "gain" (a first
    # cycle over every batch, then the tasks where the total latency is expected to gain most).
    schedule: str = "cycle"
    pipeline: bool = True
    # Generate task i+1's programs while task i's build (Measurer.start / finish); the timed runs
    # still have the machine to themselves (`collect_rate` in bench/README.md). False: one after the other.
    overlap: bool = True
    temperature: float = 1.0
    top_k: int = 0
    # The cost model choosing which samples to measure (tlm.search.costmodel): "none", "auto" (the
    # shipped one for the target) or a directory. With one, a task's k_p programs are `cm_explore`
    # plain samples (what the model proposes, unranked: the cost model and the fine-tuning keep
    # seeing programs it would not choose) and the cost model's top k_p - cm_explore of
    # `cm_pool` x k_p samples.
    cost_model: str = "none"
    cm_pool: int = 4
    cm_explore: int = 2
    # With a cost model: boosted this many more trees on the task's correct programs measured on
    # this CPU before it ranks the task's samples (CostModel.adapted, the TLM tuner's online update;
    # 0: the cost model as is). Features of measured programs are cached in WORK/features.
    cm_adapt_trees: int = 0
    transfer: int = 0  # of a task's k_p programs, up to this many are other CPUs' best (tlm.search.proposals)
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


# ---------------------------------------------------------------- the loop

class _Loop(FinetuneProcess):
    def __init__(self, config: LoopConfig, tasks: list | None, progress: bool, measurer=None, after_task=None):
        from rich.console import Console

        from tlm.graph.target import resolve_target
        from tlm.measure.database import open_db
        from tlm.model.lm import MODEL_FILES

        self.config = config
        self.progress = progress
        self.console = Console(stderr=True, quiet=not progress)
        self.work = Path(config.work)
        self.base = Path(config.base)
        if config.kb < 1 or config.kp < 1:
            raise TlmError("--kb and --kp must be at least 1")
        if config.schedule not in ("cycle", "gain"):
            raise TlmError(f"unknown schedule {config.schedule!r} (cycle or gain)")
        missing = [f for f in MODEL_FILES if not (self.base / f).is_file()]
        if missing:
            raise TlmError(f"--base {self.base} is not a model directory (missing {', '.join(missing)})")
        self.target = resolve_target(config.target)
        self.wd = WorkDir(self.work)
        self.wd.check_config(dict(config.to_json(), target=self.target.config))
        self.tasks = self.wd.tasks(tasks, config.max_tasks, self._load_tasks)
        self.batches = split_batches(self.tasks, config.kb)
        self.patience = config.patience_measurements or config.kp * len(self.tasks)
        self.state = self.wd.load_state(self.target.key)
        self.db = open_db(str(self.work / "db"))
        self._job = None  # the fine-tuning process (FinetuneProcess)
        self._measurer = measurer
        self._own_measurer = measurer is None
        self._gen: tuple[str, Any] | None = None
        self._cm, self._cm_loaded, self._cm_label = None, False, None
        self._others: list | None = None  # other CPUs of the database (with LoopConfig.transfer)
        self.measured_now = 0
        # called with the database at every checkpoint: once the tasks are loaded, after each
        # task's results are committed, and every few seconds while waiting for a fine-tuning
        self.after_task = after_task

    def _load_tasks(self) -> list:
        if not self.config.sources:
            raise TlmError("no tasks: give --sources (e.g. pretrain-set)")
        from tlm.space.sampling import corpus_tasks

        with self.console.status("loading the training tasks"):
            return corpus_tasks(list(self.config.sources), hold_out="test", target=self.target)[0]

    # ------------------------------------------------------------ models
    def _newest_model(self, before: int) -> Path:
        self._poll_finetune()
        return self.wd.newest_model(before) or self.base

    def _generator(self, model: Path):
        from tlm.model.generate import Generator

        if self._gen is None or self._gen[0] != str(model):
            if self.config.gen_threads > 0:
                import torch

                torch.set_num_threads(self.config.gen_threads)
            self._gen = (str(model), Generator.from_dir(model, self.target, self.config.device))
        return self._gen[1]

    def _label(self, model: Path) -> str:
        return "base" if model == self.base else model.name

    # ------------------------------------------------------------ measuring
    def _get_measurer(self):
        from tlm.measure.cuda_local import measurer_for

        if self._measurer is None:
            self._measurer = measurer_for(self.target, self.config.measure)
        return self._measurer

    def _candidates(self, gen, task, need: int, r: int, have: int) -> tuple[list, int]:
        from tlm.search.proposals import candidates

        return candidates(self.db, gen, task, self.target, self.config, self._cost_model(), self._others, need, r,
                          have)

    def _cost_model(self):
        if not self._cm_loaded:
            from tlm.search.costmodel import META_FILE, CostModel, default_cost_model

            spec = self.config.cost_model
            path = default_cost_model(self.target) if spec == "auto" else None if spec == "none" else Path(spec)
            self._cm, self._cm_loaded = (CostModel.load(path, self.target) if path else None), True
            if path:  # which one ranked a round's samples (the shipped one is retrained between sessions)
                meta = read_json(path / META_FILE) if (path / META_FILE).is_file() else {}
                self._cm_label = {"path": str(path), "programs": meta.get("programs")}
        return self._cm

    def _batch(self, r: int) -> tuple[int, list]:
        """(batch index, tasks) of round r; a `gain` round's choice is saved before it is measured,
        so a resumed round measures the same tasks."""
        from tlm.search.loop_state import gain_batch, round_order

        b = r % len(self.batches)
        if self.config.schedule != "gain" or r < len(self.batches):
            return b, round_order(self.batches[b])
        chosen = self.state.setdefault("chosen", {})
        if str(r) not in chosen:
            key = self.target.key
            picked = gain_batch(self.tasks, max(len(x) for x in self.batches), self.db.best_by_task(key),
                                self.db.best_before_last_round(key, "tlm"), self.db.counts_by_task(key),
                                self.config.kp, barren=self.wd.barren())
            chosen.clear()  # only the round in flight needs remembering
            chosen[str(r)] = [t.hash for t in picked]
            self.wd.save()
        by_hash = {t.hash: t for t in self.tasks}
        return -1, [by_hash[h] for h in chosen[str(r)] if h in by_hash]

    def _round(self, r: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        b, batch = self._batch(r)
        where = f"batch {b + 1}/{len(self.batches)}" if b >= 0 else "the tasks expected to gain most"
        model = self._newest_model(r)
        gen = self._generator(model)
        kp = self.config.kp
        todo = [(t, sum(self.db.counts_by_round(t.hash, self.target.key, p).get(r, 0) for p in ("tlm", "transfer")))
                for t in batch]
        if self.config.transfer and self._others is None:
            from tlm.model.demos import other_targets

            self._others = other_targets(self.db, self.target)
        start_wall = self.wd.wall()
        new = errors = gen_fail = 0
        gen_s = 0.0
        used = [self._label(model)]  # the models that generated this round (one, unless a fine-tuning ended)
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("{task.fields[status]}"), console=self.console, disable=not self.progress,
                      transient=True) as bar:
            job = bar.add_task(f"round {r} ({where}, {self._label(model)})",
                               total=kp * len(batch), completed=sum(min(kp, h) for _, h in todo), status="")
            # Task i's programs build (in the worker processes) while task i+1's are generated here;
            # only the timed runs have the machine to themselves (Measurer.start / finish).
            pending = None  # (task, need, PendingBatch, best known latency) being built
            measure_s = 0.0

            def finish_pending() -> None:
                nonlocal new, errors, measure_s
                p_task, p_need, started, best = pending
                t0 = time.perf_counter()
                results = self._get_measurer().finish(started, best_s={p_task.hash: best} if best else None)
                self.db.add_results(results, self.target.key)
                measure_s += time.perf_counter() - t0
                new += len(results)
                errors += sum(1 for res in results if not res.ok)
                self.measured_now += len(results)
                if self.after_task is not None:
                    self.after_task(self.db)
                bar.update(job, advance=p_need)

            for i, (task, have) in enumerate(todo):
                need = kp - have
                if need <= 0:
                    continue
                bar.update(job, status=f"task {i + 1}/{len(batch)} {task.name[:32]}: generating")
                t0 = time.perf_counter()
                try:
                    cands, bad = self._candidates(gen, task, need, r, have)
                except TlmError as err:
                    cands, bad = [], need
                    self.console.print(f"  [yellow]{task.name}[/yellow]: no programs generated: {err}")
                gen_s += time.perf_counter() - t0
                gen_fail += bad
                if pending is not None:
                    finish_pending()
                    pending = None
                if cands:
                    bar.update(job, status=f"task {i + 1}/{len(batch)} {task.name[:32]}: measuring {len(cands)}")
                    t0 = time.perf_counter()
                    best = self.db.best(task.hash, self.target.key)  # for MeasureConfig.slow_factor
                    pending = (task, need, self._get_measurer().start(cands), best.median_s if best else None)
                    measure_s += time.perf_counter() - t0
                    if not self.config.overlap:
                        finish_pending()
                        pending = None
                else:
                    bar.update(job, advance=need)
                    if not have and not self.db.count(task_hash=task.hash, target_key=self.target.key) and \
                            self.wd.mark_barren(task.hash):
                        self.console.print(f"  [yellow]{task.name}[/yellow] ({task.hash}): no program could be "
                                           "generated (every sample failed TVM's checks); left out of the "
                                           "reference point, chosen last")
                if self._poll_finetune() and (newer := self._newest_model(r)) != model:
                    model, gen = newer, self._generator(newer)  # a pipelined fine-tuning just finished
                    used.append(self._label(model))
                    self.console.print(f"  round {r}: generating with {self._label(model)} from task {i + 2} on")
            if pending is not None:
                finish_pending()
        point = self.wd.point(r, b, self._label(model), self.tasks, self.db.counts_by_task(self.target.key),
                              self.db.best_by_task(self.target.key))
        self.wd.commit_round({
            "round": r, "batch": b, "tasks": len(batch), "model": used[0], "models": used, "measured": new,
            "errors": errors, "generation_failures": gen_fail, "seconds": round(self.wd.wall() - start_wall, 3),
            "generate_s": round(gen_s, 3), "measure_s": round(measure_s, 3), "cost_model": self._cm_label}, point)
        write_convergence(self.work, self.state["curve"], self._title())
        norm = f"{point['normalized']:.4f}" if point["normalized"] is not None else "n/a (not every task measured yet)"
        self.console.print(
            f"round {r}: {where} ({len(batch)} tasks) with {self._label(model)}: "
            f"{new} programs measured ({errors} failed); {point['measurements']} measurements in all; "
            f"total latency {point['total_latency_s'] * 1e3:.3f} ms over {point['tasks_with_program']} tasks; "
            f"normalized {norm}")

    def _title(self) -> str:
        c = self.config
        return f"tlm loop: {len(self.tasks)} tasks, k_b={len(self.batches)}, k_p={c.kp}, {self.target.cpu}"

    # ------------------------------------------------------------ driver
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
        if self.after_task is not None:
            self.after_task(self.db)
        self._resume_finetune()
        self.state["stopped"] = None
        while (reason := stop_reason(self.state, c.rounds, self.patience, c.min_gain, len(self.batches))) is None:
            r = self.state["next_round"]
            self._round(r)
            self._launch_finetune(r)
        self._wait_all_finetunes()
        self.state["stopped"] = reason
        self.wd.save()
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
        if self._job is not None:  # interrupted: a re-run relaunches it
            self._job.terminate()
        if self._measurer is not None and self._own_measurer:
            self._measurer.close()
        self.db.close()


def run_loop(config: LoopConfig, tasks: list | None = None, progress: bool = True, *,
             measurer=None, after_task=None) -> dict[str, Any]:
    """Run (or resume) the iterative optimization in `config.work`; returns a summary.

    `tasks` replaces `config.sources` (tests, notebooks); a re-run may omit them (tasks.json).
    `measurer`: a `tlm.measure.measurer.Measurer` for `config.target` to use (and leave open) instead
    of starting one from `config.measure` (its worker pools take a while to start).
    `after_task(db)`: called after each task's new records are committed, and every few seconds while
    the loop waits for a fine-tuning (tlm.search.collect
    flushes them to the corpus there).
    """
    loop = _Loop(config, tasks, progress, measurer, after_task)
    try:
        return loop.run()
    finally:
        loop.close()
