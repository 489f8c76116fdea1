"""Whole-model GPU plans: a model's kernels in order, built here (no GPU), run where one is.

    tlm gpu plan WORKLOAD --target h100 [--db DIR] --out PLAN      (here, with TVM)
    python -m tlm.measure.cuda_plan PLAN --out RESULTS             (there: numpy, CuPy, nvcc)

Why: the GPU machine has no TVM, so whole-model GPU latencies were sums of task latencies, an
estimate. A plan carries what a VM would do, as data: tlm's Relax pipeline for the target (the
fusion passes of task extraction, the best records of `db` applied as tlm.compiler.build does,
TVM's dlight GPU rules for the other tasks), stopped before VM code generation, where `main` is
a flat list of `call_tir`s, reshapes (views: no kernel), constants and tuples. Walking it gives
the buffers (inputs, constants, intermediates, outputs, views of another buffer), the steps in
order (a function and its argument buffers; the function's kernels and launches,
tlm.measure.cuda_build) and each function's CUDA C. Each CUDA function names its task's hash, so
that the GPU machine can put there a program of that task it has just measured in a bundle
(tlm.measure.plan_assemble: a held-out bundle and its contenders' whole-model plans in one call).

Weights do not travel (bert_base's are 440 MB, a call carries 64 MiB): a float constant or
input over 64 KiB is regenerated on both sides from a seed (tlm.measure.cuda_plan.regenerate)
at the original's mean and std; smaller, integer and mask-like ones (few distinct values, or
infinities: biases, norms, causal masks, token ids) are carried exactly. The expected output is the same plan's on this CPU: the same source through
the same pipeline for LLVM, the constants regenerated alike (matched by the original's digest),
run by TVM's VM.

Target "llvm" keeps the plan in memory, its steps TVM functions: `run_plan_cpu` runs it step by
step on TVM tensors (views alias their base), so the walk, the aliasing, the regeneration and
the step order are tested against the VM without a GPU (the walk: tlm.compiler.plan_walk).
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tlm.compiler.plan_walk import LARGE_BYTES, run_steps, vm_output, walked
from tlm.errors import TlmError, quiet_stderr
from tlm.graph.target import build_context, resolve_target
from tlm.measure.cuda_plan import DATA_FILE, EXPECTED_FILE, PLAN_FILE, PLAN_VERSION

__all__ = ["LARGE_BYTES", "MAX_PLAN_BYTES", "Plan", "build_plan", "run_plan_cpu", "write_plan", "summary"]
MAX_PLAN_BYTES = 48 << 20  # a call to the GPU machine carries 64 MiB in all
FULL_EXPECTED_BYTES = 8 << 20  # a larger expected output travels as a sample (cuda_measure.sample_index)


@dataclass
class Plan:
    """A plan as built: its JSON, the data it carries, the CPU's output; CUDA C or (LLVM) TVM functions."""

    meta: dict[str, Any]  # what plan.json holds
    exact: dict[str, Any] = field(repr=False)  # npz key -> array: the carried inputs and constants
    expected: Any = field(repr=False)  # the CPU's output (whole or sampled, as meta["expected"] says)
    sources: dict[str, str] = field(default_factory=dict, repr=False)  # CUDA: function -> CUDA C
    lib: Any = field(default=None, repr=False)  # LLVM: the compiled functions, by name
    directory: str | None = None


def cpu_expected(imported, seed: int, digests: set[str]):
    """The plan's output on this CPU: the same source, pipeline and regenerated constants, for LLVM."""
    from tlm.graph.target import host_target

    info = host_target()
    mod, _, w, exact = walked(imported, info, seed)
    missing = digests - {b["regen"]["digest"] for b in w.buffers if "regen" in b}
    if missing:
        raise TlmError(f"plan: {len(missing)} large constants of the GPU plan are not in the CPU's (folded otherwise)")
    with quiet_stderr():
        return vm_output(mod, w, exact, info)


def build_plan(source, target: str = "h100", db: str | None = None, out: str | Path | None = None, seed: int = 0,
               imported=None, tasks=None) -> Plan:
    """The plan of a zoo workload (or an ImportedModel) for `target`; written to `out` if given
    (CUDA only). An LLVM plan stays in memory, its functions compiled (`run_plan_cpu`). `tasks`:
    the model's tasks for `target` when the caller has them (else extracted again)."""
    import numpy as np
    import tvm

    from tlm.compiler.apply import compile_database
    from tlm.compiler.build import ATOL as MODEL_ATOL, RTOL as MODEL_RTOL
    from tlm.measure.cuda_build import lower_cuda
    from tlm.measure.cuda_measure import ATOL, RTOL, sample_index

    start = time.perf_counter()
    info = resolve_target(target)
    if out is not None and info.kind != "cuda":
        raise TlmError(f"plan: only a CUDA plan is written (target {target!r} is {info.kind})")
    if imported is None:
        from tlm.graph.extract import load
        from tlm.graph.importer import import_source

        imported, tasks = load(source, target=info) if db else (import_source(source), tasks)
    msdb, rows = None, None
    if db:
        from tlm.graph.extract import extract_from_relax
        from tlm.measure.database import open_db
        from tlm.space.intrin import light_tensor_intrin

        light_tensor_intrin()  # as tlm.space.design registers them (its CUDA spaces use none of CUDA's)
        with open_db(db, create=False) as database:
            msdb, rows = compile_database(database, tasks or extract_from_relax(imported.mod, info), info)
    mod, how, w, exact = walked(imported, info, seed, msdb)
    for name, why in w.refused.items():  # said, never silent: the plan runs dlight's program there
        print(f"tlm: warning: {name}: the database's program does not lower for {info.config.get('model') or info.cpu} "
              f"({why}); TVM's dlight schedule instead", file=sys.stderr)
    nbytes = {k: sum(int(np.prod(b["shape"])) * np.dtype(b["dtype"]).itemsize for b in w.buffers if pick(b))
              for k, pick in (("carried", lambda b: "exact" in b), ("regenerated", lambda b: "regen" in b),
                              ("intermediate", lambda b: b["kind"] in ("intermediate", "output")))}
    if out is not None and nbytes["carried"] > MAX_PLAN_BYTES:  # refused before the CPU reference runs
        raise TlmError(f"plan: {nbytes['carried'] / 2**20:.1f} MiB of exact data, over the {MAX_PLAN_BYTES >> 20} MiB a call carries")
    used = list(dict.fromkeys(s["func"] for s in w.steps))
    functions: dict[str, Any] = {}
    sources: dict[str, str] = {}
    lib = None  # LLVM: the compiled functions
    if info.kind == "cuda":
        for name in used:
            cuda = w.cuda.get(name)  # a database program was lowered once already, when it was checked
            if cuda is None or cuda.error:
                cuda = lower_cuda(tvm.IRModule({"main": mod[name].with_attr("global_symbol", "main")}), info)
            if cuda.error:
                raise TlmError(f"plan: {name}: {cuda.error}")
            sources[name] = cuda.source
            functions[name] = {"src": f"src/{name}.cu.xz", "schedule": how[name], **cuda.plan()}
            if name in w.tasks:  # a GPU run may put its measured program of that task here (plan_assemble)
                functions[name]["task"] = w.tasks[name]
        digests = {b["regen"]["digest"] for b in w.buffers if "regen" in b}
        expected = cpu_expected(imported, seed, digests)
    else:
        funcs = {name: mod[name].with_attr("global_symbol", name) for name in used}
        with quiet_stderr():
            with build_context():
                lib = tvm.compile(tvm.IRModule(funcs), target=info.tvm())
            expected = vm_output(mod, w, exact, info)
        functions = {name: {"schedule": how[name]} for name in used}
    sampled, scale = expected.nbytes > FULL_EXPECTED_BYTES, float(np.max(np.abs(expected), initial=0.0))
    counts = {k: sum(1 for n in used if how[n] == k) for k in ("db", "dlight", "default")}
    meta = {"version": PLAN_VERSION, "source": imported.source, "target": info.config,
            "card": info.config.get("model", ""), "arch": info.cpu, "seed": seed, "created": time.time(),
            "buffers": w.buffers, "steps": w.steps, "functions": functions, "output": w.outputs[0],
            "outputs": w.outputs, "inputs": [{k: b[k] for k in ("id", "shape", "dtype")} for b in w.buffers
                                             if b["kind"] == "input"],
            "schedules": counts, "db": os.path.abspath(db) if db else None, "refused": w.refused,
            "db_tasks": {s: sum(1 for r in rows if r["status"] == s) for s in ("tuned", "greedy", "untuned")} if rows else None,
            "expected": {"shape": list(expected.shape), "dtype": str(expected.dtype), "sampled": sampled, "scale": scale},
            "tolerance": {"rtol": RTOL, "atol": ATOL, "model_rtol": MODEL_RTOL, "model_atol": MODEL_ATOL},
            "bytes": nbytes, "limit_bytes": MAX_PLAN_BYTES}
    flat = expected.reshape(-1)
    plan = Plan(meta, exact, flat[sample_index(flat.size)] if sampled else expected, sources, lib)
    meta["build_s"] = round(time.perf_counter() - start, 1)
    if out is not None:
        write_plan(plan, Path(out))
    return plan


def write_plan(plan: Plan, out: Path) -> int:
    """The plan's files under `out`; TlmError (and no plan.json) when they pass the limit."""
    import numpy as np

    (out / "src").mkdir(parents=True, exist_ok=True)
    (out / PLAN_FILE).unlink(missing_ok=True)  # written last: a folder without it is no plan
    for name, code in plan.sources.items():
        with lzma.open(out / plan.meta["functions"][name]["src"], "wt", preset=6) as f:
            f.write(code)
    np.savez_compressed(out / DATA_FILE, **plan.exact)
    np.savez_compressed(out / EXPECTED_FILE, out=plan.expected)
    files = [out / DATA_FILE, out / EXPECTED_FILE] + [out / f["src"] for f in plan.meta["functions"].values()]
    plan.meta["files_bytes"] = sum(p.stat().st_size for p in files) + len(json.dumps(plan.meta)) + 64
    total = plan.meta["files_bytes"]
    if total > MAX_PLAN_BYTES:
        raise TlmError(f"plan: {total / 2**20:.1f} MiB of files, over the {MAX_PLAN_BYTES >> 20} MiB a call carries")
    (out / PLAN_FILE).write_text(json.dumps(plan.meta))
    plan.directory = str(out)
    return total


def run_plan_cpu(plan: Plan):
    """Execute an LLVM plan step by step on TVM CPU tensors (views alias their base); the output."""
    if plan.lib is None:
        raise TlmError("run_plan_cpu needs a plan built for an LLVM target (its steps are TVM functions)")
    return run_steps(plan.meta, plan.exact, plan.lib)


def summary(plan: Plan) -> str:
    m, s = plan.meta, plan.meta["schedules"]
    return (f"{m['source']} for {m['card'] or m['arch']}: {len(m['steps'])} steps, {len(m['functions'])} functions "
            f"({s['db']} from the database, {s['dlight']} dlight, {s['default']} default), "
            f"{m['bytes']['carried'] / 2**20:.2f} MiB carried, {m['bytes']['regenerated'] / 2**20:.1f} MiB regenerated"
            + (f", {m['files_bytes'] / 2**20:.2f} MiB of files" if "files_bytes" in m else ""))


def _cmd_plan(args: argparse.Namespace) -> int:
    plan = build_plan(args.workload, target=args.target, db=args.db, out=args.out, seed=args.seed)
    print(f"{args.out}: {summary(plan)}")
    return 0


def register_cli(sub) -> None:
    """`tlm gpu plan`, under the `gpu` command of tlm.measure.gpu_cli (registered before)."""
    gpu = sub.choices.get("gpu")
    gsub = gpu.get_default("gpu_subparsers") if gpu is not None else None
    if gsub is None:
        raise TlmError("tlm gpu plan: the gpu command is not registered (tlm.measure.gpu_cli first)")
    p = gsub.add_parser("plan", help="a whole-model GPU plan, built here, run by tlm.measure.cuda_plan")
    p.add_argument("workload", help="a zoo workload name")
    p.add_argument("--target", default="h100", help="a GPU name (h100, h200, ...) or a CUDA target dict")
    p.add_argument("--db", default=None, help="apply this database's best records (else dlight for every task)")
    p.add_argument("--seed", type=int, default=0, help="seed of the regenerated weights")
    p.add_argument("--out", required=True)
    p.set_defaults(func=_cmd_plan)

