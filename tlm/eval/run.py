"""`tlm eval --suite quick|standard|large|full --out DIR [--dry-run]`: the paper's evaluation, resumable.

A run is keyed by the machine's hardware (config.json): resuming it on another CPU is refused.
Steps (each skipped when its output exists; every measurement stays in OUT/dbs): peak (timed
2048^3 torch.mm); per workload MetaSchedule at the large budget and the TLM budgets in order in
one database, sqlite-backed-up after each budget (OUT/dbs/W/tlm@B), a JSON log per step
(OUT/logs); e2e (every snapshot compiled, timed interleaved with PyTorch and ONNX Runtime);
subgraph (one task per type tuned alone by TLM; "MS after k" from MetaSchedule's records in
measurement order); heldout (tlm.eval.heldout: 20 held-out tasks, each tuned alone by TLM@k,
random@k and MetaSchedule@k); heldout-retime (tlm.eval.retime: each held-out task's winners timed
again together, in interleaved rounds); generator cost. The plan is tlm.eval.suites; tlm.eval.tables then writes
the CSVs and tlm.eval.report summary.md and the PNGs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import time
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any

from tlm.errors import TlmError
from tlm.eval.suites import (EvalConfig, SUITES, Step, build_plan, db_dir, describe_plan, log_path, retire_tlm,
                             run_plan, tlm_results, workload_dbs)
from tlm.eval.tables import representatives, write_csv, write_tables
from tlm.eval.timing import interleaved, reference_runners  # noqa: F401 - benches import them from here


def snapshot(src_dir: str, dst_dir: str) -> None:
    """Copy a record database consistently (sqlite backup), atomically into `dst_dir`; the copy
    is a database of its own to the shard folders (tlm.measure.shards.forget_shards)."""
    from tlm.measure.database import DB_FILE, open_db
    from tlm.measure.shards import forget_shards

    shutil.rmtree(tmp := dst_dir + ".tmp", ignore_errors=True)
    os.makedirs(tmp)
    with closing(sqlite3.connect(os.path.join(src_dir, DB_FILE))) as src, \
            closing(sqlite3.connect(os.path.join(tmp, DB_FILE))) as dst:
        src.backup(dst)
    with open_db(tmp) as db:
        forget_shards(db)
    shutil.rmtree(dst_dir, ignore_errors=True)
    os.replace(tmp, dst_dir)


class Runner:
    """Executes steps for real (tuning, compiling, timing); tests inject a fake instead."""

    def __init__(self, cfg: EvalConfig, target=None):
        from tlm.graph.target import resolve_target

        self.cfg, self.target, self._tasks = cfg, resolve_target(target), {}
        self._tlm: tuple[Any, str] | None = None  # the held-out TuneConfig and model_tag (heldout_tlm)

    def tasks(self, w: str) -> list:
        from tlm.graph.extract import tasks_for_source

        if w not in self._tasks:
            self._tasks[w] = tasks_for_source(w, target=self.target).tasks
        return self._tasks[w]

    def reps(self) -> list[tuple[str, Any]]:  # (workload, task): one task per type
        return representatives({w: self.tasks(w) for w in self.cfg.workloads})

    def __call__(self, st: Step) -> None:
        getattr(self, "_" + st.kind)(st)  # _peak, _tune, _subgraph, _heldout, _generator, _e2e

    def heldout(self, choose: bool = False) -> list[tuple[str, Any]]:
        """The held-out benchmark's (workload, task): chosen once (OUT/heldout/tasks.json), then kept."""
        from tlm.eval.heldout import read_tasks, select_heldout, write_tasks
        from tlm.measure.shards import corpus_task_hashes
        from tlm.model.lm import repo_root

        cfg, path = self.cfg, Path(self.cfg.out) / "heldout" / "tasks.json"
        tbw = {w: self.tasks(w) for w in cfg.workloads}
        if path.is_file():
            return read_tasks(path, tbw)
        if not choose:
            return []
        # At least 32 programs (the largest k) whatever the ks: runs of any ks share their tasks.
        picked = select_heldout(tbw, cfg.heldout_tasks, self.target, max([32] + cfg.heldout_tlm_ks), cfg.seed,
                                exclude=corpus_task_hashes(repo_root() / "data" / "corpus"))
        write_tasks(path, picked)
        return picked

    def heldout_tlm(self):
        """The held-out benchmark's TLM: the TuneConfig its tuners start from (the shipped model and
        cost model for the target; EvalConfig.heldout_adapt_trees) and its `model_tag`."""
        from tlm.eval.heldout import model_tag
        from tlm.model.lm import default_model_dir
        from tlm.search.base import TuneConfig
        from tlm.search.costmodel import default_cost_model

        if self._tlm is None:
            cfg = self.cfg
            model = Path(cfg.heldout_generator) if cfg.heldout_generator else default_model_dir(self.target)
            cost_model = default_cost_model(self.target)
            adapt = {} if cfg.heldout_adapt_trees is None else {"cm_adapt_trees": cfg.heldout_adapt_trees}
            tc = TuneConfig(seed=cfg.seed, model=str(model), cost_model=str(cost_model) if cost_model else "none",
                            **adapt)
            self._tlm = (tc, model_tag(model, cost_model, tc.cm_adapt_trees))
        return self._tlm

    def e2e_model(self) -> str:
        """The end-to-end TLM's `model_tag`: the shipped generator and cost model for the target,
        with the tuner's default online update (what `_tune` runs)."""
        from tlm.eval.heldout import model_tag
        from tlm.model.lm import default_model_dir
        from tlm.search.base import TuneConfig
        from tlm.search.costmodel import default_cost_model

        tc = TuneConfig(seed=self.cfg.seed)
        return model_tag(default_model_dir(self.target), default_cost_model(self.target), tc.cm_adapt_trees)

    def heldout_dbs(self):
        """The held-out contenders' databases (OUT/dbs/heldout), kept in git as shards while open
        (tlm.eval.heldout.persisted)."""
        from tlm.eval.heldout import persisted

        cfg = self.cfg
        return persisted(os.path.join(cfg.out, "dbs", "heldout"), Path(cfg.out) / "heldout" / "records",
                         cfg.heldout_tlm_ks, cfg.heldout_ms_ks, self.heldout_tlm()[1])

    def _heldout(self, st: Step) -> None:
        from tlm.eval.heldout import run_heldout

        cfg, root = self.cfg, os.path.join(self.cfg.out, "dbs", "heldout")
        tc, tag = self.heldout_tlm()

        def run():
            with self.heldout_dbs():
                run_heldout(self.heldout(choose=True), root, self.target, cfg.heldout_tlm_ks, cfg.heldout_ms_ks,
                            tc, model=tag)
        from tlm.eval.suites import contenders

        dbs = [os.path.join(root, name) for name, _, _ in contenders(cfg.heldout_tlm_ks, cfg.heldout_ms_ks, tag)]
        self._logged(st, run, dbs, None)

    def _retime(self, st: Step) -> None:
        from tlm.eval.retime import retime

        cfg, (tc, tag) = self.cfg, self.heldout_tlm()

        def run():
            with self.heldout_dbs():
                retime(self.heldout(), os.path.join(cfg.out, "dbs", "heldout"), self.target, cfg.heldout_tlm_ks,
                       cfg.heldout_ms_ks, Path(cfg.out) / "heldout" / "retimed.csv", cfg.heldout_retime_rounds,
                       tag, tc.measure)
        self._logged(st, run, None, None)

    def _logged(self, st: Step, fn, db: str | None, proposer: str | None) -> None:
        """Run fn, then write the step's JSON log (measurements added, wall seconds; the time of
        an interrupted earlier attempt is carried over in LOG.partial)."""
        from tlm.measure.database import GREEDY, open_db

        def count():  # db may be a list of databases (the held-out benchmark's contenders)
            total = 0
            for one in (db if isinstance(db, list) else [db]):
                if one and os.path.isfile(os.path.join(one, "records.sqlite")):
                    with open_db(one) as d:  # unmeasured first choices (--budget 0) are no measurement
                        total += d.count(None, self.target.key, proposer) - (
                            d.count(None, self.target.key, GREEDY) if proposer is None else 0)
            return total

        path = Path(next((p for p in st.outputs if p.endswith(".json")), log_path(self.cfg, st.id)))
        partial = path.with_suffix(".partial")
        path.parent.mkdir(parents=True, exist_ok=True)
        before_s = json.loads(partial.read_text())["wall_s"] if partial.exists() else 0.0
        n0, t0 = count(), time.perf_counter()
        try:
            fn()
        except BaseException:
            partial.write_text(json.dumps({"wall_s": before_s + time.perf_counter() - t0}))
            raise
        path.write_text(json.dumps({
            "step": st.id, "workload": st.workload, "method": st.method, "budget": st.budget,
            "measurements": count() - n0, "total_measurements": count(), "wall_s": before_s + time.perf_counter() - t0,
            "finished": time.strftime("%Y-%m-%d %H:%M:%S")}, indent=1))
        partial.unlink(missing_ok=True)

    def _peak(self, st: Step) -> None:
        import torch

        torch.set_num_threads(self.target.cores)
        a, b, n = torch.randn(2048, 2048), torch.randn(2048, 2048), 2048
        best_ms = min(interleaved({"mm": lambda: torch.mm(a, b)}, rounds=5, min_ms=300)["mm"])
        Path(st.outputs[0]).write_text(json.dumps(
            {"gflops": 2 * n**3 / best_ms / 1e6, "n": n, "threads": self.target.cores, "cpu": self.target.cpu}))

    def _tune(self, st: Step) -> None:
        from tlm.search.base import TuneConfig
        from tlm.search.tune import tune

        live = db_dir(self.cfg, st.workload, st.method)

        def run():
            with workload_dbs(self.cfg, st.workload):  # to git at the step's end or its interruption
                tune(self.tasks(st.workload), st.method, st.budget, live, target=self.target,
                     config=TuneConfig(seed=self.cfg.seed), progress=True)
                if st.method == "tlm":
                    snapshot(live, st.outputs[0])  # what this budget compiles; the next one continues `live`
        self._logged(st, run, live, st.method)

    def _subgraph(self, st: Step) -> None:
        from tlm.measure.database import open_db
        from tlm.search.base import TuneConfig
        from tlm.search.tune import tune

        db, k = db_dir(self.cfg, "subgraph", "tlm"), max(self.cfg.subgraph_ks)

        def run():
            for _, t in self.reps():
                with open_db(db) as d:
                    if d.count(t.hash, self.target.key, "tlm") >= k:
                        continue
                tune([t], "tlm", f"{k}g", db, target=self.target, config=TuneConfig(seed=self.cfg.seed))
        self._logged(st, run, db, "tlm")

    def _generator(self, st: Step) -> None:
        import torch

        from tlm.model.generate import Generator
        from tlm.model.lm import default_model_dir

        torch.set_num_threads(self.target.cores)
        gen = Generator.from_dir(default_model_dir(self.target), self.target)
        rows = []
        for w, t in self.reps()[: self.cfg.generator_tasks]:
            for mode, n in (("greedy", 1), ("sampled", 16)):
                gen.forward_calls, t0 = 0, time.perf_counter()
                valid = len(gen.generate(t, n, greedy=mode == "greedy", seed=self.cfg.seed))
                s, per = time.perf_counter() - t0, max(1, valid)
                rows.append({"workload": w, "task": t.name, "kind": t.kind, "mode": mode, "requested": n,
                             "valid": valid, "model_passes": gen.forward_calls, "seconds": s,
                             "passes_per_program": gen.forward_calls / per, "ms_per_program": s * 1e3 / per})
        write_csv(st.outputs[0], rows)

    def _e2e(self, st: Step) -> None:
        import numpy as np
        import torch
        import tvm

        from tlm.compiler.build import CompileConfig, compile_imported
        from tlm.graph.importer import import_source

        w, cfg, threads = st.workload, self.cfg, self.target.cores
        torch.set_num_threads(threads)
        imported = import_source(w)
        rows, fns = [], {}
        args = [tvm.runtime.tensor(np.ascontiguousarray(x), tvm.cpu()) for x in imported.inputs]
        for label in [f"metaschedule@{cfg.ms_budget}"] + [f"tlm@{b}" for b in cfg.tlm_budgets]:
            db, t0 = db_dir(cfg, w, "metaschedule" if label.startswith("metaschedule") else label), time.perf_counter()
            try:
                m = compile_imported(imported, db, target=self.target, tasks=self.tasks(w),
                                     config=CompileConfig(repeat=3, min_repeat_ms=50, compare=False))
            except Exception as err:  # noqa: BLE001 - the other contenders are still timed
                rows.append({"workload": w, "method": label, "error": f"{type(err).__name__}: {err}"[:300]})
                continue
            rows.append({"workload": w, "method": label, "measurements": m.measurements, "matches": m.matches,
                         "max_abs_diff": m.max_abs_diff, "compile_s": time.perf_counter() - t0,
                         "task_estimate_ms": (m.weighted_task_latency_us or 0) / 1e3 or None,
                         "tuned_tasks": m.tuned_tasks, "greedy_tasks": m.greedy_tasks, "tasks": m.tasks})
            fns[label] = lambda vm=m.vm: vm["main"](*args)
        refs, note = reference_runners(imported, threads)
        if note:
            print(f"[eval] onnxruntime skipped: {note}")
        fns.update(refs)
        rows += [{"workload": w, "method": k} for k in ("pytorch", "onnxruntime") if k in fns]
        times = interleaved(fns, cfg.rounds)
        for r in (r for r in rows if r["method"] in times):
            r.update(e2e_ms=statistics.median(times[r["method"]]), e2e_min_ms=min(times[r["method"]]),
                     rounds=cfg.rounds, threads=threads)
        os.makedirs(os.path.dirname(st.outputs[0]), exist_ok=True)
        Path(st.outputs[0]).write_text(json.dumps({"workload": w, "rows": rows, "times_ms": times}, indent=1))


def evaluate(cfg: EvalConfig, dry_run: bool = False, runner=None, log=print, report_only: bool = False) -> int:
    """Run (or with dry_run print) the plan, then write the tables and the report (report_only:
    from what is measured so far, measuring nothing)."""
    from tlm.eval.report import write_report

    if dry_run:
        from tlm.graph.extract import cached_tasks
        from tlm.graph.target import resolve_target

        info, tbw = resolve_target(None), {}
        for w in cfg.workloads:  # estimates only from the task cache: a dry run imports no model
            if (cached := cached_tasks(w, info)) is not None:
                tbw[w] = cached.tasks
        types = len(representatives(tbw)) if len(tbw) == len(cfg.workloads) else None
        log(describe_plan(cfg, build_plan(cfg, {w: len(t) for w, t in tbw.items()}, types)))
        return 0
    from tlm.graph.target import resolve_target
    from tlm.measure.shards import hardware_slug

    cfg.hardware = cfg.hardware or hardware_slug(resolve_target(None).key)
    runner = runner or Runner(cfg)
    if cfg.heldout_tasks and isinstance(runner, Runner):
        cfg.heldout_model = runner.heldout_tlm()[1]
    saved = Path(cfg.out) / "config.json"  # the end-to-end TLM's models, as the run so far had them
    old_tag = json.loads(saved.read_text()).get("e2e_model", "") if saved.is_file() else None
    e2e_tlm = cfg.e2e and bool(cfg.tlm_budgets or cfg.subgraph_ks) and hasattr(runner, "e2e_model")
    if e2e_tlm:  # a report alone changes nothing: it names the models that tuned
        cfg.e2e_model = (old_tag or "") if report_only else runner.e2e_model()
    cfg.save()
    if e2e_tlm and not report_only and old_tag is not None and old_tag != cfg.e2e_model:
        if tlm_results(cfg.out):
            retire_tlm(cfg.out, old_tag, log)
    with ExitStack() as kept:  # the tuning databases come back from git first: steps they hold are done
        for w in cfg.workloads if cfg.e2e else []:
            kept.enter_context(workload_dbs(cfg, w))
        plan = build_plan(cfg)
        status = {} if report_only else run_plan(plan, runner, log)
        if isinstance(runner, Runner):
            write_tables(cfg, {w: runner.tasks(w) for w in cfg.workloads} if cfg.e2e else {}, runner.target.key)
    if isinstance(runner, Runner):
        from tlm.eval.heldout import heldout_rows

        picked = runner.heldout() if cfg.heldout_tasks else []
        if picked:
            tuned = all(st.done() for st in plan if st.kind == "heldout")  # after it, a short run ran out of programs
            with runner.heldout_dbs():
                rows = heldout_rows(picked, os.path.join(cfg.out, "dbs", "heldout"), runner.target.key,
                                    cfg.heldout_tlm_ks, cfg.heldout_ms_ks, cfg.heldout_model, complete=tuned)
            from tlm.eval.retime import apply_retimed

            apply_retimed(rows, Path(cfg.out) / "heldout" / "retimed.csv")
            write_csv(os.path.join(cfg.out, "heldout.csv"), rows)
        if cfg.corpus:  # the corpus as committed now, and none of the evaluated tasks in it
            from tlm.eval.corpus import write_corpus_table
            from tlm.model.lm import repo_root

            write_corpus_table(cfg.out, repo_root() / "data" / "corpus", {t.hash for _, t in picked} | {
                t.hash for w in (cfg.workloads if cfg.e2e else []) for t in runner.tasks(w)})
    write_report(cfg.out)
    bad = [k for k, v in status.items() if v in ("failed", "blocked")]
    log(f"[eval] report: {os.path.join(cfg.out, 'summary.md')}" + (f"; failed/blocked: {bad}" if bad else ""))
    return 1 if bad else 0


def _cmd_eval(args: argparse.Namespace) -> int:
    if any(k < 0 for k in (args.heldout_ks or []) + (args.heldout_ms_ks or [])) or (args.heldout_tasks or 0) < 0:
        raise TlmError("--heldout-tasks and the held-out k values must be >= 0")
    if (args.heldout_adapt_trees or 0) < 0 or (args.heldout_retime_rounds or 0) < 0:
        raise TlmError("--heldout-adapt-trees and --heldout-retime-rounds must be >= 0")
    if args.heldout_ms_ks is not None and 0 in args.heldout_ms_ks:
        raise TlmError("--heldout-ms-ks: MetaSchedule@0 does not exist (k >= 1)")
    if args.heldout_generator and not (Path(args.heldout_generator) / "model.safetensors").is_file():
        raise TlmError(f"--heldout-generator {args.heldout_generator}: no model there (model.safetensors)")
    out = args.out
    if out is None:  # one folder per suite and machine: a run resumes only on its own hardware
        from tlm.graph.target import resolve_target
        from tlm.measure.shards import hardware_slug

        out = os.path.join("results", f"{args.suite}-{hardware_slug(resolve_target(None).key)}")
    return evaluate(EvalConfig.for_suite(args.suite, out, args.workloads, rounds=args.rounds,
                                         heldout_tasks=args.heldout_tasks, heldout_tlm_ks=args.heldout_ks,
                                         heldout_ms_ks=args.heldout_ms_ks,
                                         heldout_adapt_trees=args.heldout_adapt_trees,
                                         heldout_retime_rounds=args.heldout_retime_rounds,
                                         heldout_generator=args.heldout_generator), args.dry_run,
                    report_only=args.report_only)


def register_cli(sub) -> None:
    p = sub.add_parser("eval", help="the paper's evaluation (subgraph, end-to-end, cost, efficiency), resumable")
    p.add_argument("--suite", choices=tuple(SUITES), default="quick")
    p.add_argument("--out", default=None, help="output directory (databases, CSVs, summary.md, PNGs; default "
                                                 "results/SUITE-HARDWARE, e.g. results/heldout-llvm-znver5-2c)")
    p.add_argument("--workloads", nargs="+", default=None, help="override the suite's workloads")
    p.add_argument("--rounds", type=int, default=None, help="interleaved end-to-end timing rounds (default 5)")
    p.add_argument("--heldout-tasks", type=int, default=None,
                   help="tasks of the held-out subgraph benchmark (suites full and heldout: 20; 0: none)")
    p.add_argument("--heldout-ks", type=int, nargs="+", default=None,
                   help="held-out benchmark: TLM@k (and random@k for k > 0); default 0 1 10 32")
    p.add_argument("--heldout-ms-ks", type=int, nargs="+", default=None,
                   help="held-out benchmark: MetaSchedule@k; default 1 10 64 256")
    p.add_argument("--heldout-adapt-trees", type=int, default=None,
                   help="held-out benchmark: the TLM tuner's online cost model update, in trees (default "
                        "TuneConfig.cm_adapt_trees; 0: off); part of TLM's database key")
    p.add_argument("--heldout-retime-rounds", type=int, default=None,
                   help="held-out benchmark: after the tuning, each task's winners are timed again together "
                        "in this many interleaved rounds, the report's latencies (default 3; 0: off)")
    p.add_argument("--heldout-generator", default="",
                   help="held-out benchmark: TLM's model directory (default: the shipped model); its "
                        "weights are part of TLM's database key, so a candidate is measured beside the shipped one")
    p.add_argument("--dry-run", action="store_true", help="print the plan and estimated measurements only")
    p.add_argument("--report-only", action="store_true",
                   help="write the tables and summary.md from what is measured so far, measuring nothing")
    p.set_defaults(func=_cmd_eval)
