"""Tensor sentences: exact round trips, compactness, refusal of bad sentences; the number
encoding (issue 14, point 2): every integer has words, common ones are one word, the code is
prefix-free and canonical, tile choices of any extent (large, prime) encode and decode uniquely
(those tests build decision points by hand and need no TVM)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tlm.errors import TlmError
from tlm.space.language import (COMMON, MAX_DIGITS, choice_from_tokens, closed_words, number_words, read_number,
                                read_value, value_mask, value_tokens)

pytestmark = pytest.mark.tvm


@pytest.fixture(scope="module")
def W():
    import workloads_tir as W

    return W


@pytest.fixture(scope="module")
def tasks(W):
    return {name: build() for name, build in W.TINY.items()}


def _round_trip(task, target, prog):
    import tvm_ffi

    from tlm.space.language import MAX_TOKENS, parse, prompt_tokens, render

    sentence = render(prog, task, target)
    words = sentence.split()
    assert len(words) <= MAX_TOKENS
    assert words[: len(prompt_tokens(task, target))] == prompt_tokens(task, target)
    back = parse(sentence, task, target)
    assert (back.space, back.decisions) == (prog.space, prog.decisions)
    assert render(back, task, target) == sentence
    assert tvm_ffi.structural_equal(back.sch.mod, prog.sch.mod)
    return sentence


def test_round_trip_225_programs_over_9_task_types(tasks, host):
    from tlm.space.design import random_program

    rng = random.Random(2024)
    seen = set()
    count = 0
    for name, task in tasks.items():
        for _ in range(25):
            prog = random_program(task, host, rng)
            assert prog.ok, (name, prog.error)
            seen.add(_round_trip(task, host, prog))
            count += 1
    assert count >= 200 and len(seen) > 150  # random draws are mostly distinct


@given(name=st.sampled_from(["matmul", "batch_matmul", "dense_bias", "conv3x3", "depthwise_conv", "softmax", "layer_norm", "pooling"]),
       seed=st.integers(0, 2**63))
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_round_trip_property(tasks, host, name, seed):
    from tlm.space.design import random_program

    prog = random_program(tasks[name], host, random.Random(seed))
    assert prog.ok, prog.error
    _round_trip(tasks[name], host, prog)


def test_prompt_depends_on_task_and_target_only(tasks, host):
    from tlm.graph.target import resolve_target
    from tlm.space.language import hardware_tokens, prompt_tokens

    words = prompt_tokens(tasks["dense_bias"], host)
    hw = hardware_tokens(host)
    assert words[:3] == ["dense", "add", "relu"]
    assert words[-len(hw):] == hw and hw[:3] == ["llvm", host.arch, host.isa] and hw[-1] == host.cpu
    cuda = hardware_tokens(resolve_target("a100"))
    assert cuda[:2] == ["cuda", "sm_80"] and "sms" in cuda and "l2" in cuda
    assert hardware_tokens(resolve_target("h100")) != hardware_tokens(resolve_target("h200"))
    assert all(" " not in w and w for w in words)


def test_hardware_words_describe_the_cpu_class():
    """An unseen CPU shares every word but its name with a seen one of its class; the words
    depend on the target dict only (LLVM's CPU tables), not on the machine that runs this."""
    from tlm.graph.target import resolve_target
    from tlm.space.language import hardware_tokens

    def words(mcpu, cores=2, triple="x86_64-unknown-linux-gnu"):
        return hardware_tokens(resolve_target({"kind": "llvm", "mcpu": mcpu, "num-cores": cores, "mtriple": triple}))

    icx = words("icelake-server")
    assert icx == ["llvm", "x86_64", "avx512", "512", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw",
                   "avx512vl", "avx512vnni", "cores", "2", "icelake-server"]
    assert words("sapphirerapids")[-1] == "sapphirerapids" and "avx512bf16" in words("sapphirerapids")
    zen3, zen2 = words("znver3"), words("znver2")
    assert zen3[:-1] == zen2[:-1] == ["llvm", "x86_64", "avx2", "256", "avx", "avx2", "fma", "f16c", "cores", "2"]
    assert words("znver3", cores=48)[-3:] == ["cores", "48", "znver3"]
    arm = words("neoverse-v1", 4, "aarch64-unknown-linux-gnu")
    assert arm[:3] == ["llvm", "aarch64", "neon"] and "sve" in arm and arm[-1] == "neoverse-v1"


def test_bad_sentences_are_refused(tasks, host):
    from tlm.space.design import random_program
    from tlm.space.language import parse, render

    task = tasks["conv3x3"]
    prog = random_program(task, host, random.Random(5))
    words = render(prog, task, host).split()
    with pytest.raises(TlmError):
        parse(" ".join(words[:-1]), task, host)  # truncated
    with pytest.raises(TlmError):
        parse(" ".join(words + ["1"]), task, host)  # extra word
    with pytest.raises(TlmError):
        parse(" ".join(words), tasks["conv1x1"], host)  # another task's prompt
    i = words.index("tile") + 4  # first tile factor: a wrong product is refused, not repaired
    assert int(words[i - 1]) < 1024 and int(words[i]) < 1024  # toy extents: one-word numbers
    bad = words[:i] + [str(int(words[i]) + 1)] + words[i + 1 :]
    with pytest.raises(TlmError):
        parse(" ".join(bad), task, host)
    j = words.index("unroll_explicit") + 1
    with pytest.raises(TlmError):
        parse(" ".join(words[:j] + ["7"] + words[j + 1 :]), task, host)  # not a candidate


def test_cuda_matmul_sentences(W):
    from tlm.graph.target import resolve_target
    from tlm.space.design import random_program
    from tlm.space.language import parse, render

    cuda = resolve_target("a100")
    task = W.matmul(64)
    made = 0
    for seed in range(12):
        prog = random_program(task, cuda, random.Random(seed))
        if prog.sch is None:
            continue
        sentence = render(prog, task, cuda)
        assert sentence.split()[10] == "cuda"  # after 10 subgraph words
        assert render(parse(sentence, task, cuda), task, cuda) == sentence
        made += 1
    assert made >= 3


def test_version_is_an_int():
    from tlm.space.language import SENTENCE_VERSION

    assert isinstance(SENTENCE_VERSION, int) and SENTENCE_VERSION >= 1


# ---------------------------------------------------------------- numbers

_PRIMES = [1031, 4099, 50261, 65537, 999983, 2147483647]
integers = st.one_of(st.integers(-10**6, 10**6), st.integers(0, 10**MAX_DIGITS - 1), st.sampled_from(_PRIMES))


def _point(kind, **ctx):
    from tlm.space.design import DecisionPoint

    return DecisionPoint(0, kind, ctx, ctx.pop("choices", None))


def test_examples():
    assert number_words(0) == ["0"] and number_words(1024) == ["1024"] and number_words(4096) == ["4096"]
    assert number_words(1031) == ["n4", "1", "0", "3", "1"]
    assert number_words(50257) == ["n5", "5", "0", "2", "5", "7"]
    assert number_words(-1) == ["neg", "1"] and number_words(2**20) == [str(2**20)]
    assert set(range(1025)) <= COMMON and len(COMMON) < 1200  # a small vocabulary


@given(n=integers)
def test_every_integer_round_trips_with_closed_words(n):
    words = number_words(n)
    assert set(words) <= closed_words()  # no <unk> ever: every tokenizer has these
    assert read_number(words + ["tail"], 0) == (n, len(words))
    assert (len(words) == 1) == (n in COMMON)


@given(a=st.lists(integers, min_size=1, max_size=6))
def test_concatenations_decode_uniquely(a):
    words = [w for n in a for w in number_words(n)]
    got, pos = [], 0
    while pos < len(words):
        n, pos = read_number(words, pos)
        got.append(n)
    assert got == a


@pytest.mark.parametrize("words", [["n4", "1", "0", "2", "4"], ["n4", "0", "9", "9", "9"], ["neg", "0"],
                                   ["n4", "1", "0", "3"], ["n4", "1", "0", "3", "x"], ["neg", "neg", "5"],
                                   ["0017"], ["n3", "1", "0", "0"], ["tile"], [], ["²"]])
def test_non_canonical_or_broken_words_are_refused(words):
    with pytest.raises(TlmError) as err:
        read_number(words, 0)
    assert "\n" not in str(err.value)


def test_too_large_and_non_integers_are_one_line_errors():
    with pytest.raises(TlmError, match="digits"):
        number_words(10**MAX_DIGITS)
    with pytest.raises(TlmError, match="not an integer"):
        number_words(1.5)


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0] if n < 5000 else \
        sorted({d for i in range(1, int(n**0.5) + 1) if n % i == 0 for d in (i, n // i)})


def _tilings(extent, n, limit=3000):
    """Ordered factorisations of `extent` into n factors (SamplePerfectTile's choices), at most `limit`."""
    if n == 1:
        return [(extent,)]
    out = []
    for d in _divisors(extent):
        for rest in _tilings(extent // d, n - 1, limit):
            out.append((d,) + rest)
            if len(out) >= limit:
                return out
    return out


@given(extent=st.one_of(st.integers(1, 10**7), st.sampled_from(_PRIMES), st.sampled_from([1031 * 64, 50257 * 3, 2**22 * 3])),
       n=st.integers(1, 4))
@settings(max_examples=60, deadline=None)
def test_tile_choices_of_any_extent_encode_and_decode_uniquely(extent, n):
    choices = _tilings(extent, n)
    point = _point("tile", block="C", axis="0", extent=extent, n=n, choices=tuple(choices))
    seqs = sorted(tuple(value_tokens(point, c)) for c in choices)
    assert len(set(seqs)) == len(choices)
    # No choice's words are a prefix of another's (in sorted order a prefix sits just before
    # its extensions), so a generator knows where a value ends.
    assert not any(b[: len(a)] == a for a, b in zip(seqs, seqs[1:]))
    for c in choices[:200]:
        words = value_tokens(point, c)
        assert set(words) <= closed_words()
        assert choice_from_tokens(point, words) == c
        assert read_value(point, words + ["cat"], 0) == (c, len(words))


def test_categorical_and_location_values():
    cat = _point("cat", use="unroll", candidates=(0, 16, 64, 5000), choices=(0, 1, 2, 3))
    assert [value_tokens(cat, c) for c in range(4)] == [["0"], ["16"], ["64"], ["n4", "5", "0", "0", "0"]]
    assert [choice_from_tokens(cat, value_tokens(cat, c)) for c in range(4)] == [0, 1, 2, 3]
    with pytest.raises(TlmError, match="not a candidate"):
        choice_from_tokens(cat, ["7"])
    rep = _point("cat", use="x", candidates=(1, 1, 2), choices=(0, 1, 2))  # repeats: by index
    assert value_tokens(rep, 1) == ["#", "1"] and choice_from_tokens(rep, ["#", "2"]) == 2
    with pytest.raises(TlmError):
        choice_from_tokens(rep, ["#", "3"])
    loc = _point("loc", block="C", choices=(-2, -1, 0, 1500))
    assert [value_tokens(loc, c) for c in (-2, -1, 1500)] == [["inline"], ["root"], ["n4", "1", "5", "0", "0"]]
    assert [choice_from_tokens(loc, value_tokens(loc, c)) for c in (-2, -1, 0, 1500)] == [-2, -1, 0, 1500]
    with pytest.raises(TlmError, match="extra"):
        choice_from_tokens(loc, ["root", "1"])


def test_value_mask_reads_multi_word_numbers():
    prompt = "matmul float32 1 64 float32 64 n4 1 0 3 1 llvm x86_64 avx2 256 cores 2 znver3".split()
    body = "space 3 0 tile C 1 n4 1 0 3 1 1 n4 1 0 3 1 1 cat unroll # 2 loc C n4 2 0 0 0 tile D 0 8 8".split()
    mask = value_mask(prompt + body, len(prompt))
    values = [w for w, m in zip(prompt + body, mask) if m]
    assert values == ["0", "1", "n4", "1", "0", "3", "1", "1", "#", "2", "n4", "2", "0", "0", "0", "8"]
    with pytest.raises(TlmError):
        value_mask(prompt + body[:-1] + ["x"], len(prompt))
