"""The whole model's output check: its largest difference from the reference and the tolerance
(tlm.compiler.build.compile_imported), and the rebuild without compile-time weight packing
(tlm.compiler.pack) when a model does not match with it."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Callable

from tlm.errors import TlmWarning


def max_abs_diff(got, want) -> float:
    """Largest difference of the model's output from the reference: inf when the shapes differ or
    a NaN or infinity of one is not the other's (NaN never compares above a tolerance, so a NaN
    difference would pass every `> tolerance` check)."""
    import numpy as np

    if got.shape != want.shape:
        return float("inf")
    g, w = got.astype("float64"), want.astype("float64")
    with np.errstate(invalid="ignore"):
        diff = np.where((g == w) | (np.isnan(g) & np.isnan(w)), 0.0, np.abs(g - w))
    return float(np.nan_to_num(diff, nan=np.inf, posinf=np.inf).max(initial=0.0))


def tolerance_for(want, cfg: Any) -> float:
    """The whole model's tolerance: atol + rtol x the reference's largest finite magnitude."""
    import numpy as np

    finite = np.abs(want[np.isfinite(want)]) if want.dtype.kind == "f" else np.abs(want)
    return cfg.atol + cfg.rtol * float(finite.max(initial=0.0))


def without_packing(build: Callable[[Any], list], cfg: Any, want, tolerance: float) -> list:
    """The model does not match with its convolution weights packed at compile time (checked alone,
    each program reads the weights as they are): built again without the packing, kept where that
    matches (said either way; tlm.compiler.pack). `build(config)`: [(vm, output, rows)] of the
    model's variants built with that CompileConfig; `cfg` the one that gave the wrong model."""
    plain = build(dataclasses.replace(cfg, pack_convs=False))
    if max_abs_diff(plain[0][1], want) > tolerance:  # the saved artifact is this build now
        warnings.warn("the model does not match its reference, with or without its convolution weights packed "
                      "at compile time", stacklevel=3, category=TlmWarning)
        return plain
    warnings.warn("the model did not match its reference with its convolution weights packed at compile time "
                  "(tlm.compiler.pack); built again with the weights as they are, it matches",
                  stacklevel=3, category=TlmWarning)
    return plain
