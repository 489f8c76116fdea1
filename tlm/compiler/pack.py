"""Convolution weights packed when the model is compiled, in the order its tuned program reads them.

Matmul tasks are tuned with pre-packed weights (tlm.graph.passes.PREPACK_OPS). Convolutions are
tuned as they are: timed alone and warm, packing gained them 1.00-1.02x (`prepack` in
bench/README.md), and their records keep the hashes of the corpus. In a whole model their weights
come from memory instead of a warm cache, and there the layout matters: resnet_50's eight
heaviest convolutions timed cold (every argument but the input flushed before each call) are 1.22x
faster summed with the same programs reading packed weights, 1.04x warm (znver4,
`python bench/pack_convs.py`, bench/results/pack_convs.md); whole models 1.00-1.14x faster.

So the compile marks the convolutions' constant weights layout-free as well
(`COMPILE_PACK_OPS`), and `pack_records` gives each marked function the record of its unmarked
twin (the tuned task) with MetaSchedule's RewriteLayout postprocessor applied on top: the same
loops, reading weights that `prepack_fold` packed once at compile time. A program whose packing
fails keeps its loops on the weights as they are (never TVM's default for a tuned task). The
compiled model is checked against its reference like every other.
"""

from __future__ import annotations

import warnings

from tlm.errors import TlmWarning

# Operator words of the tasks whose weights are packed at compile time only (not during tuning).
COMPILE_PACK_OPS = frozenset({"conv1d", "conv2d", "conv3d"})


def packed_schedule(marked, trace):
    """(schedule, packed): the program of `trace` (a Trace or its JSON) on the IRModule `marked`
    (layout-free weights) with MetaSchedule's RewriteLayout on top; where RewriteLayout refuses
    the program or would lose values (`_lossless`), the program as it is on a fresh schedule and
    False."""
    from tvm.s_tir import Schedule
    from tvm.s_tir.meta_schedule.postproc import RewriteLayout
    from tvm.s_tir.schedule import Trace

    def replayed():
        sch = Schedule(marked)
        if isinstance(trace, Trace):
            trace.apply_to_schedule(sch, remove_postproc=False)
        else:
            Trace.apply_json_to_schedule(trace, sch)
        return sch

    sch = replayed()
    try:
        rewritten = RewriteLayout().apply(sch)
    except Exception:  # noqa: BLE001 - the program stands without its packing
        rewritten = False
    if rewritten and _lossless(sch):
        return sch, True
    return replayed(), False


def _lossless(sch) -> bool:
    """Whether each packing block of `sch` (RewriteLayout's `layout_rewrite_preproc`) writes as many
    values as it reads. RewriteLayout takes the packed layout from the region the program reads,
    and where that is part of the buffer it folds the rest onto it: a conv padded from 3 to 8
    channels (tlm.graph.widths, 2026-12-06) whose slice kept 3 read its bias for those 3, and the
    packing wrote `packed[c % 3] = bias[c]` for all 8, so the model came out wrong (caught by its
    check)."""
    import math

    def size(buffer) -> int:  # a block's region names its buffer by its variable, typed by its shape
        return math.prod(int(d) for d in buffer.ty.shape)

    for rv in sch.get_child_blocks(sch.get_sblock("root")):
        block = sch.get(rv)
        if "meta_schedule.layout_rewrite_preproc" in block.annotations and block.reads and block.writes \
                and size(block.writes[0].source) < size(block.reads[0].source):
            return False
    return True


def pack_records(msdb, target, ops: frozenset[str] = COMPILE_PACK_OPS):
    """A module pass, before MetaScheduleApplyDatabase: each layout-free PrimFunc of `ops` gets,
    in the MetaSchedule database `msdb`, its unmarked twin's record with the weights packed."""
    import tvm
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.tirx import PrimFunc

    from tlm.graph.tasks import op_names

    normalize = tvm.get_global_func("tvm.s_tir.meta_schedule.normalize_mod")

    @tvm.transform.module_pass(opt_level=0, name="tlm.PackRecords")
    def _pass(mod, _ctx):
        unpacked = []
        for gv, func in mod.functions.items():
            if not (isinstance(func, PrimFunc) and func.attrs and "layout_free_buffers" in func.attrs
                    and ops & set(op_names(gv.name_hint))):
                continue
            marked = normalize(func)
            if msdb.has_workload(marked):
                continue
            rec = msdb.query_tuning_record(normalize(func.without_attr("layout_free_buffers")), target,
                                           gv.name_hint)
            if rec is None:  # untuned: TVM's default, as for the unmarked task (the compile says so)
                continue
            sch, packed = packed_schedule(marked, rec.trace)
            if not packed:
                unpacked.append(gv.name_hint)
            msdb.commit_tuning_record(TuningRecord(sch.trace, msdb.commit_workload(marked), rec.run_secs,
                                                   target, rec.args_info))
        if unpacked:
            warnings.warn(f"weights left unpacked (RewriteLayout refused the program, or its packing would lose "
                          f"values): {', '.join(unpacked)}",
                          stacklevel=2, category=TlmWarning)
        return mod

    return _pass


def packed_candidate(task, trace):
    """A measurer Candidate of the program `trace` on `task` with its weight (argument 1)
    layout-free and packed as the compile packs it (`packed_schedule`), under a twin hash (its
    reference is the unpacked task's arguments in the packed layout); None where RewriteLayout
    refuses the program."""
    import dataclasses

    import tvm

    from tlm.measure.measurer import Candidate

    marked = tvm.IRModule({"main": task.mod["main"].with_attr("layout_free_buffers", [1])})
    sch, packed = packed_schedule(marked, trace)
    if not packed:
        return None
    twin = dataclasses.replace(task, hash=task.hash[:-1] + "p", mod_json=tvm.ir.save_json(marked))
    return Candidate(task=twin, schedule=sch, proposer="pack")
