"""The walk behind a whole-model plan (tlm.compiler.gpu_plan): tlm's Relax pipeline for a target
stopped where `main` is a flat list of `call_tir`s, views, constants and tuples; that `main` as
data (buffers, steps); which inputs and constants are carried and which regenerated; and the
CPU side: the walked module run by TVM's VM, and a plan's steps run one by one (`run_steps`).

Why a module of its own: the builder (gpu_plan) and the CPU reference share it, and the CPU
executor runs the exact data the GPU machine gets, so tests check the plan's semantics here.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from tlm.errors import TlmError, quiet_stderr
from tlm.graph.target import TargetInfo, build_context
from tlm.measure.cuda_plan import host_array

LARGE_BYTES = 64 * 1024  # a float constant over this is regenerated from a seed, not carried


@dataclass
class Walk:
    """`main` as data: buffers (dicts), steps, output buffer ids, constant expressions by id."""

    buffers: list[dict[str, Any]]
    steps: list[dict[str, Any]]
    outputs: list[int]
    consts: dict[int, Any] = field(repr=False)
    cuda: dict[str, Any] = field(default_factory=dict)  # CUDA: each database program's lowering (CudaProgram)
    tasks: dict[str, str] = field(default_factory=dict)  # function -> its task's hash (tlm.graph.tasks.structural_hash)

    @property
    def refused(self) -> dict[str, str]:
        """Function -> why its database program did not lower (dlight's schedule runs instead)."""
        return {name: str(c.error).splitlines()[0][:200] for name, c in self.cuda.items() if c.error}


def lower_to_calls(mod, info: TargetInfo, msdb=None, lowered: dict[str, Any] | None = None,
                   hashes: dict[str, str] | None = None) -> tuple[Any, dict[str, str]]:
    """The prepared Relax module -> `main` as flat call_tir/reshape bindings, every function
    scheduled; and per function how: "db" (a record of `msdb`), "dlight" or "default" (LLVM's).
    CUDA: a record whose program does not lower to CUDA C (an unmeasured budget-0 pick can be
    one) is set aside for dlight's rules; each database program's lowering goes into `lowered`,
    and each fused function's task hash (as task extraction hashes it, before any schedule) into
    `hashes`, so that a GPU run can put a measured program of that task in its place
    (tlm.measure.plan_assemble)."""
    import contextlib

    import tvm
    from tvm import relax
    from tvm.s_tir import dlight as dl
    from tvm.tirx import PrimFunc

    from tlm.graph.passes import fuse_passes, prepack_fold

    def scheduled(m) -> set[str]:
        return {gv.name_hint for gv, f in m.functions.items()
                if isinstance(f, PrimFunc) and f.attrs is not None and bool(f.attrs.get("tirx.is_scheduled", False))}

    tgt = info.tvm()
    with tgt, msdb if msdb is not None else contextlib.nullcontext(), build_context(3):
        mod = tvm.transform.Sequential(fuse_passes(tgt))(mod)
        before, pre = scheduled(mod), mod
        if hashes is not None:
            from tlm.graph.tasks import structural_hash

            hashes.update({gv.name_hint: structural_hash(tvm.IRModule({"main": f.with_attr("global_symbol", "main")}))
                           for gv, f in mod.functions.items() if isinstance(f, PrimFunc)})
        if msdb is not None:  # as tlm.compiler.apply.build_relax applies them
            mod = relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(mod)
            if info.kind == "llvm":
                mod = tvm.transform.Sequential(prepack_fold())(mod)
        tuned = scheduled(mod) - before
        if info.kind == "cuda" and tuned:
            from tlm.measure.cuda_build import lower_cuda

            for name in sorted(tuned):
                gv = mod.get_global_var(name)
                got = lower_cuda(tvm.IRModule({"main": mod[gv].with_attr("global_symbol", "main")}), info)
                if lowered is not None:
                    lowered[name] = got
                if got.error:
                    mod[gv] = pre[pre.get_global_var(name)]  # unscheduled again: dlight's rules below
                    tuned = tuned - {name}
        if info.kind == "cuda":
            mod = dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                                          dl.gpu.GeneralReduction(), dl.gpu.Fallback())(mod)
        mod = tvm.transform.Sequential([relax.transform.RewriteDataflowReshape(), relax.transform.ToNonDataflow()])(mod)
    other = "dlight" if info.kind == "cuda" else "default"
    return mod, {gv.name_hint: "db" if gv.name_hint in tuned else other
                 for gv, f in mod.functions.items() if isinstance(f, PrimFunc)}


def walk(main) -> Walk:
    """The flat `main` -> buffers and steps; TlmError (one line) for what a plan cannot hold."""
    import tvm
    from tvm import relax

    const_type = tvm.ir.expr.Constant
    bufs: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    consts: dict[int, Any] = {}
    ids: dict[Any, Any] = {}

    def new(ty, kind: str, **extra: Any) -> int:
        try:
            shape = [int(v) for v in ty.shape.values]
        except (AttributeError, TypeError):
            raise TlmError(f"plan: a tensor of shape {getattr(ty, 'shape', ty)} (static shapes only)") from None
        bufs.append({"id": len(bufs), "shape": shape, "dtype": str(ty.dtype), "kind": kind, **extra})
        return len(bufs) - 1

    def ref(e):
        if isinstance(e, relax.Var):
            if e not in ids:
                raise TlmError(f"plan: {e} is used before it is defined")
            return ids[e]
        if isinstance(e, const_type):
            if e not in ids:
                ids[e] = new(e.ty, "constant")
                consts[ids[e]] = e
            return ids[e]
        if isinstance(e, relax.Tuple):
            return [ref(f) for f in e.fields]
        if isinstance(e, relax.TupleGetItem):
            return ref(e.tuple_value)[e.index]
        raise TlmError(f"plan: unsupported argument {type(e).__name__}")

    for p in main.params:
        ids[p] = new(p.ty, "input")
    for block in main.body.blocks:
        for b in block.bindings:
            v = b.value
            op = getattr(v.op, "name", type(v.op).__name__) if isinstance(v, relax.Call) else None
            if isinstance(b, relax.MatchCast):
                raise TlmError("plan: match_cast (symbolic shapes) is not supported")
            if op == "relax.call_tir":
                if len(v.args) > 2:
                    raise TlmError("plan: call_tir with symbolic shape arguments is not supported")
                args = ref(v.args[1])
                args = args if isinstance(args, list) else [args]
                if any(isinstance(a, list) for a in args):
                    raise TlmError(f"plan: {v.args[0].name_hint} takes a tuple argument")
                out_ty = v.ty_args[0]
                fields = list(out_ty.fields) if hasattr(out_ty, "fields") else [out_ty]
                outs = [new(t, "intermediate") for t in fields]
                steps.append({"func": v.args[0].name_hint, "args": args + outs, "n_out": len(outs)})
                ids[b.var] = outs if hasattr(out_ty, "fields") else outs[0]
            elif op == "relax.reshape":
                src = ref(v.args[0])
                ids[b.var] = new(b.var.ty, "view", base=bufs[src].get("base", src))
            elif isinstance(v, (relax.Var, const_type, relax.Tuple, relax.TupleGetItem)):
                ids[b.var] = ref(v)
            else:
                raise TlmError(f"plan: {op or type(v).__name__} needs a runtime the plan does not have")
    out = ref(main.body.body)
    outputs = out if isinstance(out, list) else [out]
    if not outputs or any(isinstance(o, list) for o in outputs):
        raise TlmError("plan: the model's output is not a tensor or a flat tuple of them")
    for o in outputs:
        if bufs[o]["kind"] == "intermediate":
            bufs[o]["kind"] = "output"
    return Walk(bufs, steps, outputs, consts)


def weight_like(a) -> bool:
    """A float array that random values of its mean and std may stand in for: finite, and many
    distinct values (a causal mask of 0 and -inf, or all ones, keeps its meaning only exactly;
    such arrays compress to almost nothing)."""
    import numpy as np

    from tlm.measure.cuda_measure import sample_index

    sample = a.reshape(-1)[sample_index(a.size, 4096)]
    return a.dtype.kind == "f" and bool(np.isfinite(a).all()) and len(np.unique(sample)) > 64


def mark_data(w: Walk, inputs: list, seed: int) -> dict[str, Any]:
    """Mark each input and constant carried ("exact": its npz key) or regenerated ("regen":
    seed from the original's digest, mean, std); returns the carried arrays."""
    import numpy as np

    exact: dict[str, Any] = {}
    params = [b for b in w.buffers if b["kind"] == "input"]
    if len(params) != len(inputs):
        raise TlmError(f"plan: main takes {len(params)} inputs, the model has {len(inputs)}")
    for b in w.buffers:
        if b["kind"] not in ("input", "constant"):
            continue
        a = np.ascontiguousarray(inputs[b["id"]] if b["kind"] == "input" else w.consts[b["id"]].value.numpy())
        if list(a.shape) != b["shape"] or str(a.dtype) != b["dtype"]:
            raise TlmError(f"plan: buffer {b['id']} holds {a.dtype}{list(a.shape)}, expected {b['dtype']}{b['shape']}")
        if a.nbytes > LARGE_BYTES and weight_like(a):
            h = hashlib.blake2b(f"{a.dtype}{a.shape}".encode(), digest_size=8)
            h.update(a.view(np.uint8).reshape(-1))
            digest = h.hexdigest()
            b["regen"] = {"seed": (int(digest, 16) + seed * 1000003) % (1 << 53), "mean": float(a.mean(dtype=np.float64)),
                          "std": float(a.std(dtype=np.float64)), "digest": digest}
        else:
            b["exact"] = f"b{b['id']}"
            exact[b["exact"]] = a
    return exact


def with_constants(mod, w: Walk, exact: dict[str, Any]):
    """`mod` with every constant of the walk holding the plan's data (regenerated or carried)."""
    from tvm import relax

    by_expr = {w.consts[i]: i for i in w.consts}
    bufs = {b["id"]: b for b in w.buffers}

    @relax.expr_functor.mutator
    class Swap(relax.PyExprMutator):
        def visit_generic_const_(self, op):
            i = by_expr.get(op)
            return op if i is None else relax.const(host_array(bufs[i], exact), bufs[i]["dtype"])

    import tvm

    out = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)  # a copy: `mod` keeps its constants
    out["main"] = Swap().visit_expr(mod["main"])
    return out


def vm_output(mod, w: Walk, exact: dict[str, Any], info: TargetInfo):
    """The walked module (the plan's constants) built for LLVM and run by TVM's VM."""
    import numpy as np
    import tvm
    from tvm import relax

    t = relax.transform
    lower = [t.RemovePurityChecking(), t.CallTIRRewrite(), t.StaticPlanBlockMemory(), t.LowerAllocTensor(),
             t.KillAfterLastUse(), t.LowerRuntimeBuiltin(), t.ComputePrimValue(), t.VMShapeLower(), t.AttachGlobalSymbol()]
    tgt = info.tvm()
    with tgt, build_context(3):
        ex = relax.build(with_constants(mod, w, exact), target=tgt, relax_pipeline=tvm.transform.Sequential(lower))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    args = [tvm.runtime.tensor(np.ascontiguousarray(host_array(b, exact)), tvm.cpu())
            for b in w.buffers if b["kind"] == "input"]
    out = vm["main"](*args)
    while not hasattr(out, "numpy"):  # a tuple: the model's output is its first tensor
        out = out[0]
    return out.numpy()


def walked(imported, info: TargetInfo, seed: int, msdb=None):
    """An imported model lowered for `info`, walked, its data marked: (module, how each function
    is scheduled, walk, carried arrays). The GPU plan and its CPU reference both come from here."""
    lowered: dict[str, Any] = {}
    hashes: dict[str, str] = {}  # CUDA only: what a GPU run's plan_assemble reads (the CPU reference needs none)
    with quiet_stderr():  # TVM's warnings (e.g. fast-mode gathers), not ours to show
        mod, how = lower_to_calls(imported.mod, info, msdb, lowered, hashes if info.kind == "cuda" else None)
    w = walk(mod["main"])
    w.cuda, w.tasks = lowered, hashes
    return mod, how, w, mark_data(w, list(imported.inputs), seed)


def run_steps(meta: dict[str, Any], exact: dict[str, Any], lib):
    """Execute a plan's steps one by one with `lib`'s TVM functions on CPU tensors (views alias
    their base, inputs and constants as the GPU machine makes them); the output."""
    import numpy as np
    import tvm

    dev = tvm.cpu()
    t: dict[int, Any] = {}
    for b in meta["buffers"]:
        if b["kind"] == "view":
            t[b["id"]] = t[b["base"]]._create_view(tuple(b["shape"]))
        elif b["kind"] in ("input", "constant"):
            t[b["id"]] = tvm.runtime.tensor(np.ascontiguousarray(host_array(b, exact)), dev)
        else:
            t[b["id"]] = tvm.runtime.empty(tuple(b["shape"]), b["dtype"], dev)
    for s in meta["steps"]:
        lib[s["func"]](*[t[i] for i in s["args"]])
    return t[meta["output"]].numpy()
