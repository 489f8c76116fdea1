"""Applying a record database to a model: the record each task gets (`task_picks`), the MetaSchedule
view that holds them (`compile_database`), the Relax build that applies it (`build_relax`), and the
numpy/torch <-> TVM tensor conversions of the compiled model's calls. The whole-model compile that
uses them (pick, build, check, time) is tlm.compiler.build."""

from __future__ import annotations

from typing import Any


def _to_numpy(x):
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return x.numpy() if hasattr(x, "numpy") and not hasattr(x, "__array_interface__") else x


def to_tvm(inputs) -> list:
    """numpy arrays or torch tensors -> TVM CPU tensors (copied: TVM wants aligned, contiguous data)."""
    import numpy as np
    import tvm

    dev = tvm.cpu()
    return [tvm.runtime.tensor(np.ascontiguousarray(_to_numpy(x)), dev) for x in inputs]


def out_numpy(out):
    if hasattr(out, "numpy"):
        return out.numpy()
    return out_numpy(out[0])  # a tuple output: the first element is the model's output


def task_picks(database, tasks, target) -> dict[str, Any]:
    """Task hash -> the record a compile applies (`Database.compile_record`, or None): records are
    timed on one thread; the model runs on the target's cores, where a record without a parallel
    loop runs on one (Database.fastest_on, tlm.space.threads)."""
    from tlm.graph.target import resolve_target

    info = resolve_target(target)
    threads = info.cores if info.kind == "llvm" else 1
    return {t.hash: database.compile_record(t.hash, info.key, threads) for t in tasks}


def compile_database(database, tasks, target, picks: dict[str, Any] | None = None,
                     final: dict[str, Any] | None = None) -> tuple[Any, list[dict[str, Any]]]:
    """(MetaSchedule database that `build_relax` applies, one row per task).

    The MetaSchedule view holds each task's fastest measured record for `target`, plus the
    unmeasured greedy program (tlm-greedy) of tasks that have no measured record. Rows:
    name, hash, weight, measured (records with a latency or an error), best_us (the applied
    record's one-thread median), status ("tuned", "greedy" or "untuned"), for_threads (the
    applied record is not the one-thread best: the best has no parallel loop to use the target's
    cores, `Database.fastest_on`). `picks`: the records to apply (default `task_picks`); `final`
    (task hash -> tlm.compiler.cold_pick.ColdPick): those tasks' rows carry cold_us (the applied
    record's cold median), cold_picked and cold_measured.
    """
    from tvm.s_tir import meta_schedule as ms

    from tlm.graph.target import resolve_target
    from tlm.measure.database import GREEDY

    info = resolve_target(target)
    picks = task_picks(database, tasks, info) if picks is None else picks
    final = final or {}
    msdb, tvm_target = ms.database.MemoryDatabase(), info.tvm()
    rows = []
    for t in tasks:
        rec = picks[t.hash]
        measured = sum(1 for r in database.records(t.hash, info.key) if r.proposer != GREEDY)
        status = "untuned"  # no record, or none that replays: TVM's default schedule, said by the caller
        if rec is not None and database.commit_record(msdb, rec, t, tvm_target):
            status = "greedy" if rec.proposer == GREEDY else "tuned"
        best = rec if status == "tuned" else None
        one_thread = database.best(t.hash, info.key) if best else None
        rows.append({"name": t.name, "hash": t.hash, "weight": t.weight, "measured": measured,
                     "best_us": best.median_s * 1e6 if best else None, "status": status,
                     # the one-thread best skipped for a record with a parallel loop
                     "for_threads": bool(best and one_thread and one_thread.id != best.id)})
        if t.hash in final:
            p = final[t.hash]
            cold_s = p.cold_s.get(p.record.id)
            rows[-1].update(cold_us=None if cold_s is None else cold_s * 1e6, cold_picked=p.changed,
                            cold_measured=p.measured)
    return msdb, rows


def build_relax(msdb, mod, target, fast_math: bool = True, prepack: bool | frozenset[str] = True,
                pack_convs: bool = True):
    """A prepared Relax module -> VM executable, with the records of a MetaSchedule database.

    What `ms.relax_integration.compile_relax` does, but the fusion passes are tlm's own
    (tlm.graph.passes.fuse_passes, the list task extraction runs), so every task of the
    compiled model is one that tuning saw. `pack_convs`: the convolutions' weights are packed
    as well, in the order their tuned programs read them (tlm.compiler.pack)."""
    import tvm
    from tvm import relax
    from tvm.relax import pipeline
    from tvm.relax.transform import MetaScheduleApplyDatabase

    from tlm.compiler.pack import COMPILE_PACK_OPS, pack_records
    from tlm.graph.target import build_context
    from tlm.graph.passes import PREPACK_OPS, fuse_passes, prepack_fold

    tvm_target = target.tvm()
    pack_convs = bool(pack_convs and prepack)
    marked = (PREPACK_OPS if prepack is True else frozenset(prepack or ())) | (COMPILE_PACK_OPS if pack_convs else frozenset())
    try:
        lower = pipeline.dataflow_lower_passes(tvm_target) + pipeline.finalize_passes(tvm_target)
    except (ValueError, AttributeError):  # CPU targets have no registered lists: compile_relax's own
        lower = [relax.transform.RewriteDataflowReshape(), relax.transform.ToNonDataflow(),
                 relax.transform.RemovePurityChecking(), relax.transform.CallTIRRewrite(),
                 relax.transform.StaticPlanBlockMemory(), relax.transform.LowerAllocTensor(),
                 relax.transform.KillAfterLastUse(), relax.transform.LowerRuntimeBuiltin(),
                 relax.transform.ComputePrimValue(), relax.transform.VMShapeLower(),
                 relax.transform.AttachGlobalSymbol()]

    @tvm.transform.module_pass(opt_level=3)
    def _pipeline(mod, _ctx):
        mod = tvm.transform.Sequential(fuse_passes(tvm_target, fast_math, marked or False))(mod)
        if pack_convs:
            mod = pack_records(msdb, tvm_target)(mod)
        mod = MetaScheduleApplyDatabase(enable_warning=False)(mod)  # untuned tasks keep TVM's default
        if prepack:  # packed weights: the packing runs once, here, on the constants
            mod = tvm.transform.Sequential(prepack_fold())(mod)
        return tvm.transform.Sequential(lower)(mod)

    with tvm_target, msdb, build_context(3):  # without TVM's TIR CSE (tlm.graph.target.BUILD_CONFIG)
        return relax.build(mod, target=tvm_target, relax_pipeline=_pipeline)
