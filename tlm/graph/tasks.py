"""The task record: one fused subgraph (a MetaSchedule task) with its weight and FLOPs.

Every later stage (space builder, sampler, measurer, generator) takes `Task`s. A task holds its
TIR IRModule as TVM JSON so that it can be cached and sent to worker processes as plain data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

# Anchor operators, most specific first: the first one found in a task name is its type.
_ANCHORS = (
    "conv3d_transpose", "conv2d_transpose", "conv1d_transpose", "conv3d", "conv2d", "conv1d", "batch_matmul",
    "matmul", "dense", "softmax", "layer_norm", "rms_norm", "group_norm", "max_pool3d",
    "max_pool2d", "avg_pool3d", "avg_pool2d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
    "mean", "sum", "max", "variance", "take", "cumsum", "concatenate", "resize2d",
)


_LAYOUT = {"reshape", "transpose", "permute_dims", "cast", "broadcast_to", "squeeze", "expand_dims",
           "strided_slice", "split", "flatten"}


def task_kind(name: str) -> str:
    """Task type from a fused task name, e.g. fused_conv2d3_add_relu -> conv2d."""
    ops = [re.sub(r"\d+$", "", op) for op in op_names(name)]
    for anchor in _ANCHORS:
        if anchor in ops:
            return anchor
    # Otherwise the first op that computes something (data movement names the task last).
    compute = [op for op in ops if op not in _LAYOUT]
    return (compute or ops or [name])[0]


def op_names(name: str) -> list[str]:
    """Operator words of a task name without numeric suffixes: fused_conv2d3_add_relu -> [...]."""
    words = [w for w in name.split("_") if w and w != "fused"]
    # Rejoin names that contain underscores themselves (layer_norm, max_pool2d, ...).
    out: list[str] = []
    i = 0
    while i < len(words):
        for size in (3, 2):
            cand = "_".join(words[i : i + size])
            if re.sub(r"\d+$", "", cand) in _ANCHORS:
                out.append(cand)
                i += size
                break
        else:
            out.append(words[i])
            i += 1
    # The numbers TVM appends (conv2d22, add18) only tell same-named functions apart.
    return [re.sub(r"(?<=[a-z_])\d+$", "", w) for w in out]


@dataclass
class Task:
    """One tuning task: a fused TIR function of a model, with how often the model calls it."""

    name: str
    hash: str  # TVM structural hash of `mod` as 16 hex digits; the task's identity
    weight: int  # number of calls in the model
    flops: float  # floating point operations of one call (TVM's estimate)
    kind: str  # task type (anchor operator), e.g. "conv2d", "matmul", "softmax"
    args: list[dict[str, Any]]  # [{"dtype": "float32", "shape": [1, 64, 56, 56]}, ...]
    mod_json: str = field(repr=False)  # tvm.ir.save_json of the task's IRModule (func "main")

    @cached_property
    def mod(self):
        import tvm

        return tvm.ir.load_json(self.mod_json)

    def to_json(self, with_mod: bool = False) -> dict[str, Any]:
        out = {
            "name": self.name,
            "hash": self.hash,
            "weight": self.weight,
            "flops": self.flops,
            "kind": self.kind,
            "args": self.args,
        }
        if with_mod:
            out["mod"] = self.mod_json
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Task:
        return cls(
            name=data["name"],
            hash=data["hash"],
            weight=int(data["weight"]),
            flops=float(data["flops"]),
            kind=data["kind"],
            args=data["args"],
            mod_json=data["mod"],
        )


def structural_hash(mod) -> str:
    """Stable hash of an IRModule (parameter names do not count, structure does)."""
    import tvm_ffi

    return f"{tvm_ffi.structural_hash(mod) & 0xFFFFFFFFFFFFFFFF:016x}"


def task_from_mod(mod, name: str = "main", weight: int = 1) -> Task:
    """Build a Task from an IRModule with one PrimFunc (or from a PrimFunc)."""
    import tvm
    from tvm.s_tir.analysis import estimate_tir_flops

    if isinstance(mod, tvm.tirx.PrimFunc):
        mod = tvm.IRModule({"main": mod})
    (gv,) = mod.get_global_vars()
    if gv.name_hint != "main":
        mod = tvm.IRModule({"main": mod[gv]})
    func = mod["main"]
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    args = []
    for info in ArgInfo.from_prim_func(func):
        args.append({"dtype": str(info.dtype), "shape": [int(x) for x in info.shape]})
    try:
        flops = float(estimate_tir_flops(mod))
    except Exception:  # estimation is best effort (e.g. data-dependent loops)
        flops = 0.0
    return Task(
        name=name,
        hash=structural_hash(mod),
        weight=int(weight),
        flops=flops,
        kind=task_kind(name),
        args=args,
        mod_json=tvm.ir.save_json(mod),
    )


def matmul_task(n: int = 32, m: int | None = None, k: int | None = None, dtype: str = "float32") -> Task:
    """A tiny dense matmul task (C = A @ B), for tests and examples."""
    from tvm import te

    m = m or n
    k = k or n
    a = te.placeholder((n, k), dtype, name="A")
    b = te.placeholder((k, m), dtype, name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((n, m), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return task_from_mod(te.create_prim_func([a, b, c]), name="matmul")
