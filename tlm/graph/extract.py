"""Graph layer, stage 1b: fusion and task extraction.

A prepared Relax module (tlm.graph.importer) goes through the fusion passes
(tlm.graph.passes.fuse_passes), and its fused subgraphs become deduplicated, weighted `Task`s,
cached on disk per (source, target, code). Records tuned for these tasks are found again by the
whole-model compile (tlm.compiler.build), because it runs the same pass list before it applies
the records.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tlm.errors import TlmError, first_line, quiet_stderr
from tlm.graph.importer import ImportedModel, import_source, import_torch
from tlm.graph.passes import fuse_passes
from tlm.graph.target import TargetInfo, resolve_target
from tlm.graph.tasks import Task, task_from_mod

# Bump when extraction changes in a way that changes tasks (invalidates the on-disk cache).
# 2: fast float32 math in legalization, elementwise ops moved before reshapes (tlm.graph.passes).
# 3: pre-packed (layout-free) weights of matmul tasks (tlm.graph.passes.layout_free).
# 4: zero pads folded into convs, 2-D convs in NHWC (tlm.graph.layout).
# 5: transposed 2-D convs as one sub-pixel conv2d + depth-to-space (tlm.graph.deconv).
# 6: 1-D convs in NWC (tlm.graph.layout).
# 7: convs' output widths padded to a multiple of 8 (tlm.graph.widths).
EXTRACT_VERSION = 7


def code_digest() -> str:
    """Digest of the code that defines models and extraction: editing it invalidates the cache."""
    here = Path(__file__).parent
    files = [here / "importer.py", here / "decompose.py", here / "converters.py", here / "passes.py", here / "layout.py", here / "widths.py", here / "rewrite.py",
             here / "deconv.py", here / "specialize.py", here / "batchnorm.py", here / "diagnose.py", here / "extract.py", here / "zoo.py", here / "tasks.py",
             *sorted((here / "models").glob("*.py"))]
    return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:16]


@dataclass
class TaskSet:
    source: str
    target: TargetInfo
    tasks: list[Task]

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "target": self.target.config,
            "tasks": [t.to_json() for t in self.tasks],
        }


def cache_dir() -> Path:
    root = os.environ.get("TLM_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "tlm")
    return Path(root)


def fuse(mod, target: TargetInfo, fast_math: bool = True, prepack: bool | frozenset[str] = True):
    """Relax module -> module of fused TIR functions, as the whole-model compile sees it."""
    import tvm

    tvm_target = target.tvm()
    with tvm_target, tvm.transform.PassContext(opt_level=3):
        return tvm.transform.Sequential(fuse_passes(tvm_target, fast_math, prepack))(mod)


def extract_from_relax(mod, target: TargetInfo, fast_math: bool = True,
                       prepack: bool | frozenset[str] = True) -> list[Task]:
    """Fused subgraphs of a prepared Relax module as Tasks (deduplicated, with weights);
    `fast_math=False`: TVM's own legalization of transcendental math, `prepack=False`: no
    pre-packed weights (tlm.graph.passes)."""
    from tvm.s_tir import meta_schedule as ms

    from tlm.graph.diagnose import EXTRACT, check_lowered, explain

    try:
        with quiet_stderr():
            fused = fuse(mod, target, fast_math, prepack)
            extracted = ms.relax_integration.extract_tasks(fused, target.tvm())
    except Exception as err:
        raise TlmError(explain(err, "task extraction", EXTRACT, mod, target)) from None
    check_lowered(fused)  # an op no legalization covers: refused here, before any tuning
    tasks = [task_from_mod(t.dispatched[0], name=t.task_name, weight=t.weight) for t in extracted]
    # Heaviest first: a stable order that puts the work that matters on top.
    tasks.sort(key=lambda t: (-t.weight * t.flops, t.name))
    return tasks


def extract_tasks(module, example_inputs, target=None, prepack: bool | frozenset[str] = True) -> list[Task]:
    """Tasks of any torch.nn.Module that torch.export accepts."""
    info = resolve_target(target)
    return extract_from_relax(import_torch(module, example_inputs).mod, info, prepack=prepack)


def load(source, example_inputs=None, target=None) -> tuple[ImportedModel, list[Task]]:
    """The graph stage in one call: a zoo name, an .onnx path or a torch.nn.Module (with example
    inputs) imported once, with its tasks for `target` (cached on disk for names and files)."""
    info = resolve_target(target)
    if isinstance(source, str):
        imported = import_source(source)
        return imported, tasks_for_source(source, target=info, imported=imported).tasks
    if example_inputs is None:
        raise TlmError("example_inputs are required to compile a torch module")
    imported = import_torch(source, example_inputs)
    return imported, extract_from_relax(imported.mod, info)


def _cache_key(source: str, target: TargetInfo) -> tuple[str, str]:
    """(display name, cache key); ONNX files are keyed by their content."""
    if source.endswith(".onnx") or os.path.exists(source):
        if not os.path.isfile(source):
            raise TlmError(f"no such ONNX file: {source}")
        digest = hashlib.sha256(Path(source).read_bytes()).hexdigest()
        name = source
    else:
        from tlm.graph.zoo import get_workload

        name = get_workload(source).name
        digest = name
    raw = json.dumps([EXTRACT_VERSION, code_digest(), digest, target.key])
    return name, hashlib.sha256(raw.encode()).hexdigest()[:24]


def cached_tasks(source: str, target=None) -> TaskSet | None:
    """The cached tasks of a zoo workload or ONNX file for a target, or None (nothing imported)."""
    info = resolve_target(target)
    name, key = _cache_key(source, info)
    path = cache_dir() / "tasks" / f"{key}.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        return TaskSet(name, info, [Task.from_json(t) for t in data["tasks"]])
    except (OSError, ValueError, KeyError):
        return None  # a corrupt cache entry is rebuilt by tasks_for_source


def tasks_for_source(source: str, target=None, refresh: bool = False, imported: ImportedModel | None = None) -> TaskSet:
    """Tasks of a zoo workload or ONNX file for a target, cached on disk per (source, target).

    `imported`: the source already imported (`import_source(source)`), so a cache miss does not
    import it a second time."""
    info = resolve_target(target)
    if not refresh and (cached := cached_tasks(source, info)) is not None:
        return cached
    name, key = _cache_key(source, info)
    path = cache_dir() / "tasks" / f"{key}.json"
    tasks = extract_from_relax((imported or import_source(source)).mod, info)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"source": name, "target": info.config, "tasks": [t.to_json(with_mod=True) for t in tasks]}
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as tmp:
        json.dump(payload, tmp)
    os.replace(tmp.name, path)
    return TaskSet(name, info, tasks)


def training_tasks(train_sources: list[str], test_sources: list[str], target=None) -> list[Task]:
    """Unique tasks of the training workloads, minus every task (by hash) of a test workload.

    Hold-out is per subgraph, as in the paper: a task shared with any test workload is never
    trained on, even when it also occurs in a training workload.
    """
    return drop_held_out([tasks_for_source(s, target) for s in train_sources],
                         {t.hash for s in test_sources for t in tasks_for_source(s, target).tasks})


def drop_held_out(train_sets: list, held_out: set[str]) -> list[Task]:
    """`training_tasks` of TaskSets already extracted (tlm.graph.sources.held_out_split): the
    training sets' distinct tasks, weights summed, minus every task whose hash is held out."""
    seen: dict[str, Task] = {}
    for ts in train_sets:
        for task in ts.tasks:
            if task.hash in held_out:
                continue
            if task.hash in seen:
                seen[task.hash].weight += task.weight
            else:
                seen[task.hash] = Task.from_json(task.to_json(with_mod=True))
    return list(seen.values())
