"""ONNX Runtime's whole call against its own nodes timed alone (issue 46: is "whole within 1.1x of
its kernels alone" a property of the host, or of tlm's kernels?), beside bench/vm_profile.py's
figures for tlm's libraries.

    python bench/ort_profile.py WORKLOAD [--rounds 9] [--out bench/results/ort_profile]

The zoo workload is exported to ONNX (TorchScript exporter) and loaded with every graph
optimization (as `bench/ort_gap.py` runs it); the optimized graph (fused convolutions, NCHWc
layouts, reorders) is saved and each of its nodes made a one-node model fed the inputs it had in
the whole run. All sessions share one ONNX Runtime thread pool with as many threads as tlm's
(separate pools spin and take each other's cores). Per round: the whole call as bench/ort_gap.py
times it (tlm.compiler.build.median_ms: median of 3 repeats of >= 200 ms; the row of 2026-11-29
13:42 took the median single call over 200 ms), a profiled whole call (each node's kernel time
inside the model, the fourth of four back-to-back calls), and each node alone twice, the second
call's kernel time from ONNX Runtime's profiler (warm, without the per-run overhead of a one-node
session). Medians over the rounds. Appends a row to OUT.json and writes OUT.md with the nodes that run slowest inside
against alone.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _session(path: str, optimize: bool, save: str | None = None, profile: bool = False):
    import onnxruntime as ort

    o = ort.SessionOptions()
    o.use_per_session_threads = False  # the global pool (set in profile())
    o.enable_profiling = profile
    o.profile_file_prefix = path
    o.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                  else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    if save:
        o.optimized_model_filepath = save
    return ort.InferenceSession(path, o, providers=["CPUExecutionProvider"])


def _kernel_times(sess) -> list[dict]:
    events = json.loads(Path(sess.end_profiling()).read_text())
    return [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]


def profile(workload: str, rounds: int, threads: int) -> dict:
    import numpy as np
    import onnx
    import torch
    from onnx import TensorProto, helper
    from onnxruntime.capi import _pybind_state

    from tlm.compiler.contenders import median_ms
    from tlm.errors import quiet_stderr
    from tlm.graph.zoo import get_workload

    _pybind_state.set_global_thread_pool_sizes(threads, 1)
    module, inputs = get_workload(workload).build()
    tmp = tempfile.mkdtemp(prefix="tlm-ort-profile-")
    src, opt = os.path.join(tmp, "model.onnx"), os.path.join(tmp, "optimized.onnx")
    with torch.no_grad(), quiet_stderr():
        torch.onnx.export(module, tuple(inputs), src, dynamo=False)
    whole = _session(src, True, save=opt)
    feed = {i.name: np.ascontiguousarray(x.numpy()) for i, x in zip(whole.get_inputs(), inputs)}
    graph = onnx.load(opt)
    g = graph.graph
    inits = {t.name: t for t in g.initializer}
    every = copy.deepcopy(graph)  # every node's outputs as graph outputs: the inputs of each node alone
    named = {o.name for o in every.graph.output}
    for n in every.graph.node:
        for o in n.output:
            if o and o not in named:
                every.graph.output.append(helper.make_tensor_value_info(o, TensorProto.FLOAT, None))
                named.add(o)
    every_path = os.path.join(tmp, "every.onnx")
    onnx.save(every, every_path)
    s = _session(every_path, False)
    values = dict(zip([o.name for o in s.get_outputs()], s.run(None, feed)))
    values.update(feed)
    singles = []
    for k, n in enumerate(g.node):
        ins = [i for i in n.input if i and i not in inits]
        gi = [helper.make_tensor_value_info(i, helper.np_dtype_to_tensor_dtype(values[i].dtype), values[i].shape)
              for i in ins]
        go = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in n.output if o]
        one = helper.make_model(helper.make_graph([n], f"node{k}", gi, go, [inits[i] for i in n.input if i in inits]),
                                opset_imports=graph.opset_import, ir_version=graph.ir_version)
        path = os.path.join(tmp, f"node{k}.onnx")
        onnx.save(one, path)
        singles.append((_session(path, False, profile=True), {i: values[i] for i in ins}))
    profiled = _session(opt, False, profile=True)
    wholes = []
    for _ in range(rounds):
        wholes.append(median_ms(lambda: whole.run(None, feed), repeat=3, min_repeat_ms=200))
        for _ in range(4):
            profiled.run(None, feed)
        for sess, f in singles:
            sess.run(None, f)
            sess.run(None, f)
    per = len(g.node)
    events = _kernel_times(profiled)
    runs = [events[i * per:(i + 1) * per] for i in range(len(events) // per)][3::4]
    inside = [statistics.median(r[j]["dur"] for r in runs) / 1e3 for j in range(per)]
    alone = [statistics.median(e["dur"] for e in _kernel_times(sess)[1::2]) / 1e3 for sess, _ in singles]
    nodes = sorted(({"node": g.node[j].name, "op": g.node[j].op_type, "inside_ms": round(inside[j], 4),
                     "alone_ms": round(alone[j], 4)} for j in range(per)), key=lambda r: r["alone_ms"] - r["inside_ms"])
    return {"workload": workload, "threads": threads, "rounds": rounds, "nodes": per,
            "whole_ms": round(statistics.median(wholes), 4), "inside_ms": round(sum(inside), 4),
            "alone_ms": round(sum(alone), 4), "top": nodes[:10]}


def write(rows: list[dict], out: Path) -> None:
    lines = ["# ONNX Runtime: whole call against its nodes alone", "",
             "Command: `python bench/ort_profile.py WORKLOAD` (see its docstring). Medians in ms; `inside`: the "
             "nodes' kernel times in a profiled whole call (the profiler adds a little to each); `alone`: each "
             "node of the optimized graph as a one-node model, warm.", "",
             "| date | hardware | commit | workload | nodes | threads | whole | nodes inside | nodes alone | "
             "whole / alone | rounds |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['date']} | {r['hardware']} | {r['commit']} | {r['workload']} | {r['nodes']} | {r['threads']} | "
                     f"{r['whole_ms']:.3f} | {r['inside_ms']:.3f} | {r['alone_ms']:.3f} | "
                     f"{r['whole_ms'] / r['alone_ms']:.2f} | {r['rounds']} |")
    for r in rows[-1:]:
        lines += ["", f"## {r['workload']} ({r['date']}, {r['hardware']}): nodes slowest inside against alone", "",
                  "| node | op | inside ms | alone ms |", "|---|---|---|---|"]
        lines += [f"| `{n['node']}` | {n['op']} | {n['inside_ms']:.3f} | {n['alone_ms']:.3f} |" for n in r["top"]]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workload")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--out", default=str(ROOT / "bench/results/ort_profile"))
    args = p.parse_args(argv)
    import tlm  # noqa: F401 - TVM's pool size, read below, is set on import
    from ort_gap import _hardware
    from tlm.graph.target import runtime_threads

    out = Path(args.out)
    rows = json.loads(out.with_suffix(".json").read_text()) if out.with_suffix(".json").exists() else []
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    row = {"date": time.strftime("%Y-%m-%d %H:%M"), "hardware": _hardware()[1], "commit": commit,
           **profile(args.workload, args.rounds, runtime_threads())}
    print(f"{args.workload}: ONNX Runtime whole {row['whole_ms']:.3f} ms, nodes alone {row['alone_ms']:.3f} "
          f"({row['whole_ms'] / row['alone_ms']:.2f}x), inside {row['inside_ms']:.3f}")
    rows.append(row)
    write(rows, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
