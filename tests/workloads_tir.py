"""Tiny TIR tasks of the common operator types, built from TE/TOPI (no model import needed).

Import from tests as `from workloads_tir import ...` (pytest puts tests/ on sys.path) and from
elsewhere after adding this directory to sys.path.
Every builder takes a `scale` so tests use toy sizes and benchmarks realistic ones.
"""

from __future__ import annotations

from collections.abc import Callable

from tlm.graph.tasks import Task, task_from_mod


def _task(tensors, name: str) -> Task:
    from tvm import te

    return task_from_mod(te.create_prim_func(tensors), name=name)


def matmul(n: int = 32, m: int | None = None, k: int | None = None) -> Task:
    from tvm import te

    m, k = m or n, k or n
    a = te.placeholder((n, k), "float32", name="A")
    b = te.placeholder((k, m), "float32", name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((n, m), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return _task([a, b, c], "fused_matmul")


def batch_matmul(b: int = 2, n: int = 16, k: int = 16, m: int = 16) -> Task:
    from tvm import te, topi

    x = te.placeholder((b, n, k), "float32", name="X")
    y = te.placeholder((b, m, k), "float32", name="Y")
    return _task([x, y, topi.nn.batch_matmul(x, y)], "fused_batch_matmul")


def dense_bias(n: int = 16, k: int = 32, m: int = 32, relu: bool = True) -> Task:
    from tvm import te, topi

    x = te.placeholder((n, k), "float32", name="X")
    w = te.placeholder((m, k), "float32", name="W")
    bias = te.placeholder((m,), "float32", name="bias")
    out = topi.add(topi.nn.dense(x, w), bias)
    if relu:
        out = topi.nn.relu(out)
    return _task([x, w, bias, out], "fused_dense_add" + ("_relu" if relu else ""))


def _conv(c: int, hw: int, co: int, kernel: int, pad: int, stride: int = 1, name: str = "conv2d") -> Task:
    from tvm import te, topi

    data = te.placeholder((1, c, hw, hw), "float32", name="data")
    weight = te.placeholder((co, c, kernel, kernel), "float32", name="weight")
    out = topi.nn.relu(topi.nn.conv2d_nchw(data, weight, stride, pad, 1))
    return _task([data, weight, out], f"fused_{name}_relu")


def conv1x1(c: int = 8, hw: int = 8, co: int = 8) -> Task:
    return _conv(c, hw, co, 1, 0)


def conv3x3(c: int = 4, hw: int = 8, co: int = 8) -> Task:
    return _conv(c, hw, co, 3, 1)


def depthwise_conv(c: int = 8, hw: int = 8) -> Task:
    from tvm import te, topi

    data = te.placeholder((1, c, hw, hw), "float32", name="data")
    weight = te.placeholder((c, 1, 3, 3), "float32", name="weight")
    out = topi.nn.depthwise_conv2d_nchw(data, weight, 1, 1, 1)
    return _task([data, weight, out], "fused_depthwise_conv2d")


def softmax(rows: int = 8, cols: int = 16) -> Task:
    from tvm import te, topi

    x = te.placeholder((rows, cols), "float32", name="x")
    return _task([x, topi.nn.softmax(x, axis=-1)], "fused_softmax")


def fast_softmax(rows: int = 8, cols: int = 16) -> Task:
    """Softmax as tlm's fast math legalizes it (tlm.graph.passes): exp as a polynomial."""
    from tvm import te, topi

    x = te.placeholder((rows, cols), "float32", name="x")
    return _task([x, topi.nn.fast_softmax(x, axis=-1)], "fused_softmax")


def elu_chain(links: int = 5, rows: int = 4, cols: int = 16) -> Task:
    """`links` ELUs one after another, exp as tlm's fast math computes it: each link reads its input
    three times (the test, the value, the exp), so inlining every block copies the first link's
    math 3^links times."""
    from tvm import te, tirx, topi

    def elu(y, k: int):
        e = topi.fast_exp(y)
        return te.compute((rows, cols), lambda i, j: tirx.Select(y[i, j] > 0, y[i, j], e[i, j] - 1.0), name=f"elu{k}")

    x = y = te.placeholder((rows, cols), "float32", name="x")
    for k in range(links):
        y = elu(y, k)
    return _task([x, y], "fused_elu_chain")


def layer_norm(rows: int = 8, cols: int = 32) -> Task:
    from tvm import te, topi

    x = te.placeholder((rows, cols), "float32", name="x")
    gamma = te.placeholder((cols,), "float32", name="gamma")
    beta = te.placeholder((cols,), "float32", name="beta")
    return _task([x, gamma, beta, topi.nn.layer_norm(x, gamma, beta, axis=[1])], "fused_layer_norm")


def pooling(c: int = 8, hw: int = 16) -> Task:
    from tvm import te, topi

    x = te.placeholder((1, c, hw, hw), "float32", name="x")
    out = topi.nn.pool2d(x, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), "max", layout="NCHW")
    return _task([x, out], "fused_max_pool2d")


def transpose(b: int = 4, n: int = 8, m: int = 16) -> Task:
    """A task with one program: one design space without decisions (like reshapes, concatenates)."""
    from tvm import te, topi

    x = te.placeholder((b, n, m), "float32", name="x")
    return _task([x, topi.transpose(x, (0, 2, 1))], "transpose")


# Toy sizes (tests) and model-like sizes (benchmark) of each task type.
TINY: dict[str, Callable[[], Task]] = {
    "matmul": lambda: matmul(32),
    "batch_matmul": lambda: batch_matmul(),
    "dense_bias": lambda: dense_bias(),
    "conv1x1": lambda: conv1x1(),
    "conv3x3": lambda: conv3x3(),
    "depthwise_conv": lambda: depthwise_conv(),
    "softmax": lambda: softmax(),
    "layer_norm": lambda: layer_norm(),
    "pooling": lambda: pooling(),
}

REALISTIC: dict[str, Callable[[], Task]] = {
    "matmul": lambda: matmul(512),
    "batch_matmul": lambda: batch_matmul(12, 128, 64, 128),
    "dense_bias": lambda: dense_bias(128, 768, 768, relu=False),
    "conv1x1": lambda: conv1x1(64, 56, 256),
    "conv3x3": lambda: conv3x3(64, 56, 64),
    "depthwise_conv": lambda: depthwise_conv(32, 112),
    "softmax": lambda: softmax(1536, 128),
    "layer_norm": lambda: layer_norm(128, 768),
    "pooling": lambda: pooling(64, 112),
}
