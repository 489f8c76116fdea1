"""Nearest-task donors for a first choice: measured programs of corpus tasks with the same
operators at the nearest shapes, their decisions carried to a new task.

A task's first choice (what `--budget 0` compiles, and the first program a tuning run measures)
is the cost model's pick among the language model's `TuneConfig.pick_samples` samples. For a
task unlike most of its training data all of them can be poor: gpt2's 768 -> 3072 matmul with
its tanh GELU (4 such tasks in the corpus, 44 with an erf GELU) got a pick 1.4x slower than its
10g best on znver4, among 32 samples whose best the cost model scored well below that best's.
The corpus (`data/corpus`) holds the fastest measured programs of the same operators at other
shapes (gpt2 at 64 tokens); each decision of one, carried to the new task as the nearest valid
choice (`carry`), gives a program of the new task's own space, and the donors join the samples
in the cost model's ranking. A held-out task is in no corpus, so a donor is never its own
program; a user's task that is in the corpus gets its own measured programs at distance 0.
Whole models at budget 0, with 3 donor tasks against none (znver4, 2026-12-06,
`python bench/donors.py --models ...`): gpt2 1.16x faster, bert_tiny 1.10x, mobilenet_v2 1.07x,
bert_base 1.06x, resnet_50 1.05x, dcgan 0.99x. A donor can lose to the pick it displaces (one of
mobilenet_v2's 1x1 convolutions, 1.6x slower alone): the cost model ranks it, nothing measures it.

The index (`load_index`) keeps, per corpus task, its operators, argument shapes and the decision
words of its DONOR_RECORDS fastest correct programs per target (CPUs and GPUs; a target's programs
go only to targets of its kind); built from the shards once per corpus state and cached under
`tlm.graph.extract.cache_dir()`. GPU first choices do not take donors yet: the held-out GPU
benchmark judges them first (`tlm gpu-heldout donors`).
"""

from __future__ import annotations

import hashlib
import json
import lzma
import math
import os
import statistics
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from tlm.errors import TlmError

DONOR_TASKS = 3  # the nearest corpus tasks a first choice takes programs from
DONOR_RECORDS = 2  # each donor task's fastest records on the CPU nearest the target
INDEX_VERSION = 3  # 2: record medians as ingest takes them (statistics.median); 3: GPU records too


@dataclass(frozen=True)
class Donor:
    """A measured program of a corpus task, as decision words (the sentence after its prompt)."""

    task_hash: str
    distance: float  # summed |log| differences of the argument shapes (0: the same shapes)
    target_key: str  # the CPU it was measured on
    median_s: float
    words: tuple[str, ...]


def corpus_dir() -> Path:
    from tlm.model.lm import repo_root

    return repo_root() / "data" / "corpus"


def _digest(corpus: Path) -> str:
    """Names and sizes of the corpus's shard and task files (shards are immutable, only added)."""
    h = hashlib.sha256(f"v{INDEX_VERSION}".encode())
    for path in sorted(corpus.rglob("*.xz")):
        h.update(f"{path.relative_to(corpus).as_posix()}:{path.stat().st_size};".encode())
    return h.hexdigest()[:16]


def build_index(corpus: str | os.PathLike) -> dict[str, Any]:
    """{"tasks": {hash: [operator words, [[dtype, shape], ...]]}, "best": {hash: {target key:
    [[median s, decision words], ...]}}} of the shards under `corpus` (fastest first; CPUs' and GPUs',
    each target's programs donated only to targets of its kind, `_key_order`)."""
    from types import SimpleNamespace

    from tlm.graph.tasks import op_names
    from tlm.measure.shards import read_shard, shard_paths
    from tlm.space.language import prompt_tokens

    corpus = Path(corpus)
    tasks: dict[str, list] = {}
    for path in sorted((corpus / "tasks").glob("*.json.xz")):
        for t in json.loads(lzma.decompress(path.read_bytes())):
            tasks.setdefault(t["hash"], [t["name"], [[a["dtype"], a["shape"]] for a in t["args"]]])
    runs: dict[str, dict[str, list]] = {}
    for path in shard_paths(corpus):
        try:
            header, shard_tasks, records = read_shard(path)
        except TlmError:
            continue  # unreadable: read_shard said so on stderr
        for t in shard_tasks:
            tasks.setdefault(t["hash"], [t["name"], [[a["dtype"], a["shape"]] for a in t["args"]]])
        key = header.get("target_key") or json.dumps(header.get("target", {}), sort_keys=True)
        for r in records:
            if r.get("err") or not r.get("lat") or not r.get("s"):
                continue
            runs.setdefault(r["t"], {}).setdefault(key, []).append((statistics.median(r["lat"]), r["s"]))  # as ingest
    best: dict[str, dict[str, list]] = {}
    for h, by_key in runs.items():
        if h not in tasks:
            continue
        name, args = tasks[h]
        task = SimpleNamespace(name=name, kind="", args=[{"dtype": d, "shape": s} for d, s in args])
        for key, recs in by_key.items():
            n = len(prompt_tokens(task, _target(key)))
            kept, seen = [], set()
            for median, sentence in sorted(recs):
                words = sentence.split()[n:]
                if words and words[0] == "space" and " ".join(words) not in seen:
                    seen.add(" ".join(words))
                    kept.append([median, " ".join(words)])
                if len(kept) >= DONOR_RECORDS:
                    break
            if kept:
                best.setdefault(h, {})[key] = kept
    return {"version": INDEX_VERSION,
            "tasks": {h: [op_names(tasks[h][0]), tasks[h][1]] for h in best},
            "best": best}


_LOADED: dict[str, dict[str, Any]] = {}


def load_index(corpus: str | os.PathLike | None = None) -> dict[str, Any] | None:
    """The donor index of `corpus` (default: the checkout's data/corpus), built on first use and
    cached; None when there is no corpus."""
    from tlm.graph.extract import cache_dir

    corpus = Path(corpus) if corpus else corpus_dir()
    if not corpus.is_dir():
        return None
    digest = _digest(corpus)
    if digest in _LOADED:
        return _LOADED[digest]
    path = cache_dir() / "donors" / f"{digest}.json.xz"
    index = None
    if path.is_file():
        try:
            index = json.loads(lzma.decompress(path.read_bytes()))
        except (lzma.LZMAError, ValueError):
            index = None  # a cut write: built again
    if index is None or index.get("version") != INDEX_VERSION:
        index = build_index(corpus)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
        tmp.write_bytes(lzma.compress(json.dumps(index).encode()))
        os.replace(tmp, path)
    _LOADED[digest] = index
    return index


def shape_distance(args: list[dict[str, Any]], other: list[list]) -> float:
    """Summed |log| differences of two argument lists' shapes; inf unless dtypes and ranks agree."""
    if len(args) != len(other):
        return math.inf
    d = 0.0
    for a, (dtype, shape) in zip(args, other):
        if a["dtype"] != dtype or len(a["shape"]) != len(shape):
            return math.inf
        d += sum(abs(math.log(max(1, x)) - math.log(max(1, y))) for x, y in zip(a["shape"], shape))
    return d


@lru_cache(maxsize=None)
def _target(key: str):
    """The TargetInfo of a target key (resolving one asks LLVM for its features: ~2 ms)."""
    from tlm.graph.target import resolve_target

    return resolve_target(json.loads(key))


def _key_order(target, keys: list[str]) -> list[str]:
    """`keys` (targets of one task's records) that may donate to `target`, nearest first. CPUs: the
    same target, then the same ISA and vector width in the same CPU family (znver5 for znver4), then
    the same ISA and vector width, then the other CPUs (each group in key order). GPUs: the same
    card, then cards whose code is the same (an H200's programs for an H100: same arch, threads,
    shared memory and registers); another kind's programs never (a CPU space's decisions differ)."""
    def family(cpu: str) -> str:  # znver4 -> znver, icelake-server -> icelake
        return cpu.rstrip("0123456789").split("-")[0]

    def rank(key: str) -> tuple:
        if key == target.key:
            return (0, key)
        if target.kind != "llvm":
            from tlm.measure.gpu_ingest import same_code

            return (1 if same_code(json.loads(key), target.config) else 9, key)
        other = _target(key)
        same_isa = (other.isa, other.vector_bits) == (target.isa, target.vector_bits)
        return (1 if same_isa and family(other.cpu) == family(target.cpu) else 2 if same_isa else 3, key)

    mine = [k for k in keys if json.loads(k).get("kind") == target.kind]
    return [k for r, k in sorted(rank(k) for k in mine) if r < 9]


def find(task, target, index: dict[str, Any], k_tasks: int = DONOR_TASKS,
         k_records: int = DONOR_RECORDS) -> list[Donor]:
    """The fastest programs (on the nearest target of `target`'s kind, `_key_order`) of the
    `k_tasks` corpus tasks with `task`'s operators nearest in shape that have such programs,
    nearest first."""
    from tlm.graph.tasks import op_names

    if k_tasks <= 0:
        return []
    ops = op_names(task.name)
    near = sorted((d, h) for h, (words, args) in index["tasks"].items()
                  if words == ops and (d := shape_distance(task.args, args)) < math.inf)
    out, used = [], 0
    for d, h in near:
        if used >= k_tasks:
            break
        by_key = index["best"][h]
        keys = _key_order(target, list(by_key))
        if not keys:
            continue  # measured on targets of another kind only
        used += 1
        out += [Donor(h, d, keys[0], median, tuple(words.split())) for median, words in by_key[keys[0]][:k_records]]
    return out


def _nearest(point, value):
    """The valid choice of `point` nearest a donor's value (the value itself when valid)."""
    choices = point.choices
    if value in choices:
        return value
    if point.kind == "tile":  # factors nearest in log scale, the innermost (the vector lanes) counted twice
        def cost(c):
            return sum(abs(math.log2(a) - math.log2(b)) * (2.0 if i == len(c) - 1 else 1.0)
                       for i, (a, b) in enumerate(zip(c, value)))
        return min(choices, key=cost)
    return min(choices, key=lambda c: abs(c - value))


def _policy(words: tuple[str, ...]):
    """A walk policy that reads a donor's decision words in step with the new task's decision
    points: each point's kind and block must be the donor's; its value is the nearest valid one."""
    from tlm.space.language import read_number, read_value

    words = list(words)  # read_number compares list slices
    pos = 0

    def expect(word: str) -> None:
        nonlocal pos
        if pos >= len(words) or words[pos] != word:
            raise TlmError(f"the donor's decisions differ at word {pos}")
        pos += 1

    def policy(point):
        nonlocal pos
        ctx = point.context
        expect(point.kind)
        if point.kind == "space":
            n, pos = read_number(words, pos)
            if n != ctx["n"]:
                raise TlmError("the donor's task has other design spaces")
            value, pos = read_number(words, pos)
            return _nearest(point, value)
        if point.kind == "tile":
            expect(ctx["block"])
            expect(str(ctx["axis"]))
            _, pos = read_number(words, pos)  # the donor's extent
        elif point.kind == "cat":
            expect(ctx["use"])  # a value that is no candidate here: read_value refuses the donor
        elif point.kind == "loc":
            expect(ctx["block"])
        value, pos = read_value(point, words, pos)
        return _nearest(point, value)

    return policy


def carry(task, target, words: tuple[str, ...], space=None):
    """The program of `task` whose decisions are a donor's (`words`), each the nearest valid
    choice (a Program; check `.ok`: a donor of another structure gives one with `error`)."""
    from tlm.space.design import task_space, walk

    return walk(space or task_space(task, target), _policy(words))


def donor_programs(task, target, index: dict[str, Any] | None, k_tasks: int = DONOR_TASKS) -> list[tuple[Donor, Any, str]]:
    """(donor, Program, sentence) of the donors of `task` that carry to a valid program of its
    space, distinct programs only."""
    from tlm.space.design import task_space
    from tlm.space.language import render

    if index is None:
        return []
    out, seen = [], set()
    space = None
    for donor in find(task, target, index, k_tasks):
        space = space or task_space(task, target)
        try:
            prog = carry(task, target, donor.words, space)
        except TlmError:
            continue
        if not prog.ok:
            continue
        sentence = render(prog, task, target)
        if sentence not in seen:
            seen.add(sentence)
            out.append((donor, prog, sentence))
    return out


_NO_CORPUS: list = []  # said once per process


def donor_samples(task, target, k_tasks: int, skip: set[str]) -> list:
    """The donor programs of `task` as the language model's samples are (tlm.model.generate.Generated,
    log-prob NaN: no model wrote them), none whose sentence is in `skip`; [] for k_tasks 0 and, for
    now, for a GPU target: GPU donors (`find` reads the GPU shards too) are judged on the held-out
    GPU benchmark first (`tlm gpu-heldout donors`), before the tuner's first choices take them. A
    checkout without data/corpus has none, said once per process."""
    import sys

    from tlm.model.generate import generated

    if k_tasks <= 0 or target.kind != "llvm":
        return []
    index = load_index()
    if index is None and not _NO_CORPUS:
        _NO_CORPUS.append(True)
        print(f"tlm: note: no corpus at {corpus_dir()}: first choices from the model's samples only (no donors)",
              file=sys.stderr)
    return [generated(task.hash, prog, sentence, float("nan"))
            for _, prog, sentence in donor_programs(task, target, index, k_tasks) if sentence not in skip]
