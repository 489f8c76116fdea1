"""Large-scale sampling: uniformly random valid programs per task, stored as tensor sentences.

Layout of an output directory:
    manifest.json              sentence version, target, per task: name, count, shard, errors
    shards/<task hash>.jsonl.gz  one JSON record per program:
                               {"task": hash, "target": target id, "space": i, "sentence": "..."}
A task is written in one piece (temp file + rename) and then entered in the manifest, so an
interrupted run resumes with the tasks that are not in the manifest yet.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tlm.errors import TlmError, read_json
from tlm.graph.target import TargetInfo
from tlm.graph.tasks import Task

MANIFEST = "manifest.json"


def target_id(target: TargetInfo) -> str:
    """A short stable id of a target (the full config is in the manifest)."""
    return hashlib.sha1(target.key.encode()).hexdigest()[:12]


def task_seed(seed: int, task_hash: str) -> int:
    """A well-spread seed per (run seed, task): nearby seeds give unrelated streams."""
    import numpy as np

    state = np.random.SeedSequence([seed, int(task_hash[:8], 16), int(task_hash[8:], 16)]).generate_state(2)
    return int(state[0]) << 32 | int(state[1])


@dataclass
class TaskSample:
    """What sampling one task produced (records are the shard lines)."""

    task: str
    records: list[dict[str, Any]]
    tries: int
    errors: int
    seconds: float
    first_error: str | None = None


def distinct_programs(task: Task, target: TargetInfo, seed: int, max_tries: int, seconds: float | None = None,
                      stats: dict[str, Any] | None = None) -> Iterator[tuple[Any, str]]:
    """Valid random programs of a task whose sentences were not drawn before, as (Program,
    sentence), until `max_tries` walks or `seconds`; `stats` gets tries, errors, first_error."""
    import random

    from tlm.space.design import random_policy, task_space, walk
    from tlm.space.language import render

    space = task_space(task, target)
    policy = random_policy(random.Random(seed))
    seen: set[str] = set()
    stats = {} if stats is None else stats
    stats.update(tries=0, errors=0, first_error=None)
    start = time.perf_counter()
    while stats["tries"] < max_tries and (seconds is None or time.perf_counter() - start < seconds):
        stats["tries"] += 1
        prog = walk(space, policy)
        if prog.error:
            stats["errors"] += 1
            stats["first_error"] = stats["first_error"] or prog.error
            continue
        sentence = render(prog, task, target)
        if sentence in seen:
            continue
        seen.add(sentence)
        yield prog, sentence


def sample_task(task: Task, target: TargetInfo, n: int, seed: int, max_tries: int | None = None) -> TaskSample:
    """Up to `n` distinct random valid programs of a task (fewer if its space is smaller)."""
    start = time.perf_counter()
    tid = target_id(target)
    stats: dict[str, Any] = {}
    records: list[dict[str, Any]] = []
    if n > 0:
        for prog, sentence in distinct_programs(task, target, seed, max_tries or 4 * n + 20, stats=stats):
            records.append({"task": task.hash, "target": tid, "space": prog.space, "sentence": sentence})
            if len(records) >= n:
                break
    return TaskSample(task.hash, records, stats.get("tries", 0), stats.get("errors", 0), time.perf_counter() - start,
                      stats.get("first_error"))


def _worker(job: dict[str, Any]) -> dict[str, Any]:
    """One task in a worker process: sample, write the shard, return its manifest entry."""
    from tlm.space.intrin import light_tensor_intrin

    light_tensor_intrin()
    task = Task.from_json(job["task"])
    target: TargetInfo = job["target"]
    try:
        res = sample_task(task, target, job["n"], job["seed"])
    except Exception as err:  # one bad task never stops the run
        return {"hash": task.hash, "name": task.name, "error": str(err).strip().splitlines()[-1][:300]}
    path = Path(job["path"])
    tmp = path.with_suffix(".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8") as f:
        for rec in res.records:
            f.write(json.dumps(rec) + "\n")
    os.replace(tmp, path)
    lengths = [len(r["sentence"].split()) for r in res.records]
    return {
        "hash": task.hash, "name": task.name, "kind": task.kind, "requested": job["n"],
        "count": len(res.records), "tries": res.tries, "errors": res.errors,
        "first_error": res.first_error, "seconds": round(res.seconds, 3),
        "mean_tokens": round(sum(lengths) / len(lengths), 1) if lengths else 0,
        "max_tokens": max(lengths, default=0), "shard": str(path.relative_to(job["out"])),
    }


def _load_manifest(out: Path, target: TargetInfo) -> dict[str, Any]:
    from tlm.space.language import SENTENCE_VERSION

    fresh = {"version": SENTENCE_VERSION, "target": target.config, "target_id": target_id(target), "tasks": {}}
    path = out / MANIFEST
    if not path.exists():
        return fresh
    manifest = read_json(path, "manifest")
    if manifest.get("version") != SENTENCE_VERSION:
        raise TlmError(f"{out} holds sentence version {manifest.get('version')}, not {SENTENCE_VERSION}: use another --out")
    if manifest.get("target_id") != target_id(target):
        raise TlmError(f"{out} holds programs for another target: use another --out")
    return manifest


def _save_manifest(out: Path, manifest: dict[str, Any]) -> None:
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, out / MANIFEST)


def sample(tasks: list[Task], target: TargetInfo, per_task: int, out: str | Path, jobs: int = 1, seed: int = 0, progress: bool = True) -> dict[str, Any]:
    """Sample `per_task` programs for every task into `out`, resuming a previous run there.

    Returns a summary: programs written now, tasks skipped as done, failed tasks, seconds.
    """
    if per_task < 1:
        raise TlmError("--per-task must be at least 1")
    out = Path(out)
    (out / "shards").mkdir(parents=True, exist_ok=True)
    manifest = _load_manifest(out, target)
    done = manifest["tasks"]
    unique = {t.hash: t for t in tasks}
    todo = [
        t for t in unique.values()
        if not (t.hash in done and done[t.hash].get("requested", 0) >= per_task and (out / done[t.hash]["shard"]).exists())
    ]
    jobs_list = [
        {"task": t.to_json(with_mod=True), "target": target, "n": per_task, "seed": task_seed(seed, t.hash),
         "path": str(out / "shards" / f"{t.hash}.jsonl.gz"), "out": str(out)}
        for t in todo
    ]
    start = time.perf_counter()
    written, failed = 0, []
    for entry in _run(jobs_list, jobs, progress, per_task):
        if "error" in entry:
            failed.append(entry)
            continue
        done[entry["hash"]] = entry
        written += entry["count"]
        _save_manifest(out, manifest)
    _save_manifest(out, manifest)
    seconds = time.perf_counter() - start
    return {"written": written, "tasks": len(todo), "skipped": len(unique) - len(todo), "failed": failed,
            "seconds": seconds, "jobs": jobs, "total": sum(e["count"] for e in done.values())}


def _run(jobs_list: list[dict], jobs: int, progress: bool, per_task: int) -> Iterator[dict]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn("sampling"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), disable=not progress)
    with bar:
        bar_task = bar.add_task("programs", total=len(jobs_list) * per_task)
        if jobs <= 1 or len(jobs_list) <= 1:
            results = map(_worker, jobs_list)
            pool = None
        else:
            import multiprocessing

            # TVM and fork do not mix well; spawned workers import TVM once each.
            pool = multiprocessing.get_context("spawn").Pool(min(jobs, len(jobs_list)))
            results = pool.imap_unordered(_worker, jobs_list)
        try:
            for entry in results:
                bar.advance(bar_task, per_task)
                yield entry
        finally:
            if pool is not None:
                pool.terminate()


def read_shards(out: str | Path) -> Iterator[dict[str, Any]]:
    """All records of a sampling directory."""
    out = Path(out)
    manifest = json.loads((out / MANIFEST).read_text())
    for entry in manifest["tasks"].values():
        with gzip.open(out / entry["shard"], "rt", encoding="utf-8") as f:
            for line in f:
                yield json.loads(line)


# The pretraining corpus: one training variant of every family, at batch 1 and a shape other
# than the family's held-out test workload where the family has one.
PRETRAIN_SET = (
    "resnet_18-b1-i224", "resnet_50-b1-i240", "mobilenet_v2-b1-i240", "mobilenet_v3-b1-i224",
    "resnext_50-b1-i256", "wide_resnet_50-b1-i224", "densenet_121-b1-i224", "vgg_16-b1-i224",
    "inception_v3-b1-i299", "efficientnet-b1-i224", "vit-b1-i224", "resnet3d_18-b1-i112", "dcgan-b1",
    "bert_tiny-b1-s64", "bert_medium-b1-s128", "bert_base-b1-s64", "bert_large-b1-s64",
    "gpt2-b1-s64", "llama-b1-s64",
)


def expand_sources(sources: list[str]) -> list[str]:
    """`pretrain-set` stands for PRETRAIN_SET, `train-set` for every workload of the training
    split (all batch sizes and input sizes); other names pass through."""
    from tlm.graph.zoo import list_workloads

    out: list[str] = []
    for s in sources:
        if s == "train-set":
            out.extend(w.name for w in list_workloads("train"))
        else:
            out.extend(PRETRAIN_SET if s == "pretrain-set" else [s])
    return out


def corpus_tasks(sources: list[str], hold_out: str = "none", target=None) -> tuple[list[Task], TargetInfo]:
    """Tasks of `sources`; with hold_out="test", minus every task of the held-out test workloads."""
    from tlm.graph.extract import drop_held_out
    from tlm.graph.sources import held_out_split
    from tlm.graph.target import resolve_target

    sources = expand_sources(sources)
    target = resolve_target(target)
    found, held_out = held_out_split(sources, hold_out, target)  # extracted in workers, each cache read once
    if hold_out == "test":
        return drop_held_out(found, held_out), target
    return [t for ts in found for t in ts.tasks], target


def _cmd_sample(args: argparse.Namespace) -> int:
    tasks, target = corpus_tasks(args.source, args.hold_out, args.target)
    jobs = args.jobs or max(1, target.cores if target.kind == "llvm" else (os.cpu_count() or 1))
    res = sample(tasks, target, args.per_task, args.out, jobs=jobs, seed=args.seed)
    for f in res["failed"]:
        print(f"task {f['name']} ({f['hash']}) failed: {f['error']}")
    rate = res["written"] / res["seconds"] if res["seconds"] > 0 else 0.0
    print(
        f"{res['written']} programs for {res['tasks']} tasks in {res['seconds']:.1f} s "
        f"({rate:.1f} programs/s, {rate / max(1, jobs):.1f} per worker); "
        f"{res['skipped']} tasks already done; {res['total']} programs in {args.out}"
    )
    return 1 if res["failed"] else 0


def register_cli(subparsers) -> None:
    p = subparsers.add_parser("sample", help="sample random programs of model tasks as tensor sentences")
    p.add_argument("source", nargs="+", help="zoo workload names, .onnx paths, or 'pretrain-set'")
    p.add_argument("--per-task", type=int, default=100, help="programs per task (default 100)")
    p.add_argument("--out", required=True, help="output directory (re-running resumes)")
    p.add_argument("--jobs", type=int, default=0, help="worker processes (default: target cores)")
    p.add_argument("--target", default=None, help="'host' (default), a GPU name, a TVM tag or JSON")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hold-out", default="none", choices=["none", "test"],
                   help="'test': leave out every task of the held-out test workloads")
    p.set_defaults(func=_cmd_sample)
