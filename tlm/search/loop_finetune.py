"""The loop's fine-tuning process (tlm.search.loop): launched after each round on the best
programs measured so far, polled while the next round is measured (`LoopConfig.pipeline`) or
waited for, and relaunched on resume if a previous run did not finish it."""

from __future__ import annotations

from pathlib import Path

from tlm.model.finetune import FinetuneConfig, FinetuneJob, FinetuneOutcome, finetune_outcome, model_done


class FinetuneProcess:
    """Mixed into the loop (`tlm.search.loop._Loop`), whose config, state, work directory,
    database, tasks, target, base model and console it uses."""

    _job: FinetuneJob | None

    def _launch_finetune(self, r: int) -> None:
        from tlm.model.demos import demo_records, every_target_demos, write_demos

        self._wait_finetune()
        if self.config.demo_targets == "all":
            demos, by_target = every_target_demos(self.db, self.tasks, self.target, self.config.per_task_demos)
            demos = demos if by_target.get(self.target.key) else []  # none of its own yet: nothing to learn
            targets = [k for k, n in by_target.items() if n]  # the CPUs the model learns (its own first)
        else:
            demos = demo_records(self.db, self.tasks, self.target, self.config.per_task_demos)
            targets = [self.target.key]
        if not demos:
            self.state["finetune"] = {"round": r, "status": "skipped", "demonstrations": 0}
            self.wd.save()
            self.console.print(f"  round {r}: no demonstrations yet, no fine-tuning")
            return
        demos_path = self.work / "demos" / f"round-{r}.jsonl"
        write_demos(demos, demos_path)
        out = self.wd.model_dir(r)
        c = self.config
        ft = FinetuneConfig(steps=c.ft_steps, lr=c.ft_lr, batch_size=c.ft_batch_size, epochs=c.ft_epochs,
                            loss=c.ft_loss, seed=c.seed + r, device=c.device, threads=c.ft_threads)
        log_path = self.work / "logs" / f"finetune-round-{r}.log"
        self._job = FinetuneJob(self.base, demos_path, out, ft, log_path, targets, idle=c.ft_idle)
        self.state["finetune"] = {"round": r, "status": "running", "demonstrations": len(demos),
                                  "out": str(out), "log": str(log_path), "started_wall_s": round(self.wd.wall(), 3)}
        self.wd.save()
        mode = "in the background" if c.pipeline else "now"
        self.console.print(f"  fine-tuning the base on {len(demos)} demonstrations into {out.name} {mode}")
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

    def _poll_finetune(self) -> None:
        if self._job is not None and (outcome := self._job.poll()) is not None:
            self._finish_finetune(outcome)

    def _wait_finetune(self) -> None:
        if self._job is not None:
            with self.console.status(f"waiting for the fine-tuning of round {self.state['finetune']['round']}"):
                outcome = self._job.wait()
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
        self._launch_finetune(last)
