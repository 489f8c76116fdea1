"""ONNX's recurrent operators (LSTM, GRU, RNN), which TVM's ONNX importer has no conversion for.

An ONNX export of any PyTorch `nn.LSTM`, `nn.GRU` or `nn.RNN` (an LSTM language model, EnCodec's
encoder) was refused at import. `rnn_converters()` lends the importer a converter for each while
it runs (TVM's importer reads its operator table from `onnx_frontend._get_convert_map` on every
model; it has no other way in). Each converter unrolls the recurrence over the sequence, as TVM's
PyTorch importer does for `aten.lstm` / `aten.gru`: the input projection of every step is one
matmul ([seq, batch, input] @ [input, gates * hidden]), then one matmul of the hidden state per
step and the gates' elementwise work, which fusion puts in that matmul's epilogue.

Everything the ONNX operators define is converted (opset 7-22): both directions, `layout` 1
(batch first), initial states, biases, LSTM's peepholes, `clip`, GRU's `linear_before_reset` 0 or
1, and the activation functions by name with their `activation_alpha` / `activation_beta`
(consumed in order by the functions that take them, as ONNX Runtime does). Two things are refused
in one line rather than guessed: `sequence_lens` that differ from the sequence length (padded
batches), and LSTM's `input_forget`.

ONNX Runtime, the reference an ONNX model is checked against, refuses `layout` 1; it runs
`layout0_twin` of such a model instead (the same nodes in layout 0 between transposes).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tlm.graph.converters import dtype_of

# name -> (alpha default, beta default); None: the function takes no such parameter
_ACTIVATIONS: dict[str, tuple[float | None, float | None]] = {
    "sigmoid": (None, None), "tanh": (None, None), "relu": (None, None), "softsign": (None, None),
    "softplus": (None, None), "hardsigmoid": (0.2, 0.5), "leakyrelu": (0.01, None), "elu": (1.0, None),
    "thresholdedrelu": (1.0, None), "affine": (1.0, 0.0), "scaledtanh": (1.0, 1.0),
}
DEFAULTS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _activations(op: str, attr: dict, directions: int, dtype: str) -> list:
    """One list of functions (Relax expr -> expr) per direction, from `activations`,
    `activation_alpha` and `activation_beta` (defaults: ONNX's for the op)."""
    names = [_text(n) for n in attr.get("activations", ())] or list(DEFAULTS[op]) * directions
    per = len(DEFAULTS[op])
    if len(names) != per * directions:
        raise ValueError(f"{op} has {len(names)} activation functions; it takes {per} per direction")
    alphas, betas = list(attr.get("activation_alpha", ())), list(attr.get("activation_beta", ()))
    funcs = []
    for name in names:
        key = name.lower()
        if key not in _ACTIVATIONS:
            raise ValueError(f"{op} activation function {name!r} is not one ONNX defines")
        a_default, b_default = _ACTIVATIONS[key]
        alpha = (alphas.pop(0) if alphas else a_default) if a_default is not None else None
        beta = (betas.pop(0) if betas else b_default) if b_default is not None else None
        funcs.append(_activation(key, alpha, beta, dtype))
    return [funcs[d * per:(d + 1) * per] for d in range(directions)]


def _activation(key: str, alpha: float | None, beta: float | None, dtype: str):
    """ONNX's activation function `key` as a function of a Relax expression of `dtype`."""
    from tvm import relax

    op = relax.op

    def c(v: float):
        return relax.const(v, dtype)

    table = {
        "sigmoid": lambda x: op.sigmoid(x),
        "tanh": lambda x: op.tanh(x),
        "relu": lambda x: op.nn.relu(x),
        "softsign": lambda x: op.divide(x, op.add(op.abs(x), c(1.0))),
        "softplus": lambda x: op.log(op.add(op.exp(x), c(1.0))),
        "hardsigmoid": lambda x: op.clip(op.add(op.multiply(x, c(alpha)), c(beta)), 0.0, 1.0),
        "leakyrelu": lambda x: op.nn.leakyrelu(x, alpha),
        "elu": lambda x: op.where(op.greater(x, c(0.0)), x,
                                  op.multiply(c(alpha), op.subtract(op.exp(x), c(1.0)))),
        "thresholdedrelu": lambda x: op.where(op.greater(x, c(alpha)), x, op.zeros_like(x)),
        "affine": lambda x: op.add(op.multiply(x, c(alpha)), c(beta)),
        "scaledtanh": lambda x: op.multiply(c(alpha), op.tanh(op.multiply(x, c(beta)))),
    }
    return table[key]


def _dims(x) -> list[int]:
    """The static shape of a Relax tensor expression."""
    try:
        return [int(d) for d in x.ty.shape]
    except (TypeError, AttributeError):
        raise ValueError("a recurrent operator's input has a shape unknown at import; export with static shapes") from None


def _arg(inputs, k: int):
    return inputs[k] if len(inputs) > k else None


def _check_lengths(op: str, lengths, seq: int) -> None:
    """`sequence_lens` equal to the sequence length for every batch row changes nothing; any other
    value (a padded batch) is refused."""
    from tvm.ir.expr import Constant

    if lengths is None:
        return
    if isinstance(lengths, Constant) and bool((lengths.value.numpy() == seq).all()):
        return
    raise ValueError(f"{op} with per-row sequence_lens (a padded batch) is not supported; export it without them")


def convert(op: str, bb, inputs, attr: dict):
    """The Relax expression (a tuple: Y, Y_h[, Y_c]) of one ONNX LSTM / GRU / RNN node."""
    from tvm import relax

    R = relax.op
    emit = bb.emit
    x, w, r, b = inputs[0], inputs[1], inputs[2], _arg(inputs, 3)
    lengths, h0 = _arg(inputs, 4), _arg(inputs, 5)
    c0, peep = (_arg(inputs, 6), _arg(inputs, 7)) if op == "LSTM" else (None, None)
    if op == "LSTM" and int(attr.get("input_forget", 0)):
        raise ValueError("LSTM with input_forget=1 is not supported")
    direction = _text(attr.get("direction", "forward"))
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ValueError(f"{op} direction {direction!r} is not one ONNX defines")
    batch_first = int(attr.get("layout", 0)) == 1
    reset_after = op == "GRU" and bool(int(attr.get("linear_before_reset", 0)))  # R's hidden bias kept apart
    clip = attr.get("clip")
    gates = GATES[op]
    directions, hidden4, _ = _dims(w)
    hidden = hidden4 // gates
    if batch_first:  # [batch, seq, input] -> [seq, batch, input]; states [batch, dirs, h] -> [dirs, batch, h]
        x = emit(R.permute_dims(x, [1, 0, 2]))
        h0 = None if h0 is None else emit(R.permute_dims(h0, [1, 0, 2]))
        c0 = None if c0 is None else emit(R.permute_dims(c0, [1, 0, 2]))
    seq, batch, _ = _dims(x)
    _check_lengths(op, lengths, seq)
    dtype = dtype_of(x)
    funcs = _activations(op, attr, directions, dtype)

    def gate(z):  # ONNX's clip bounds the activations' inputs
        return z if clip is None else R.clip(z, -float(clip), float(clip))

    def cols(z, k: int, n: int = 1):  # gate k (of `gates`) of a [.., gates*hidden] expression
        return R.strided_slice(z, axes=[-1], begin=[k * hidden], end=[(k + n) * hidden])

    def take(z, d: int):  # direction d of a [dirs, ...] tensor, without that axis
        return emit(R.squeeze(R.strided_slice(z, axes=[0], begin=[d], end=[d + 1]), axis=[0]))

    def state(s0, d: int):  # direction d's initial state [batch, h]: given, else zeros
        return take(s0, d) if s0 is not None else emit(R.full((batch, hidden), relax.const(0.0, dtype), dtype))

    ys, hs, cs = [], [], []
    for d in range(directions):
        f = funcs[d]
        wd, rd = take(w, d), take(r, d)  # [gates*h, input], [gates*h, h]
        xw = emit(R.matmul(x, R.permute_dims(wd)))  # [seq, batch, gates*h]
        wb = rb = None
        if b is not None:
            bd = take(b, d)  # [2*gates*h]: W's biases, then R's
            wb = emit(R.strided_slice(bd, axes=[0], begin=[0], end=[gates * hidden]))
            rb = emit(R.strided_slice(bd, axes=[0], begin=[gates * hidden], end=[2 * gates * hidden]))
        if wb is not None:
            both = emit(R.add(wb, rb))
            xw = emit(R.add(xw, R.concat([cols(both, 0, 2), cols(wb, 2)], axis=0) if reset_after else both))
        rt = emit(R.permute_dims(rd))  # [h, gates*h]
        h = state(h0, d)
        c = state(c0, d) if op == "LSTM" else None
        pd = take(peep, d) if peep is not None else None  # [3*h]: input, output, forget
        steps = range(seq - 1, -1, -1) if (direction == "reverse" or d == 1) else range(seq)
        out = [None] * seq
        for t in steps:
            xt = emit(R.squeeze(R.strided_slice(xw, axes=[0], begin=[t], end=[t + 1]), axis=[0]))  # [batch, gates*h]
            if op == "LSTM":
                g = emit(R.add(xt, R.matmul(h, rt)))
                i, o, fg, cc = (cols(g, k) for k in range(4))  # ONNX's gate order: i, o, f, c
                if pd is not None:
                    i = R.add(i, R.multiply(cols(pd, 0), c))
                    fg = R.add(fg, R.multiply(cols(pd, 2), c))
                i, fg, cc = emit(f[0](gate(i))), emit(f[0](gate(fg))), emit(f[1](gate(cc)))
                c = emit(R.add(R.multiply(fg, c), R.multiply(i, cc)))
                if pd is not None:
                    o = R.add(o, R.multiply(cols(pd, 1), c))
                h = emit(R.multiply(f[0](gate(o)), f[2](c)))
            elif op == "GRU":  # gate order z, r, h
                hr = emit(R.matmul(h, rt))  # [batch, 3h]
                zr = emit(R.add(cols(xt, 0, 2), cols(hr, 0, 2)))
                z, rg = emit(f[0](gate(cols(zr, 0)))), emit(f[0](gate(cols(zr, 1))))
                if reset_after:
                    hh = R.multiply(rg, cols(hr, 2) if rb is None else R.add(cols(hr, 2), cols(rb, 2)))
                else:
                    hh = R.matmul(R.multiply(rg, h), cols(rt, 2))
                hh = emit(f[1](gate(R.add(cols(xt, 2), hh))))
                h = emit(R.add(R.multiply(R.subtract(relax.const(1.0, dtype), z), hh), R.multiply(z, h)))
            else:
                h = emit(f[0](gate(R.add(xt, R.matmul(h, rt)))))
            out[t] = h
        ys.append(emit(R.stack(out, axis=0)))  # [seq, batch, h]
        hs.append(h)
        cs.append(c)
    y = emit(R.stack(ys, axis=1))  # [seq, dirs, batch, h]
    y_h = emit(R.stack(hs, axis=0))  # [dirs, batch, h]
    y_c = emit(R.stack(cs, axis=0)) if op == "LSTM" else None
    if batch_first:  # Y [batch, seq, dirs, h]; states [batch, dirs, h]
        y = emit(R.permute_dims(y, [2, 0, 1, 3]))
        y_h = emit(R.permute_dims(y_h, [1, 0, 2]))
        y_c = None if y_c is None else emit(R.permute_dims(y_c, [1, 0, 2]))
    return relax.Tuple([y, y_h] + ([y_c] if y_c is not None else []))


def _converter(op: str):
    """An OnnxOpConverter subclass for `op` (TVM picks `_impl_v<N>` by the model's opset)."""
    from tvm.relax.frontend.onnx.onnx_frontend import OnnxOpConverter

    def impl(cls, bb, inputs, attr, params):
        return convert(op, bb, inputs, attr)

    return type(f"Tlm{op}", (OnnxOpConverter,), {"_impl_v1": classmethod(impl)})


@contextlib.contextmanager
def rnn_converters() -> Iterator[None]:
    """TVM's ONNX importer with LSTM, GRU and RNN converters, for the duration of the block."""
    from tvm.relax.frontend.onnx import onnx_frontend

    original = onnx_frontend._get_convert_map
    ours = {op: _converter(op) for op in GATES}

    def convert_map():
        table = original()
        for op, conv in ours.items():
            table.setdefault(op, conv)  # a TVM that gains its own keeps it
        return table

    onnx_frontend._get_convert_map = convert_map
    try:
        yield
    finally:
        onnx_frontend._get_convert_map = original


def _batch_first(node) -> bool:
    return node.op_type in GATES and any(a.name == "layout" and a.i == 1 for a in node.attribute)


def batch_first_nodes(model) -> list[str]:
    """The op types of `model`'s main-graph recurrent nodes with `layout` 1 (batch first)."""
    return [n.op_type for n in model.graph.node if _batch_first(n)]


def layout0_twin(model):
    """A copy of ONNX `model` whose batch-first recurrent nodes are layout 0 between transposes
    (ONNX Runtime refuses `layout` 1, so this twin is what it can run as the reference); None if
    `model` has none. Layout 1 is X [batch, seq, in], states [batch, dirs, hidden], Y [batch, seq,
    dirs, hidden]; layout 0 swaps batch and seq in X, batch and dirs in the states, and gives Y as
    [seq, dirs, batch, hidden]."""
    import onnx
    from onnx import helper

    if not batch_first_nodes(model):
        return None
    twin = onnx.ModelProto()
    twin.CopyFrom(model)
    nodes = []
    for i, n in enumerate(twin.graph.node):
        if not _batch_first(n):
            nodes.append(n)
            continue
        tag = f"tlm_layout0_{i}"
        ins, outs = list(n.input), list(n.output)
        for k in (0, 5, 6):  # X, initial_h, initial_c
            if k < len(ins) and ins[k]:
                nodes.append(helper.make_node("Transpose", [ins[k]], [f"{tag}_in{k}"], perm=[1, 0, 2]))
                ins[k] = f"{tag}_in{k}"
        after = []
        for k, name in enumerate(outs):  # Y, Y_h, Y_c
            if name:
                after.append(helper.make_node("Transpose", [f"{tag}_out{k}"], [name],
                                              perm=[2, 0, 1, 3] if k == 0 else [1, 0, 2]))
                outs[k] = f"{tag}_out{k}"
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute if a.name != "layout"}
        nodes += [helper.make_node(n.op_type, ins, outs, name=n.name, domain=n.domain, **attrs)] + after
    del twin.graph.node[:]
    twin.graph.node.extend(nodes)
    return twin


def runtime_model(path: str, batch_first: list[str] | None = None) -> tuple[str | bytes, list[str]]:
    """What ONNX Runtime is given for the ONNX file at `path`: the path, or the serialized
    `layout0_twin` where the model has batch-first recurrent nodes (their op types, second).
    `batch_first`: those nodes, when the caller read the model already (the file is then read
    again only if there are some)."""
    import onnx

    if batch_first is None:
        batch_first = batch_first_nodes(onnx.load(path, load_external_data=False))
    if not batch_first:
        return path, []
    return layout0_twin(onnx.load(path)).SerializeToString(), list(batch_first)
