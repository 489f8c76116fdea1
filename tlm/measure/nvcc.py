"""CUDA C -> cubin with NVIDIA's compiler, on any machine (the `cuda` install extra here, the
machine's own toolkit where there is a GPU).

A bundle's file holds many programs of one task (a call costs ~0.5 s of start-up whatever it
compiles): TVM's preamble once, then each program's kernels, renamed `p<k>_<name>`
(tlm.measure.gpu_bundle). ptxas's resource report (`-Xptxas -v`: registers, spills, shared
memory) decides, before a program is timed, whether it can launch at all on the card: a kernel
whose block needs more registers or shared memory than an SM has is refused as the driver would
refuse it (`launch_error`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tlm.errors import TlmError
from tlm.measure.cuda_build import CudaProgram

NVCC_TIMEOUT_S = 600.0


@dataclass
class Toolkit:
    nvcc: str
    include: str


@dataclass
class KernelResources:
    registers: int = 0
    smem: int = 0  # static shared memory bytes
    spill_bytes: int = 0
    stack: int = 0


def find_toolkit() -> Toolkit | None:
    """nvcc of CUDA_HOME or the PATH (a machine's own toolkit), else of the `cuda` extra's wheels
    (nvidia/cu13); None if there is none."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    nvcc = str(Path(home) / "bin" / "nvcc") if home else shutil.which("nvcc")
    if nvcc and Path(nvcc).exists():
        return Toolkit(nvcc, str(Path(nvcc).resolve().parent.parent / "include"))
    try:
        import nvidia  # the namespace package of NVIDIA's wheels

        for root in nvidia.__path__:
            base = Path(root) / "cu13"
            if (base / "bin" / "nvcc").exists():
                return Toolkit(str(base / "bin" / "nvcc"), str(base / "include"))
    except ImportError:
        pass
    return None


def require_toolkit() -> Toolkit:
    tk = find_toolkit()
    if tk is None:
        raise TlmError("nvcc not found: pip install -e '.[cuda]' (NVIDIA's CUDA 13.0 compiler wheels)")
    return tk


_ENTRY = re.compile(r"Compiling entry function '(\w+)'")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def parse_ptxas(text: str) -> dict[str, KernelResources]:
    """ptxas -v's report per entry function."""
    out: dict[str, KernelResources] = {}
    current = None
    for line in text.splitlines():
        m = _ENTRY.search(line)
        if m:
            current = out.setdefault(m.group(1), KernelResources())
            continue
        if current is None:
            continue
        m = _SPILL.search(line)
        if m:
            current.stack, current.spill_bytes = int(m.group(1)), int(m.group(2)) + int(m.group(3))
            continue
        m = _USED.search(line)
        if m:
            current.registers = int(m.group(1))
            smem = _SMEM.search(line)
            current.smem = int(smem.group(1)) if smem else 0
    return out


def _arch(target_arch: str) -> str:
    return target_arch if target_arch.startswith("sm_") else f"sm_{target_arch}"


def compile_source(tk: Toolkit, source: str, arch: str) -> tuple[bytes | None, str]:
    with tempfile.TemporaryDirectory(prefix="tlm-nvcc-") as tmp:
        cu, out = Path(tmp) / "k.cu", Path(tmp) / "k.cubin"
        cu.write_text(source)
        cmd = [tk.nvcc, "-cubin", f"-arch={_arch(arch)}", "-O3", "-w", "-I", tk.include, "-Xptxas", "-v", "-o", str(out), str(cu)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=NVCC_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return None, f"nvcc timed out after {NVCC_TIMEOUT_S:.0f} s"
        report = proc.stdout + proc.stderr
        if proc.returncode != 0 or not out.exists():
            errors = [ln for ln in report.splitlines() if "error" in ln.lower()]
            return None, (errors[0] if errors else report.strip().splitlines()[-1] if report.strip() else "nvcc failed")[:300]
        return out.read_bytes(), report


def launch_error(prog: CudaProgram, prefix: str, resources: dict[str, KernelResources], max_smem: int = 49152,
                 registers_per_sm: int = 65536, max_threads: int = 1024) -> str | None:
    """Why the driver would refuse to launch the program's kernels (named `prefix + name` in
    ptxas's report), or None."""
    for kn in prog.kernels:
        res = resources.get(prefix + kn.name)
        if res is None:
            return f"no ptxas report for {kn.name}"
        threads = kn.threads
        if threads > max_threads:
            return f"{kn.name}: {threads} threads per block"
        # registers are allocated per warp in units of 256
        per_warp = -(-res.registers * 32 // 256) * 256
        if per_warp * -(-threads // 32) > registers_per_sm:
            return f"{kn.name}: {res.registers} registers x {threads} threads exceed {registers_per_sm}"
        if res.smem + kn.smem > max_smem:
            return f"{kn.name}: {res.smem + kn.smem} bytes of shared memory exceed {max_smem}"
    return None
