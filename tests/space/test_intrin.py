"""tlm.space.intrin: TVM's CPU tensor intrinsics registered without importing the rest."""

import inspect


def test_shallow_stacks_keep_what_tvmscript_reads():
    """While the intrinsics are parsed, `inspect.stack()` skips source lookups but for the nearest
    frames: each frame is there, with its locals, and the callers' code lines TVMScript reads."""
    from tlm.space.intrin import _shallow_stacks

    marker = 42  # noqa: F841 - read back through the frame below

    def caller():
        return inspect.stack()

    standard = caller()
    with _shallow_stacks():
        fast = caller()
    assert inspect.stack is not fast and len(fast) == len(standard)
    assert [f.function for f in fast] == [f.function for f in standard]
    for k in (0, 2):  # the same frames (the middle one called from another line)
        assert (fast[k].lineno, fast[k].code_context) == (standard[k].lineno, standard[k].code_context)
    assert fast[1].code_context[0].strip() == "fast = caller()"
    assert fast[1].frame.f_locals["marker"] == 42


def test_the_cpu_intrinsics_are_registered():
    from tlm.space.intrin import light_tensor_intrin

    light_tensor_intrin()
    from tvm.s_tir import TensorIntrin
    from tvm.s_tir.tensor_intrin.x86 import VNNI_DOT_16x4_INTRIN

    assert TensorIntrin.get(VNNI_DOT_16x4_INTRIN).desc is not None
