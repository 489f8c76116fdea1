"""Whole models measured on a GPU (issue 49 item 4): the plans of one call against PyTorch in the same call.

    python bench/gpu_plans.py RUN [--out bench/results/gpu-e2e]

RUN is a folder that `PLANS="..." bash bench/gpu_device.sh` filled: plans.jsonl (one line per
plan, `python -m tlm.measure.cuda_plan`'s plan-result.json and its folder's name, "plan") and
pytorch.json (bench/gpu_pytorch.py). A plan's folder is named WORKLOAD-SCHEDULES: `dlight` (TVM's
rule-based GPU schedules for every task, zero measurements), or the name of the database whose
best records it applied (`tlm`: the GPU TLM's first 10 programs per task, `tlmcm`: the 10 of its 32
samples the cost model ranks first, what the tuner measures with a cost model, `metaschedule`: the 64 of
MetaSchedule's first round): built here with those records, or put together on the GPU machine
from the bundle the same call measured (`ASSEMBLE=...`, tlm.measure.plan_assemble), where a task
without a correct measured program keeps dlight's (said in the table). Per plan: whether its output matched the CPU's, the median of the
whole model launched kernel by kernel from Python (CuPy), the same steps replayed as one CUDA
graph (no host time between kernels, as a VM with CUDA graphs would run them) and the sum of the
per-step medians; against PyTorch eager (TF32 off and on) and torch.compile where measured.
Writes OUT.json and OUT.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

LABELS = {"dlight": "dlight (0 measurements)", "tlm": "TLM@10g (its first 10 samples)",
          "tlmcm": "TLM@10g (the cost model's top 10 of 32 samples, as the tuner measures)",
          "metaschedule": "MetaSchedule@64g", "tlm0": "TLM@0 (the cost model's pick, 0 measurements)"}


def split_name(plan: str, workload: str | None) -> tuple[str, str]:
    """('bert_base-b1-s128-tlm', 'bert_base-b1-s128') -> ('bert_base-b1-s128', 'tlm'); a plan that
    could not be read names no workload: its folder's name up to the last '-'."""
    if workload and plan.startswith(workload + "-"):
        return workload, plan[len(workload) + 1:]
    head, _, tail = plan.rpartition("-")
    return head, tail


def _ms(x) -> str:
    return f"{x:.3f}" if isinstance(x, (int, float)) and math.isfinite(x) else "-"


def report(run: Path) -> tuple[dict, list[str]]:
    plans = [json.loads(x) for x in (run / "plans.jsonl").read_text().splitlines() if x.strip()]
    pt_path = run / "pytorch.json"
    pt = json.loads(pt_path.read_text()) if pt_path.exists() else {}
    ptw = pt.get("workloads", {})
    rows = []
    for r in plans:
        w, sched = split_name(r["plan"], r.get("source"))  # source: the plan's workload
        eager = ptw.get(w, {}).get("eager_ms")
        graph = r.get("graph_median_ms")
        rows.append({"workload": w, "schedules": sched, "checked": r.get("checked"), "wrong": r.get("wrong"),
                     "max_abs_diff": r.get("max_abs_diff"), "limit": r.get("limit"), "error": r.get("error"),
                     "stream_ms": r.get("median_ms"), "graph_ms": graph, "sum_step_ms": r.get("sum_step_ms"),
                     "steps": r.get("steps_n"), "functions": r.get("functions"), "compile_s": r.get("compile_s"),
                     "eager_ms": eager, "eager_tf32_ms": ptw.get(w, {}).get("eager_tf32_ms"),
                     "compiled_ms": ptw.get(w, {}).get("compiled_ms"),
                     "eager_over_graph": round(eager / graph, 3) if eager and graph else None,
                     "device": (r.get("device") or {}).get("name"),
                     # an assembled plan's functions that kept dlight's program (no correct measured one)
                     "kept_dlight": (r.get("schedules") or {}).get("dlight") if "bundle" in (r.get("schedules") or {}) else None})
    by = {(x["workload"], x["schedules"]): x for x in rows}
    versus: dict[str, dict[str, float]] = {}
    for w in sorted({x["workload"] for x in rows}):
        m = by.get((w, "metaschedule"))
        for name in ("tlm", "tlmcm"):
            t = by.get((w, name))
            if t and m and t.get("graph_ms") and m.get("graph_ms") and t["checked"] and m["checked"]:
                versus.setdefault(name, {})[w] = round(m["graph_ms"] / t["graph_ms"], 3)
    devices = sorted({x["device"] for x in rows if x["device"]})
    out = {"run": str(run), "devices": devices, "pytorch": {k: v for k, v in pt.items() if k != "workloads"},
           "plans": rows, "speedup_over_ms64_graph": versus}
    lines = [f"# Whole models on the GPU: {', '.join(devices) or 'no device'} (issue 49 item 4)", "",
             f"Made by `python bench/gpu_plans.py {run}`; the plans by `tlm gpu plan WORKLOAD --target h100 "
             "[--db DB] --out DIR`, run by `PLANS=... bash bench/gpu_device.sh` in one call with "
             f"`bench/gpu_pytorch.py` (torch {pt.get('torch', '?')}). Batch 1, fp32. Weights over 64 KiB are "
             "regenerated on the GPU machine from seeds at the originals' mean and std; the output is checked "
             "against the same plan's on the CPU (TVM's VM). Plan times: CUDA events, a warm-up, median of up "
             "to 100 runs, no L2 flush (one run warms the next, as in serving). `stream`: kernels launched one "
             "by one from Python (CuPy); `graph`: the same kernels replayed as one CUDA graph; `steps`: the sum "
             "of each step's median alone.", "",
             "| workload | schedules | checked (max abs diff / limit) | stream (ms) | graph (ms) | steps (ms) | "
             "PyTorch eager, TF32 off (ms) | eager, TF32 on (ms) | torch.compile (ms) | eager / graph |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for x in rows:
        chk = (f"{'yes' if x['checked'] else 'NO'} ({x['max_abs_diff']:.2g} / {x['limit']:.2g})"
               if x.get("max_abs_diff") is not None else (x["error"] or "-"))
        label = LABELS.get(x["schedules"], x["schedules"]) + (
            f" ({x['kept_dlight']} of {x['functions']} functions dlight's)" if x.get("kept_dlight") else "")
        lines.append(f"| {x['workload']} | {label} | {chk} | {_ms(x['stream_ms'])} | "
                     f"{_ms(x['graph_ms'])} | {_ms(x['sum_step_ms'])} | {_ms(x['eager_ms'])} | {_ms(x['eager_tf32_ms'])} | "
                     f"{_ms(x['compiled_ms'])} | {x['eager_over_graph'] or '-'} |")
    for name, vs in versus.items():
        lines += ["", f"{LABELS[name]} against MetaSchedule@64g (MetaSchedule's graph time / TLM's; > 1: TLM faster): "
                  + ", ".join(f"{w} {v}x" for w, v in vs.items()) + "."]
    return out, lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run")
    p.add_argument("--out", default="bench/results/gpu-e2e")
    args = p.parse_args()
    run = Path(args.run)
    if not (run / "plans.jsonl").exists():
        print(f"error: {run} has no plans.jsonl (the $OUT of a `PLANS=... bash bench/gpu_device.sh` call)", file=sys.stderr)
        return 1
    out, lines = report(run)
    Path(args.out + ".json").write_text(json.dumps(out, indent=1))
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
