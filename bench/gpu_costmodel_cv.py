"""GPU cost-model configurations compared two ways, without a GPU (issue 49's tlm@0+cm target):
cross-validation on the GPU corpus (5 folds of unseen tasks; each fold's model picks one of a
task's measured programs: summed best latency over the picks' and geomean pick / best), and the
held-out H200 run (each model's pick of the TLM's measured proposals of each held-out task,
dlight's summed latency over the picks'; a pick that was refused is charged dlight's).

    python bench/gpu_costmodel_cv.py [--corpus work/gpu-lm2/corpus] [--work work/gpu-lm2/cm-work]
        [--bundle work/gpu3/bundle-heldout-all] [--results results/gpu/run-2026-12-04-h200-a]
        [--configs '{}' '{"objective": "pairwise"}' ...] [--name gpu-costmodel-cv] [--ptxas]

Each --configs entry is a JSON object of CostModelConfig fields (over the shipped ones, with
cpu_columns). `--ptxas` appends to every program's features what ptxas reported of it in the GPU
runs under results/gpu (registers, shared memory, occupancy: tlm.measure.nvcc.occupancy_columns),
which a pick at budget 0 could know only by compiling its samples with nvcc. Rows go to
bench/results/NAME.json and .md.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _program(sentence: str) -> str:
    """A sentence without its hardware words: the H100 and H200 run the same code, and a bundle
    built for one was filed under the other."""
    return re.sub(r" cuda .*? space ", " space ", sentence)


def ptxas_table(bundles: list[Path], results: list[Path]) -> dict[tuple[str, str], tuple]:
    """(task hash, sentence) -> (kernels as (threads, blocks, dynamic shared memory), ptxas
    resources per kernel) of every program that a GPU run compiled: the bundles' manifests say
    what each candidate launches, the runs' results lines what ptxas reported of it."""
    import gzip

    from tlm.measure.nvcc import KernelResources

    launch = {}
    for b in bundles:
        with gzip.open(b / "manifest.json.gz", "rt") as f:
            man = json.load(f)
        for e in man["tasks"]:
            for c in e.get("candidates", []):
                kernels = [(math.prod(k["block"]), math.prod(k["grid"]), k.get("smem", 0)) for k in c["kernels"]]
                launch[(b.name, e["hash"], c["id"])] = (c["sentence"], kernels)
    out = {}
    for path in results:
        bundle = path.name.removesuffix("-results.jsonl")
        for line in path.read_text().splitlines():
            r = json.loads(line)
            got = launch.get((bundle, r["t"], r["k"]))
            if got is None or not r.get("regs"):
                continue
            sentence, kernels = got
            spill = r.get("spill", 0) or 0
            res = [KernelResources(registers=g, smem=m, spill_bytes=spill if i == 0 else 0)
                   for i, (g, m) in enumerate(zip(r["regs"], r["smem"]))]
            if len(res) == len(kernels):
                out[(r["t"], _program(sentence))] = (kernels, res)
    return out


def with_ptxas(x: np.ndarray, keys: list[tuple[str, str]], table: dict, target) -> np.ndarray:
    """Features with tlm.measure.nvcc's occupancy columns appended (NaN where no run compiled it)."""
    from tlm.measure.nvcc import PTXAS_COLUMNS, occupancy_columns

    extra = np.full((len(keys), len(PTXAS_COLUMNS)), np.nan, dtype="float32")
    for i, (task, sentence) in enumerate(keys):
        got = table.get((task, _program(sentence)))
        if got is not None:
            extra[i] = occupancy_columns(*got, target.cores, target.cpu)
    return np.concatenate([x, extra], axis=1)


def training_rows(corpus: str, work: str, table: dict | None = None) -> list[tuple]:
    """(task hash, target, features, latencies) of every CUDA task group of the corpus (with the
    ptxas columns of `table` appended, if given)."""
    from tlm.search.costmodel_data import corpus_groups, correct_records, task_groups
    from tlm.graph.target import resolve_target
    from tlm.measure.database import open_db

    # ingests the shards and featurizes new records (cached), then re-reads the groups with their tasks
    corpus_groups(corpus, work, "cuda", log=lambda m: print(m, file=sys.stderr))
    rows = []
    with open_db(str(Path(work) / "db")) as db:
        for key in db.target_keys():
            target = resolve_target(json.loads(key))
            if target.kind != "cuda":
                continue
            tasks = [t for h in sorted(db.best_by_task(target.key)) if (t := db.task(h)) is not None]
            for task, x, lat in task_groups(db, target, tasks, cache=Path(work) / "features"):
                if table is not None:  # the group's records in task_groups' order, for their sentences
                    recs = correct_records(db, task.hash, target)
                    assert [r.median_s for r in recs] == list(lat)
                    x = with_ptxas(x, [(task.hash, r.sentence) for r in recs], table, target)
                rows.append((task.hash, target, x, np.asarray(lat)))
    return rows


def heldout_rows(bundle: str, results: str, table: dict | None = None) -> list[tuple]:
    """(features, measured latencies or None, dlight's latency) of the TLM's proposals per held-out task."""
    from tlm.eval.gpu_heldout_report import measured
    from tlm.graph.target import resolve_target
    from tlm.measure.cuda_measure import read_manifest
    from tlm.measure.gpu_bundle import read_tasks
    from tlm.search.costmodel import features
    from tlm.space.language import parse

    man = read_manifest(bundle)
    target = resolve_target(man["target"])
    tasks = read_tasks(bundle)
    props, ref = measured(bundle, results, man)
    out = []
    for e in man["tasks"]:
        mine = [c for c in e.get("candidates", []) if c.get("proposer") == "tlm"]
        if mine and e["hash"] in ref:
            schs = [parse(c["sentence"], tasks[e["hash"]], target).sch for c in mine]
            x = features(tasks[e["hash"]], schs, target)
            if table is not None:
                x = with_ptxas(x, [(e["hash"], c["sentence"]) for c in mine], table, target)
            out.append((x, props[e["hash"]]["tlm"], ref[e["hash"]], target))
    return out


def fit(cfg, rows):
    from tlm.search.costmodel import CostModel

    return CostModel(cfg).fit([(x, list(lat)) for _, _, x, lat in rows], [t for _, t, _, _ in rows])


def cross_validate(cfg, rows, folds: int = 5, seed: int = 0) -> tuple[float, float]:
    hashes = sorted({r[0] for r in rows})
    np.random.default_rng(seed).shuffle(hashes)
    fold = {h: i % folds for i, h in enumerate(hashes)}
    picked = best = 0.0
    logs = []
    for f in range(folds):
        model = fit(cfg, [r for r in rows if fold[r[0]] != f])
        for _, target, x, lat in (r for r in rows if fold[r[0]] == f):
            p = lat[model.order(x, target)[0]]
            picked, best = picked + p, best + lat.min()
            logs.append(math.log(p / lat.min()))
    return best / picked, math.exp(float(np.mean(logs)))


def heldout_score(model, held) -> float:
    picked = dlight = 0.0
    for x, lat, ref, target in held:
        p = lat[model.order(x, target)[0]]
        picked += ref if p is None else p
        dlight += ref
    return dlight / picked


def main() -> int:
    from tlm.search.costmodel import CostModelConfig

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="work/gpu-lm2/corpus")
    ap.add_argument("--work", default="work/gpu-lm2/cm-work")
    ap.add_argument("--bundle", default="work/gpu3/bundle-heldout-all")
    ap.add_argument("--results", default="results/gpu/run-2026-12-04-h200-a")
    ap.add_argument("--configs", nargs="+", default=["{}", '{"objective": "pairwise"}'])
    ap.add_argument("--name", default="gpu-costmodel-cv")
    ap.add_argument("--ptxas", action="store_true",
                    help="append ptxas's occupancy columns (tlm.measure.nvcc), from the runs' results under results/gpu")
    args = ap.parse_args()
    for p in (args.corpus, args.bundle, args.results):
        if not Path(p).exists():
            print(f"gpu_costmodel_cv: {p}: no such directory", file=sys.stderr)
            return 2
    table = None
    if args.ptxas:
        gpu = ROOT / "results" / "gpu"
        table = ptxas_table(sorted(p.parent for p in gpu.glob("bundles/*/manifest.json.gz")),
                            sorted(gpu.glob("run-*/*-results.jsonl")))
        print(f"ptxas reports of {len(table)} programs", file=sys.stderr)
    rows, held = training_rows(args.corpus, args.work, table), heldout_rows(args.bundle, args.results, table)
    if table is not None:
        known = sum(int((~np.isnan(x[:, -1])).sum()) for _, _, x, _ in rows)
        print(f"ptxas columns known for {known} of {sum(len(x) for _, _, x, _ in rows)} training programs, "
              f"{sum(int((~np.isnan(h[0][:, -1])).sum()) for h in held)} of "
              f"{sum(len(h[0]) for h in held)} held-out", file=sys.stderr)
    out = []
    for spec in args.configs:
        t0 = time.monotonic()
        cfg = CostModelConfig(cpu_columns=True, **json.loads(spec))
        cv_sum, cv_geo = cross_validate(cfg, rows)
        row = {"config": json.loads(spec), "cv_best_over_pick_summed": round(cv_sum, 3),
               "cv_pick_over_best_geomean": round(cv_geo, 3),
               "heldout_dlight_over_pick_summed": round(heldout_score(fit(cfg, rows), held), 3),
               "tasks": len({r[0] for r in rows}), "groups": len(rows), "programs": int(sum(len(r[3]) for r in rows)),
               "heldout_tasks": len(held), "seconds": round(time.monotonic() - t0)}
        print(json.dumps(row), flush=True)
        out.append(row)
    res = ROOT / "bench" / "results"
    (res / f"{args.name}.json").write_text(json.dumps(out, indent=1))
    lines = [f"# GPU cost-model configurations: `python bench/gpu_costmodel_cv.py --configs ...`", "",
             "| config | CV best / pick, summed | CV pick / best, geomean | held-out dlight / pick, summed |",
             "|---|---:|---:|---:|"]
    lines += [f"| `{json.dumps(r['config'])}` | {r['cv_best_over_pick_summed']} | {r['cv_pick_over_best_geomean']} | "
              f"{r['heldout_dlight_over_pick_summed']} |" for r in out]
    (res / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
