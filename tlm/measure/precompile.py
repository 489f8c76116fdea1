"""Compile ahead: a bundle's or a plan's CUDA C -> cubins here (no GPU needed), carried with it, so
that the GPU machine's minutes time programs instead of running nvcc (issue 49: a run there was
compile-bound, 14 nvcc processes busy for the whole run at ~8 programs a second).

    tlm gpu precompile FOLDER ... [--jobs N]      (FOLDER: a bundle or a plan)

Each source `FOLDER/src/X.cu.xz` gets `FOLDER/cubin/X.json` (what nvcc and ptxas said: the
kernels' resources or the error; the source's sha256, the arch, the nvcc that made it) and, when
it compiled, `FOLDER/cubin/X.cubin.xz`. The json is written last and each write is atomic, so a
run killed anywhere resumes with what it finished. `tlm.measure.cuda_runner.compile_file` (the
bundle runner's and the plan runner's compilation) takes the cubin from there when the source's
digest and the arch match and the machine's own nvcc (if it has one) is of the same CUDA release,
and runs nvcc only for what is missing; the runners count the files they took ahead in their
summaries. TLM_AHEAD=0 in the environment turns the cubins ahead off.
"""

from __future__ import annotations

import functools
import hashlib
import json
import lzma
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

from tlm.errors import TlmError

AHEAD_DIR = "cubin"


def ahead_paths(src: str | Path) -> tuple[Path, Path]:
    """(json, cubin.xz) beside `FOLDER/src/X.cu.xz`: `FOLDER/cubin/X.json`, `FOLDER/cubin/X.cubin.xz`."""
    src = Path(src)
    stem = src.name[: -len(".cu.xz")] if src.name.endswith(".cu.xz") else src.stem
    d = src.parent.parent / AHEAD_DIR
    return d / f"{stem}.json", d / f"{stem}.cubin.xz"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def nvcc_release(version: str) -> str | None:
    """'13.0' of nvcc's 'Build cuda_13.0.r13.0/compiler.36424714_0' (None if not found)."""
    m = re.search(r"cuda_(\d+\.\d+)", version)
    return m.group(1) if m else None


@functools.lru_cache(maxsize=1)
def local_release() -> str | None:
    """The CUDA release of this machine's nvcc, or None without one (then any cubin ahead will do)."""
    from tlm.measure.nvcc import find_toolkit

    tk = find_toolkit()
    return nvcc_release(nvcc_version(tk.nvcc)) if tk else None


def _valid_meta(src: str | Path, arch: str, release: str | None) -> dict[str, Any] | None:
    """The json of `src` compiled ahead when it may be taken (precompiled's rules), else None."""
    if os.environ.get("TLM_AHEAD") == "0":
        return None
    meta_path, cubin_xz = ahead_paths(src)
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return None
    if meta.get("arch") != arch or meta.get("sha256") != _digest(Path(src)):
        return None
    if release is not None and nvcc_release(meta.get("nvcc", "")) != release:
        return None
    if "error" in meta:
        return None if "timed out" in meta["error"] else meta
    return meta if cubin_xz.exists() else None


def precompiled(src: str | Path, arch: str, release: str | None = None) -> dict[str, Any] | None:
    """What compiling `src` ahead gave ({"resources": ..., "cubin_xz": path} or {"error": ...}), or
    None when it was not compiled ahead for this arch and this very source (or timed out then), by
    an nvcc of `release` when one is given, or TLM_AHEAD=0 says not to take it."""
    meta = _valid_meta(src, arch, release)
    if meta is None:
        return None
    if "error" in meta:
        return {"error": meta["error"]}
    return {"resources": meta["resources"], "cubin_xz": str(ahead_paths(src)[1])}


def take_ahead(src: str, cubin: str, arch: str) -> dict[str, Any] | None:
    """`src`'s cubin compiled ahead, written to `cubin` (or its refusal), as the runners' compilation
    (tlm.measure.cuda_runner.compile_file) reports a file; None when there is none to take for this
    machine's nvcc."""
    found = precompiled(src, arch, local_release())
    if found is None:
        return None
    out: dict[str, Any] = {"src": src, "seconds": 0.0, "ahead": True}
    if "error" in found:
        return dict(out, error=found["error"])
    write_atomic_bytes(Path(cubin), lzma.decompress(Path(found["cubin_xz"]).read_bytes()))
    return dict(out, cubin=cubin, resources=found["resources"])


def write_atomic_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def compile_ahead(src: str, arch: str, nvcc: str) -> dict[str, Any]:
    """One source -> its cubin.xz and json (in a pool worker); the json's fields: the runners' own
    compilation's record (tlm.measure.nvcc.compile_file_report)."""
    from tlm.measure.nvcc import compile_file_report

    meta_path, cubin_xz = ahead_paths(src)
    meta_path.parent.mkdir(parents=True, exist_ok=True)
    data, res = compile_file_report(src, arch)
    if data is not None:
        write_atomic_bytes(cubin_xz, lzma.compress(data))
    meta = {"arch": arch, "sha256": _digest(Path(src)), "nvcc": nvcc, **res}
    write_atomic_bytes(meta_path, json.dumps(meta).encode())
    return meta


def carry_ahead(src_from: str | Path, src_to: str | Path, arch: str) -> bool:
    """`src_to` (written from `src_from`: the same file, or some of its kernels) takes `src_from`'s
    cubin ahead, whose kernels it names (tlm.measure.plan_assemble: a plan's function cut out of a
    bundle's group file); False when there is none to take."""
    meta = _valid_meta(src_from, arch, None)
    if meta is None or "error" in meta:
        return False
    meta_to, cubin_to = ahead_paths(src_to)
    meta_to.parent.mkdir(parents=True, exist_ok=True)
    write_atomic_bytes(cubin_to, ahead_paths(src_from)[1].read_bytes())
    write_atomic_bytes(meta_to, json.dumps(dict(meta, sha256=_digest(Path(src_to)))).encode())
    return True


def sources_of(folder: str | Path) -> tuple[str, list[Path]]:
    """(arch, CUDA C files) of a bundle (its manifest) or a plan (plan.json)."""
    from tlm.measure.cuda_measure import MANIFEST, read_manifest

    folder = Path(folder)
    if (folder / MANIFEST).exists():
        manifest = read_manifest(folder)
        srcs = [g["src"] for e in manifest["tasks"] for g in e.get("groups", [])]
        srcs += [e["ref"]["src"] for e in manifest["tasks"] if e.get("ref")]
        return manifest["arch"], [folder / s for s in dict.fromkeys(srcs)]
    if (folder / "plan.json").exists():
        plan = json.loads((folder / "plan.json").read_text())
        return plan["arch"], [folder / f["src"] for f in plan["functions"].values()]
    raise TlmError(f"{folder}: not a GPU bundle ({MANIFEST}) or plan (plan.json)")


def nvcc_version(nvcc: str) -> str:
    """`nvcc --version`'s last line (e.g. 'Build cuda_13.0.r13.0/compiler.36424714_0')."""
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
    return out.splitlines()[-1] if out else "unknown"


def ahead_status(folders: list[str | Path]) -> dict[str, tuple[int, int]]:
    """Per folder (files compiled ahead, files): what a call would take ready (no nvcc needed)."""
    out = {}
    for f in folders:
        arch, srcs = sources_of(f)
        out[str(f)] = (sum(precompiled(s, arch) is not None for s in srcs), len(srcs))
    return out


def precompile(folders: list[str | Path], jobs: int = 2, log: Callable[[str], None] = print,
               progress: bool = True) -> dict[str, Any]:
    """Compile every source of the folders not compiled ahead yet; a one-line account per folder."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from tlm.measure.nvcc import require_toolkit

    found = [(Path(f), *sources_of(f)) for f in folders]  # every folder read before nvcc runs
    nvcc = nvcc_version(require_toolkit().nvcc)
    release = nvcc_release(nvcc)  # a file compiled ahead by another CUDA release is compiled again
    todo = [(str(s), arch, str(f)) for f, arch, srcs in found for s in srcs if precompiled(s, arch, release) is None]
    start = time.perf_counter()
    per: dict[str, dict[str, int]] = {str(f): {"files": len(s), "compiled": 0, "errors": 0} for f, _, s in found}
    bar = Progress(TextColumn("[bold]nvcc ahead"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   disable=not progress)
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool, bar:
        task = bar.add_task("nvcc", total=len(todo))
        futures = {pool.submit(compile_ahead, src, arch, nvcc): folder for src, arch, folder in todo}
        for fut in as_completed(futures):
            meta = fut.result()
            per[futures[fut]]["compiled"] += 1
            per[futures[fut]]["errors"] += "error" in meta
            bar.advance(task)
    for folder, n in per.items():
        log(f"{folder}: {n['files']} files, {n['compiled']} compiled now ({n['errors']} refused by nvcc/ptxas), "
            f"{n['files'] - n['compiled']} compiled before")
    return {"folders": per, "seconds": round(time.perf_counter() - start, 1), "nvcc": nvcc}
