"""Whole-model compile: apply the best record of each task, build, check, time, compare.

Each task gets its fastest measured record for this target; a task with none gets
the TLM tuner's unmeasured first choice (`--budget 0`, proposer "tlm-greedy": the most likely
of 16 samples by default, `TuneConfig.pick`) when
there is one, else TVM's default schedule. Records of other
targets are never applied (the MetaSchedule database view holds only this target's records).
The artifact is a shared library that `tvm.runtime.load_module` + `relax.VirtualMachine`
reload; we time and check the reloaded one, so a wrong program (greedy ones included) fails
the output check.
The entry points (`tlm compile`, `tlm.compile`, tuning first with `--budget`) are in
tlm/compiler/job.py.
"""

from __future__ import annotations

import itertools
import os
import statistics
import tempfile
import warnings
from dataclasses import dataclass, field
from typing import Any

from tlm.compiler.apply import build_relax, compile_database, out_numpy, task_picks, to_tvm
from tlm.compiler.contenders import onnxruntime_ms, pytorch_ms
from tlm.errors import TlmError, TlmWarning

# Outputs must match the reference within ATOL + RTOL * max|reference| (float32 end to end).
RTOL = 1e-3
ATOL = 1e-4


@dataclass
class CompileConfig:
    repeat: int = 10  # timed repeats (median reported)
    min_repeat_ms: int = 100
    rtol: float = RTOL
    atol: float = ATOL
    compare: bool = True  # also time PyTorch eager and ONNX Runtime
    fast_math: bool = True  # tlm.graph.passes' vectorizable math (False: TVM's own, for benchmarks)
    prepack: bool | frozenset[str] = True  # pre-packed weights (tlm.graph.passes.layout_free; False: benchmarks)
    pack_convs: bool = True  # conv weights packed at compile time (tlm.compiler.pack; False: benchmarks)
    # LLVM: each heavy task's best records (this many, < 2: none) re-timed cold on the cores, the
    # fastest applied (tlm.compiler.cold_pick); kept in the record database for the next compile
    cold_pick: int = 4


@dataclass
class CompiledModel:
    """A compiled model: call it with numpy arrays or torch tensors, get numpy back."""

    vm: Any = field(repr=False)
    artifact: str
    latency_ms: float
    max_abs_diff: float | None
    tolerance: float | None
    pytorch_ms: float | None = None
    onnxruntime_ms: float | None = None
    onnxruntime_note: str | None = None
    tasks: int = 0
    tuned_tasks: int = 0
    greedy_tasks: int = 0  # tasks compiled with their unmeasured greedy program
    measurements: int = 0
    cold_measurements: int = 0  # compile-time re-timings of found programs (tlm.compiler.cold_pick)
    # the final pick (tlm.compiler.cold_pick): timed and changed task names, and where two builds
    # were timed, faster_whole's verdict (applied, whole_ms, checked)
    final_pick: dict | None = field(default=None, repr=False)
    threads: int = 1
    target: dict | None = None
    task_rows: list = field(default_factory=list, repr=False)  # see compile_database
    db: str | None = None
    budget: str | None = None  # set when the model was tuned with the TLM tuner first
    tune_s: float | None = None
    earlier_measurements: int = 0  # of `measurements`, those already in `db` before this call tuned
    wall_s: float | None = None  # tuning (if any) + build + check + timing

    def __call__(self, *inputs):
        return out_numpy(self.vm["main"](*to_tvm(inputs)))

    @property
    def matches(self) -> bool:
        return self.max_abs_diff is not None and self.max_abs_diff <= (self.tolerance or 0.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "latency_ms": self.latency_ms, "pytorch_ms": self.pytorch_ms,
            "onnxruntime_ms": self.onnxruntime_ms, "onnxruntime_note": self.onnxruntime_note,
            "max_abs_diff": self.max_abs_diff, "tolerance": self.tolerance, "matches": self.matches,
            "measurements": self.measurements, "cold_measurements": self.cold_measurements,
            "final_pick": self.final_pick,
            "tasks": self.tasks, "tuned_tasks": self.tuned_tasks,
            "greedy_tasks": self.greedy_tasks, "threads": self.threads, "artifact": self.artifact,
            "target": self.target, "weighted_task_latency_us": self.weighted_task_latency_us,
            "db": self.db, "budget": self.budget, "tune_s": self.tune_s, "wall_s": self.wall_s,
            "earlier_measurements": self.earlier_measurements,
            "untuned_tasks": self.untuned_tasks, "task_rows": self.task_rows,
        }

    def earlier_note(self) -> str:
        """What the summary line says when the records directory held measurements already: a
        budget adds to them (resuming), so budget 0 there is not a zero-measurement build."""
        if not self.earlier_measurements:
            return ""
        return (f" ({self.earlier_measurements} of them already in the records directory from an earlier run, "
                f"{max(self.measurements - self.earlier_measurements, 0)} new; give --db to start from none)")

    @property
    def untuned_tasks(self) -> list[str]:
        """Tasks that run TVM's default schedule: no measured record and no greedy program."""
        return [r["name"] for r in self.task_rows if r["status"] == "untuned"]

    def untuned_note(self) -> str | None:
        """One line naming the untuned tasks, or None when every task has a program."""
        names = self.untuned_tasks
        if not names:
            return None
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        return (f"{len(names)} of {self.tasks} tasks run TVM's default schedule, untuned: {shown} "
                "(tune them, or compile with a budget)")

    @property
    def weighted_task_latency_us(self) -> float | None:
        """Sum of weight x measured best latency over the tuned tasks."""
        vals = [r["weight"] * r["best_us"] for r in self.task_rows if r.get("best_us")]
        return sum(vals) if vals else None


def compile_imported(imported, db: str, target=None, output: str | None = None,
                     config: CompileConfig | None = None, tasks=None) -> CompiledModel:
    """Compile an `ImportedModel` (tlm.graph.extract) with the best records of `db` for `target`."""
    import numpy as np
    import tvm

    from tlm.compiler.check import max_abs_diff, tolerance_for, without_packing
    from tlm.graph.extract import extract_from_relax
    from tlm.graph.target import physical_cores, resolve_target, runtime_threads
    from tlm.measure.database import open_db
    from tlm.space.intrin import light_tensor_intrin

    cfg = config or CompileConfig()
    info = resolve_target(target)
    light_tensor_intrin()
    database = open_db(db, create=False)
    try:
        if tasks is None:
            tasks = extract_from_relax(imported.mod, info, cfg.fast_math, cfg.prepack)
        picks, final = task_picks(database, tasks, info), {}
        if cfg.cold_pick > 1 and info.kind == "llvm":
            from tlm.compiler.cold_pick import ColdPickConfig, cold_pick

            final = cold_pick(database, tasks, info, picks, info.cores, ColdPickConfig(top=cfg.cold_pick))
        changed = {h: p.record for h, p in final.items() if p.changed}
        variants = _variants(database, tasks, info, picks, final)
    finally:
        database.close()
    artifact = output or os.path.join(tempfile.mkdtemp(prefix="tlm-model-"), "model.so")
    os.makedirs(os.path.dirname(os.path.abspath(artifact)), exist_ok=True)
    alt = os.path.splitext(artifact)[0] + ".final-pick.so"  # the final pick's build, until it wins
    dev = tvm.cpu()
    built = _build_variants(variants, imported, info, cfg, artifact, alt)
    want = np.asarray(imported.reference(imported.inputs))  # after the builds: a failing build says so first
    tolerance = tolerance_for(want, cfg)
    if max_abs_diff(built[0][1], want) > tolerance and any(r["status"] == "greedy" for r in built[0][2]):
        rechecked = _recheck(db, tasks, info, picks, final)  # an unmeasured program may be the wrong one
        if rechecked:
            variants = rechecked
            built = _build_variants(variants, imported, info, cfg, artifact, alt)
    if max_abs_diff(built[0][1], want) > tolerance and cfg.pack_convs:
        rebuild = lambda c: _build_variants(variants, imported, info, c, artifact, alt)  # noqa: E731
        built = without_packing(rebuild, cfg, want, tolerance)
    args = [tvm.runtime.tensor(np.ascontiguousarray(x), dev) for x in imported.inputs]
    final_pick = final and {"timed": [t.name for t in tasks if t.hash in final],
                            "changed": [t.name for t in tasks if t.hash in changed]}
    if len(built) == 2:  # the final pick is kept only where the whole model, checked, runs faster
        from tlm.compiler.cold_pick import faster_whole

        final_pick.update(faster_whole([b[0] for b in built], args,
                                       [max_abs_diff(b[1], want) <= tolerance for b in built]))
        chosen = built[1 if final_pick["applied"] else 0]
        if final_pick["applied"]:
            os.replace(alt, artifact)
        else:
            os.remove(alt)
        if not final_pick["checked"][1]:  # never silent: a checked record built into a wrong model
            warnings.warn("the final pick's build did not match the reference: the records' own pick is applied",
                          stacklevel=2, category=TlmWarning)
        built = [chosen]
    vm, got, rows = built[0]
    tuned = sum(1 for r in rows if r["status"] == "tuned")
    measurements = sum(r["measured"] for r in rows)
    model = CompiledModel(vm=vm, artifact=os.path.abspath(artifact), latency_ms=0.0, max_abs_diff=None,
                          tolerance=None, tasks=len(tasks), tuned_tasks=tuned, measurements=measurements,
                          cold_measurements=sum(p.measured for p in final.values()), final_pick=final_pick or None,
                          threads=runtime_threads(), target=info.config, task_rows=rows, db=os.path.abspath(db),
                          greedy_tasks=sum(1 for r in rows if r["status"] == "greedy"))
    if (note := model.untuned_note()) is not None:  # never silent: the user may expect tuned code
        warnings.warn(note, stacklevel=2, category=TlmWarning)
    if info.kind == "llvm" and model.threads < (cores := physical_cores()):  # PyTorch and ONNX Runtime get as many
        warnings.warn(f"TVM runs this model on {model.threads} of this host's {cores} cores (its thread pool "
                      "started before tlm was imported, or TVM_NUM_THREADS/OMP_NUM_THREADS says so)",
                      stacklevel=2, category=TlmWarning)
    if got.shape != want.shape:
        raise TlmError(f"compiled output shape {got.shape} differs from the reference {want.shape}")
    model.max_abs_diff, model.tolerance = max_abs_diff(got, want), tolerance
    timer = vm.time_evaluator("main", dev, number=1, repeat=cfg.repeat, min_repeat_ms=cfg.min_repeat_ms)
    model.latency_ms = float(statistics.median(timer(*args).results)) * 1e3
    if cfg.compare:
        if imported.torch_module is not None:
            model.pytorch_ms = pytorch_ms(imported.torch_module, imported.example_inputs, model.threads, cfg.repeat,
                                              cfg.min_repeat_ms)
        try:
            model.onnxruntime_ms, model.onnxruntime_note = onnxruntime_ms(imported, model.threads, cfg.repeat,
                                                                             cfg.min_repeat_ms)
        except Exception as err:  # a comparison that cannot run is reported, not fatal
            model.onnxruntime_note = f"{type(err).__name__}: {str(err).strip()[:200]}"
    return model


def _variants(database, tasks, info, picks: dict[str, Any], final: dict[str, Any]) -> list[tuple]:
    """[(MetaSchedule view, rows)]: the records' own pick, and the final pick's where it changed any."""
    changed = {h: p.record for h, p in final.items() if p.changed}
    variants = [compile_database(database, tasks, info, picks, None if changed else final)]
    if changed:
        variants.append(compile_database(database, tasks, info, {**picks, **changed}, final))
    return variants


_BUILDS = itertools.count()  # tells apart the files of one process's builds (_build_variants)


def _build_variants(variants, imported, info, cfg: CompileConfig, artifact: str, alt: str) -> list[tuple]:
    """[(vm, output, rows)] of each (MetaSchedule view, rows) built, saved (the first to `artifact`,
    a second to `alt`), loaded back and run on the example inputs."""
    import tvm
    from tvm import relax

    from tlm.errors import interrupted, quiet_stderr
    from tlm.graph.diagnose import BUILD, RUN, explain

    dev = tvm.cpu()
    built = []
    for i, (msdb, rows) in enumerate(variants):
        path = artifact if i == 0 else alt
        try:  # one line naming the stage and the operator (tlm.graph.diagnose), never TVM's last line
            with quiet_stderr():
                ex = build_relax(msdb, imported.mod, info, cfg.fast_math, cfg.prepack, cfg.pack_convs)
        except Exception as err:
            if interrupted():
                raise
            raise TlmError(explain(err, "whole-model build", BUILD, imported.mod, info)) from None
        # A fresh file, renamed into place once loaded: a library loaded before at `path` (a model
        # built again, or compiled twice to one path) would otherwise be what the loader returns.
        fresh = f"{path}.{os.getpid()}-{next(_BUILDS)}.so"
        try:
            ex.export_library(fresh)
            loaded = tvm.runtime.load_module(fresh)
            os.replace(fresh, path)
        except Exception as err:
            if os.path.exists(fresh):
                os.remove(fresh)
            if interrupted():
                raise
            raise TlmError(explain(err, f"saving the compiled model to {path}", BUILD)) from None
        try:
            vm = relax.VirtualMachine(loaded, dev)  # check the saved artifact
            got = out_numpy(vm["main"](*to_tvm(imported.inputs)))
        except Exception as err:
            if interrupted():
                raise
            raise TlmError(explain(err, f"running the compiled model {path}", RUN)) from None
        built.append((vm, got, rows))
    return built


def _recheck(db: str, tasks, info, picks: dict[str, Any], final: dict[str, Any]) -> list | None:
    """The whole model did not match: run its applied greedy programs checked (tlm.compiler.recheck);
    the variants to build again where wrong ones were replaced, else None (said either way)."""
    from tlm.compiler.recheck import recheck_greedy
    from tlm.measure.database import open_db

    database = open_db(db, create=False)
    try:
        fix = recheck_greedy(database, tasks, info, picks)
        if not fix.wrong:
            warnings.warn(f"the model does not match its reference, and none of its {fix.checked} unmeasured "
                          "programs is wrong on its own", stacklevel=3, category=TlmWarning)
            return None
        picks.update(fix.picks)
        variants = _variants(database, tasks, info, picks, final)
    finally:
        database.close()
    warnings.warn(f"{len(fix.wrong)} unmeasured program(s) gave wrong outputs when run alone and were replaced "
                  f"(the task's next program, or TVM's default schedule), the model built again: "
                  + "; ".join(fix.wrong[:3]) + (f" and {len(fix.wrong) - 3} more" if len(fix.wrong) > 3 else ""),
                  stacklevel=3, category=TlmWarning)
    return variants
