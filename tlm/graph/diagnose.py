"""Failures named for a user: the stage, the operator, its shapes and layouts.

TVM reports a failure with its own text, whose last line is often noise (`# Metadata omitted.
Use show_meta=True in script() method to show it.`, a C++ frame). `explain` turns an exception
of any stage into one line:

    whole-model build failed in legalization at relax.nn.conv2d_transpose(float32[1, 8, 8, 16],
    float32[16, 8, 2, 2]; data_layout=NHWC, kernel_layout=IOHW, out_layout=NHWC, strides=[2, 2],
    ...): no legalization lowers it for these shapes and layouts (TVM: CodeGenVM cannot emit this
    Relax operator directly ...)

The stage comes from where the exception was raised (TVM's C++ and Python frames, tlm's passes),
the operator from the Relax call being lowered when it was raised (a `call` in a legalization or
pass frame), from the call TVM's text quotes, or from the calls that LegalizeOps leaves in the
module; `unsupported_torch_ops` names the torch operators that the Relax importer lacks, with the
shapes torch.export recorded.
"""

from __future__ import annotations

import re
from typing import Any

from tlm.errors import reason

IMPORT = "import"
PREPARE = "graph preparation"
LAYOUT = "layout pass"
FUSION = "fusion"
LEGALIZE = "legalization"
EXTRACT = "task extraction"
SCHEDULE = "scheduling"
BUILD = "codegen/build"
RUN = "run"

# (pattern on a frame's file or function, stage), deepest frame first: the first frame that
# matches one names the stage.
_FRAME_STAGES = [
    (r"tlm/graph/layout\.py|convert_layout|ConvertLayout", LAYOUT),
    (r"legaliz|Legaliz", LEGALIZE),
    (r"fuse_ops|fuse_tir|FuseOps|FuseTIR|annotate_tir_op_pattern", FUSION),
    (r"meta_schedule|s_tir/schedule", SCHEDULE),
    (r"codegen|target/llvm|target/source|vm_build|/build_module|tirx/transform|s_tir/transform|export_library"
     r"|/contrib/cc\.py|relax/backend", BUILD),
    (r"relax/frontend", IMPORT),
]

# Ops the VM code generator emits itself (besides those with a packed function, FCallPacked);
# any other op left after legalization stops the build.
_VM_OPS = {"relax.null_value", "relax.shape_of", "relax.make_closure", "relax.invoke_closure",
           "relax.invoke_pure_closure", "relax.tensor_to_shape", "relax.shape_to_tensor", "relax.hint_on_device",
           "relax.to_vdevice"}
_VM_PREFIXES = ("relax.call_", "relax.vm.", "relax.memory.", "relax.builtin.", "relax.runtime.")


def _vm_emits(op) -> bool:
    name = str(op.name)
    if name in _VM_OPS or name.startswith(_VM_PREFIXES):
        return True
    try:
        return op.get_attr("FCallPacked") is not None
    except Exception:
        return False


def _frames(err: BaseException) -> list[tuple[str, str, Any]]:
    """(file, function, frame) of the exception's traceback, deepest first (tvm-ffi adds TVM's
    C++ frames to it, with the C++ file and function)."""
    out = []
    tb = err.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        out.append((code.co_filename.replace("\\", "/"), code.co_name or "", tb.tb_frame))
        tb = tb.tb_next
    return out[::-1]


def stage_of(err: BaseException, default: str) -> str:
    """The stage that raised `err`, read from its traceback; `default` when no frame says."""
    for filename, func, _ in _frames(err):
        where = f"{filename} {func}"
        for pattern, stage in _FRAME_STAGES:
            if re.search(pattern, where):
                return stage
    return default


def _is_op_call(obj) -> bool:
    from tvm import relax

    return isinstance(obj, relax.Call) and hasattr(obj.op, "name") and str(obj.op.name).startswith("relax.")


def call_in_frames(err: BaseException):
    """The Relax call being lowered or rewritten when `err` was raised: a `call` argument of the
    deepest Python frame that has one (legalization functions, expression mutators), else None."""
    for _, _, frame in _frames(err):
        for name in ("call", "expr", "node"):
            obj = frame.f_locals.get(name)
            try:
                if obj is not None and _is_op_call(obj) and not _vm_emits(obj.op):
                    return obj
            except Exception:  # a local that is not what it seems
                continue
    return None


def _dim_text(v) -> str:
    try:
        return str(int(v))
    except (TypeError, ValueError):
        return str(v)  # a symbolic dimension


def _type_text(ty) -> str:
    dtype, shape = getattr(ty, "dtype", None), getattr(ty, "shape", None)
    if dtype is not None:
        values = getattr(shape, "values", None)
        dims = ", ".join(_dim_text(v) for v in values) if values is not None else "?"
        return f"{dtype}[{dims}]"
    fields = getattr(ty, "fields", None)
    if fields is not None:
        return "(" + ", ".join(_type_text(f) for f in fields) + ")"
    return type(ty).__name__


def _arg_text(arg) -> str:
    for name in ("ty", "struct_info", "struct_info_"):  # TVM 0.27 names a Relax value's type `ty`
        try:
            ty = getattr(arg, name, None)
        except Exception:
            ty = None
        if ty is not None:
            return _type_text(ty)
    return type(arg).__name__


def _value_text(v) -> str:
    if isinstance(v, (str, int, float, bool)):
        return str(v)
    if hasattr(v, "value") and isinstance(getattr(v, "value"), (int, float)):
        return str(v.value)  # a TIR IntImm / FloatImm
    try:
        return "[" + ", ".join(_value_text(x) for x in v) + "]"
    except TypeError:
        return str(v)


def attrs_text(attrs) -> str:
    """The attributes of a call, layouts first: `data_layout=NHWC, kernel_layout=IOHW, ...`."""
    if attrs is None:
        return ""
    info = getattr(type(attrs), "__tvm_ffi_type_info__", None)
    names = [f.name for f in getattr(info, "fields", None) or []]
    if not names:
        names = [k for k in dir(attrs) if not k.startswith("_") and not callable(getattr(attrs, k, None))]
    names.sort(key=lambda n: "layout" not in n)  # layouts first (stable otherwise)
    parts = []
    for n in names:
        try:
            v = getattr(attrs, n)
        except Exception:
            continue
        if v is None or str(v) in ("", "void"):
            continue
        parts.append(f"{n}={_value_text(v)}")
    return ", ".join(parts)


def describe_call(call, limit: int = 400) -> str:
    """`op(arg types; attributes)`, e.g. `relax.nn.conv2d_transpose(float32[1, 8, 8, 16],
    float32[16, 8, 2, 2]; data_layout=NHWC, ...)`."""
    name = str(getattr(call.op, "name", None) or getattr(call.op, "name_hint", "?"))
    args = ", ".join(_arg_text(a) for a in call.args)
    attrs = attrs_text(call.attrs)
    text = f"{name}({args}{'; ' + attrs if attrs else ''})"
    return text if len(text) <= limit else text[: limit - 4] + "...)"


def op_calls(mod, op_name: str | None = None) -> list:
    """Calls of Relax ops in the module's Relax functions (of `op_name` only, if given), in order."""
    from tvm import relax

    found = []

    @relax.expr_functor.visitor
    class Calls(relax.PyExprVisitor):
        def visit_call_(self, call):
            if _is_op_call(call) and (op_name is None or str(call.op.name) == op_name):
                found.append(call)
            super().visit_call_(call)

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            Calls().visit_expr(func)
    return found


def unlegalized_calls(mod, target=None) -> list:
    """Calls that LegalizeOps (tlm's fast-math legalization) leaves in the module and that the VM
    cannot emit: the operators no legalization covers for their shapes, dtypes and layouts."""
    import tvm
    from tvm import relax

    from tlm.errors import quiet_stderr
    from tlm.graph.passes import fast_math_legalization

    tvm_target = target.tvm() if hasattr(target, "tvm") else target
    try:
        with quiet_stderr():
            if tvm_target is not None:
                with tvm_target, tvm.transform.PassContext(opt_level=3):
                    legal = relax.transform.LegalizeOps(customize_legalize_map=fast_math_legalization())(mod)
            else:
                legal = relax.transform.LegalizeOps(customize_legalize_map=fast_math_legalization())(mod)
    except Exception:
        return []
    return leftover_calls(legal)


def leftover_calls(mod) -> list:
    """Calls of Relax ops that the VM cannot emit, in a module that has been legalized (a fused
    module of tlm.graph.extract.fuse): what no legalization covered."""
    return [c for c in op_calls(mod) if not _vm_emits(c.op)]


def check_lowered(fused, what: str = "task extraction") -> None:
    """A TlmError naming the first call that legalization left in a fused module (the build would
    stop at it in VM codegen), with its shapes and layouts; nothing if there is none. Cheap: task
    extraction can call it so that a model that cannot build fails before any tuning."""
    from tlm.errors import TlmError

    left = leftover_calls(fused)
    if left:
        raise TlmError(f"{what} failed in {LEGALIZE} at {_calls_text(left)}: no legalization lowers it for these "
                       "shapes and layouts (the VM cannot emit it)")


_QUOTED = re.compile(r"^R\.([A-Za-z0-9_.]+)\(")


def quoted_op(err: BaseException) -> str | None:
    """The Relax op of the call TVM's message quotes (`Offending call: R.nn.conv2d_transpose(...)`)."""
    for ln in str(err).splitlines():
        m = _QUOTED.match(ln.strip())
        if m:
            return "relax." + m.group(1)
    return None


def _sentence(text: str) -> str:
    """The first sentence of a message (TVM's advice after it is for TVM developers)."""
    m = re.match(r"(.+?[.!])(\s|$)", text)
    return m.group(1).rstrip(".") if m else text


def _calls_text(calls: list) -> str:
    first = describe_call(calls[0])
    more = len(calls) - 1
    return first + (f" (and {more} more call{'s' * (more > 1)})" if more else "")


def explain(err: BaseException, what: str, default_stage: str, mod=None, target=None) -> str:
    """One line for a failure of `what` ("whole-model build", "task extraction", ...):
    `WHAT failed in STAGE at OP(SHAPES; ATTRIBUTES): REASON`, the operator when one can be found
    (see the module docstring), the stage from the traceback or `default_stage`."""
    stage = stage_of(err, default_stage)
    why = reason(err)
    call = call_in_frames(err)
    subject = describe_call(call) if call is not None else None
    if subject is None and mod is not None:
        op = quoted_op(err)
        leftover = []
        if op is not None or "CodeGenVM" in str(err) or stage == LEGALIZE:
            try:
                leftover = unlegalized_calls(mod, target)
            except Exception:
                leftover = []
        if op is not None:
            named = [c for c in leftover if str(c.op.name) == op]
            if named:  # the build stopped at a call that nothing legalized
                stage = LEGALIZE
                why = f"no legalization lowers it for these shapes and layouts (TVM: {_sentence(why)})"
            else:
                try:
                    named = op_calls(mod, op)
                except Exception:
                    named = []
            subject = _calls_text(named) if named else op
        elif leftover:
            stage = LEGALIZE
            subject = _calls_text(leftover)
            why = f"no legalization lowers it for these shapes and layouts (TVM: {_sentence(why)})"
    where = "" if stage == what else f" in {stage}"
    at = f" at {subject}" if subject else ""
    return f"{what} failed{where}{at}: {why}"


def unsupported_torch_ops(exported, message: str) -> str | None:
    """The torch operators that TVM's importer names as unsupported (`Unsupported function types
    ['_cdist_forward.default']`), each with the shapes and dtypes of its first use in the exported
    graph (decomposed as TVM decomposes it), the torch function it came from and the user's source
    line: `aten._cdist_forward.default(float32[1, 4, 8], float32[1, 4, 8]) from torch.cdist at
    model.py:12`. None if the message names none."""
    m = re.search(r"\[([^\]]*)\]", message)
    if "nsupported" not in message or not m:
        return None
    names = [n.strip().strip("'\"") for n in m.group(1).split(",") if n.strip()]
    if not names:
        return None
    first: dict[str, Any] = {}

    def scan(program) -> None:
        for node in program.graph.nodes:
            if node.op == "call_function":
                name = str(getattr(node.target, "__name__", node.target))
                if name in names and name not in first:
                    first[name] = node

    try:
        scan(exported)
        if len(first) < len(names):  # TVM imports the program after torch's default decompositions
            from tlm.errors import quiet_stderr

            with quiet_stderr():
                scan(exported.run_decompositions())
    except Exception:  # shapes are a bonus: the names alone still say what is missing
        pass
    return ", ".join(f"aten.{n}" + (_node_text(first[n]) if n in first else "") for n in names)


def _node_text(node) -> str:
    """`(ARGS) from torch.FN at FILE:LINE` for an exported graph node (what its metadata has)."""
    text = f"({_node_args(node)})"
    fn = node.meta.get("torch_fn")
    if isinstance(fn, (tuple, list)) and len(fn) == 2 and str(fn[1]).startswith("function."):
        text += f" from torch.{str(fn[1]).split('.', 1)[1]}"
    where = re.findall(r'File "([^"]+)", line (\d+)', str(node.meta.get("stack_trace") or ""))
    if where:
        path, line = where[-1]
        text += f" at {path.replace(chr(92), '/').rsplit('/', 1)[-1]}:{line}"
    return text


def _node_args(node) -> str:
    """The tensor arguments of an exported graph node as `dtype[shape]`, other arguments as values."""
    parts = []
    for a in node.args:
        val = getattr(a, "meta", {}).get("val") if hasattr(a, "meta") else None
        if val is not None and hasattr(val, "shape"):
            parts.append(f"{str(val.dtype).replace('torch.', '')}[{', '.join(str(int(d)) for d in val.shape)}]")
        elif isinstance(a, (int, float, bool, str)) or a is None:
            parts.append(repr(a))
        elif isinstance(a, (list, tuple)):
            parts.append(_value_text([getattr(x, "name", x) for x in a]))
        else:
            parts.append(type(a).__name__)
    for k, v in node.kwargs.items():
        if isinstance(v, (int, float, bool, str)):
            parts.append(f"{k}={v!r}")
    return ", ".join(parts)


def unsupported_onnx_ops(model, message: str) -> str | None:
    """The ONNX operators that TVM's importer names as unsupported (`The following operators are
    not supported for frontend ONNX: DFT`), each with its first node's name and input shapes
    (ONNX shape inference): `DFT(float32[4, 8]) (node dft_1)`. None if the message names none."""
    m = re.search(r"not supported for frontend ONNX:\s*(.+)$", message)
    if not m:
        return None
    names = [n.strip() for n in m.group(1).split(",") if n.strip()]
    shapes: dict[str, str] = {}
    try:
        import onnx
        from onnx import helper

        inferred = onnx.shape_inference.infer_shapes(model)
        g = inferred.graph
        for vi in [*g.input, *g.value_info, *g.output]:
            t = vi.type.tensor_type
            dims = ", ".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim)
            shapes[vi.name] = f"{helper.tensor_dtype_to_np_dtype(t.elem_type)}[{dims}]"
        for init in g.initializer:
            shapes[init.name] = f"{helper.tensor_dtype_to_np_dtype(init.data_type)}[{', '.join(map(str, init.dims))}]"
        nodes = list(g.node)
    except Exception:  # shapes are a bonus
        nodes = list(getattr(getattr(model, "graph", None), "node", []))
    out = []
    for n in names:
        node = next((x for x in nodes if x.op_type == n), None)
        if node is None:
            out.append(n)
            continue
        args = ", ".join(shapes.get(i, "?") for i in node.input if i)
        out.append(f"{n}({args})" + (f" (node {node.name})" if node.name else ""))
    return ", ".join(out)
