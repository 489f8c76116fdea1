"""The GPU runs so far (issue 49): what was measured, how fast, and random programs against dlight.

    python bench/gpu_report.py --run BUNDLE RESULTS [--run BUNDLE RESULTS ...] [--pytorch P.json]
                               [--out bench/results/gpu]

RESULTS is a folder that `bash bench/gpu_device.sh BUNDLE` filled ($OUT: <bundle>-results.jsonl,
-summary.json, -device.json). Per run: the card, programs measured and checked, wrong results,
faults, seconds (compilation on the GPU machine's cores included) and programs per second. Per
task: TVM's rule-based GPU schedule (dlight, zero measurements, the runner's reference) against
the first random program and the best of the bundle's random programs (up to 12, the GPU design
spaces' valid programs drawn uniformly); per task kind and overall: geometric means of
dlight / random latency (> 1: random is faster) and the summed latency of each. When the same
bundle was measured in two runs: the run-to-run ratio of every program's median (repeatability).
Writes OUT.json and OUT.md.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _geo(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def _results(bundle: Path, folder: Path) -> tuple[list[dict], dict, dict]:
    from tlm.measure.gpu_ingest import results_file

    name = bundle.name
    path = results_file(folder, bundle)
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    summary_path = folder / f"{name}-summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    return rows, summary, summary.get("device", {})


def main() -> int:
    from tlm.measure.cuda_measure import read_manifest

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", nargs=2, action="append", metavar=("BUNDLE", "RESULTS"), required=True)
    p.add_argument("--pytorch", default=None)
    p.add_argument("--e2e", nargs="*", default=[], help="workloads whose every task the runs measured: "
                   "weighted sums of task latencies (an estimate of the whole model)")
    p.add_argument("--target", default="h200", help="the card the workloads' tasks were extracted for")
    p.add_argument("--out", default="bench/results/gpu")
    args = p.parse_args()

    runs, medians = [], collections.defaultdict(list)
    tasks: dict[str, dict] = {}
    for bundle, folder in args.run:
        bundle, folder = Path(bundle), Path(folder)
        manifest = read_manifest(bundle)
        for t in manifest["tasks"]:
            tasks[t["hash"]] = t
        rows, summary, device = _results(bundle, folder)
        progs = [r for r in rows if r["k"] != "ref"]
        runs.append({"bundle": bundle.name, "results": str(folder), "card": manifest.get("card"),
                     "device": device.get("name"), "tasks": len({t["hash"] for t in manifest["tasks"]}),
                     "programs": len(progs),
                     "timed": sum(1 for r in progs if r["lat"]),
                     "wrong": sum(1 for r in progs if (r["err"] or "").startswith("WrongResult")),
                     "faults": sum(1 for r in progs if (r["err"] or "").startswith("fault")),
                     "other_errors": sum(1 for r in progs if r["err"] and not r["err"].startswith(("WrongResult", "fault"))),
                     "seconds": summary.get("seconds"),
                     "programs_per_s": round(len(progs) / summary["seconds"], 1) if summary.get("seconds") else None})
        for r in rows:
            if r["lat"]:
                medians[(r["t"], r["k"])].append(statistics.median(r["lat"]))

    best = {key: min(v) for key, v in medians.items()}  # a program measured twice: its faster run
    per_task = []
    for h, t in tasks.items():
        ref = best.get((h, "ref"))
        cands = [best[(h, c["id"])] for c in t.get("candidates", []) if (h, c["id"]) in best]
        if ref is None or not cands:
            continue
        per_task.append({"task": t["name"], "hash": h, "kind": t["kind"], "dlight_us": ref * 1e6,
                         "random1_us": cands[0] * 1e6, "random_best_us": min(cands) * 1e6, "programs": len(cands)})
    kinds = collections.defaultdict(list)
    for row in per_task:
        kinds[row["kind"]].append(row)

    def stats(rows: list[dict]) -> dict:
        return {"tasks": len(rows),
                "dlight_over_random1": round(_geo([r["dlight_us"] / r["random1_us"] for r in rows]), 3),
                "dlight_over_random_best": round(_geo([r["dlight_us"] / r["random_best_us"] for r in rows]), 3),
                "sum_dlight_ms": round(sum(r["dlight_us"] for r in rows) / 1e3, 3),
                "sum_random_best_ms": round(sum(r["random_best_us"] for r in rows) / 1e3, 3),
                "random_best_faster": sum(1 for r in rows if r["random_best_us"] < r["dlight_us"])}

    twice = [v for v in medians.values() if len(v) >= 2]
    repeat = None
    if twice:
        ratios = [v[1] / v[0] for v in twice]
        repeat = {"programs": len(twice), "median_ratio": round(statistics.median(ratios), 4),
                  "p10": round(sorted(ratios)[len(ratios) // 10], 4), "p90": round(sorted(ratios)[9 * len(ratios) // 10], 4),
                  "within_5pct": round(sum(1 for r in ratios if abs(r - 1) <= 0.05) / len(ratios), 3)}
    e2e = {}
    if args.e2e:
        from tlm.graph.extract import tasks_for_source
        from tlm.graph.target import resolve_target

        rows = {r["hash"]: r for r in per_task}
        for name in args.e2e:
            wl = tasks_for_source(name, target=resolve_target(args.target)).tasks
            # a task with no valid random program (every sample refused by the GPU postprocessors)
            # counts its dlight time in the random columns too, and the table says how many did
            no_random = [t for t in wl if t.hash not in rows and (t.hash, "ref") in best]
            for t in no_random:
                rows[t.hash] = {k: best[(t.hash, "ref")] * 1e6 for k in ("dlight_us", "random1_us", "random_best_us")}
            missing = [t.name for t in wl if t.hash not in rows]
            if missing:
                e2e[name] = {"missing": missing}
                continue
            e2e[name] = {k: round(sum(t.weight * rows[t.hash][f"{k}_us"] for t in wl) / 1e3, 3)
                         for k in ("dlight", "random1", "random_best")}
            e2e[name].update(tasks=len(wl), dlight_only=[t.name for t in no_random])
    out = {"runs": runs, "overall": stats(per_task), "by_kind": {k: stats(v) for k, v in sorted(kinds.items())},
           "repeatability": repeat, "e2e_estimate": e2e, "tasks": per_task}
    if args.pytorch:
        out["pytorch"] = json.loads(Path(args.pytorch).read_text())
    Path(args.out + ".json").write_text(json.dumps(out, indent=1))

    lines = ["# GPU measurements (issue 49)", "",
             "Written by `python bench/gpu_report.py " + " ".join(f"--run {b} {r}" for b, r in args.run)
             + (f" --pytorch {args.pytorch}" if args.pytorch else "")
             + (f" --e2e {' '.join(args.e2e)}" if args.e2e else "") + "`.",
             "Programs: random valid programs of the CUDA design spaces (MetaSchedule's GPU rules and "
             "postprocessors), built here (TVM 0.27 CUDA C), compiled with nvcc 13.0 on the GPU machine, "
             "each checked against TVM's dlight schedule on every element (itself checked against the "
             "CPU's untuned program), timed with CUDA events, L2 flushed before each repeat, median.", "",
             "## Runs", "", "| bundle | card | device | tasks | programs | timed | wrong | faults | other errors | seconds | programs/s |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        lines.append(f"| {r['bundle']} | {r['card']} | {r['device']} | {r['tasks']} | {r['programs']} | {r['timed']} | "
                     f"{r['wrong']} | {r['faults']} | {r['other_errors']} | {r['seconds']} | {r['programs_per_s']} |")
    lines += ["", "## Random programs against dlight (TVM's rule-based GPU schedules, zero measurements)", "",
              "Geometric means of dlight latency / random latency per task (> 1: the random program is faster); "
              "random@1 is each task's first program, random@best the best of its (up to 12) programs.", "",
              "| kind | tasks | dlight / random@1 | dlight / random@best | random@best faster | summed dlight (ms) | summed random@best (ms) |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for k, s in [("all", out["overall"])] + sorted(out["by_kind"].items(), key=lambda kv: -kv[1]["tasks"]):
        lines.append(f"| {k} | {s['tasks']} | {s['dlight_over_random1']} | {s['dlight_over_random_best']} | "
                     f"{s['random_best_faster']} | {s['sum_dlight_ms']} | {s['sum_random_best_ms']} |")
    if repeat:
        lines += ["", "## Repeatability", "",
                  f"{repeat['programs']} programs (references included) measured in two runs (two machines "
                  f"of the same kind, or one machine twice): second/first median latency, median {repeat['median_ratio']}, 10th-90th "
                  f"percentile {repeat['p10']}-{repeat['p90']}; {repeat['within_5pct']:.0%} within 5%."]
    if e2e:
        pt = out.get("pytorch", {}).get("workloads", {})
        lines += ["", "## Whole models, estimated", "",
                  "Not a whole-model run: the sum over the model's tasks of (calls x the task's kernel time), "
                  "kernels alone (no launch gaps, no host time between them), against PyTorch eager measured "
                  "whole (TF32 off).", "",
                  "| workload | tasks | dlight (ms) | random@1 (ms) | random@best (ms) | PyTorch eager (ms) |",
                  "|---|---:|---:|---:|---:|---:|"]
        for name, row in e2e.items():
            if "missing" in row:
                lines.append(f"| {name} | {len(row['missing'])} tasks not measured | | | | |")
                continue
            eager = pt.get(name, {}).get("eager_ms")
            note = f" ({len(row['dlight_only'])} with no random program: {', '.join(row['dlight_only'])})" if row["dlight_only"] else ""
            lines.append(f"| {name} | {row['tasks']}{note} | {row['dlight']} | {row['random1']} | {row['random_best']} | "
                         f"{f'{eager:.3f}' if eager else '-'} |")
    if args.pytorch:
        pt = out["pytorch"]
        lines += ["", f"## PyTorch on the same card ({pt['device']}, torch {pt['torch']}, CUDA {pt['cuda']})", "",
                  "Batch 1, fp32, eval, no_grad; CUDA events, 10 warm-up runs, median of 50 (`bench/gpu_pytorch.py`).", "",
                  "| workload | eager, TF32 off (ms) | eager, TF32 on (ms) | torch.compile, TF32 off (ms) |", "|---|---:|---:|---:|"]
        for name, row in pt["workloads"].items():
            lines.append(f"| {name} | {row.get('eager_ms', row.get('error', '-')):.3f} | {row.get('eager_tf32_ms', 0):.3f} | "
                         + (f"{row['compiled_ms']:.3f} |" if "compiled_ms" in row else "- |") if "eager_ms" in row
                         else f"| {name} | {row.get('error')} | | |")
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
