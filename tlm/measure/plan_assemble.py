"""A whole-model GPU plan whose tasks run the best programs a GPU run just measured, put
together on the GPU machine (numpy only, no TVM).

    python -m tlm.measure.plan_assemble PLAN BUNDLE RESULTS --proposer tlm [--first 10 | --only FILE] --out DIR

Why: a plan built here can only hold programs measured before (`tlm gpu plan --db`), so a
held-out bundle (TLM@10's and MetaSchedule@64's programs of a model's tasks) and the whole-model
plans of each contender's picks took two GPU calls with a rebuild here in between, and an idle GPU
machine goes back within seconds. A plan's CUDA function carries its task's hash
(tlm.compiler.plan_walk), and a bundle candidate of that task is the same TIR function scheduled
another way, lowered by the same code (its kernels' arguments index the same parameters); so the
GPU machine puts, for each task of the plan, the fastest correct program of `proposer` among its
first `first` in the bundle (the order the held-out report's TLM@k reads), or among those a
candidates file names (`--only`: the cost model's top 10, as the tuner measures), in the function's place:
its kernels cut out of the bundle's group source (tlm.measure.gpu_bundle writes many programs to a
file, each one's kernels prefixed `p<id>_`) and its launches. A task the run did not measure
correctly keeps the plan's own program (dlight's, for a plan built without --db), and the plan
says which (`assembled`). The CPU's expected output does not depend on the schedules, so the
plan's check stays valid.
"""

from __future__ import annotations

import argparse
import json
import lzma
import re
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

from tlm.errors import TlmError, first_line
from tlm.measure.cuda_build import kernel_pieces, split_source
from tlm.measure.cuda_measure import named_programs, read_lines, read_manifest
from tlm.measure.cuda_plan import DATA_FILE, EXPECTED_FILE, PLAN_FILE, read_plan
from tlm.measure.precompile import carry_ahead

_KERNEL_NAME = re.compile(r'extern "C" __global__\s+void\s+(?:__launch_bounds__\(\s*\d+\s*\)\s+)?(\w+)\s*\(')


def program_source(group_source: str, prefix: str, names: list[str]) -> str:
    """One program's CUDA C out of a bundle's group file: the shared preamble and the kernels
    named `prefix + name` for each of `names` (TlmError if one is missing)."""
    preamble, kernels = split_source(group_source)
    wanted = {prefix + n for n in names}
    named = [(m.group(1), p) for p in kernel_pieces(kernels) if (m := _KERNEL_NAME.match(p))]
    mine = [p for n, p in named if n in wanted]  # declarations too, in order
    missing = sorted(wanted - {n for n, _ in named})
    if missing:
        raise TlmError(f"kernels {missing} are not in the bundle's source")
    return preamble + "".join(mine)


def medians(results: str | Path) -> dict[tuple[str, Any], float]:
    """(task hash, candidate id) -> median seconds of each correct, timed line of a run."""
    return {(r["t"], r["k"]): statistics.median(r["lat"]) for r in read_lines(Path(results))
            if r.get("lat") and not r.get("err")}


def picks(manifest: dict[str, Any], med: dict[tuple[str, Any], float], proposer: str,
          first: int | None = None, only: set[tuple[str, str]] | None = None
          ) -> dict[str, tuple[dict[str, Any], float]]:
    """Task hash -> (candidate, median s): the fastest measured-correct of `proposer`'s first
    `first` programs of the task (all when None), in the manifest's order; with `only` ((task,
    sentence) pairs, tlm.measure.cuda_measure.named_programs), among those it names."""
    out = {}
    for e in manifest["tasks"]:
        mine = [c for c in e.get("candidates", []) if c.get("proposer", "random") == proposer
                and (only is None or (e["hash"], c["sentence"]) in only)]
        timed = [(med[(e["hash"], c["id"])], c["id"], c) for c in mine[:first] if (e["hash"], c["id"]) in med]
        if timed:
            lat, _, c = min(timed, key=lambda x: x[:2])
            out[e["hash"]] = (c, lat)
    return out


def assemble(plan_dir: str | Path, bundle: str | Path, results: str | Path, proposer: str, out: str | Path,
             first: int | None = None, only: str | Path | None = None) -> dict[str, Any]:
    """Write the plan of `plan_dir` with each task's pick (`picks`) to `out`; returns its
    `assembled` record (what was replaced, what kept)."""
    plan_dir, bundle, out = Path(plan_dir), Path(bundle), Path(out)
    plan = read_plan(plan_dir)
    manifest = read_manifest(bundle)
    chosen = picks(manifest, medians(results), proposer, first, named_programs(only) if only else None)
    by_hash = {e["hash"]: e for e in manifest["tasks"]}
    (out / "src").mkdir(parents=True, exist_ok=True)
    (out / PLAN_FILE).unlink(missing_ok=True)  # written last: a folder without it is no plan
    replaced, kept = {}, {}
    for name, f in plan["functions"].items():
        task = f.get("task")
        if task not in chosen:
            why = ("no task hash (a plan built before plan_assemble)" if task is None
                   else "not in the bundle" if task not in by_hash else f"no correct program of {proposer}")
            kept[name] = why
            shutil.copyfile(plan_dir / f["src"], out / f["src"])
            carry_ahead(plan_dir / f["src"], out / f["src"], plan["arch"])
            continue
        cand, lat = chosen[task]
        group = next(g for g in by_hash[task]["groups"] if cand["id"] in g["members"])
        with lzma.open(bundle / group["src"], "rt") as fh:
            code = program_source(fh.read(), cand["prefix"], [k["name"] for k in cand["kernels"]])
        src = f"src/{name}.cu.xz"
        with lzma.open(out / src, "wt", preset=6) as fh:
            fh.write(code)
        carry_ahead(bundle / group["src"], out / src, plan["arch"])  # the group's cubin holds its kernels
        plan["functions"][name] = {"src": src, "schedule": "bundle", "task": task,
                                   "kernels": [dict(k, name=cand["prefix"] + k["name"]) for k in cand["kernels"]],
                                   "workspaces": list(cand["workspaces"])}
        replaced[name] = {"candidate": cand["id"], "median_s": lat, "sentence": cand["sentence"]}
    for f in (DATA_FILE, EXPECTED_FILE):
        shutil.copyfile(plan_dir / f, out / f)
    plan["assembled"] = {"from": plan_dir.name, "bundle": bundle.name, "proposer": proposer, "first": first,
                         "only": Path(only).name if only else None,
                         "replaced": replaced, "kept": kept}
    counts = {"bundle": len(replaced)}
    counts.update({k: sum(1 for n in kept if plan["functions"][n]["schedule"] == k) for k in ("db", "dlight", "default")})
    plan["schedules"] = counts
    (out / PLAN_FILE).write_text(json.dumps(plan))
    return plan["assembled"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tlm.measure.plan_assemble", description=__doc__.split("\n\n")[0])
    p.add_argument("plan", help="a plan folder (tlm gpu plan ... --out)")
    p.add_argument("bundle", help="the bundle the GPU run measured (its manifest and sources)")
    p.add_argument("results", help="that run's results lines (the runner's results.jsonl)")
    p.add_argument("--proposer", required=True, help="whose programs: tlm, metaschedule, random")
    p.add_argument("--first", type=int, default=None, help="only the proposer's first N programs of each task")
    p.add_argument("--only", default=None, metavar="FILE",
                   help="only the programs a candidates file names (tlm gpu-heldout candidates --cm-top)")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    try:
        got = assemble(args.plan, args.bundle, args.results, args.proposer, args.out, args.first, args.only)
    except (TlmError, OSError, ValueError, KeyError) as err:
        print(f"plan_assemble: {first_line(err)}", file=sys.stderr)
        return 1
    print(f"{args.out}: {len(got['replaced'])} functions with {args.proposer}'s measured programs"
          + (f" (first {args.first})" if args.first else "") + (f" (those {args.only} names)" if args.only else "")
          + f", {len(got['kept'])} kept as planned")
    return 0


if __name__ == "__main__":
    sys.exit(main())
