"""Collection at scale (issue 15): the iterative loop, durable in git. `make collect` runs it.

    tlm collect [--corpus data/corpus] [--work DIR] [--base MODEL] [--hours H] [--flush-minutes M] [loop options]

The iterative loop (tlm.search.loop: generate with the newest model, measure, fine-tune TLM-base
on the best programs: by default the best of every CPU in the corpus, each prompt naming its CPU,
so a new CPU's rounds also learn from the others; `--demo-targets self`: this one's only; and of
each task's programs one is the fastest of another CPU not yet measured here, `--transfer`) over the
training tasks, with every record also written to the corpus as
append-only, compressed, immutable shards (tlm.measure.shards): at most --flush-minutes after it
was measured, at the end of the run, and when the run is stopped (Ctrl-C, SIGTERM, --hours).
After kill -9, the next start flushes what the work database holds and the corpus lacks.
By default the shipped cost model (`tlm costmodel`, pretrained/costmodel-*) chooses 6 of each
task's 8 programs among 32 samples, and 2 are plain samples (`--cost-model none`: all plain).
Generation runs on one PyTorch thread (`--gen-threads`): on a shared 2-core machine PyTorch's own
threads wait for each other's time slices beside any busy neighbour (`generation` in bench/README.md).
The log says the programs measured and the rate at every flush. The fine-tuning after each round
runs beside the next round's measuring, at idle priority on one thread (it trains on the cores the
measuring leaves idle, and the timed programs keep theirs: `idle_neighbour` in bench/README.md), and
the round switches to its model as soon as it is done (`--no-pipeline`: stop measuring meanwhile).

A start on any machine first ingests every shard of the corpus into the work database (records
of every hardware; each keeps its target key), so a program is never measured twice on the same
hardware, a fresh work directory on a new machine resumes where the committed corpus stands, and
a new hardware starts its own rounds. One collector per work directory (a lock file).
The work directory defaults to `work/collect-<hardware>-<sources>-x<extraction version>` (not in
git). The default sources are `train-set`: every workload of the training split, held-out tasks
removed. Once loaded, the training tasks are also kept in the corpus (`tasks_archive`, one xz file
named by the extraction code), so the next fresh machine of the same kind loads them instead of
extracting. A work directory names the extraction of its tasks (`tasks.key`: version and archive):
one of another extraction version is refused in one line (its tasks are not this code's); one
extracted by other code of the same version, or from before the stamp, resumes but never writes
its tasks into this code's archive (a pre-version-6 tasks.json once went in under its name).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tlm.errors import TlmError, interrupted, signal_handler
from tlm.search.loop import LoopConfig, run_loop

DEFAULT_CORPUS = "data/corpus"


@dataclass
class CollectConfig:
    corpus: str = DEFAULT_CORPUS
    hours: float = 0.0  # stop after this long (0: only the loop's own stopping rules)
    flush_minutes: float = 10.0
    loop: LoopConfig = field(default_factory=lambda: LoopConfig(base="", work=""))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class _TimeUp(Exception):
    pass


def default_base(target) -> Path:
    """The shipped TLM-base that serves `target` (pretrained/tlm-base-KIND-*)."""
    from tlm.model.lm import read_meta, repo_root, serves

    root = repo_root() / "pretrained"
    bases = sorted(root.glob(f"tlm-base-{target.kind}-*")) if root.is_dir() else []
    for path in bases:
        if serves(read_meta(path), target):
            return path
    if bases:
        return bases[0]
    raise TlmError(f"no pretrained/tlm-base-{target.kind}-* model; pass --base DIR")


def tasks_archive(corpus: Path, sources: list[str], target) -> Path:
    """Where the corpus keeps the training tasks of `sources` for `target`: an xz file named by
    the extraction version and code and by what extraction reads of the target
    (`TargetInfo.extraction_key`: for LLVM its architecture, not its CPU), so that a fresh machine
    of any CPU of a kind already seen loads them instead of extracting ~160 workloads (about an
    hour on 2 cores); any change to extraction renames it."""
    import hashlib

    from tlm.graph.extract import EXTRACT_VERSION, code_digest

    raw = json.dumps([EXTRACT_VERSION, code_digest(), sorted(sources), target.extraction_key])
    slug = "-".join(p for p in (target.kind, target.arch) if p)
    return corpus / "tasks" / f"{slug}-{hashlib.sha256(raw.encode()).hexdigest()[:16]}.json.xz"


# A loop's work directory names the extraction its tasks.json came from: "<version> <archive>".
TASKS_STAMP = "tasks.key"


def _held_extraction(work: Path) -> tuple[int | None, str | None]:
    """(extraction version, archive name) of a work directory's tasks; None for what it does not say."""
    try:
        words = (work / TASKS_STAMP).read_text().split()
    except OSError:
        return None, None  # a work directory from before the stamp: its extraction is unknown
    if len(words) == 2 and words[0].isdigit():
        return int(words[0]), words[1]
    return None, (words or [None])[-1]  # the stamp's first form named the archive only


def read_tasks_archive(path: Path) -> list | None:
    """The tasks of an archive, or None when there is none (or it is unreadable: extract instead)."""
    import lzma

    from tlm.graph.tasks import Task

    try:
        with lzma.open(path, "rt") as f:
            return [Task.from_json(t) for t in json.load(f)]
    except (OSError, ValueError, KeyError, lzma.LZMAError):
        return None


def write_tasks_archive(path: Path, tasks_json: Path) -> None:
    """Compress a loop's tasks.json into the archive (atomically; never rewritten once there)."""
    import lzma
    import os
    import shutil

    if path.is_file():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    with open(tasks_json, "rb") as src, lzma.open(tmp, "wb", preset=9) as dst:
        shutil.copyfileobj(src, dst)  # streamed: a train-set tasks.json is ~200 MB
    os.replace(tmp, path)


@contextmanager
def _locked(work: Path):
    import fcntl

    work.mkdir(parents=True, exist_ok=True)
    f = open(work / "collect.lock", "w")
    try:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise TlmError(f"another collector is running in {work}") from None
        yield
    finally:
        f.close()


class _Stop(Exception):
    pass


@contextmanager
def _sigterm_stops(flag: dict):
    """SIGTERM: stop after the task being measured (its records committed); a second SIGTERM, or
    one before the loop has started measuring (loading tasks), interrupts at once (the records
    committed so far are flushed either way)."""
    def handler(signum, frame):
        if flag.get("term") or not flag.get("started"):
            flag["term"] = True
            raise KeyboardInterrupt
        flag["term"] = True

    with signal_handler(signal.SIGTERM, handler):
        yield


def collect(config: CollectConfig, tasks: list | None = None, progress: bool = True, log=print, *,
            measurer=None) -> dict[str, Any]:
    """Ingest the corpus, run the loop with periodic flushes, flush at the end; returns a summary."""
    from tlm.graph.extract import EXTRACT_VERSION
    from tlm.graph.target import resolve_target
    from tlm.measure.database import open_db
    from tlm.measure.shards import flush, hardware_slug, ingest, pending, require_corpus_dir

    loop = config.loop
    target = resolve_target(loop.target)
    loop.target = target.config
    if not loop.ft_threads:
        loop.ft_threads = 1 if loop.pipeline else max(1, target.cores)
    corpus = require_corpus_dir(config.corpus)
    archive = tasks_archive(corpus, list(loop.sources), target)
    if not loop.work:  # one work directory per hardware, task set and extraction version (its tasks never change)
        sources = "-".join(loop.sources) if len(loop.sources) <= 2 else f"{len(loop.sources)}-sources"
        loop.work = str(Path("work") / f"collect-{hardware_slug(target.key)}-{sources[:60]}-x{EXTRACT_VERSION}")
    if not loop.base:
        loop.base = str(default_base(target))
    work = Path(loop.work)
    with _locked(work):
        (work / "collect.json").write_text(json.dumps(config.to_json(), indent=1))
        with open_db(str(work / "db")) as db:
            got = ingest(db, corpus)
            before = db.count(target_key=target.key)
        # a damaged or unreadable shard was named on stderr by ingest itself (got.skipped)
        log(f"corpus {corpus}: {len(got.shards)} new shards ingested ({got.records} records); "
            f"{before} records for {target.cpu} in {work / 'db'}")
        t0 = time.monotonic()
        last = [time.monotonic()]
        flushed = {"shards": 0, "records": 0}

        from_sources = tasks is None and not loop.max_tasks  # the archive holds every task of the sources
        if tasks is None and (work / "tasks.json").is_file():  # a loop resumed: its tasks are its own
            version, held = _held_extraction(work)
            if version is not None and version != EXTRACT_VERSION:
                raise TlmError(f"{work} holds the training tasks of extraction version {version} (this code's is "
                               f"{EXTRACT_VERSION}): collect into a new --work")
            # Unstamped, or extracted by an earlier revision of the same version's code (the
            # archive is named by the code): resumed, but never archived under this code's name.
            from_sources = from_sources and held == archive.name
        elif tasks is None:
            (work / TASKS_STAMP).write_text(f"{EXTRACT_VERSION} {archive.name}\n")
            if tasks := read_tasks_archive(archive):
                log(f"{len(tasks)} training tasks from {archive} (no extraction)")
        flag: dict = {}

        def after_task(db) -> None:
            if not flag.get("started") and from_sources and (work / "tasks.json").is_file():
                write_tasks_archive(archive, work / "tasks.json")  # commit it with the shards
            flag["started"] = True
            if flag.get("term"):
                raise _Stop
            if time.monotonic() - last[0] >= config.flush_minutes * 60:
                rep = flush(db, corpus)
                flushed["shards"] += len(rep.shards)
                flushed["records"] += rep.records
                last[0] = time.monotonic()
                now = db.count(target_key=target.key) - before
                wall = last[0] - t0
                log(f"{time.strftime('%H:%M:%S')}: {now} programs measured in {wall:.0f} s "
                    f"({now / max(wall, 1e-9):.2f} per second); {flushed['records']} records flushed so far")
            if config.hours and time.monotonic() - t0 >= config.hours * 3600:
                raise _TimeUp

        stopped, summary = None, {}
        try:
            with _sigterm_stops(flag):
                summary = run_loop(loop, tasks, progress, measurer=measurer, after_task=after_task)
                stopped = summary.get("stopped")
        except _TimeUp:
            stopped = f"--hours {config.hours:g} reached"
        except _Stop:
            stopped = "stopped (SIGTERM)"
        except KeyboardInterrupt:
            stopped = "interrupted"
        except Exception:
            if not flag.get("term") and not interrupted():  # TVM may wrap an interrupt in its own error
                raise
            stopped = "interrupted (SIGTERM)" if flag.get("term") else "interrupted"
        finally:
            with open_db(str(work / "db")) as db:
                rep = flush(db, corpus)
                left = pending(db)
                after = db.count(target_key=target.key)
            flushed["shards"] += len(rep.shards)
            flushed["records"] += rep.records
            log(f"flushed {flushed['records']} records into {flushed['shards']} shards under {corpus}"
                + (f" ({left} records not flushed)" if left else ""))
    wall = time.monotonic() - t0
    log(f"{after - before} programs measured in {wall:.0f} s ({(after - before) / max(wall, 1e-9):.2f} per second, "
        "generation, fine-tuning and task loading included)")
    return {"corpus": str(corpus), "work": str(work), "stopped": stopped, "ingested_shards": len(got.shards),
            "ingested_records": got.records, "measured_now": after - before, "wall_s": round(wall, 1),
            "per_second": round((after - before) / max(wall, 1e-9), 3), "flushed_records": flushed["records"],
            "flushed_shards": flushed["shards"], "records": after, "loop": summary}


def _cmd_collect(args: argparse.Namespace) -> int:
    from tlm.measure.config import measure_config_from_args

    loop = LoopConfig(base=args.base or "", work=args.work or "", sources=list(args.sources), kb=args.kb,
                      kp=args.kp, rounds=args.rounds, max_tasks=args.max_tasks, seed=args.seed, target=args.target,
                      pipeline=args.pipeline, ft_threads=args.ft_threads, gen_threads=args.gen_threads,
                      schedule=args.schedule,
                      cost_model=args.cost_model, cm_pool=args.cm_pool, cm_explore=args.cm_explore,
                      cm_adapt_trees=args.cm_adapt_trees,
                      demo_targets=args.demo_targets, transfer=args.transfer,
                      measure=measure_config_from_args(args))
    if args.hours < 0 or args.flush_minutes <= 0:
        raise TlmError("--hours must be >= 0 and --flush-minutes > 0")
    if args.cm_pool < 1 or args.cm_explore < 0 or args.cm_adapt_trees < 0:
        raise TlmError("--cm-pool must be >= 1, --cm-explore and --cm-adapt-trees >= 0")
    cfg = CollectConfig(corpus=args.corpus, hours=args.hours, flush_minutes=args.flush_minutes, loop=loop)
    res = collect(cfg, progress=args.progress, log=lambda m: print(m, file=sys.stderr, flush=True))
    if args.json:
        json.dump(res, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        print(f"stopped: {res['stopped']}; {res['measured_now']} measured now, {res['records']} records for this "
              f"hardware; {res['flushed_records']} records flushed to {res['corpus']}")
    return 0


def _cmd_corpus(args: argparse.Namespace) -> int:
    from tlm.measure.shards import corpus_summary

    summary = corpus_summary(args.corpus)
    if args.curve:
        from tlm.search.corpus_curve import write_curves

        for c in write_curves(args.corpus, args.curve):
            print(f"{c.hardware}: {c.records} records over {c.tasks} tasks; " + (
                f"first pass complete at {c.reference} records, normalized total latency now {c.final:.3f}"
                if c.reference and c.reference < c.records else "first pass not past its end yet: no curve")
                  + f" ({Path(args.curve) / f'convergence-{c.hardware}.csv'})", file=sys.stderr)
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if not summary:
        print(f"no shards under {args.corpus}")
    for hw, v in sorted(summary.items()):
        print(f"{hw}: {v['records']} records ({v['ok']} correct) over {v['tasks']} tasks in {v['shards']} shards")
    return 0


def register_cli(sub) -> None:
    from tlm.measure.config import add_measure_args

    p = sub.add_parser("collect", help="the data engine: the iterative loop, flushed to the corpus in git")
    p.add_argument("--corpus", default=DEFAULT_CORPUS, help=f"shard directory (default {DEFAULT_CORPUS})")
    p.add_argument("--work", default=None, help="work directory (default work/collect-HARDWARE-SOURCES)")
    p.add_argument("--base", default=None, help="TLM-base model directory (default: the shipped one)")
    p.add_argument("--sources", nargs="+", default=["train-set"],
                   help="workloads whose training tasks are measured (default train-set: every training "
                        "workload, all batch and input sizes; pretrain-set: one variant per family)")
    p.add_argument("--hours", type=float, default=0.0, help="stop after this long (0: the loop's rules)")
    p.add_argument("--flush-minutes", type=float, default=10.0, help="write new shards at least this often")
    p.add_argument("--kb", type=int, default=4)
    p.add_argument("--kp", type=int, default=8)
    p.add_argument("--rounds", type=int, default=0)
    p.add_argument("--max-tasks", type=int, default=0)
    p.add_argument("--schedule", default="gain", choices=["cycle", "gain"],
                   help="gain (default): after one cycle over the batches, the tasks expected to gain most")
    p.add_argument("--cost-model", default="auto",
                   help="which samples to measure: auto (default: ranked by the shipped cost model for the "
                        "target, if any), none (every sample), or a cost model directory")
    p.add_argument("--cm-pool", type=int, default=4, help="with a cost model: samples per measured program")
    p.add_argument("--cm-explore", type=int, default=2,
                   help="with a cost model: programs per task and round measured unranked (plain samples)")
    p.add_argument("--cm-adapt-trees", type=int, default=0,
                   help="with a cost model: trees it is boosted on a task's measured programs before ranking "
                        "the task's samples (0: off)")
    p.add_argument("--demo-targets", default="all", choices=["all", "self"],
                   help="fine-tune on the demonstrations of every CPU in the corpus (default; each prompt "
                        "names its CPU) or of this hardware only")
    p.add_argument("--transfer", type=int, default=1,
                   help="of a task's programs per round, up to this many are the fastest of other CPUs in the "
                        "corpus, said for this one (default 1; 0: none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ft-threads", type=int, default=0, help="0: 1 when pipelined (the default), else every core")
    p.add_argument("--gen-threads", type=int, default=1,
                   help="PyTorch threads of the generation (default 1: on a shared machine PyTorch's threads "
                        "spin and wait for one another, bench/README.md; 0: PyTorch's default)")
    p.add_argument("--no-pipeline", dest="pipeline", action="store_false",
                   help="stop measuring while fine-tuning (by default the fine-tuning process runs beside the "
                        "measuring at idle priority, on the cores it leaves idle, bench/README.md)")
    p.add_argument("--target", default=None)
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    add_measure_args(p)
    # Slow programs (far from the best) cost ~400 ms of timing instead of 5 full runs, those 3x
    # slower than their task's best (or below 1 GFLOPS) are not timed beyond their checked run
    # and stopped 3 s past that: the corpus grows faster where precision matters least
    # (tlm.measure.config.MeasureConfig; a vgg_16-b8 conv's random programs ran up to 30 s).
    # Repeats of 10 ms, not 30: 1.31x the programs per second, as repeatable (bench/measure_rate.py).
    p.set_defaults(func=_cmd_collect, timing_budget_ms=400.0, slow_factor=3.0, min_gflops=1.0, min_repeat_ms=10)

    p = sub.add_parser("corpus", help="what the measurement corpus holds, per hardware")
    p.add_argument("--corpus", default=DEFAULT_CORPUS)
    p.add_argument("--json", action="store_true")
    p.add_argument("--curve", default=None, metavar="DIR",
                   help="also write the convergence curve per hardware (paper Figure 9): DIR/convergence-*.csv "
                        "and DIR/convergence.png (e.g. results/corpus)")
    p.set_defaults(func=_cmd_corpus)
