"""What a program costs LLVM to build, read from its lowered TIR before any code is generated.

Some programs of a design space are fast to run but take LLVM minutes to compile: a vectorized
loop whose extent is not a power of two (a conv1d's 49 output positions) under a large
`pragma_auto_unroll_max_step` becomes thousands of odd-width vector loads and stores in one body,
and LLVM's type legalization splits each of them lane by lane. Measured on znver3 (LLVM 17,
a HuBERT feature extractor's conv1d tasks): 77,616 lanes in odd-width vector accesses took over
15 minutes to build, 41,184 took 10 s, 1,127 took 0.2 s; power-of-two widths of any count build
in well under a second. `odd_vector_lanes` counts those lanes after TVM's own lowering (the
unrolling included), and `too_slow_to_build` says when a program should not be a first choice.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from tlm.errors import TlmError
from tlm.graph.target import TargetInfo

# Lanes in odd-width vector accesses above which LLVM's build time grows past seconds (see above).
ODD_LANES_LIMIT = 4096


def _lanes(expr_type: Any) -> int:
    import tvm

    return tvm.DataType(str(expr_type.dtype)).lanes


def odd_vector_lanes(mod, target: TargetInfo) -> int:
    """Total lanes of the vector loads and stores whose width is not a power of two in `mod`
    (a scheduled IRModule) once lowered by TVM's default TIR pipeline for `target` (LLVM only)."""
    import tvm_ffi
    from tvm import tirx
    from tvm.ir.expr import TensorLoad

    tvm_target = target.tvm()
    lowered = tirx.transform.BindTarget(tvm_target.with_host(tvm_target))(mod)
    lowered = tirx.get_default_tir_pipeline(tvm_target)[0](lowered)
    total = 0

    def visit(node) -> None:
        nonlocal total
        lanes = _lanes(node.value.ty if isinstance(node, tirx.stmt.BufferStore) else node.ty)
        if lanes > 1 and lanes & (lanes - 1):
            total += lanes

    for func in lowered.functions.values():
        if isinstance(func, tirx.PrimFunc):
            tvm_ffi.structural_walk(func.body, ((TensorLoad, tirx.stmt.BufferStore), visit))
    return total


def odd_vector_loops(mod) -> bool:
    """Whether a scheduled IRModule vectorizes a loop whose extent is not a power of two (only
    such loops make odd-width vectors, so only they need the lowering `odd_vector_lanes` does)."""
    import tvm_ffi
    from tvm import tirx

    found = False

    def visit(loop) -> None:
        nonlocal found
        if loop.kind == tirx.stmt.ForKind.VECTORIZED:
            extent = loop.extent
            found = found or not isinstance(extent, tirx.expr.IntImm) or bool(extent.value & (extent.value - 1))

    for func in mod.functions.values():
        if isinstance(func, tirx.PrimFunc):
            tvm_ffi.structural_walk(func.body, ((tirx.stmt.For, visit),))
    return found


def too_slow_to_build(mod, target: TargetInfo, limit: int = ODD_LANES_LIMIT) -> int:
    """The odd-width vector lanes of `mod` when over `limit` on an LLVM target, else 0 (fine, or a
    target whose build time this does not predict)."""
    if target.kind != "llvm" or not odd_vector_loops(mod):
        return 0
    lanes = odd_vector_lanes(mod, target)
    return lanes if lanes > limit else 0


def _first_fine(name: str, ranked: list, problem: Callable[[Any], Any], note: Callable[[Any, int], str],
                warning: Callable[[Any], str]) -> list:
    """[the first of `ranked` whose `problem` is falsy], with `note(first problem, its choice
    number)` on stderr when it is not the first; else [the first of all] with `warning(first
    problem)` (nothing for an empty `ranked`)."""
    first = None
    for i, item in enumerate(ranked):
        got = problem(item)
        if not got:
            if i > 0:
                print(f"tlm: note: {name}: {note(first, i + 1)}", file=sys.stderr)
            return [item]
        first = first or got
    if ranked:
        print(f"tlm: warning: {name}: {warning(first)}", file=sys.stderr)
    return ranked[:1]


def first_buildable(name: str, ranked: list, cost: Callable[[Any], int]) -> list:
    """[the first of `ranked` whose `cost` (`too_slow_to_build`) is 0], or [the first of all] when
    none is; said on stderr (naming task `name`) when it is not the first of `ranked`."""
    return _first_fine(name, ranked, cost,
                       lambda lanes, k: (f"the model's first choice has {lanes:,} lanes in odd-width vector accesses "
                                         f"(LLVM would take minutes to build it); its choice #{k} is used"),
                       lambda lanes: (f"each of the model's {len(ranked)} choices has too many lanes in odd-width "
                                      f"vector accesses (the first {lanes:,}); LLVM may take minutes to build it"))


def first_lowering(name: str, ranked: list, error_of: Callable[[Any], str | None]) -> list:
    """[the first of `ranked` whose `error_of` (CUDA lowering's error) is None], said in a note when
    it is not the first; [the first of all], with a warning, when none lowers."""
    def error(item) -> str | None:
        try:
            err = error_of(item)
        except TlmError as e:
            err = str(e)
        return None if err is None else str(err).splitlines()[0][:160]

    return _first_fine(name, ranked, error,
                       lambda why, k: f"the model's first choice does not lower to CUDA ({why}); its choice #{k} is used",
                       lambda why: f"none of the model's {len(ranked)} choices lowers to CUDA ({why})")
