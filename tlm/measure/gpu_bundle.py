"""Measurement bundles: GPU programs built here (no GPU), measured on a machine with one.

    tlm gpu bundle --target h200 --sources bert_tiny-b1-s64 ... --per-task 10 --out DIR

A bundle is a folder that travels to the GPU machine:

    tasks.json.xz      the tasks with their TIR (for the records, tlm.measure.gpu_ingest)
    manifest.json.gz   target, card, and per task: arguments, input seed, the CPU check file,
                       the reference program, the candidates (sentence + launch plan), and the
                       source files (one per preamble group) that hold their kernels
    src/*.cu.xz        CUDA C: TVM's preamble, then the kernels of several programs, renamed
                       p<k>_<name> for candidate k and ref_<name> for the reference
    checks/*.npz       the untuned program's outputs on this CPU (tlm.measure.reference), on the
                       inputs `cuda_measure.make_inputs(args, seed)`: of every buffer it writes, the elements at
                       `sample_index` (evenly spread), and the first inputs (to see that the GPU
                       machine's numpy draws the same ones)

Candidates are distinct random programs of the task's CUDA design spaces that MetaSchedule's GPU
postprocessors accept (VerifyGPUCode: shared memory, threads), as tensor sentences. The
reference is TVM's rule-based GPU schedule of the task (`tvm.s_tir.dlight`): the runner runs it
first, checks it against the CPU's outputs, and then checks every candidate against it on every
element. Tasks are built in worker processes, each task written in one piece, so an interrupted
build resumes with the tasks it has not written.
"""

from __future__ import annotations

import gzip
import json
import lzma
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tlm.errors import TlmError, first_line
from tlm.graph.target import TargetInfo, resolve_target
from tlm.graph.tasks import Task
from tlm.measure.cuda_build import CudaProgram, lower_cuda, rename_kernels, split_source
from tlm.measure.cuda_measure import MANIFEST, read_candidates, sample_index

BUNDLE_VERSION = 1
REF_PREFIX = "ref_"
TASKS_FILE = "tasks.json.xz"  # the bundle's tasks with their TIR (for the records of its results)


@dataclass
class BundleConfig:
    target: str = "h200"
    per_task: int = 10
    seed: int = 0
    jobs: int = 2
    task_seconds: float = 60.0  # sampling time per task at most (GPU spaces reject most samples)
    max_tries_per_program: int = 40
    candidates: str | None = None  # JSON lines {task, proposer, sentence}: these programs, not random ones

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def dlight_program(task: Task, target: TargetInfo) -> CudaProgram:
    """TVM's rule-based GPU schedule of the task (zero measurements), lowered."""
    import tvm
    from tvm.s_tir import dlight as dl

    try:  # on a fresh copy: dlight's schedules write into the module they are given
        with target.tvm():
            mod = dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                                          dl.gpu.GeneralReduction(), dl.gpu.Fallback())(tvm.ir.load_json(task.mod_json))
    except Exception as err:  # a task dlight cannot schedule
        return CudaProgram(error=f"dlight: {first_line(err)}")
    return lower_cuda(tvm.IRModule({"main": mod["main"]}), target)


def sample_programs(task: Task, target: TargetInfo, n: int, seed: int, seconds: float,
                    max_tries: int) -> tuple[list[tuple[int, str, CudaProgram]], dict[str, Any]]:
    """Up to n distinct valid random programs (space, sentence, lowered); and the counts."""
    from tlm.space.sampling import distinct_programs

    out: list[tuple[int, str, CudaProgram]] = []
    counts: dict[str, Any] = {}
    lowering = 0
    first_error = None
    start = time.perf_counter()
    for prog, sentence in distinct_programs(task, target, seed, max_tries * n, seconds, counts):
        cuda = lower_cuda(prog.sch.mod, target)
        if cuda.error:
            lowering += 1
            first_error = first_error or cuda.error
            continue
        out.append((prog.space, sentence, cuda))
        if len(out) >= n:
            break
    stats = {"tries": counts["tries"], "rejected": counts["errors"], "lowering_errors": lowering,
             "first_error": counts["first_error"] or first_error, "sample_s": round(time.perf_counter() - start, 2)}
    return out, stats


def proposed_programs(task: Task, target: TargetInfo, proposals: list[dict[str, Any]]
                      ) -> tuple[list[tuple[int, str, CudaProgram, str]], dict[str, Any]]:
    """The programs that sentences name, in their order (a tuner's proposals, say), lowered:
    (space, sentence, lowered, proposer); a sentence that names no valid program is counted
    per proposer in the stats, never silently dropped."""
    from tlm.space.design import task_space
    from tlm.space.language import parse

    space = task_space(task, target)
    out: list[tuple[int, str, CudaProgram, str]] = []
    refused: dict[str, int] = {}
    first_error = None
    start = time.perf_counter()
    for p in proposals:
        try:
            prog = parse(p["sentence"], task, target, space=space)
            error = prog.error
        except TlmError as err:
            prog, error = None, str(err)
        cuda = lower_cuda(prog.sch.mod, target) if prog is not None and not error else None
        error = error or (cuda.error if cuda is not None else None)
        if error:
            refused[p["proposer"]] = refused.get(p["proposer"], 0) + 1
            first_error = first_error or error
            continue
        out.append((prog.space, p["sentence"], cuda, p["proposer"]))
    stats = {"tries": len(proposals), "rejected": sum(refused.values()), "refused": refused, "lowering_errors": 0,
             "first_error": first_error, "sample_s": round(time.perf_counter() - start, 2)}
    return out, stats


def cpu_check(task: Task, seed: int, path: Path) -> dict[str, Any]:
    """Run the untuned task on this CPU and save what the GPU runner checks against."""
    import numpy as np
    import tvm

    from tlm.graph.target import build_context, host_target
    from tlm.measure.cuda_measure import make_inputs
    from tlm.measure.reference import fast_reference

    inputs = make_inputs(task.args, seed)
    with build_context():
        lib = tvm.compile(fast_reference(tvm.ir.load_json(task.mod_json)), target=host_target().tvm())
    dev = tvm.cpu()
    tensors = [tvm.runtime.tensor(x, dev) for x in inputs]
    lib["main"](*tensors)
    arrays: dict[str, Any] = {}
    written = []
    for i, (x, t) in enumerate(zip(inputs, tensors)):
        out = t.numpy()
        arrays[f"head{i}"] = x.reshape(-1)[:16].copy()
        same = np.array_equal(out, x, equal_nan=True) if out.dtype.kind == "f" else np.array_equal(out, x)
        if same:  # the runner checks that such a buffer still holds its input
            continue
        written.append(i)
        arrays[f"val{i}"] = out.reshape(-1)[sample_index(out.size)]
    np.savez_compressed(path, **arrays)
    return {"written": written}


def _write_xz(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with lzma.open(tmp, "wt", preset=6) as f:
        f.write(text)
    os.replace(tmp, path)


FILE_PROGRAMS = 16  # programs per source file at most: nvcc takes ~0.7 s a program, one file per core


def _groups(programs: list[tuple[str, CudaProgram]]) -> list[tuple[str, list[int]]]:
    """Programs by preamble (TVM adds helpers, e.g. cp.async, to some programs' preambles), in
    files of FILE_PROGRAMS at most: a task of a hundred programs in one file was a 2-minute nvcc
    run that the GPU machine's other cores could not share."""
    by: dict[str, list[int]] = {}
    for k, (_, cuda) in enumerate(programs):
        by.setdefault(split_source(cuda.source)[0], []).append(k)
    return [(pre, ks[i:i + FILE_PROGRAMS]) for pre, ks in by.items() for i in range(0, len(ks), FILE_PROGRAMS)]


def build_task(job: dict[str, Any]) -> dict[str, Any]:
    """One task (in a worker process): sample, lower, reference, CPU check; its manifest entry."""
    from tlm.space.intrin import light_tensor_intrin

    light_tensor_intrin()
    task = Task.from_json(job["task"])
    target: TargetInfo = job["target"]
    cfg: BundleConfig = job["config"]
    start = time.perf_counter()
    try:
        from tlm.space.sampling import task_seed

        if job.get("proposals") is not None:
            progs, stats = proposed_programs(task, target, job["proposals"])
        else:
            sampled, stats = sample_programs(task, target, cfg.per_task, task_seed(cfg.seed, task.hash),
                                             cfg.task_seconds, cfg.max_tries_per_program)
            progs = [(*p, "random") for p in sampled]
    except Exception as err:  # one bad task never stops the bundle
        return dict(task_entry(task, cfg.seed), error=first_line(err))
    return write_entry(task, progs, target, cfg.seed, Path(job["out"]), stats, start)


def task_entry(task: Task, seed: int) -> dict[str, Any]:
    return {"hash": task.hash, "name": task.name, "kind": task.kind, "flops": task.flops,
            "weight": task.weight, "args": task.args, "seed": seed}


def reference_files(task: Task, target: TargetInfo, seed: int, out: Path) -> dict[str, Any]:
    """The task's reference (dlight's program, its CUDA C under `out`) and CPU check, as entry fields."""
    ref = dlight_program(task, target)
    fields: dict[str, Any] = {"ref_error": ref.error}
    fields.update(cpu_check(task, seed, out / "checks" / f"{task.hash}.npz"))
    fields["check"] = f"checks/{task.hash}.npz"
    if not ref.error:
        preamble, kernels = split_source(ref.source)
        rel = f"src/{task.hash}-ref.cu.xz"
        _write_xz(out / rel, preamble + rename_kernels(kernels, [k.name for k in ref.kernels], REF_PREFIX))
        fields["ref"] = {"src": rel, "prefix": REF_PREFIX, **ref.plan()}
    return fields


def write_entry(task: Task, progs: list[tuple[Any, str | None, CudaProgram, str]], target: TargetInfo, seed: int,
                out: Path, stats: dict[str, Any], start: float, ref: dict[str, Any] | None = None) -> dict[str, Any]:
    """A task's manifest entry and files under `out` for its lowered programs (space, sentence,
    lowered, proposer), its reference and CPU check (`ref`: those fields, made before)."""
    entry = dict(task_entry(task, seed), **stats)
    try:
        entry.update(ref if ref is not None else reference_files(task, target, seed, out))
    except Exception as err:  # one bad task never stops the bundle
        entry["error"] = first_line(err)
        return entry
    files = []
    entry["candidates"] = []
    for g, (preamble, members) in enumerate(_groups([(s, c) for _, s, c, _ in progs])):
        rel = f"src/{task.hash}-g{g}.cu.xz"
        bodies = []
        for k in members:
            cuda = progs[k][2]
            bodies.append(rename_kernels(split_source(cuda.source)[1], [kn.name for kn in cuda.kernels], f"p{k}_"))
        _write_xz(out / rel, preamble + "\n".join(bodies))
        files.append({"src": rel, "members": members})
    for k, (space, sentence, cuda, proposer) in enumerate(progs):
        entry["candidates"].append({"id": k, "space": space, "sentence": sentence, "proposer": proposer,
                                    "prefix": f"p{k}_", **cuda.plan()})
    entry["groups"] = files
    entry["build_s"] = round(time.perf_counter() - start, 2)
    return entry


def _entries_dir(out: Path) -> Path:
    return out / "tasks"


def build_bundle(tasks: list[Task], cfg: BundleConfig, out: str | Path, progress: bool = True) -> dict[str, Any]:
    """Build (or resume) a bundle of `tasks` under `out` (with cfg.candidates: those of its
    tasks that have candidates, with those programs); returns the manifest."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    out = Path(out)
    target = resolve_target(cfg.target)
    unique: dict[str, Task] = {}  # a task of several sources once, its calls summed
    for t in tasks:
        if t.hash in unique:
            unique[t.hash].weight += t.weight
        else:
            unique[t.hash] = Task.from_json(t.to_json(with_mod=True))
    tasks = list(unique.values())
    proposals = read_candidates(cfg.candidates) if cfg.candidates else None
    if proposals is not None:
        tasks = [t for t in tasks if t.hash in proposals]
    if target.kind != "cuda":
        raise TlmError(f"bad target {cfg.target!r}: a GPU bundle needs a CUDA target")
    for sub in ("src", "checks", "tasks"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    cfg_path = out / "config.json"
    if cfg_path.exists():
        old = json.loads(cfg_path.read_text())
        if {**old, "jobs": cfg.jobs} != cfg.to_json():  # worker processes do not change the bundle
            raise TlmError(f"{out} was built with another config ({cfg_path}): use another --out")
    else:
        cfg_path.write_text(json.dumps(cfg.to_json(), indent=1))
    todo = [t for t in tasks if not (_entries_dir(out) / f"{t.hash}.json").exists()]
    jobs = [{"task": t.to_json(with_mod=True), "target": target, "config": cfg, "out": str(out),
             "proposals": proposals.get(t.hash) if proposals is not None else None} for t in todo]
    done = len(tasks) - len(todo)
    if jobs:
        with ProcessPoolExecutor(max_workers=max(1, cfg.jobs)) as pool:
            futures = [pool.submit(build_task, j) for j in jobs]
            for fut in as_completed(futures):
                entry = fut.result()
                path = _entries_dir(out) / f"{entry['hash']}.json"
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(entry))
                os.replace(tmp, path)
                done += 1
                if progress:
                    n = len(entry.get("candidates", []))
                    print(f"[{done}/{len(tasks)}] {entry['name']}: {n} programs"
                          + (f" ({entry['error']})" if entry.get("error") else ""), flush=True)
    write_tasks(out, tasks)
    return write_manifest(out, [t.hash for t in tasks], target)


def write_tasks(out: Path, tasks: list[Task]) -> None:
    """The tasks with their TIR, for the records of the results (tlm.measure.gpu_ingest)."""
    _write_xz(out / TASKS_FILE, json.dumps([t.to_json(with_mod=True) for t in tasks]))


def write_manifest(out: Path, order: list[str], target: TargetInfo) -> dict[str, Any]:
    entries = []
    for h in order:
        path = _entries_dir(out) / f"{h}.json"
        if path.exists():
            entries.append(json.loads(path.read_text()))
    manifest = {"version": BUNDLE_VERSION, "target": target.config, "card": target.config.get("model", ""),
                "arch": target.cpu, "created": time.time(), "tasks": entries}
    tmp = out / (MANIFEST + ".tmp")
    with gzip.open(tmp, "wt") as f:
        json.dump(manifest, f)
    os.replace(tmp, out / MANIFEST)
    return manifest


def read_tasks(bundle: str | Path) -> dict[str, Task]:
    path = Path(bundle) / TASKS_FILE
    if not path.exists():
        raise TlmError(f"{bundle}: no {TASKS_FILE} (not a GPU bundle?)")
    with lzma.open(path, "rt") as f:
        return {t["hash"]: Task.from_json(t) for t in json.load(f)}


def bundle_tasks(sources: list[str], target: TargetInfo, hold_out: str, limit: int | None) -> list[Task]:
    from tlm.space.sampling import corpus_tasks

    tasks, _ = corpus_tasks(sources, hold_out, target)
    return tasks[:limit] if limit else tasks


def bundle_hashes(bundle: str | Path) -> set[str]:
    """The tasks of a bundle: its built entries, or (a bundle kept without them, as in
    results/gpu/bundles) its manifest's."""
    from tlm.measure.cuda_measure import read_manifest

    found = {p.stem for p in (Path(bundle) / "tasks").glob("*.json")}
    if not found and (Path(bundle) / MANIFEST).exists():
        found = {e["hash"] for e in read_manifest(bundle)["tasks"]}
    if not found:
        raise TlmError(f"--skip {bundle}: not a GPU bundle (no tasks/ and no {MANIFEST})")
    return found
