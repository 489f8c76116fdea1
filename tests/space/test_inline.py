"""Space builder: costly math read more than once is computed once (tlm.space.inline)."""

from __future__ import annotations

import random

import pytest


def _inlined_blocks(trace) -> list[str]:
    """Names of the blocks a design-space trace inlines (ComputeInline of a named block)."""
    names = {}
    out = []
    for inst in trace.insts:
        if inst.kind.name == "GetSBlock":
            names[inst.outputs[0]] = str(inst.attrs[0])
        elif inst.kind.name == "ComputeInline":
            out.append(names.get(inst.inputs[0], "?"))
    return out


@pytest.mark.tvm
def test_fast_softmax_computes_exp_once_and_stays_correct(host):
    import numpy as np
    import tvm
    import workloads_tir as W

    from tlm.space.design import random_program, task_space
    from tlm.space.inline import INLINE_RULE, keep_shared_math, shared_costly_blocks

    task = W.fast_softmax()
    assert shared_costly_blocks(task.mod) == ["T_fast_exp"]
    assert shared_costly_blocks(W.softmax().mod) == []  # TVM's exp is one call: nothing to keep
    assert shared_costly_blocks(W.layer_norm().mod) == [] and shared_costly_blocks(W.matmul(8).mod) == []
    marked = keep_shared_math(task.mod)
    assert INLINE_RULE in tvm.ir.save_json(marked) and INLINE_RULE not in tvm.ir.save_json(task.mod)

    from tlm.search.baselines import tune_context

    space = task_space(task, host)
    baseline = tune_context(task, host).generate_design_space()  # random and MetaSchedule's spaces
    assert len(baseline) == len(space.traces)
    for trace in space.traces + [s.trace for s in baseline]:
        assert "T_fast_exp" not in _inlined_blocks(trace)
    args = [np.random.default_rng(0).standard_normal(a["shape"]).astype(a["dtype"]) for a in task.args]
    want = np.exp(args[0] - args[0].max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    for seed in range(3):
        prog = random_program(task, host, random.Random(seed))
        assert prog.ok, prog.error
        lib = tvm.compile(prog.sch.mod, target=host.tvm())
        out = tvm.runtime.tensor(np.zeros_like(args[-1]))
        lib["main"](tvm.runtime.tensor(args[0]), out)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.tvm
def test_a_chain_of_activations_keeps_what_would_be_copied(host):
    """Each ELU reads its input three times; inlining all of them copied the first link's math
    3^links times (the op battery's chain of seven activations took over 900 s to compile). The
    space keeps the links whose math would be copied, and its programs stay right."""
    import numpy as np
    import tvm
    import workloads_tir as W

    from tlm.space.design import random_program, task_space
    from tlm.space.inline import shared_costly_blocks

    task = W.elu_chain(links=5)
    kept = shared_costly_blocks(task.mod)
    assert kept == ["elu0", "elu1", "elu2", "elu3"]  # the last link is the output: nothing reads it
    for trace in task_space(task, host).traces:
        assert not set(kept) & set(_inlined_blocks(trace))
    x = np.random.default_rng(0).standard_normal((4, 16)).astype("float32")
    want = x
    for _ in range(5):
        want = np.where(want > 0, want, np.exp(want) - 1)
    for seed in range(2):
        prog = random_program(task, host, random.Random(seed))
        assert prog.ok, prog.error
        lib = tvm.compile(prog.sch.mod, target=host.tvm())
        out = tvm.runtime.tensor(np.zeros_like(x))
        lib["main"](tvm.runtime.tensor(x), out)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-5)
