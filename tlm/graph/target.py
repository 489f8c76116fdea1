"""Hardware targets: the host CPU as a TVM LLVM target, and named GPU targets.

Every stage takes a target as a TVM JSON dict; `host_target()` is the default everywhere.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from tlm.errors import TlmError

# Short names a user may pass for GPUs; they map to TVM's own target tags, or to a config where
# TVM has no tag (the H200: the H100's limits, its own L2 size, as PyTorch reads it there).
GPU_TAGS: dict[str, Any] = {
    "cuda": "nvidia/nvidia-a100",
    "a100": "nvidia/nvidia-a100",
    "v100": "nvidia/nvidia-v100",
    "h100": "nvidia/nvidia-h100",
    "h200": {"kind": "cuda", "arch": "sm_90a", "max_num_threads": 1024, "max_threads_per_block": 1024,
             "max_shared_memory_per_block": 49152, "thread_warp_size": 32, "registers_per_block": 65536,
             "l2_cache_size_bytes": 62914560},
    "t4": "nvidia/nvidia-t4",
    "a10g": "nvidia/nvidia-a10g",
}
# Streaming multiprocessors per card (the GPU's "cores"): with `model` in the target config, the
# facts that tell two cards of one architecture apart (H100 and H200 share sm_90a and its limits).
GPU_SMS = {"a100": 108, "v100": 80, "h100": 132, "h200": 132, "t4": 40, "a10g": 80}


@dataclass(frozen=True)
class TargetInfo:
    """A target as a JSON dict plus the facts the tensor language needs (hardware tokens)."""

    config: dict[str, Any]  # the dict TVM's Target() takes
    kind: str  # "llvm" or "cuda"
    cpu: str  # LLVM CPU name, or the GPU arch (e.g. sm_80)
    cores: int
    vector_bits: int  # widest SIMD register for LLVM; 0 for GPUs
    isa: str  # e.g. "avx512", "avx2", "sse4", "neon", or "cuda"
    features: tuple[str, ...] = ()  # the flags of FEATURES this CPU has (LLVM's table for the mcpu)

    @property
    def arch(self) -> str:
        """The CPU architecture of the target triple (x86_64, aarch64, ...); "" for GPUs."""
        if self.kind != "llvm":
            return ""
        arch = str(self.config.get("mtriple", "")).split("-")[0]
        return {"amd64": "x86_64", "arm64": "aarch64"}.get(arch, arch) or "unknown"

    def tvm(self):
        import tvm

        return tvm.target.Target(self.config)

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.config,
            "kind": self.kind,
            "cpu": self.cpu,
            "cores": self.cores,
            "vector_bits": self.vector_bits,
            "isa": self.isa,
            "arch": self.arch,
            "features": list(self.features),
        }

    @property
    def key(self) -> str:
        """A stable string that identifies the target (cache keys, database target column)."""
        return json.dumps(self.config, sort_keys=True)

    @property
    def extraction_key(self) -> str:
        """The part of `key` that task extraction depends on. For LLVM the CPU name and core count
        are dropped: legalization and fusion never read them, so every CPU of one architecture
        gets the same tasks (same TIR, same hashes; tests/graph/test_extract.py checks it on
        three CPUs). A new CPU then reuses the task list another CPU of its kind extracted."""
        drop = ("mcpu", "num-cores") if self.kind == "llvm" else ()
        return json.dumps({k: v for k, v in self.config.items() if k not in drop}, sort_keys=True)


def _host_triple() -> str:
    from tvm.target import codegen

    # The wheel's LLVM reports the vendor it was built with (e.g. x86_64-conda-linux-gnu);
    # the generic vendor triple works the same and is what users write.
    arch, _, rest = codegen.llvm_get_system_triple().partition("-")
    system = rest.split("-", 1)[1] if "-" in rest else rest
    return f"{arch}-unknown-{system}"


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


# TVM sizes its CPU thread pool once per process, when the first parallel kernel runs: from
# TVM_NUM_THREADS, else OMP_NUM_THREADS, else half of std::thread::hardware_concurrency() on x86
# (it assumes two hyperthreads per core; src/runtime/threading_backend.cc, MaxConcurrency). On a
# 2-vCPU host without SMT that is ONE thread, while PyTorch and ONNX Runtime use both.
THREADS_ENV = "TVM_NUM_THREADS"


def physical_cores(sysfs: str = "/sys/devices/system/cpu") -> int:
    """Cores this process may run on, hyperthread siblings counted once (PyTorch's default too);
    the CPUs it may use where the topology cannot be read."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    cores = set()
    for cpu in cpus:
        try:
            with open(f"{sysfs}/cpu{cpu}/topology/thread_siblings_list") as f:
                cores.add(f.read().strip())
        except OSError:
            return _cores()
    return len(cores) or _cores()


def use_host_threads() -> None:
    """Make TVM's thread pool in this process (and in the processes it starts) use the host's
    physical cores, unless the user set TVM_NUM_THREADS or OMP_NUM_THREADS. No effect once the
    pool has started: `runtime_threads()` says what it runs with."""
    if THREADS_ENV not in os.environ and "OMP_NUM_THREADS" not in os.environ:
        os.environ[THREADS_ENV] = str(physical_cores())


def tvm_default_threads() -> int:
    """The threads TVM gives its pool when nothing sets them (see THREADS_ENV): how MetaSchedule
    measures, and how every record in the corpus was measured."""
    import platform

    n = os.cpu_count() or 1
    return max(1, n // 2) if platform.machine().lower() in ("x86_64", "amd64", "i386", "i686") else n


def runtime_threads() -> int:
    """The threads TVM's CPU runtime runs parallel kernels with in this process (starts the pool)."""
    import tvm

    return int(tvm.runtime.num_threads())


# TVM 0.27's TIR common-subexpression elimination (tirx.transform.CommonSubexprElim, rewritten
# in 2026) miscompiles some vectorized programs: an EfficientNet depthwise conv with its BN and
# SiLU inlined and a per-channel gather in the vectorized epilogue gave 4091 of 8192 outputs wrong
# with it and none without (tests/graph/test_target.py keeps that program). Every build tlm makes
# (measurements, references, whole models, GPU code) leaves it out; LLVM's own GVN and NVCC do
# the same job on the code they get.
BUILD_CONFIG = {"tirx.disable_cse_tir": True}


def build_context(opt_level: int | None = None):
    """The PassContext every tlm build runs in: BUILD_CONFIG at `opt_level` (default: the current
    context's, so a build keeps the optimization level it had)."""
    import tvm

    current = tvm.transform.PassContext.current()
    level = current.opt_level if opt_level is None else opt_level
    return tvm.transform.PassContext(opt_level=level, config={**dict(current.config), **BUILD_CONFIG})


# Feature flags worth a prompt word: what changes the code LLVM emits for tensor programs (vector
# width, FMA, int8/bf16 dot products, matrix units). A short fixed list, so an unseen CPU of a
# known family shares its words with a seen one.
FEATURES = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512vnni", "avxvnni",
            "avx512bf16", "avx512fp16", "amx-tile", "neon", "dotprod", "i8mm", "fullfp16", "bf16", "sve", "sve2")


def _llvm_features(target) -> tuple[str, ...]:
    """The FEATURES the target's CPU has, from LLVM's CPU tables (the same on any machine)."""
    from tvm.target import codegen

    out = []
    for flag in FEATURES:
        try:
            if codegen.llvm_cpu_has_features([flag], target):
                out.append(flag)
        except Exception:  # a flag of another architecture
            continue
    return tuple(out)


def _llvm_isa(target) -> tuple[int, str]:
    """(vector register bits, ISA name) of the target's CPU (not the host's)."""
    from tvm.target import codegen

    for isa, features, bits in (
        ("avx512", ["avx512f"], 512),
        ("avx2", ["avx2"], 256),
        ("sse4", ["sse4.2"], 128),
        ("neon", ["neon"], 128),
        ("sve", ["sve"], 128),
    ):
        try:
            if codegen.llvm_cpu_has_features(features, target):
                return bits, isa
        except Exception:  # feature unknown to this architecture
            continue
    return 128, "generic"


def host_target(num_cores: int | None = None) -> TargetInfo:
    """The LLVM target for this machine: LLVM's name for the host CPU, its cores, its SIMD ISA."""
    from tvm.target import codegen

    config = {
        "kind": "llvm",
        "mtriple": _host_triple(),
        "mcpu": str(codegen.llvm_get_system_cpu()),
        "num-cores": int(num_cores or _cores()),
    }
    return resolve_target(config)


def resolve_target(spec: str | dict[str, Any] | TargetInfo | None) -> TargetInfo:
    """Parse a user's target: None (host), "host", a GPU name, a TVM tag, JSON text or a dict.

    Raises TlmError with a one-line message for anything TVM does not accept.
    """
    import tvm
    from tvm.target import codegen

    if isinstance(spec, TargetInfo):
        return spec
    if spec is None or spec == "host" or spec == "llvm":
        return host_target()
    if isinstance(spec, str):
        text = spec.strip()
        if text.startswith("{"):
            try:
                spec = json.loads(text)
            except json.JSONDecodeError as err:
                raise TlmError(f"bad target: not valid JSON ({err.msg})") from None
        elif os.path.isfile(text):
            try:
                with open(text) as f:
                    spec = json.load(f)
            except (OSError, json.JSONDecodeError) as err:
                raise TlmError(f"bad target file {text}: {err}") from None
        else:
            name = text.lower()
            tag = GPU_TAGS.get(name, text)
            if isinstance(tag, dict):
                spec = dict(tag, model="a100" if name == "cuda" else name)
            elif tag not in tvm.target.list_tags():
                known = ", ".join(sorted(GPU_TAGS))
                raise TlmError(
                    f"bad target {text!r}: use 'host', a JSON dict, a TVM tag, or one of {known}"
                )
            else:
                model = "a100" if name == "cuda" else name if name in GPU_TAGS else None
                spec = {"tag": tag, **({"model": model} if model else {})}
    if not isinstance(spec, dict):
        raise TlmError(f"bad target: expected a dict, got {type(spec).__name__}")
    if spec.get("mcpu") == "native":
        raise TlmError("bad target: mcpu 'native' is not accepted by TVM; omit it for the host CPU")
    try:
        if "tag" in spec and set(spec) <= {"tag", "model"}:  # a tag, named by the card it describes
            target = tvm.target.Target(dict(tvm.target.Target(spec["tag"]).export(), tag="", **(
                {"model": spec["model"]} if "model" in spec else {})))
        else:
            target = tvm.target.Target(spec)
    except Exception as err:  # TVM raises its own error types for unknown kinds and attributes
        first = str(err).strip().splitlines()
        raise TlmError(f"bad target {json.dumps(spec)}: {first[-1] if first else err}") from None
    kind = target.kind.name
    exported = {k: v for k, v in dict(target.export()).items() if k not in ("keys", "tag")}
    config = {k: (list(v) if isinstance(v, tuple) else v) for k, v in exported.items()}
    config = {k: v for k, v in config.items() if v not in ("", None)}
    if "host" in config:  # GPU targets carry the host target; keep it as plain JSON
        config["host"] = {k: v for k, v in dict(target.host.export()).items() if k not in ("keys", "tag")}
    if kind == "llvm":
        mcpu = str(config.get("mcpu", ""))
        if mcpu and not codegen.llvm_is_valid_cpu(mcpu, str(config.get("mtriple") or _host_triple())):
            raise TlmError(f"bad target: LLVM does not know the CPU {mcpu!r}")
        config.setdefault("num-cores", _cores())
        config.setdefault("mtriple", _host_triple())
        target = tvm.target.Target(config)
        bits, isa = _llvm_isa(target)
        return TargetInfo(config, "llvm", mcpu or "generic", int(config["num-cores"]), bits, isa,
                          _llvm_features(target))
    if kind == "cuda":
        return TargetInfo(config, "cuda", str(config.get("arch", "sm_?")), GPU_SMS.get(str(config.get("model", "")), 0), 0, "cuda")
    raise TlmError(f"bad target: kind {kind!r} is not supported (use llvm or cuda)")
