"""What a command's SOURCE argument names, checked before anything is imported; the tasks of many
sources, each extracted in a worker process (`tasks_for_sources`).

Kept out of `tlm.graph.extract.code_digest` (which keys the task caches and the corpus' task
archive, `tlm.search.collect.tasks_archive`): it decides nothing about the tasks extracted.
"""

from __future__ import annotations

import os

from tlm.errors import TlmError


def check_source(source: str) -> None:
    """TlmError unless `source` names a zoo workload or an existing .onnx file (cheap: nothing built),
    so a command says what is wrong with its first argument before it checks the others. The same
    rule as `tlm.graph.importer.import_source`: a path ending in .onnx, or any existing path, is an
    ONNX file; anything else a workload name."""
    if source.endswith(".onnx") or os.path.exists(source):
        if not os.path.isfile(source):
            raise TlmError(f"no such ONNX file: {source}")
        return
    from tlm.graph.zoo import get_workload

    get_workload(source)


def extract_jobs() -> int:
    """Worker processes for extracting many sources: two where cores and memory allow (a large
    model's import takes a few GB), else one."""
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        mem = 0
    return 2 if (os.cpu_count() or 1) >= 2 and mem >= 16 * 2**30 else 1


def _extract_in_child(job: tuple[str, dict]) -> str | None:
    """Fill the task cache of one source in a spawned worker: None, or its error in one line."""
    from tlm.errors import first_line
    from tlm.graph.extract import tasks_for_source

    source, config = job
    try:
        tasks_for_source(source, target=config)
    except TlmError as err:
        return str(err)
    except Exception as err:  # noqa: BLE001 - the parent says it in one line
        return f"task extraction failed: {first_line(err, last=False)}"
    return None


def tasks_for_sources(sources: list[str], target=None, jobs: int | None = None) -> list:
    """`tlm.graph.extract.tasks_for_source` of each source (a TaskSet each, in order), where two or
    more are not cached yet each of those extracted in a fresh process, `jobs` at a time (default
    `extract_jobs()`).

    Importing a model keeps its weights alive in the importing process for good (TVM 0.27's
    PyTorch importer wraps the weights through DLPack, and after `gc` no Python object refers to
    the tensors that stay: ~0.4 GB per bert_base or gpt2 import, checked with torch 2.13), so
    extracting 46 workloads in one process grew to 16.6 GB. A worker gives it all back
    when it exits; this process reads the cache the workers wrote. Kept out of `code_digest`: the
    tasks are the same either way."""
    from tlm.graph.extract import cached_tasks, tasks_for_source
    from tlm.graph.target import resolve_target

    info = resolve_target(target)
    for source in sources:
        check_source(source)
    got = {s: cached_tasks(s, info) for s in dict.fromkeys(sources)}  # each cache read once
    todo = [s for s, ts in got.items() if ts is None]
    if len(todo) > 1:
        import multiprocessing
        import sys

        n = min(jobs or extract_jobs(), len(todo))
        print(f"tlm: extracting the tasks of {len(todo)} sources ({n} at a time, each in its own process)",
              file=sys.stderr)
        ctx = multiprocessing.get_context("spawn")  # TVM and fork do not mix
        with ctx.Pool(n, maxtasksperchild=1) as pool:
            for source, err in zip(todo, pool.imap(_extract_in_child, [(s, info.config) for s in todo])):
                if err is not None:
                    raise TlmError(err if source in err else f"{source}: {err}")
    for s in todo:  # read from the cache the workers wrote (or, for a single one, extracted here)
        got[s] = tasks_for_source(s, target=info)
    return [got[s] for s in sources]


def held_out_split(sources: list[str], hold_out: str, target=None) -> tuple[list, set[str]]:
    """The TaskSets of `sources` (tasks_for_sources, in order) and, with hold_out="test", the hashes
    of every task of the held-out test workloads, extracted in the same workers ("none": no hash).
    Hold-out is per subgraph, as in the paper: a training task that a test workload shares is held out."""
    from tlm.graph.zoo import list_workloads

    if hold_out not in ("none", "test"):
        raise TlmError(f"unknown --hold-out {hold_out!r} (choose test or none)")
    tests = [w.name for w in list_workloads("test")] if hold_out == "test" else []
    found = tasks_for_sources([*tests, *sources], target)
    return found[len(tests):], {t.hash for ts in found[: len(tests)] for t in ts.tasks}
