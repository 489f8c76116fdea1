"""The reference program of a task: the untuned program, made faster without changing a bit of
its result.

The measurer checks every program against the untuned task's output on fixed inputs. Run as
written (TE's loop nests, reductions innermost), the untuned program is slow: 0.4 GFLOPS on a
matmul, about 1 on a 3-D conv; the collector's main loop spent 30% of its time waiting for it
(py-spy, 2026-11-24). `fast_reference` changes only the loop order, never the arithmetic of an
output element or its order: in each block of the untuned function, the innermost spatial loop
moves inside the reduction loops when it is the last axis of the block's output and every input
either does not depend on it or depends on it through its last axis only (at least one does), so
that the inner loop reads and writes contiguous memory (matmul's j, an NHWC conv's output
channel, an NCHW conv's width; not a layer norm's row sum, whose rows it would stride over). The reduction loops keep
their relative order, so every output element sums the same terms in the same order; TVM
computes the init when the reduction loops are at their first iteration. Measured beside a
running collector, one run each: a [512,3072]x[3072,768] matmul 2.84 -> 0.11 s, a 2-D conv 5x,
a transposed conv 2.8x, a 3-D conv 1.4-2.5x. (Parallel outer loops were tried too: slower with
the build workers running beside the reference, which is how the measurer runs it.)

TVM's `reorder` refuses what it cannot prove; a block it refuses, or one that is not a plain
loop nest bound one to one to its block iterators, stays as written. LLVM does not reassociate
float arithmetic without fast-math flags, so the outputs are bitwise those of the untuned
program (tests/measure/test_reference.py checks it for every kind of task).
"""

from __future__ import annotations

from typing import Any

_DATA_PAR, _REDUCE = 0, 2  # tvm IterVar kinds


def _nest(sch, block_rv) -> tuple[list, Any] | None:
    """(loop rvs, block) when the block's loops bind its iterators one to one, in order."""
    from tvm.s_tir import SBlockRealize

    loops = sch.get_loops(block_rv)
    block = sch.get(block_rv)
    if not loops or len(loops) != len(block.iter_vars):
        return None
    realize = sch.get(loops[-1]).body
    if not isinstance(realize, SBlockRealize):
        return None
    for lp, value in zip(loops, realize.iter_values):
        if not sch.get(lp).loop_var.same_as(value):
            return None
    return loops, block


def _inner_spatial_last(sch, block_rv) -> None:
    from tvm.tirx.analysis import undefined_vars

    got = _nest(sch, block_rv)
    if got is None:
        return
    loops, block = got
    kinds = [int(iv.iter_type) for iv in block.iter_vars]
    if any(k not in (_DATA_PAR, _REDUCE) for k in kinds) or kinds[-1] != _REDUCE or _DATA_PAR not in kinds:
        return
    last = max(i for i, k in enumerate(kinds) if k == _DATA_PAR)
    var = block.iter_vars[last].var
    if len(block.writes) != 1 or not block.writes[0].region[-1].min.same_as(var):
        return
    def uses(expr) -> bool:
        return any(var.same_as(v) for v in undefined_vars(expr))

    contiguous = False
    for r in block.reads:  # every read is contiguous in the new inner loop or does not move with it
        if any(uses(rng.min) for rng in r.region[:-1]):
            return
        contiguous = contiguous or bool(r.region) and uses(r.region[-1].min)
    if not contiguous:
        return
    order = [lp for i, lp in enumerate(loops) if kinds[i] == _DATA_PAR and i != last]
    order += [lp for i, lp in enumerate(loops) if kinds[i] == _REDUCE] + [loops[last]]
    sch.reorder(*order)


def fast_reference(mod):
    """`mod` (a task's untuned IRModule) with the loop order above; `mod` itself when it has no
    root block to schedule."""
    from tvm.s_tir import Schedule

    try:
        sch = Schedule(mod)
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
    except Exception:
        return mod
    for block_rv in blocks:
        try:
            _inner_spatial_last(sch, block_rv)
        except Exception:  # refused by TVM: the block keeps its loops
            pass
    return sch.mod
