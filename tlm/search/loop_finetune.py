"""The loop's fine-tuning process (tlm.search.loop): launched after each round on the best
programs measured so far, polled while the next round is measured (`LoopConfig.pipeline`) or
waited for, and relaunched on resume if a previous run did not finish it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from tlm.model.finetune import FinetuneConfig, FinetuneJob, FinetuneOutcome, finetune_outcome, model_done


class FinetuneProcess:
    """Mixed into the loop (`tlm.search.loop._Loop`), whose config, state, work directory,
    database, tasks, target, base model and console it uses."""

    _job: FinetuneJob | None
    _ft_pending: int | None = None  # a round whose fine-tuning waits for the running one to end (pipelined)
    after_task: Any

    def _launch_finetune(self, r: int) -> None:
        from tlm.model.demos import demo_records, every_target_demos, write_demos

        if self._job is not None and self.config.pipeline:
            # Measuring goes on: the running fine-tuning (at idle priority it can take longer than
            # a round) is not waited for; when it ends, the newest round's starts on the best
            # programs of that moment (`_start_pending`).
            self._ft_pending = r
            self.console.print(f"  round {r}: the fine-tuning of round {self.state['finetune']['round']} is still "
                               "running; the next one starts when it ends")
            return
        if self.config.demo_targets == "all":
            demos, by_target = every_target_demos(self.db, self.tasks, self.target, self.config.per_task_demos)
            demos = demos if by_target.get(self.target.key) else []  # none of its own yet: nothing to learn
            targets = [k for k, n in by_target.items() if n]  # the CPUs the model learns (its own first)
        else:
            demos = demo_records(self.db, self.tasks, self.target, self.config.per_task_demos)
            targets = [self.target.key]
        if not demos:
            self._wait_finetune()
            self.state["finetune"] = {"round": r, "status": "skipped", "demonstrations": 0}
            self.wd.save()
            self.console.print(f"  round {r}: no demonstrations yet, no fine-tuning")
            return
        # A round that improved no task's best (e.g. one whose tasks a resumed corpus had already
        # measured) leaves the demonstrations as they were: the fine-tuning running or done on
        # them is the one this round would start, so it is neither waited for nor started again.
        digest = demos_digest(demos, targets)
        ft = self.state.get("finetune")
        if ft and ft.get("digest") == digest and (ft["status"] == "done" or self._job is not None):
            self.console.print(f"  round {r}: the demonstrations of round {ft['round']}'s fine-tuning, unchanged: "
                               "no new fine-tuning")
            return
        self._wait_finetune()
        demos_path = self.work / "demos" / f"round-{r}.jsonl"
        write_demos(demos, demos_path)
        self._start_finetune(r, demos_path, len(demos), digest, targets)

    def _start_finetune(self, r: int, demos_path: Path, n_demos: int, digest: str, targets: list[str]) -> None:
        out = self.wd.model_dir(r)
        c = self.config
        for stale in out.parent.glob("*.ckpt"):  # a stopped fine-tuning of an earlier round: superseded
            if stale.name != f"{out.name}.ckpt":
                stale.unlink(missing_ok=True)
        ft = FinetuneConfig(steps=c.ft_steps, lr=c.ft_lr, batch_size=c.ft_batch_size, epochs=c.ft_epochs,
                            loss=c.ft_loss, seed=c.seed + r, device=c.device, threads=c.ft_threads)
        log_path = self.work / "logs" / f"finetune-round-{r}.log"
        self._job = FinetuneJob(self.base, demos_path, out, ft, log_path, targets, idle=c.ft_idle)
        self.state["finetune"] = {"round": r, "status": "running", "demonstrations": n_demos, "digest": digest,
                                  "targets": targets, "out": str(out), "log": str(log_path),
                                  "started_wall_s": round(self.wd.wall(), 3)}
        self.wd.save()
        mode = "in the background" if c.pipeline else "now"
        self.console.print(f"  fine-tuning the base on {n_demos} demonstrations into {out.name} {mode}")
        if not c.pipeline:
            self._wait_finetune()

    def _finish_finetune(self, outcome: FinetuneOutcome) -> None:
        ft = self.state["finetune"]
        self._job = None
        if outcome.ok:
            ft["status"] = "done"
            ft.update(outcome.report)
        else:
            ft["status"] = "failed"
            ft["error"] = outcome.error
            self.console.print(f"  [red]fine-tuning of round {ft['round']} failed[/red]: {ft['error']} "
                               f"(see {ft['log']}); the previous model stays in use")
        self.wd.save()

    def _poll_finetune(self) -> bool:
        """Whether a fine-tuning just ended (a pending one is started then)."""
        if self._job is not None and (outcome := self._job.poll()) is not None:
            self._finish_finetune(outcome)
            self._start_pending()
            return True
        return False

    def _start_pending(self) -> None:
        if self._ft_pending is not None and self._job is None:
            r, self._ft_pending = self._ft_pending, None
            self._launch_finetune(r)

    def _wait_all_finetunes(self) -> None:
        """The end of a run: the running fine-tuning, then the pending one."""
        self._wait_finetune()
        while self._ft_pending is not None:
            self._start_pending()
            self._wait_finetune()

    def _wait_finetune(self) -> None:
        if self._job is not None:
            with self.console.status(f"waiting for the fine-tuning of round {self.state['finetune']['round']}"):
                # the loop's checkpoint every few seconds: a wait can be long (the collector's
                # flushes, --hours and SIGTERM are checked there; the job is relaunched on resume)
                while (outcome := self._job.poll(timeout=5.0)) is None:
                    if self.after_task is not None:
                        self.after_task(self.db)
            self._finish_finetune(outcome)

    def _resume_finetune(self) -> None:
        """Relaunch the fine-tuning of the last committed round if a previous run did not finish it."""
        last = self.state["next_round"] - 1
        if last < 0:
            return
        ft = self.state.get("finetune")
        if ft and ft["round"] == last and ft["status"] != "running":
            return
        if ft and ft["round"] == last and model_done(Path(ft["out"])):
            self._finish_finetune(finetune_outcome(ft["out"], ft["log"], 0))
            return
        self.console.print(f"  resuming the fine-tuning of round {last}")
        demos_path = self.work / "demos" / f"round-{last}.jsonl"
        if ft and ft["round"] == last and "targets" in ft and demos_path.is_file():
            # the same demonstrations as the stopped run: it goes on from its checkpoint
            # (tlm.model.checkpoint); the next round fine-tunes on what was measured since
            self._start_finetune(last, demos_path, ft["demonstrations"], ft["digest"], ft["targets"])
        else:
            self._launch_finetune(last)


def demos_digest(demos: list, targets: list[str]) -> str:
    """What a fine-tuning learns from, in 16 hex digits: its demonstrations and their CPUs."""
    h = hashlib.sha256(json.dumps(targets).encode())
    for d in demos:
        h.update(json.dumps(d.to_json(), sort_keys=True).encode())
    return h.hexdigest()[:16]
