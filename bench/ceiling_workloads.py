"""bench/ceiling.py --part workloads: issue 13's end-to-end targets, read from a `tlm eval` run.

MetaSchedule at 64g end to end against ONNX Runtime on bert_base, gpt2, resnet_50 and
mobilenet_v2 (targets: within 2.0x, 2.0x, 3x, 4x), from the e2e files of a `tlm eval --suite full`
folder (its compiled models and PyTorch and ONNX Runtime timed in one interleaved run per
workload, every output checked), and, where a target is missed, which tasks hold the time: each
task's weight x best MetaSchedule latency (the eval's own records, restored from its shards when
its databases are absent) as a share of the task sum, with GFLOPS against the machine's peak
(the run's `peak.json`). Measures nothing itself, so a workload measured in a later session
joins the table by re-running this part.
"""

from __future__ import annotations

import json
from pathlib import Path

TARGETS = {"bert_base": 2.0, "gpt2": 2.0, "resnet_50": 3.0, "mobilenet_v2": 4.0}  # MS@64g / ORT at most
TOP = 4  # tasks named per workload


def read_workloads(run_dir: str, target) -> dict:
    """{"run": dir, "command": .., "peak_gflops": .., "rows": [...]} from a `tlm eval` folder (the
    caller adds the machine, as for every part of bench/ceiling.py)."""
    from tlm.eval.suites import COMPUTE_KINDS, EvalConfig, db_dir, workload_dbs
    from tlm.graph.extract import tasks_for_source
    from tlm.measure.database import open_db
    from tlm.measure.shards import hardware_slug

    run, cfg = Path(run_dir), EvalConfig.load(run_dir)
    if cfg.hardware != hardware_slug(target.key):  # its task hashes and records are this machine's
        raise SystemExit(f"ceiling: {run}/config.json is a run on {cfg.hardware}, "
                         f"not this {hardware_slug(target.key)}; run this part there")
    peak = json.loads((run / "peak.json").read_text())["gflops"] if (run / "peak.json").is_file() else None
    label = f"metaschedule@{cfg.ms_budget}"
    rows = []
    for w in TARGETS:
        p = run / "e2e" / f"{w}.json"
        if not p.is_file():
            continue
        e2e = {r["method"]: r for r in json.loads(p.read_text())["rows"]}
        ms, ort, pt = (e2e.get(k, {}).get("e2e_ms") for k in (label, "onnxruntime", "pytorch"))
        tasks = tasks_for_source(w, target).tasks
        with workload_dbs(cfg, w), open_db(db_dir(cfg, w, "metaschedule")) as db:
            best = db.best_by_task(target.key)
        held = sorted(({"task": t.name, "kind": t.kind, "weight": t.weight, "us": t.weight * best[t.hash] * 1e6,
                        "flops": t.weight * t.flops, "gflops": t.flops / best[t.hash] / 1e9 if t.flops else None}
                       for t in tasks if t.hash in best), key=lambda h: -h["us"])
        total = sum(h["us"] for h in held)
        compute = [h for h in held if h["kind"] in COMPUTE_KINDS and h["flops"]]
        compute_us = sum(h["us"] for h in compute)
        rows.append({"workload": w, "ms_budget": cfg.ms_budget, "ms_ms": ms, "onnxruntime_ms": ort, "pytorch_ms": pt,
                     "ratio": ms / ort if ms and ort else None, "target": TARGETS[w],
                     "matches": e2e.get(label, {}).get("matches"), "tasks": len(tasks), "tuned_tasks": len(held),
                     "task_sum_us": total, "compute_share": compute_us / total if total else None,
                     "compute_gflops": sum(h["flops"] for h in compute) / compute_us / 1e3 if compute_us else None,
                     "top": [dict(h, share=h["us"] / total) for h in held[:TOP]],
                     "tlm": {k: r.get("e2e_ms") for k, r in e2e.items() if k.startswith("tlm@")},
                     "rounds": e2e.get(label, {}).get("rounds")})
    cmd = (f"tlm eval --suite {cfg.suite} --workloads {' '.join(cfg.workloads)} --heldout-tasks {cfg.heldout_tasks} "
           f"--out {run}")
    return {"run": str(run), "command": cmd, "peak_gflops": peak, "rows": rows}


def workload_lines(part: dict, created: str) -> list[str]:
    m, peak = part["machine"], part.get("peak_gflops")
    made = part.get("command") or f"tlm eval --suite full --out {part['run']}"
    lines = ["", f"## End to end: MetaSchedule against ONNX Runtime ({m['cpu']}, {m['isa']}, {m['threads']} threads)",
             "", f"Read {created} with `python bench/ceiling.py --part workloads --from {part['run']}` from the run "
             f"`{made}` made (each workload's compiled models, PyTorch and ONNX "
             "Runtime timed in one interleaved run, medians, every output checked against PyTorch). "
             "Issue 13's targets: MetaSchedule at 64g within 2.0x of ONNX Runtime on bert_base and gpt2, 3x on "
             "resnet_50, 4x on mobilenet_v2.", "",
             "| workload | MetaSchedule ms | ONNX Runtime ms | PyTorch ms | MetaSchedule / ORT | target | met | "
             "output ok |", "|---|---|---|---|---|---|---|---|"]
    for r in part["rows"]:
        met = "-" if r["ratio"] is None else ("yes" if r["ratio"] <= r["target"] else "**no**")
        lines.append(f"| {r['workload']} ({r['ms_budget']}) | {_f(r['ms_ms'])} | {_f(r['onnxruntime_ms'])} | "
                     f"{_f(r['pytorch_ms'])} | {_f(r['ratio'])}x | {r['target']:.1f}x | {met} | "
                     f"{'yes' if r['matches'] else 'NO'} |")
    lines += ["", "Where the time goes: MetaSchedule's best programs, weight x measured latency as a share of the "
              "task sum" + (f"; GFLOPS against PyTorch's `torch.mm` 2048^3 on the same threads ({peak:.0f} GFLOPS, the "
                            "run's peak.json; not the CPU's peak: a GEMM library tuned for the CPU can run above "
                            "it)" if peak else "") + ".", ""]
    for r in part["rows"]:
        held = "; ".join(f"{h['task']} ({h['kind']}, x{h['weight']}) {h['share']:.0%}"
                         + (f", {h['gflops']:.0f} GFLOPS" + (f" = {h['gflops'] / peak:.0%} of torch.mm" if peak else "")
                            if h["gflops"] else "") for h in r["top"])
        more = r["ms_ms"] - r["task_sum_us"] / 1e3 if r["ms_ms"] else None  # weights from DRAM, the VM, copies
        outside = f" (end to end {r['ms_ms']:.1f} ms, {more:.1f} ms more than its tasks timed alone)" if more else ""
        lines.append(f"- {r['workload']}: {r['tuned_tasks']} of {r['tasks']} tasks tuned, task sum "
                     f"{r['task_sum_us'] / 1e3:.1f} ms{outside}; {held}.")
    for r in part["rows"]:
        if r["ratio"] and r["ratio"] > r["target"] and r.get("compute_share"):
            lines.append(f"- **{r['workload']} misses** ({r['ratio']:.2f}x > {r['target']:.1f}x): "
                         f"{r['compute_share']:.0%} of its task sum is matmul/conv tasks at a weighted "
                         f"{r['compute_gflops']:.0f} GFLOPS, so the gap is the speed of those kernels (the matmul "
                         "section compares one with ONNX Runtime's GEMM), not unfused or scalar elementwise work.")
    return lines


def _f(v) -> str:
    return "-" if v is None else f"{v:.2f}"
