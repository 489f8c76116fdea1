"""CUDA C -> cubin with NVIDIA's compiler, here, without a GPU (the `cuda` install extra).

Many programs of one task go into one file and one `nvcc -cubin` call (a call costs ~0.5 s of
start-up whatever it compiles): TVM's preamble once, then each program's kernels, renamed
`p<k>_<name>`. ptxas's resource report (`-Xptxas -v`: registers, spills, shared memory) decides,
before a program travels, whether it can launch at all on the card: a kernel whose block needs
more registers or shared memory than an SM has is refused here, as the driver would refuse it
there. When a file does not compile, its programs are compiled one by one so that one bad
program costs only its own record.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tlm.errors import TlmError
from tlm.measure.cuda_build import CudaProgram, rename_kernels, split_source

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


@dataclass
class GroupResult:
    """One cubin holding the programs that compiled; `errors[k]` for those that did not."""

    cubin: bytes | None
    resources: dict[str, KernelResources] = field(default_factory=dict)  # by (renamed) kernel name
    errors: dict[int, str] = field(default_factory=dict)
    seconds: float = 0.0


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


def kernel_prefix(k: int) -> str:
    return f"p{k}_"


def compile_group(programs: list[CudaProgram], arch: str, tk: Toolkit | None = None) -> GroupResult:
    """One cubin for `programs` (same preamble expected; others are compiled alone), kernels
    renamed `p<k>_<name>` for program k."""
    import time

    tk = tk or require_toolkit()
    start = time.perf_counter()
    result = GroupResult(None)
    parts: dict[str, list[int]] = {}
    bodies: dict[int, str] = {}
    for k, prog in enumerate(programs):
        if prog.error:
            result.errors[k] = prog.error
            continue
        preamble, kernels = split_source(prog.source)
        bodies[k] = rename_kernels(kernels, [kn.name for kn in prog.kernels], kernel_prefix(k))
        parts.setdefault(preamble, []).append(k)
    # The largest set of programs with one preamble goes in the shared file; the others alone.
    if not parts:
        return result
    main_preamble = max(parts, key=lambda p: len(parts[p]))
    members = parts[main_preamble]
    singles = [k for p, ks in parts.items() if p != main_preamble for k in ks]
    cubin, report = compile_source(tk, main_preamble + "\n".join(bodies[k] for k in members), arch)
    if cubin is None:  # find the bad ones: each alone
        singles += members
        members = []
    else:
        result.cubin = cubin
        result.resources.update(parse_ptxas(report))
    for k in singles:
        preamble, _ = split_source(programs[k].source)
        alone, report = compile_source(tk, preamble + bodies[k], arch)
        if alone is None:
            result.errors[k] = f"nvcc: {report}"
            continue
        result.resources.update(parse_ptxas(report))
        members.append(k)
    if singles and any(k not in result.errors for k in singles):
        # The survivors go into one file again (one module to load per task there).
        ok = sorted(k for k in bodies if k not in result.errors)
        same = {split_source(programs[k].source)[0] for k in ok}
        if len(same) == 1:
            cubin, report = compile_source(tk, same.pop() + "\n".join(bodies[k] for k in ok), arch)
            if cubin is not None:
                result.cubin = cubin
                result.resources.update(parse_ptxas(report))
            else:  # pragma: no cover - compiled alone, not together
                for k in ok:
                    result.errors[k] = "nvcc: compiled alone but not with the others"
                result.cubin = None
        else:
            for k in ok:
                if k in singles:
                    result.errors[k] = "nvcc: a preamble unlike the task's other programs"
    result.seconds = time.perf_counter() - start
    return result


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
