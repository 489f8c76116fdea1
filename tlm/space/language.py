"""Tensor language: one program of a task as one sentence of space-separated words.

    sentence = prompt + (context value)*       prompt = subgraph words + hardware words

Subgraph: the task's operator words, then each argument as its dtype followed by its shape.
Hardware: `llvm CPU CORES ISA VECTOR-BITS` or `cuda ARCH THREADS SHARED-BYTES WARP REGISTERS`.
Decisions, in trace order (the space first):
    space N I                          design space I of N
    tile BLOCK AXIS EXTENT F1 .. Fn    SamplePerfectTile on a loop of EXTENT
    cat USE VALUE                      SampleCategorical; VALUE is the candidate (e.g. unroll 64)
    loc BLOCK inline|root|K            SampleComputeLocation
The prompt depends on task and target only, and every context on the decisions before it, so a
generator can write the contexts itself and ask a model only for values.
"""

from __future__ import annotations

from tlm.errors import TlmError
from tlm.graph.target import TargetInfo, host_target
from tlm.graph.tasks import Task, op_names
from tlm.space.design import Choice, DecisionPoint, Program, TaskSpace, task_space, walk

# Bump on any change of the words below; stored with every data set and model.
SENTENCE_VERSION = 1
MAX_TOKENS = 1024

_LOC_WORDS = {-2: "inline", -1: "root"}
_LOC_VALUES = {w: v for v, w in _LOC_WORDS.items()}


def prompt_tokens(task: Task, target: TargetInfo) -> list[str]:
    """Subgraph and hardware words: everything before the first decision."""
    words = op_names(task.name) or [task.kind]
    for arg in task.args:
        words.append(arg["dtype"])
        words.extend(str(int(d)) for d in arg["shape"])
    return words + hardware_tokens(target)


def hardware_tokens(target: TargetInfo) -> list[str]:
    if target.kind == "cuda":
        cfg = target.config
        keys = ("max_threads_per_block", "max_shared_memory_per_block", "thread_warp_size", "registers_per_block")
        return ["cuda", target.cpu] + [str(cfg.get(k, cfg.get("max_num_threads", 0) if k == keys[0] else 0)) for k in keys]
    return [target.kind, target.cpu, str(target.cores), target.isa, str(target.vector_bits)]


def context_tokens(point: DecisionPoint) -> list[str]:
    """The words before a decision's value (computed from the live schedule)."""
    ctx = point.context
    if point.kind == "space":
        return ["space", str(ctx["n"])]
    if point.kind == "tile":
        return ["tile", ctx["block"], ctx["axis"], str(ctx["extent"])]
    if point.kind == "cat":
        return ["cat", ctx["use"]]
    if point.kind == "loc":
        return ["loc", ctx["block"]]
    raise TlmError(f"unsupported decision kind {point.kind}")


def value_tokens(point: DecisionPoint, choice: Choice) -> list[str]:
    """The words of one choice at a point (what a model generates)."""
    if point.kind == "tile":
        return [str(f) for f in choice]
    if point.kind == "cat":
        cands = point.context["candidates"]
        return [str(cands[choice]) if len(set(cands)) == len(cands) else f"#{choice}"]
    if point.kind == "loc":
        return [_LOC_WORDS.get(choice, str(choice))]
    return [str(choice)]


def value_length(point: DecisionPoint) -> int:
    return point.context["n"] if point.kind == "tile" else 1


def choice_from_tokens(point: DecisionPoint, words: list[str]) -> Choice:
    """Inverse of `value_tokens` (raises TlmError on words that name no choice)."""
    try:
        if point.kind == "tile":
            return tuple(int(w) for w in words)
        (word,) = words
        if point.kind == "cat":
            if word.startswith("#"):
                return int(word[1:])
            return list(point.context["candidates"]).index(int(word))
        if point.kind == "loc":
            return _LOC_VALUES[word] if word in _LOC_VALUES else int(word)
        return int(word)
    except (ValueError, KeyError):
        raise TlmError(f"bad value {' '.join(words)!r} for {point.kind}") from None


def sentence_tokens(program: Program, task: Task, target: TargetInfo) -> list[str]:
    if not program.points or len(program.points) != len(program.decisions) + 1:
        raise TlmError("program has no decision contexts (build it with walk/replay)")
    words = prompt_tokens(task, target)
    for point, choice in zip(program.points, [program.space] + list(program.decisions)):
        words += context_tokens(point) + value_tokens(point, choice)
    return words


def render(program: Program, task: Task, target: TargetInfo | None = None) -> str:
    """The sentence of a program."""
    return " ".join(sentence_tokens(program, task, target or host_target()))


def parse(sentence: str, task: Task, target: TargetInfo | None = None, postproc: bool = True, space: TaskSpace | None = None) -> Program:
    """The program a sentence names (raises TlmError if it names none)."""
    target = target or host_target()
    space = space or task_space(task, target)
    words = sentence.split()
    prompt = prompt_tokens(task, target)
    if words[: len(prompt)] != prompt:
        raise TlmError("sentence prompt does not match the task and target")
    pos = len(prompt)

    def policy(point: DecisionPoint) -> Choice:
        nonlocal pos
        ctx = context_tokens(point)
        if words[pos : pos + len(ctx)] != ctx:
            got = " ".join(words[pos : pos + len(ctx)])
            raise TlmError(f"expected {' '.join(ctx)!r} at word {pos}, got {got!r}")
        pos += len(ctx)
        n = value_length(point)
        if pos + n > len(words):
            raise TlmError("sentence ends early")
        value = words[pos : pos + n]
        pos += n
        return choice_from_tokens(point, value)

    prog = walk(space, policy, postproc)
    if prog.sch is None:
        raise TlmError(f"bad sentence: {prog.error}")
    if pos != len(words):
        raise TlmError(f"{len(words) - pos} extra words at the end of the sentence")
    return prog
