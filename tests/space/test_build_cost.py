"""What a program costs LLVM to build (tlm.space.build_cost): odd-width vector lanes after lowering."""

from __future__ import annotations

import pytest
import workloads_tir as w


def _vectorized_matmul(m: int, unroll: int):
    """A (16 x 32) @ (32 x m) matmul with its m loop vectorized innermost under an unroll pragma."""
    import tvm

    sch = tvm.s_tir.Schedule(w.matmul(16, m, 32).mod)
    i, j, k = sch.get_loops(sch.get_sblock("C"))
    sch.reorder(i, k, j)
    sch.vectorize(j)
    sch.annotate(i, "pragma_auto_unroll_max_step", unroll)
    sch.annotate(i, "pragma_unroll_explicit", 1)
    return sch.mod


@pytest.mark.tvm
def test_odd_widths_count_their_lanes_after_unrolling(host):
    from tlm.space.build_cost import odd_vector_lanes, too_slow_to_build

    unrolled, rolled = odd_vector_lanes(_vectorized_matmul(49, 512), host), odd_vector_lanes(_vectorized_matmul(49, 0), host)
    assert unrolled % 49 == 0 and rolled % 49 == 0
    assert unrolled >= 32 * 49 and rolled < unrolled / 8  # TVM's unroll multiplies the odd-width accesses
    assert odd_vector_lanes(_vectorized_matmul(64, 512), host) == 0  # power-of-two widths cost nothing here
    assert too_slow_to_build(_vectorized_matmul(49, 512), host, limit=unrolled - 1) == unrolled
    assert too_slow_to_build(_vectorized_matmul(49, 512), host, limit=unrolled) == 0


def test_gpu_targets_are_not_judged():
    from tlm.graph.target import resolve_target
    from tlm.space.build_cost import too_slow_to_build

    assert too_slow_to_build(None, resolve_target("h100"), limit=0) == 0  # nothing lowered for CUDA


@pytest.mark.tvm
def test_only_odd_vectorized_loops_are_lowered():
    from tlm.space.build_cost import odd_vector_loops

    assert odd_vector_loops(_vectorized_matmul(49, 0)) and not odd_vector_loops(_vectorized_matmul(64, 512))
    assert not odd_vector_loops(w.matmul(16, 49, 32).mod)  # nothing vectorized


@pytest.mark.tvm
def test_a_reduction_redone_in_an_outer_loop_counts_its_turns():
    """A layer norm whose row mean and variance are computed inside the loop over the row's
    columns redoes them per column: TVM's flop estimate counts it (cols x the reductions)."""
    import tvm

    from tlm.space.build_cost import flops_ratio, lean_limit, redundancy

    task = w.layer_norm(8, 32)
    assert flops_ratio(task.mod, task.flops) == pytest.approx(1.0)
    sch = tvm.s_tir.Schedule(task.mod)
    _, col = sch.get_loops(sch.get_sblock("T_layer_norm"))
    for name in ("x_var_sum", "x_mean", "x_sum"):  # consumers first: each lands inside the column loop
        sch.compute_at(sch.get_sblock(name), col)
    ratio = flops_ratio(sch.mod, task.flops)
    assert ratio > 8  # the 32-wide sums of a row, redone for each of its 32 columns
    assert redundancy(ratio, lean_limit([ratio, 1.0])).startswith("redoes work")
    assert redundancy(1.3, lean_limit([ratio, 1.3])) is None and flops_ratio(sch.mod, 0.0) is None


@pytest.mark.tvm
def test_a_redone_reduction_counts_its_turns_whatever_the_rest_costs():
    """A layer norm by the reduction blocks' runs over their domains (`reduction_redo`): 512 turns
    of a row's 512-value sums; 1.0 for the task as written, for a matmul, and for sums of 32 values
    redone in the innermost loop (LLVM hoists those: such programs measured fast); `redone_work` judges the larger
    of that and the flop ratio, so a redone reduction is seen even where the rest of the task
    counts many flops a value."""
    import tvm

    from tlm.space.build_cost import flops_ratio, reduction_redo, redone_work

    def redone(rows: int, cols: int):
        task = w.layer_norm(rows, cols)
        sch = tvm.s_tir.Schedule(task.mod)
        _, col = sch.get_loops(sch.get_sblock("T_layer_norm"))
        for name in ("x_var_sum", "x_mean", "x_sum"):
            sch.compute_at(sch.get_sblock(name), col)
        return task, sch.mod

    task, mod = redone(4, 512)
    assert reduction_redo(task.mod) == 1.0 and reduction_redo(w.matmul(16, 48, 32).mod) == 1.0
    assert reduction_redo(mod) == pytest.approx(512.0)
    assert redone_work(mod, task.flops) == pytest.approx(max(512.0, flops_ratio(mod, task.flops)))
    assert redone_work(mod, task.flops * 1000) == pytest.approx(512.0)  # flops diluted: the runs still count
    assert redone_work(mod, 0.0) is None
    assert reduction_redo(redone(8, 32)[1]) == 1.0


@pytest.mark.tvm
def test_a_short_reduction_counts_the_loops_it_cannot_be_hoisted_out_of():
    """Sums of 32 values redone inside the column loop, innermost (LLVM hoists them: 1.0), and
    inside the row loop under the column loop (each row's sums redone for every column: 32); the
    latter on 8 rows runs too few times (8,192) to count."""
    import tvm

    from tlm.space.build_cost import REDO_MIN_RUNS, reduction_redo

    def redone(rows: int, outer_columns: bool):
        task = w.layer_norm(rows, 32)
        sch = tvm.s_tir.Schedule(task.mod)
        row, col = sch.get_loops(sch.get_sblock("T_layer_norm"))
        if outer_columns:
            sch.reorder(col, row)
        for name in ("x_var_sum", "x_mean", "x_sum"):
            sch.compute_at(sch.get_sblock(name), row if outer_columns else col)
        return sch.mod

    assert 256 * 32 * 32 >= REDO_MIN_RUNS > 8 * 32 * 32
    assert reduction_redo(redone(256, False)) == 1.0
    assert reduction_redo(redone(256, True)) == pytest.approx(32.0)
    assert reduction_redo(redone(8, True)) == 1.0
