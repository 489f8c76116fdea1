"""Tensor language: one program of a task as one sentence of space-separated words.

    sentence = prompt + (context value)*       prompt = subgraph words + hardware words

Subgraph: the task's operator words, then each argument as its dtype followed by its shape.
Hardware (`hardware_tokens`): `llvm ARCH ISA VECTOR-BITS FEATURE.. cores N CPU` (the CPU name last,
so an unseen CPU shares every word but one with a seen one of its class), or
`cuda ARCH THREADS SHARED-BYTES WARP REGISTERS`.
Decisions, in trace order (the space first):
    space N I                          design space I of N
    tile BLOCK AXIS EXTENT F1 .. Fn    SamplePerfectTile on a loop of EXTENT
    cat USE VALUE                      SampleCategorical; VALUE is the candidate (e.g. unroll 64),
                                       or `# K` (candidate index K) when candidates repeat
    loc BLOCK inline|root|K            SampleComputeLocation
The prompt depends on task and target only, and every context on the decisions before it, so a
generator can write the contexts itself and ask a model only for values.

Numbers (every integer the language writes: shapes, extents, factors, values, indices, hardware
numbers) use `number_words`: a common value (`COMMON`: 0..1024, multiples of 64 to 4096, of
1024 to 65536, powers of two to 2**24) is one word, its decimal numeral (`1024`); any other is
`nL` (L = its digit count) and then one word per digit (`1031` -> `n4 1 0 3 1`); a negative
one is `neg` and then its absolute value. The code is prefix-free, so concatenated tile factors
decode uniquely, and `closed_words()` holds every word it can write, so a vocabulary that has
them can say every number (any model's tokenizer has them: `tlm.model.lm.build_tokenizer`).
"""

from __future__ import annotations

import operator

from tlm.errors import TlmError
from tlm.graph.target import TargetInfo, host_target
from tlm.graph.tasks import Task, op_names
from tlm.space.design import Choice, DecisionPoint, Program, TaskSpace, task_space, walk

# Bump on any change of the words below; stored with every data set and model.
# 2: the number encoding (multi-word uncommon numbers, `# K`), hardware words with arch/features.
SENTENCE_VERSION = 2
MAX_TOKENS = 1024

_LOC_WORDS = {-2: "inline", -1: "root"}
_LOC_VALUES = {w: v for v, w in _LOC_WORDS.items()}
_INDEX, _NEG = "#", "neg"  # `# K`: a categorical choice by index; `neg N`: -N
MAX_DIGITS = 24  # longer integers are refused (no loop extent or hardware number comes close)
# Single-word numbers: every loop extent, factor and unroll step of small tasks, plus the round
# sizes of large layers and hardware (4096 hidden units, 49152 bytes of shared memory, 2**20).
COMMON = frozenset(range(1025)) | frozenset(range(1024, 4097, 64)) | frozenset(range(4096, 65537, 1024)) \
    | frozenset(2**k for k in range(25))
_DIGITS = frozenset("0123456789")


# ---------------------------------------------------------------- numbers

def number_words(n: int) -> list[str]:
    """The words of an integer (see the module docstring); TlmError for a non-integer or one
    of more than MAX_DIGITS digits."""
    try:
        n = operator.index(n)
    except TypeError:
        raise TlmError(f"not an integer: {n!r}") from None
    if n < 0:
        return [_NEG] + number_words(-n)
    if n in COMMON:
        return [str(n)]
    digits = str(n)
    if len(digits) > MAX_DIGITS:
        raise TlmError(f"{n} has more than {MAX_DIGITS} digits: too large for the tensor language")
    return [f"n{len(digits)}"] + list(digits)


def read_number(words: list[str], pos: int) -> tuple[int, int]:
    """(the integer whose words start at words[pos], the position after them); TlmError if
    none does, or if they are not the integer's canonical words (`n4 1 0 2 4`, `n4 0 9 9 9`)."""
    neg = pos < len(words) and words[pos] == _NEG
    start = pos + neg
    word = words[start] if start < len(words) else ""
    if word.isascii() and word.isdigit():
        text, end = word, start + 1
    elif word[:1] == "n" and word[1:].isascii() and word[1:].isdigit():
        end = start + 1 + int(word[1:])
        digits = words[start + 1 : end]
        if end > len(words) or not all(d in _DIGITS for d in digits):
            raise TlmError(f"bad number words {' '.join(words[pos:end])!r} at word {pos}")
        text = "".join(digits)
    else:
        raise TlmError(f"expected a number at word {pos}, got {word or 'the end'!r}")
    n = -int(text) if neg else int(text)
    if number_words(n) != words[pos:end]:
        raise TlmError(f"{' '.join(words[pos:end])!r} at word {pos} are not the words of a number")
    return n, end


def closed_words() -> set[str]:
    """Every word a number or a value can be (numbers, length words, `neg`, `#`, inline, root):
    task-independent, so any tokenizer has them and no number ever needs <unk>."""
    return ({str(n) for n in COMMON} | {f"n{k}" for k in range(4, MAX_DIGITS + 1)}
            | {_NEG, _INDEX} | set(_LOC_VALUES))



def _numbers(values) -> list[str]:
    return [w for v in values for w in number_words(int(v))]


def prompt_tokens(task: Task, target: TargetInfo) -> list[str]:
    """Subgraph and hardware words: everything before the first decision."""
    words = op_names(task.name) or [task.kind]
    for arg in task.args:
        words.append(arg["dtype"])
        words.extend(_numbers(arg["shape"]))
    return words + hardware_tokens(target)


def reprompt(sentence: str, task: Task, built: TargetInfo, target: TargetInfo) -> str:
    """A sentence of `built`'s program with `target`'s prompt: the same decisions, the card's words
    swapped (two cards that generate the same code, say the H200 and the H100)."""
    return " ".join([*prompt_tokens(task, target), *sentence.split()[len(prompt_tokens(task, built)):]])


def hardware_tokens(target: TargetInfo) -> list[str]:
    """The target's words; they depend on its config only (LLVM's tables for the mcpu, never
    the machine this runs on), so a JSON target gives the same words everywhere."""
    if target.kind == "cuda":
        cfg = target.config
        keys = ("max_threads_per_block", "max_shared_memory_per_block", "thread_warp_size", "registers_per_block")
        # SMs and L2 (MiB) tell apart cards of one architecture (H100 and H200: both sm_90a)
        return (["cuda", target.cpu] + _numbers(cfg.get(k, cfg.get("max_num_threads", 0) if k == keys[0] else 0) for k in keys)
                + ["sms"] + number_words(target.cores) + ["l2"] + number_words(int(cfg.get("l2_cache_size_bytes", 0)) >> 20))
    return ([target.kind, target.arch, target.isa] + number_words(target.vector_bits) + list(target.features)
            + ["cores"] + number_words(target.cores) + [target.cpu])


def context_tokens(point: DecisionPoint) -> list[str]:
    """The words before a decision's value (computed from the live schedule)."""
    ctx = point.context
    if point.kind == "space":
        return ["space"] + number_words(ctx["n"])
    if point.kind == "tile":
        return ["tile", ctx["block"], ctx["axis"]] + number_words(ctx["extent"])
    if point.kind == "cat":
        return ["cat", ctx["use"]]
    if point.kind == "loc":
        return ["loc", ctx["block"]]
    raise TlmError(f"unsupported decision kind {point.kind}")


def _by_index(point: DecisionPoint) -> bool:
    """Whether a categorical point names its choices by index (`# K`): candidates repeat."""
    cands = point.context["candidates"]
    return len(set(cands)) != len(cands)


def value_tokens(point: DecisionPoint, choice: Choice) -> list[str]:
    """The words of one choice at a point (what a model generates). The choices of one point
    never have words of which another's are a prefix (a prefix-free number code, and one form
    per point), so a generator knows where a value ends."""
    if point.kind == "tile":
        return _numbers(choice)
    if point.kind == "cat":
        if _by_index(point):
            return [_INDEX] + number_words(choice)
        return number_words(point.context["candidates"][choice])
    if point.kind == "loc" and choice in _LOC_WORDS:
        return [_LOC_WORDS[choice]]
    return number_words(choice)


def read_value(point: DecisionPoint, words: list[str], pos: int) -> tuple[Choice, int]:
    """(the choice whose words start at words[pos], the position after them): the inverse of
    `value_tokens`; TlmError on words that name no candidate. Tile factors are not checked
    against the valid choices here (the walk refuses a wrong product)."""
    if point.kind == "tile":
        factors = []
        for _ in range(point.context["n"]):
            f, pos = read_number(words, pos)
            factors.append(f)
        return tuple(factors), pos
    if point.kind == "cat":
        cands = point.context["candidates"]
        if _by_index(point):
            if pos >= len(words) or words[pos] != _INDEX:
                raise TlmError(f"expected {_INDEX!r} at word {pos} (repeated candidates {list(cands)})")
            k, end = read_number(words, pos + 1)
            if not 0 <= k < len(cands):
                raise TlmError(f"no candidate {k} of {point.context['use']} (it has {len(cands)})")
            return k, end
        v, end = read_number(words, pos)
        if v not in cands:
            raise TlmError(f"{v} is not a candidate of {point.context['use']} ({list(cands)})")
        return list(cands).index(v), end
    if point.kind == "loc" and pos < len(words) and words[pos] in _LOC_VALUES:
        return _LOC_VALUES[words[pos]], pos + 1
    return read_number(words, pos)


def value_length(point: DecisionPoint, words: list[str], pos: int) -> int:
    """How many words the value of `point` that starts at words[pos] has (numbers vary)."""
    return read_value(point, words, pos)[1] - pos


def choice_from_tokens(point: DecisionPoint, words: list[str]) -> Choice:
    """Inverse of `value_tokens` (raises TlmError on words that name no choice)."""
    choice, end = read_value(point, list(words), 0)
    if end != len(words):
        raise TlmError(f"bad value {' '.join(words)!r} for {point.kind}: {len(words) - end} extra words")
    return choice


_DECISION_WORDS = {"space": 0, "tile": 2, "cat": 1, "loc": 1}  # name words before a context number


def value_mask(words: list[str], prompt_len: int) -> list[bool]:
    """Which words of a sentence are decision values (what a generator samples), without the
    task: after `space`, `tile B A` a number follows; a tile's factors are numbers up to the
    next decision word; a categorical value is `# K` or a number; a location inline|root|K."""
    mask = [False] * len(words)
    i = prompt_len
    while i < len(words):
        word = words[i]
        if word not in _DECISION_WORDS:
            raise TlmError(f"word {i} ({word!r}) of the sentence starts no decision")
        i += 1 + _DECISION_WORDS[word]
        if word in ("space", "tile"):
            _, i = read_number(words, i)
        if i >= len(words) or words[i] in _DECISION_WORDS:
            raise TlmError(f"decision {word!r} at word {i} has no value")
        start = i
        if word == "tile":
            while i < len(words) and words[i] not in _DECISION_WORDS:
                _, i = read_number(words, i)
        elif word == "loc" and words[i] in _LOC_VALUES:
            i += 1
        else:
            _, i = read_number(words, i + (word == "cat" and words[i] == _INDEX))
        mask[start:i] = [True] * (i - start)
    return mask


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
        choice, pos = read_value(point, words, pos)
        return choice

    prog = walk(space, policy, postproc)
    if prog.sch is None:
        raise TlmError(f"bad sentence: {prog.error}")
    if pos != len(words):
        raise TlmError(f"{len(words) - pos} extra words at the end of the sentence")
    return prog
