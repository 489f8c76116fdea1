"""Fast import of TVM's tensor intrinsics.

`import tvm.s_tir.tensor_intrin` takes 25-30 s (the CUDA intrinsics are most of it), and both
`TuneContext` and MetaSchedule's default build function import it, in every worker process.
Registering only the CPU intrinsics gives identical CPU design spaces in well under a second.
Call `light_tensor_intrin()` before creating a TuneContext or building in a worker.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import types

_PKG = "tvm.s_tir.tensor_intrin"


def light_tensor_intrin(cuda: bool = False) -> None:
    """Register the x86/ARM dot-product intrinsics (and CUDA's if asked) without the rest."""
    import tvm.s_tir  # noqa: F401  (parent package must exist first)

    pkg = sys.modules.get(_PKG)
    if pkg is None:
        spec = importlib.util.find_spec(_PKG)
        pkg = types.ModuleType(_PKG)
        pkg.__path__ = list(spec.submodule_search_locations)
        pkg.__file__ = spec.origin
        pkg.__package__ = _PKG
        sys.modules[_PKG] = pkg
        setattr(sys.modules["tvm.s_tir"], "tensor_intrin", pkg)
    with _shallow_stacks():
        for name in ("dot_product_common", "x86", "arm_cpu") + (("cuda",) if cuda else ()):
            importlib.import_module(f"{_PKG}.{name}")


@contextlib.contextmanager
def _shallow_stacks():
    """`inspect.stack()` without source lookups but for the nearest frames, while the intrinsics'
    TVMScript functions are parsed: TVM's `T.prim_func` takes a stack for each (44), and the
    standard one looks every frame's module up among all loaded ones: with torch's ~2,800 modules
    loaded, 40 frames deep, the import took 3.1 s, now 1.4 (the same intrinsics registered). TVM
    reads the frames' locals and the code line of the third frame; those stay."""
    import inspect
    import linecache

    def stack(context: int = 1) -> list:
        out, frame = [], sys._getframe(1)
        while frame is not None:
            code, line = frame.f_code, frame.f_lineno
            text = [linecache.getline(code.co_filename, line)] if len(out) < 4 and context > 0 else None
            out.append(inspect.FrameInfo(frame, code.co_filename, line, code.co_name, text, 0 if text else None))
            frame = frame.f_back
        return out

    standard, inspect.stack = inspect.stack, stack
    try:
        yield
    finally:
        inspect.stack = standard
