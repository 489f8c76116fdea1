"""CUDA builds on a machine without a GPU: a scheduled program -> CUDA C and its launch plan.

TVM lowers the program as `tvm.compile` does (its default TIR pipeline, then the device
finalization passes and the CUDA codegen) but builds no host module: the host function is read
instead, for what a runner needs to launch the kernels without TVM (tlm.measure.cuda_runner):

- the kernels in launch order, each with its grid, block and dynamic shared memory (constants for
  the static shapes of a task), and its arguments: a task buffer (by position), a workspace
  (a global buffer the host allocates between kernels, such as a softmax's row maxima) or an
  integer;
- the workspaces' sizes.

`tlm.measure.nvcc` turns a file of many programs' CUDA C into one cubin.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from tlm.errors import first_line
from tlm.graph.target import TargetInfo, build_context

_ARR_DATA = 1  # tvm_struct_get field of a DLTensor's data pointer (kArrData)
_ARG_VALUE = 15  # tvm_struct_get field of a packed argument's value (kTVMFFIAnyUnionValue)
_DIMS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z")


@dataclass
class Kernel:
    """One kernel launch: `args` are {"buf": i} (task argument i), {"ws": j} or {"int": v}."""

    name: str
    args: list[dict[str, int]]
    grid: list[int]
    block: list[int]
    smem: int = 0  # dynamic shared memory bytes

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]


@dataclass
class CudaProgram:
    """A program's CUDA C and launch plan; `error` set (and nothing else) when lowering failed."""

    source: str = ""
    kernels: list[Kernel] = field(default_factory=list)
    workspaces: list[int] = field(default_factory=list)  # bytes of each workspace
    error: str | None = None

    def plan(self) -> dict[str, Any]:
        """The launch plan as plain JSON (the bundle manifest's form)."""
        return {"kernels": [asdict(k) for k in self.kernels], "workspaces": list(self.workspaces)}


def _stmts(stmt):
    """Every statement under `stmt`, in program order."""
    from tvm import tirx

    stack = [stmt]
    while stack:
        s = stack.pop()
        if s is None:
            continue
        yield s
        if isinstance(s, tirx.SeqStmt):
            stack.extend(reversed(list(s.seq)))
        elif isinstance(s, tirx.IfThenElse):
            stack.extend([s.else_case, s.then_case])
        else:
            body = getattr(s, "body", None)
            if isinstance(body, tirx.Stmt):
                stack.append(body)


def _struct_gets(expr) -> list[tuple[Any, int, int]]:
    """(handle, index, field) of every tvm_struct_get call in `expr`."""
    from tvm import tirx
    from tvm.ir.expr import Call

    out = []
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, Call):
            if getattr(e.op, "name", "").endswith("tvm_struct_get"):
                out.append((e.args[0], int(e.args[1]), int(e.args[2])))
            stack.extend(e.args)
        elif isinstance(e, (tirx.Cast,)):
            stack.append(e.value)
        elif hasattr(e, "a") and hasattr(e, "b"):
            stack.extend([e.a, e.b])
    return out


def _same(a, b) -> bool:
    return a.same_as(b)


def _find(pairs, var):
    for v, value in pairs:
        if _same(v, var):
            return value
    return None


def _kernel_plan(host_func, device_funcs: dict[str, Any]) -> tuple[list[Kernel], list[int]]:
    """Kernels and workspaces from the lowered host function (static shapes only)."""
    from tvm import tirx
    from tvm.ir.expr import Call

    binds, decls, allocs, calls = [], [], [], []
    for s in _stmts(host_func.body):
        if isinstance(s, tirx.Bind):
            binds.append((s.var, s.value))
        elif isinstance(s, tirx.DeclBuffer):
            decls.append((s.buffer, s.data))
        elif isinstance(s, tirx.AllocBuffer):
            allocs.append(s.buffer)
        elif isinstance(s, tirx.Evaluate) and isinstance(s.value, Call):
            call = s.value
            if "call_ffi_kernel" in getattr(call.op, "name", ""):
                calls.append(call)
    workspaces = []
    for buf in allocs:
        n = 1
        for d in buf.shape:
            n *= int(d)
        workspaces.append(n * ((buf.dtype.bits * buf.dtype.lanes + 7) // 8))

    def buffer_arg(expr, depth: int = 0) -> dict[str, int]:
        # A kernel argument is buffer_data(buffer var); a declared buffer's data is either
        # another buffer's (a view) or the data pointer of a packed argument's DLTensor.
        if depth > 8 or not (isinstance(expr, Call) and getattr(expr.op, "name", "").endswith("buffer_data")):
            raise ValueError(f"kernel argument {expr} is not a buffer's data")
        var = expr.args[0]
        for j, buf in enumerate(allocs):
            if _same(buf, var):
                return {"ws": j}
        data = _find(decls, var)
        if data is None:
            raise ValueError(f"kernel argument {var} is neither a task buffer nor a workspace")
        if isinstance(data, Call) and getattr(data.op, "name", "").endswith("buffer_data"):
            return buffer_arg(data, depth + 1)
        for handle, _, fld in _struct_gets(data):
            if fld != _ARR_DATA:
                continue
            hv = _find(binds, handle)
            for _args, index, fld2 in _struct_gets(hv) if hv is not None else ():
                if fld2 == _ARG_VALUE:
                    return {"buf": index}
        raise ValueError(f"kernel argument {var}: no packed argument found")

    kernels = []
    for call in calls:
        name = str(call.args[0].value)
        dev = device_funcs.get(name)
        if dev is None:
            raise ValueError(f"no device function {name}")
        tags = [str(t) for t in dev.attrs.get("tirx.kernel_launch_params", [])]
        n_params = len(dev.params)
        values = list(call.args[1:])
        if len(values) != n_params + len(tags):
            raise ValueError(f"{name}: {len(values)} launch arguments for {n_params} parameters and {len(tags)} launch tags")
        args = []
        for param, value in zip(dev.params, values[:n_params]):
            if isinstance(value, tirx.IntImm):
                args.append({"int": int(value.value)})
            elif isinstance(value, Call):
                args.append(buffer_arg(value))
            else:
                raise ValueError(f"{name}: unsupported argument {value}")
        dims = {tag: value for tag, value in zip(tags, values[n_params:])}
        extents = []
        for tag in _DIMS:
            value = dims.get(tag, 1)
            if not isinstance(value, (int, tirx.IntImm)):
                raise ValueError(f"{name}: dynamic launch extent {tag}")
            extents.append(int(value))
        smem = dims.get("tirx.use_dyn_shared_memory", 0)
        if not isinstance(smem, (int, tirx.IntImm)):
            raise ValueError(f"{name}: dynamic shared memory size is not a constant")
        kernels.append(Kernel(name, args, extents[:3], extents[3:], int(smem)))
    return kernels, workspaces


def lower_cuda(mod, target: TargetInfo) -> CudaProgram:
    """CUDA C and launch plan of a scheduled IRModule (function "main"); errors as data."""
    import tvm
    from tvm.tirx.build import codegen_build, split_host_device_mods

    try:
        tgt = target.tvm().with_host("llvm")
        mod = tvm.tirx.transform.BindTarget(tgt)(mod)
        pipeline, _, finalize_device = tvm.tirx.get_default_tir_pipeline(tgt)
        with build_context(3):  # without TVM's TIR CSE (tlm.graph.target.BUILD_CONFIG)
            host, devices = split_host_device_mods(pipeline(mod))
            if len(devices) != 1:
                return CudaProgram(error=f"expected one CUDA module, got {len(devices)}")
            ((dev_target, dev_mod),) = devices.items()
            dev_mod = finalize_device()(dev_mod)
            funcs = {str(f.attrs["global_symbol"]): f for f in dev_mod.functions.values()}
            kernels, workspaces = _kernel_plan(host["main"], funcs)
            source = codegen_build(dev_mod, dev_target).inspect_source()
    except Exception as err:  # TVM errors are long C++ traces; one line travels
        return CudaProgram(error=f"lowering failed: {first_line(err)}")
    if not kernels:
        return CudaProgram(error="no kernel launched")
    return CudaProgram(source, kernels, workspaces)


_KERNEL_START = re.compile(r'^extern "C" __global__', re.M)


def split_source(source: str) -> tuple[str, str]:
    """(preamble, kernels): TVM's CUDA C is a preamble of helpers, then the kernels."""
    m = _KERNEL_START.search(source)
    if m is None:
        return source, ""
    return source[: m.start()], source[m.start():]


def kernel_pieces(kernels: str) -> list[str]:
    """The kernels part of TVM's CUDA C (split_source's second half) cut where each kernel's
    `extern "C" __global__` starts, forward declarations and definitions alike, in order."""
    starts = [m.start() for m in _KERNEL_START.finditer(kernels)]
    return [kernels[a:b] for a, b in zip(starts, starts[1:] + [len(kernels)])]


def rename_kernels(code: str, names: list[str], prefix: str) -> str:
    """Prefix every kernel name (so that the kernels of many programs share one file)."""
    if not names:
        return code
    pattern = re.compile(r"\b(" + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) + r")\b")
    return pattern.sub(lambda m: prefix + m.group(1), code)
