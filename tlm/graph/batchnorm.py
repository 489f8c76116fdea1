"""Inference batch norms folded into the convolution before them, run first by
`tlm.graph.passes.prepare(fold_bn=True)`: OFF by default, see the last paragraph.

torch.export writes a CNN's `Conv2d(bias=False)` + `BatchNorm2d` as a conv and an inference
`R.nn.batch_norm`, which TVM decomposes into `(y - mean) / sqrt(var + eps) * gamma + beta`: four
per-channel operands and a division per output element, fused into every conv task's epilogue. A
division costs more than the multiply-adds of a small-channel 1x1 or depthwise conv (MobileNetV2's
expansions read 16-24 input channels; a 3x3 depthwise conv does 9 multiply-adds per output). With
constant weights the norm is an affine map per output channel, so

    s = gamma / sqrt(var + eps);   W'[o, ...] = W[o, ...] * s[o];   b' = (b - mean) * s + beta

and the pair is `conv(x, W') + b'`: what ONNX Runtime's graph optimizer, Relay's FoldScaleAxis
and `torch.onnx.export` in eval mode do, so the PyTorch door now gives the conv-plus-bias tasks of
the ONNX door. Computed in float64 with numpy at rewrite time, then float32.

Folded: `conv1d` / `conv2d` (data NCW / NCHW, kernel OIW / OIHW, any groups) and `conv2d_transpose`
(NCHW, IOHW, groups 1; before tlm.graph.deconv rewrites it), each with a constant weight and
optionally a constant per-channel bias added before the norm, and a batch norm over axis 1 with
constant parameters in inference mode. A norm after anything else (DenseNet's BN -> ReLU -> conv,
a `BatchNorm1d` after a `Linear`) becomes `x * s + (beta - mean * s)`: one multiply-add per
element, no division. Norms with parameters that are not constants are left as they were.

Why off: measured on znver3 (2026-12-02, `python bench/fold_bn.py`, bench/results/fold_bn.md),
each variant tuned by the shipped TLM, whole models timed interleaved: resnet_50 1.10-1.11x faster
folded at budget 0 but mobilenet_v2 0.89-0.92x, and 0.95-0.96x for both at 10g (the tuned tasks'
weighted one-thread sums 1.04-1.07x faster folded). The shipped models never saw a conv task
without the norm's arithmetic (their corpus has none), so their picks, not the saved divisions,
decide. Turn it on with a refit whose corpus holds the folded tasks, judged the same way.
"""

from __future__ import annotations

_CONVS = {  # op: (data layout, kernel layout, the kernel's output-channel axis)
    "relax.nn.conv1d": ("NCW", "OIW", 0),
    "relax.nn.conv2d": ("NCHW", "OIHW", 0),
    "relax.nn.conv2d_transpose": ("NCHW", "IOHW", 1),
}


def _array(expr):
    """The numpy value of a constant expression, else None."""
    from tvm.ir.expr import Constant

    return expr.value.numpy() if isinstance(expr, Constant) else None


def _channel_bias(bias, channels: int, ndim: int):
    """`bias` as a (channels,) float64 vector when it adds one value per channel of an
    N-C-spatial output of `ndim` axes (shapes like (1, C, 1, 1) or (C, 1, 1)), else None."""
    import numpy as np

    if bias is None or bias.ndim > ndim or bias.size != channels:
        return None
    full = (1,) * (ndim - bias.ndim) + bias.shape
    if full[1] != channels or any(d != 1 for i, d in enumerate(full) if i != 1):
        return None
    return bias.reshape(channels).astype(np.float64)


def _scale_shift(bn):
    """(s, t), float64 vectors with `bn(x) = x * s + t` along its axis, for an inference norm whose
    parameters are float32 constants; None otherwise."""
    import numpy as np

    a = bn.attrs
    params = [_array(p) for p in bn.args[1:]]
    if bool(getattr(a, "training", False)) or any(p is None or p.dtype != np.float32 for p in params):
        return None
    gamma, beta, mean, var = (p.astype(np.float64).reshape(-1) for p in params)
    gamma = gamma if a.scale else np.ones_like(mean)
    beta = beta if a.center else np.zeros_like(mean)
    s = gamma / np.sqrt(var + float(a.epsilon))
    return s, beta - mean * s


def _folded(conv, bias, bn):
    """(W', b') for `conv` (+ `bias`) -> `bn`, or None where the pair does not qualify."""
    import numpy as np

    name = str(conv.op.name)
    data_layout, kernel_layout, axis = _CONVS[name]
    a = conv.attrs
    if (str(a.data_layout), str(a.kernel_layout)) != (data_layout, kernel_layout) \
            or str(a.out_layout or data_layout) != data_layout:
        return None
    if name == "relax.nn.conv2d_transpose" and int(a.groups) != 1:
        return None
    weight, st = _array(conv.args[1]), _scale_shift(bn)
    if int(bn.attrs.axis) != 1 or weight is None or weight.dtype != np.float32 or st is None:
        return None
    s, t = st
    channels, ndim = weight.shape[axis], len(data_layout)
    b = np.zeros(channels) if bias is None else _channel_bias(bias, channels, ndim)
    if s.size != channels or b is None:
        return None
    shape = [1] * weight.ndim
    shape[axis] = channels
    w = (weight.astype(np.float64) * s.reshape(shape)).astype(np.float32)
    return w, (b * s + t).astype(np.float32).reshape((1, channels) + (1,) * (ndim - 2))


def fold_batch_norms(mod):
    """`mod` with every qualifying conv (+ bias) -> inference batch norm pair as `conv(x, W') + b'`
    and every other inference norm with constant parameters as `x * s + t`; `mod` itself when
    there is none."""
    from tvm import relax
    from tvm.relax.dpl import TupleGetItemPattern, is_const, is_op, rewrite_call, wildcard

    from tlm.graph.layout import static_shape
    from tlm.graph.rewrite import per_function

    x, weight, bias_value = wildcard(), is_const(), is_const()
    bias = bias_value | is_op("relax.reshape")(bias_value, wildcard())  # torch.export reshapes it
    conv = is_op("relax.nn.conv1d")(x, weight) | is_op("relax.nn.conv2d")(x, weight) \
        | is_op("relax.nn.conv2d_transpose")(x, weight)
    biased = is_op("relax.add")(conv, bias)
    params = [is_const() for _ in range(4)]
    bn = is_op("relax.nn.batch_norm")(conv | biased, *params)
    pattern = TupleGetItemPattern(bn, 0)

    def rewriter(expr, matches):
        call, b = matches[conv], None
        if biased in matches:  # the constant, in the shape it is added in
            shape = static_shape(matches[bias])
            if shape is None:
                return expr
            b = _array(matches[bias_value]).reshape(shape)
        folded = _folded(call, b, matches[bn])
        if folded is None:
            return expr
        w, b = folded
        new = relax.Call(call.op, [matches[x], relax.const(w)], call.attrs, call.ty_args)
        return relax.op.add(new, relax.const(b))

    y = wildcard()
    norm = is_op("relax.nn.batch_norm")(y, *[is_const() for _ in range(4)])
    rest = TupleGetItemPattern(norm, 0)

    def affine(expr, matches):
        shape, st = static_shape(matches[y]), _scale_shift(matches[norm])
        if shape is None or st is None:
            return expr
        # shaped to broadcast along the norm's axis: (C, 1, ..., 1)
        along = (-1,) + (1,) * (len(shape) - 1 - int(matches[norm].attrs.axis) % len(shape))
        s, t = (v.astype("float32").reshape(along) for v in st)
        return relax.op.add(relax.op.multiply(matches[y], relax.const(s)), relax.const(t))

    def per_func(func):
        new = rewrite_call(rest, affine, rewrite_call(pattern, rewriter, func))
        return None if new.same_as(func) else new

    return per_function(mod, per_func)
