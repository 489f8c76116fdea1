"""Fast import of TVM's tensor intrinsics.

`import tvm.s_tir.tensor_intrin` takes 25-30 s (the CUDA intrinsics are most of it), and both
`TuneContext` and MetaSchedule's default build function import it, in every worker process.
Registering only the CPU intrinsics gives identical CPU design spaces in well under a second.
Call `light_tensor_intrin()` before creating a TuneContext or building in a worker.
"""

from __future__ import annotations

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
    for name in ("dot_product_common", "x86", "arm_cpu") + (("cuda",) if cuda else ()):
        importlib.import_module(f"{_PKG}.{name}")
