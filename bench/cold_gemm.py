"""Matmul kernels with their weights in cache and in memory: tlm's applied program of each matmul
task of a record database against ONNX Runtime's MatMul + Add on the same shape (issue 46: is what
a whole model loses against its kernels timed alone tlm's, or the host's?).

    python bench/cold_gemm.py --db DB [--min-ms 0.2] [--rounds 5] [--out bench/results/cold_gemm]

DB: a record database (`tlm tune ... --db DB`, or one ingested from a run's shards). Each matmul
task of activations by weights (the second argument layout-free) whose applied record (the compile's pick for this host's cores) takes at least `--min-ms` is
checked once by tlm's measurer against its reference, then built here as the compile builds it
(weights in the packed layout the task takes); ONNX Runtime gets a one-node-pair model
(MatMul of the same M x K by K x N weights, then Add of a bias; the task's other epilogue ops are
left out), on a session with as many threads. Both are timed by one protocol in one process, task by task
and round by round, taking turns (which one first alternates by round; a pause of 50 ms between them lets
the other runtime's threads stop spinning, else they take the cores): `warm` is the median of back-to-back calls, `cold` of calls each made
after writing a buffer of twice the last-level cache (bench/vm_profile.py's flusher) and touching
the input, as a layer of a model meets its weights after the layers before it filled the caches.
Appends rows to OUT.json and writes OUT.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from vm_profile import _flusher  # bench/ is on the path when a bench script runs
from xcore import write_table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _tlm_kernel(task, rec, trace, target, threads: int):
    """(callable, its input tensor, (M, K, N)) of a task's applied record `rec` (its `trace`), or
    None where it is not an activation-by-weights matmul. Checked by the measurer first."""
    import numpy as np
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    from tlm.measure.config import MeasureConfig
    from tlm.measure.measurer import Candidate, Measurer, prepare
    from tlm.measure.workers import make_inputs

    cand = Candidate(task=task, trace=trace, proposer="bench")
    with Measurer(target, MeasureConfig(threads=threads, repeat=1)) as m:
        res = m.measure([cand])[0]
    if not res.ok:
        raise SystemExit(f"{task.name}: record {rec.id} fails its check: {res.error[:200]}")
    mod, _ = prepare(cand)
    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    params = list(mod["main"].params)
    shapes = [[int(s) for s in b.shape] for b in params]
    a, out = shapes[0], shapes[-1]
    m_rows = int(np.prod(a[:-1]))
    free = [int(i) for i in (mod["main"].attrs or {}).get("layout_free_buffers", [])]
    if len(a) < 2 or 1 not in free or int(np.prod(out[:-1])) != m_rows:
        return None  # not an activation-by-weights matmul (attention's batched matmuls are not)
    lib = tvm.compile(mod, target=target.tvm())
    args = [tvm.runtime.tensor(x) for x in make_inputs([(b.name, str(b.dtype), s) for b, s in zip(params, shapes)])]
    fn = lib["main"]
    return (lambda: fn(*args)), args[0], (m_rows, a[-1], out[-1])


def _ort_kernel(m: int, k: int, n: int, threads: int):
    """(callable, input array) of ONNX Runtime's MatMul + Add on an m x k input and k x n weights."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = rng.standard_normal((k, n)).astype("float32")
    b = rng.standard_normal(n).astype("float32")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("Add", ["y", "B"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    x = rng.standard_normal((m, k)).astype("float32")
    io = sess.io_binding()
    io.bind_cpu_input("x", x)
    io.bind_output("z")
    z = sess.run(None, {"x": x})[0]
    if not np.allclose(z, x @ w + b, rtol=1e-3, atol=1e-3):
        raise SystemExit(f"ONNX Runtime's MatMul + Add {m}x{k}x{n} differs from numpy's")
    return (lambda: sess.run_with_iobinding(io)), x


def _time(call, touch, flush, cold: bool, calls: int) -> float:
    """Median ms of `calls` calls, each after a flush and a touch of the input when `cold`."""
    times = []
    for _ in range(calls):
        if cold:
            flush()
            touch()
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def write(rows: list[dict], out: Path) -> None:
    """OUT.md and OUT.json: one table row per kernel and run."""
    write_table(
        out, "Matmul kernels with their weights in cache and in memory (issue 46)",
        "Command: `python bench/cold_gemm.py --db DB` (see its docstring). Medians in ms of each kernel called "
        "back to back (`warm`) and after the caches were filled with other data (`cold`): tlm's applied "
        "program and ONNX Runtime's MatMul + Add on the same shape, interleaved in one process; `extra`: "
        "cold minus warm.",
        "date | hardware | commit | records | task | M x K x N | weights MiB | tlm warm | tlm cold | tlm extra | "
        "ONNX Runtime warm | ONNX Runtime cold | ONNX Runtime extra | rounds",
        lambda r: [r["date"], r["hardware"], r["commit"], f"`{r['db']}`", f"`{r['task']}` (x{r['calls_per_model']})",
                   f"{r['m']} x {r['k']} x {r['n']}", r["weights_mib"], f"{r['tlm_warm_ms']:.3f}",
                   f"{r['tlm_cold_ms']:.3f}", f"{r['tlm_cold_ms'] - r['tlm_warm_ms']:+.3f}",
                   f"{r['ort_warm_ms']:.3f}", f"{r['ort_cold_ms']:.3f}",
                   f"{r['ort_cold_ms'] - r['ort_warm_ms']:+.3f}", r["rounds"]],
        rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--db", required=True)
    p.add_argument("--min-ms", type=float, default=0.2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--out", default=str(ROOT / "bench/results/cold_gemm"))
    args = p.parse_args()

    import tlm  # noqa: F401 - sets TVM_NUM_THREADS to the host's cores
    from ort_gap import _hardware
    from outside_zoo import _commit
    from tlm.graph.target import host_target, resolve_target
    from tlm.measure.database import open_db

    if not Path(args.db).exists():
        raise SystemExit(f"no record database at {args.db}")
    db = open_db(args.db, create=False)
    key = db.target_keys()[0]
    target = resolve_target(json.loads(key))
    threads = host_target().cores
    flush = _flusher()
    kernels = []
    for h in db.best_by_task(key):
        task = db.task(h)
        if "matmul" not in task.name:
            continue
        rec = db.compile_record(h, key, threads=threads)
        if rec is None or not rec.median_s or rec.median_s * 1e3 < args.min_ms:
            continue
        trace = db.trace_of(rec, task)
        got = _tlm_kernel(task, rec, trace, target, threads) if trace is not None else None
        if got is None:
            continue
        call, a, mkn = got
        ort_call, x = _ort_kernel(*mkn, threads)
        kernels.append({"task": task.name, "weight": task.weight, "mkn": mkn, "record": rec.id,
                        "tlm": (call, lambda a=a: a.copyfrom(a.numpy())), "ort": (ort_call, lambda x=x: x.__iadd__(0))})
    times = {(i, who, c): [] for i in range(len(kernels)) for who in ("tlm", "ort") for c in (False, True)}
    for rnd in range(args.rounds):
        for i, kn in enumerate(kernels):
            for who in ("tlm", "ort") if rnd % 2 == 0 else ("ort", "tlm"):
                call, touch = kn[who]
                time.sleep(0.05)  # the other runtime's threads stop spinning
                _time(call, touch, flush, False, 3)  # warm-up
                for cold in (False, True):
                    times[(i, who, cold)].append(_time(call, touch, flush, cold, args.calls))
    stamp = {"date": time.strftime("%Y-%m-%d %H:%M"), "hardware": _hardware()[1], "commit": _commit()}
    rows = []
    for i, kn in enumerate(kernels):
        med = {(who, c): round(statistics.median(times[(i, who, c)]), 4) for who in ("tlm", "ort") for c in (False, True)}
        m, k, n = kn["mkn"]
        rows.append({**stamp, "db": args.db,
                     "task": kn["task"], "calls_per_model": kn["weight"], "m": m, "k": k, "n": n, "record": kn["record"],
                     "weights_mib": round(k * n * 4 / 2**20, 2), "threads": threads, "rounds": args.rounds,
                     "tlm_warm_ms": med[("tlm", False)], "tlm_cold_ms": med[("tlm", True)],
                     "ort_warm_ms": med[("ort", False)], "ort_cold_ms": med[("ort", True)]})
        r = rows[-1]
        print(f"{kn['task']} {m}x{k}x{n}: tlm {r['tlm_warm_ms']:.3f} warm / {r['tlm_cold_ms']:.3f} cold, "
              f"ONNX Runtime {r['ort_warm_ms']:.3f} / {r['ort_cold_ms']:.3f} ms", flush=True)
    out = Path(args.out)
    old = json.loads(out.with_suffix(".json").read_text()) if out.with_suffix(".json").exists() else []
    write(old + rows, out)


if __name__ == "__main__":
    main()
