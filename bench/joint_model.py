"""One TLM for CPUs and GPUs (issue 49, item 5): how well each model knows the programs of held-out
tasks, judged on programs measured already (no new measurement, no GPU).

    .venv/bin/python bench/joint_model.py --model NAME=DIR ... [--out bench/results] [--name joint-model]

Held-out tasks (of the test workloads: none in any model's data) and their measured programs:
- GPU: the held-out bundle measured on the H200 (`--gpu-bundle`, `--gpu-run`; default
  results/gpu/bundles/bundle-heldout-all in run-2026-12-04-h200-a: 28 tasks, the TLM's,
  MetaSchedule's and random programs), each program's median latency;
- CPU: the held-out benchmark's records with a sentence (TLM's and random programs; MetaSchedule's
  records carry none) of the 20 tasks on znver4 (results/full-llvm-znver4-2c, 673 programs) and
  znver5 (results/heldout-llvm-znver5-2c, 1,921), each CPU's tasks apart (`--cpu-records`).
Per model and kind of target it serves (tlm.json's `targets`):
- best lp: mean log-probability per value word (teacher forcing over the whole vocabulary:
  tlm.model.demos.encode_demo, the "decisions" loss) of each task's fastest measured program;
  higher: the model finds the best known program likelier;
- all lp: the same over every measured program;
- pick: per task, the measured program the model finds likeliest (summed value log-prob, what
  greedy generation follows) against the task's fastest: summed latency of the fastest over summed
  latency of the picks (1.0: it picks the fastest everywhere), and the per-task geomean.
Writes OUT/NAME.json and OUT/NAME.md.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GPU_BUNDLE = "results/gpu/bundles/bundle-heldout-all"
GPU_RUN = "results/gpu/run-2026-12-04-h200-a"
CPU_RECORDS = ["results/full-llvm-znver4-2c/heldout/records", "results/heldout-llvm-znver5-2c/heldout/records"]


def gpu_programs(bundle: str, run: str) -> dict[str, dict[str, float]]:
    """Task hash -> {sentence: median seconds} of every correct measured program of the bundle."""
    from tlm.measure.cuda_measure import read_manifest
    from tlm.measure.gpu_ingest import results_file
    from tlm.measure.plan_assemble import medians

    med = medians(results_file(run, bundle))
    out: dict[str, dict[str, float]] = {}
    for e in read_manifest(bundle)["tasks"]:
        for c in e.get("candidates", []):
            if (e["hash"], c["id"]) in med:
                got = out.setdefault(e["hash"], {})
                got[c["sentence"]] = min(got.get(c["sentence"], math.inf), med[(e["hash"], c["id"])])
    return out


def cpu_programs(records: str) -> dict[str, dict[str, float]]:
    """Task hash -> {sentence: median seconds} of every correct record with a sentence of the shards
    under `records` (one CPU's)."""
    from tlm.measure.shards import SUFFIX, read_shard

    out: dict[str, dict[str, float]] = {}
    for path in sorted(Path(records).rglob(f"*{SUFFIX}")):
        for r in read_shard(path)[2]:
            if not r.get("err") and r.get("lat") and isinstance(r.get("s"), str):
                got = out.setdefault(r["t"], {})
                got[r["s"]] = min(got.get(r["s"], math.inf), statistics.median(r["lat"]))
    return out


def value_scores(lm, sentences: list[str]) -> list[tuple[float, int]]:
    """(summed log-probability of the value words, their number) per sentence
    (tlm.model.demos.value_logprobs, as bench/sft_loss.py scores); the prompt ends at the first
    decision's context word, `space` (tlm.space.language: every sentence starts its decisions with
    the design space's index)."""
    from tlm.model.demos import Demo, value_logprobs

    demos = [Demo("", s, s.split().index("space"), "", "") for s in sentences]
    return list(value_logprobs(lm, demos, batch_size=16, with_words=True))


def judge(lm, programs: dict[str, dict[str, float]]) -> dict[str, float]:
    best_lp, all_lp, picked, fastest, ratios = [], [], [], [], []
    for task in sorted(programs):
        sentences = sorted(programs[task])
        scores = value_scores(lm, sentences)
        lat = [programs[task][s] for s in sentences]
        b = min(range(len(lat)), key=lambda i: lat[i])
        best_lp.append(scores[b][0] / max(1, scores[b][1]))
        all_lp.extend(lp / max(1, n) for lp, n in scores)
        p = max(range(len(scores)), key=lambda i: scores[i][0])
        picked.append(lat[p])
        fastest.append(lat[b])
        ratios.append(lat[b] / lat[p])
    return {"tasks": len(programs), "programs": sum(map(len, programs.values())),
            "best_lp": statistics.fmean(best_lp), "all_lp": statistics.fmean(all_lp),
            "pick_summed": sum(fastest) / sum(picked),
            "pick_geomean": math.exp(statistics.fmean(math.log(r) for r in ratios))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", nargs="+", required=True, help="NAME=DIR, a TLM directory each")
    ap.add_argument("--gpu-bundle", default=GPU_BUNDLE)
    ap.add_argument("--gpu-run", default=GPU_RUN)
    ap.add_argument("--cpu-records", nargs="+", default=CPU_RECORDS, help="one CPU's held-out records each")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--name", default="joint-model")
    args = ap.parse_args(argv)

    import torch

    from tlm.model.lm import load_model, model_targets

    torch.set_num_threads(2)
    cpu = {f"{i}:{task}": got for i, d in enumerate(args.cpu_records) for task, got in cpu_programs(d).items()}
    sets = {"cuda": gpu_programs(args.gpu_bundle, args.gpu_run), "llvm": cpu}
    rows = []
    for spec in args.model:
        name, _, path = spec.partition("=")
        lm = load_model(path)
        kinds = {t.get("kind") for t in model_targets(lm.meta)}
        for kind, programs in sets.items():
            if kind in kinds:
                start = time.perf_counter()
                rows.append(dict(model=name, path=path, kind=kind, **judge(lm, programs),
                                 seconds=round(time.perf_counter() - start, 1)))
                print(json.dumps(rows[-1]), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "python bench/joint_model.py " + " ".join(sys.argv[1:] if argv is None else argv)
    info = {"command": command, "host": platform.processor() or platform.machine(), "gpu_bundle": args.gpu_bundle,
            "gpu_run": args.gpu_run, "cpu_records": args.cpu_records, "rows": rows}
    (out / f"{args.name}.json").write_text(json.dumps(info, indent=1))
    lines = ["# One TLM for CPUs and GPUs: held-out tasks' measured programs under each model (issue 49, item 5)", "", f"`{command}`", "",
             "GPU: the held-out bundle's programs measured on the H200; CPU: the held-out benchmark's records on znver4 and znver5 "
             "(module doc). lp: mean log-probability per value word; pick: the fastest's summed latency over the "
             "likeliest's (1.0: always the fastest).", "",
             "| model | kind | tasks | programs | best lp | all lp | pick (summed) | pick (geomean) |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['model']} | {r['kind']} | {r['tasks']} | {r['programs']} | {r['best_lp']:.3f} | {r['all_lp']:.3f} | "
              f"{r['pick_summed']:.3f} | {r['pick_geomean']:.3f} |" for r in rows]
    (out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / args.name}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
