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

import math
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


def compile_file_report(src: str | Path, arch: str) -> tuple[bytes | None, dict]:
    """A bundle's or plan's xz CUDA C file -> (cubin or None, {"seconds", and "resources" per kernel
    from ptxas, or "error"}): what the runners and `tlm gpu precompile` record of a file."""
    import lzma
    import time
    from dataclasses import asdict

    start = time.perf_counter()
    with lzma.open(src, "rt") as f:
        data, report = compile_source(require_toolkit(), f.read(), arch)
    out: dict = {"seconds": round(time.perf_counter() - start, 3)}
    if data is None:
        out["error"] = f"nvcc: {report}"
    else:
        out["resources"] = {k: asdict(v) for k, v in parse_ptxas(report).items()}
    return data, out


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


# What decides how many blocks of a kernel an SM holds at once, per compute capability (CUDA's
# occupancy rules: threads, blocks, registers allocated per warp in units of 256, shared memory
# with 1 KB reserved per block). sm_90: H100 and H200.
SM_LIMITS = {
    "sm_90": {"threads": 2048, "blocks": 32, "registers": 65536, "smem": 233472},
    "sm_80": {"threads": 2048, "blocks": 32, "registers": 65536, "smem": 167936},
    "sm_86": {"threads": 1536, "blocks": 16, "registers": 65536, "smem": 102400},
    "sm_89": {"threads": 1536, "blocks": 24, "registers": 65536, "smem": 102400},
    "sm_75": {"threads": 1024, "blocks": 16, "registers": 65536, "smem": 65536},
    "sm_70": {"threads": 2048, "blocks": 32, "registers": 65536, "smem": 98304},
}
PTXAS_COLUMNS = ("kernels", "registers", "spill_bytes", "smem", "threads", "blocks", "resident_blocks",
                 "occupancy", "waves", "last_wave_fill", "min_occupancy")


def occupancy_columns(kernels: list[tuple[int, int, int]], resources: list[KernelResources], sms: int,
                      arch: str) -> list[float]:
    """What ptxas's report says of a program's launch (PTXAS_COLUMNS): kernels as (threads per
    block, blocks, dynamic shared memory bytes) in launch order, each with its ptxas resources.
    The columns after the first three describe the kernel with the most threads in all (the
    program's main loop nest, as far as its launch tells): its registers, shared memory, threads
    per block and blocks, how many blocks an SM holds at once, the warps that gives against the
    SM's, the waves its grid runs in over `sms` SMs and how full the last one is; then the lowest
    occupancy of any kernel. Known before any run: the cost model may read them at budget 0."""
    lim = SM_LIMITS.get(_arch(arch).rstrip("a"), SM_LIMITS["sm_90"])
    rows = []
    for (threads, blocks, dyn), res in zip(kernels, resources):
        warps = max(1, -(-threads // 32))
        per_warp = -(-res.registers * 32 // 256) * 256
        smem = res.smem + dyn
        resident = min(lim["blocks"], lim["threads"] // (warps * 32),
                       lim["registers"] // (per_warp * warps) if per_warp else lim["blocks"],
                       lim["smem"] // (smem + 1024) if smem else lim["blocks"])
        resident = max(1, resident)
        waves = blocks / (resident * max(1, sms))
        fill = waves / math.ceil(waves) if waves > 0 else 0.0
        rows.append((threads * blocks, res.registers, smem, threads, blocks, resident,
                     resident * warps * 32 / lim["threads"], waves, fill))
    if not rows:
        return [0.0] * len(PTXAS_COLUMNS)
    main = max(rows, key=lambda r: r[0])
    return [float(len(rows)), float(main[1]), float(sum(r.spill_bytes for r in resources)), float(main[2]),
            float(main[3]), float(main[4]), float(main[5]), main[6], main[7], main[8], min(r[6] for r in rows)]
