"""Picks for the model's threads (tlm.space.threads): whole models built with each task's one-thread
best record against the record estimated fastest on the host's cores (issue 46: the whole model
against its tasks; a record without a parallel loop runs on one core in the model).

    python bench/parallel_pick.py [--dbs 'work/ort-gap/znver4-2c/dbs/{workload}@b10g']
        [--budget0] [--workloads mobilenet_v2,resnet_50] [--rounds 21] [--out bench/results/parallel_pick]

A workload is a zoo name or a model of bench/outside_models.py (`--dbs
'work/outside-zoo/znver4-2c/dbs/{workload}@10g' --workloads conv1d_audio,vit_p8`).

`--dbs`: each workload compiled twice from the same records (no tuning): `one-thread` applies each
task's fastest record as timed (on one thread, as every record is), `threads` the one
`Database.fastest_on` picks. `--budget0`: each workload tuned at budget 0 twice into fresh
databases under work/parallel_pick, the cost model's ranking of the generator's samples without
and with each program's gain on the host's cores (`CostModel.order(gains=...)`), then compiled.
`one-thread` restores the earlier picks by making every program's estimated gain 1. Both builds
checked against PyTorch, then timed interleaved round by round (TVM's timer, 200 ms per round)
with each round's cross-core round trip (bench/xcore.py). Appends rows to OUT.json, writes OUT.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from xcore import interleaved_ms, write_table  # bench/ is on the path when a bench script runs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


@contextlib.contextmanager
def one_thread_picks():
    """The picks before tlm.space.threads: every program's gain on the threads is 1, so the
    compile applies the one-thread best and the cost model ranks by one-thread latency."""
    import tlm.space.threads as threads

    saved = threads.speedup
    threads.speedup = lambda mod, n: 1.0
    try:
        yield
    finally:
        threads.speedup = saved


def _source(workload: str) -> tuple:
    """(what tlm.compile takes, its example inputs as numpy): a zoo name, or a model of
    bench/outside_models.py (module and inputs)."""
    import numpy as np

    import outside_models
    from tlm.graph.extract import import_source

    if workload not in {e.name for e in outside_models.entries()}:
        return (workload,), [np.ascontiguousarray(x) for x in import_source(workload).inputs]
    module, inputs = outside_models.get(workload).make()
    return (module, inputs), [np.ascontiguousarray(x.numpy()) for x in inputs]


def _compile(workload: str, db: str, budget: str | None, out: Path):
    import tlm
    from tlm.compiler.build import CompileConfig

    m = tlm.compile(*_source(workload)[0], db=db, budget=budget, output=str(out),
                    config=CompileConfig(compare=False, repeat=3))
    if not m.matches:
        raise SystemExit(f"{workload} ({out.name}): output differs from PyTorch by {m.max_abs_diff}")
    return m


def whole(workload: str, db: str | None, rounds: int, out_dir: Path) -> dict:
    """Both builds of `workload` (from `db`, or tuned at budget 0 when None), timed interleaved."""
    import tvm

    models = {}
    for name in ("one-thread", "threads"):
        where = db or str(out_dir / f"{workload}-b0-{name}")
        budget = None if db else "0"
        if budget and Path(where).exists():  # this script's own scratch: budget 0 would resume the old picks
            shutil.rmtree(where)
        with one_thread_picks() if name == "one-thread" else contextlib.nullcontext():
            models[name] = _compile(workload, where, budget, out_dir / f"{workload}-{'b0' if budget else 'db'}-{name}.so")
    changed = sorted(r["name"] for r in models["threads"].task_rows if r.get("for_threads"))
    args = [tvm.runtime.tensor(x, tvm.cpu()) for x in _source(workload)[1]]
    med, trip = interleaved_ms({k: m.vm for k, m in models.items()}, args, rounds)
    print(f"{workload}: one-thread picks {med['one-thread']:.3f} ms, threads picks {med['threads']:.3f} ms "
          f"({med['one-thread'] / med['threads']:.3f}x); measured records re-picked: {len(changed)}", flush=True)
    return {"workload": workload, "one_thread_ms": round(med["one-thread"], 4), "threads_ms": round(med["threads"], 4),
            "repicked": changed, "round_trip_ns": trip, "rounds": rounds,
            "max_abs_diff": models["threads"].max_abs_diff}


def _cells(r: dict) -> list:
    names = ", ".join(f"`{n}`" for n in r["repicked"]) or "-"
    return [r["date"], r["hardware"], r["commit"], f"`{r['records']}`", r["workload"], f"{r['one_thread_ms']:.3f}",
            f"{r['threads_ms']:.3f}", f"{r['one_thread_ms'] / r['threads_ms']:.3f}x", names, r["round_trip_ns"], r["rounds"]]


HEADER = ("date | hardware | commit | records | workload | one-thread picks ms | threads picks ms | speedup | "
          "measured records re-picked | round trip ns | rounds")


def write(rows: list[dict], out: Path) -> None:
    write_table(out, "Picks for the model's threads (tlm.space.threads)",
                "Command: `python bench/parallel_pick.py` (see the script's docstring). Medians in ms of whole "
                "models, both builds checked against PyTorch; speedup: one-thread picks' time over the threads "
                "picks'. `records` `budget 0`: tuned at budget 0 for each build (the cost model's ranking with and "
                "without each program's gain on the cores; greedy picks are not listed as re-picked); the budget-0 rows "
                "of d48b063 ranked by the exact gain (`speedup`), later ones by `coarse_speedup`.",
                HEADER, _cells, rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dbs", default=None, help="records directory per workload, with {workload} in it")
    p.add_argument("--budget0", action="store_true", help="tune at budget 0 for each build instead")
    p.add_argument("--workloads", default="mobilenet_v2,resnet_50")
    p.add_argument("--rounds", type=int, default=21, help="interleaved rounds of the whole models")
    p.add_argument("--out", default=str(ROOT / "bench/results/parallel_pick"))
    args = p.parse_args(argv)
    if bool(args.dbs) == args.budget0:
        raise SystemExit("give --dbs PATTERN or --budget0")
    import tlm  # noqa: F401 - sets TVM's thread count before TVM starts its pool
    from ort_gap import _hardware

    out = Path(args.out)
    rows = json.loads(out.with_suffix(".json").read_text()) if out.with_suffix(".json").exists() else []
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    stamp = {"date": time.strftime("%Y-%m-%d %H:%M"), "hardware": _hardware()[1], "commit": commit}
    libs = ROOT / "work" / "parallel_pick"
    libs.mkdir(parents=True, exist_ok=True)
    for w in args.workloads.split(","):
        db = args.dbs.format(workload=w) if args.dbs else None
        if db and not Path(db).is_dir():
            raise SystemExit(f"no records directory {db}")
        rows.append({**stamp, "records": db or "budget 0", **whole(w, db, args.rounds, libs)})
        write(rows, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
