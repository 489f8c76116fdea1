"""Tensor sentences: exact round trips, compactness, refusal of bad sentences."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tlm.errors import TlmError

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
    assert words[:3] == ["dense", "add", "relu"]
    assert words[-5:] == hardware_tokens(host) and words[-5] == "llvm"
    cuda = hardware_tokens(resolve_target("a100"))
    assert cuda[:2] == ["cuda", "sm_80"] and all(w.isdigit() for w in cuda[2:])
    assert all(" " not in w and w for w in words)


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
        assert sentence.split()[10] == "cuda"
        assert render(parse(sentence, task, cuda), task, cuda) == sentence
        made += 1
    assert made >= 3


def test_version_is_an_int():
    from tlm.space.language import SENTENCE_VERSION

    assert isinstance(SENTENCE_VERSION, int) and SENTENCE_VERSION >= 1
