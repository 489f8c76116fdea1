"""The final pick (tlm.compiler.cold_pick): whole models compiled from the same records with the
records' own pick (`--cold-pick 0`) and as `tlm compile` compiles them by default (each heavy
task's 4 best records re-timed cold on the cores, the build kept only where the whole model runs
faster), timed interleaved (issue 46 item 1: weights cold in cache).

    python bench/final_pick.py --db-root results/full-llvm-znver5-2c/records [--method tlm@10g]
        [--workloads mobilenet_v2,resnet_50,bert_tiny,bert_base,gpt2] [--rounds 21] [--out bench/results/final_pick]
    python bench/final_pick.py --dbs 'work/ort-gap/znver4-2c/dbs/{workload}@b10g' ...

`--db-root`: a run's committed record shards (RUN/WORKLOAD/METHOD), ingested into a database under
work/final_pick/ (the final pick's times are kept there: a rerun re-times nothing). Both builds are
checked against PyTorch, then timed in `--rounds` interleaved rounds (TVM's timer, 200 ms per
round) with the cross-core round trip (bench/xcore.py); the compile's own verdict (its 7 rounds
of both builds) is listed beside. Appends rows to OUT.json, writes OUT.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from parallel_pick import _source  # bench/ is on the path when a bench script runs
from xcore import interleaved_ms, write_table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _compile(workload: str, db: str, cold_pick: int, out: Path):
    import tlm
    from tlm.compiler.build import CompileConfig

    m = tlm.compile(*_source(workload)[0], db=db, output=str(out),
                    config=CompileConfig(compare=False, repeat=3, cold_pick=cold_pick))
    if not m.matches:
        raise SystemExit(f"{workload} ({out.name}): output differs from PyTorch by {m.max_abs_diff}")
    return m


def whole(workload: str, db: str, rounds: int, out_dir: Path) -> dict:
    import tvm

    t0 = time.perf_counter()
    models = {"records": _compile(workload, db, 0, out_dir / f"{workload}-records.so")}
    t1 = time.perf_counter()
    models["final"] = _compile(workload, db, 4, out_dir / f"{workload}-final.so")
    t2 = time.perf_counter()
    fp = models["final"].final_pick or {}
    args = [tvm.runtime.tensor(x, tvm.cpu()) for x in _source(workload)[1]]
    med, trip = interleaved_ms({k: m.vm for k, m in models.items()}, args, rounds)
    verdict = ("applied" if fp["applied"] else "not applied") if "whole_ms" in fp else "no task changed"
    print(f"{workload}: records' pick {med['records']:.3f} ms, default compile {med['final']:.3f} ms "
          f"({med['records'] / med['final']:.3f}x; final pick {verdict})", flush=True)
    return {"workload": workload, "records_ms": round(med["records"], 4), "final_ms": round(med["final"], 4),
            "verdict": verdict, "compile_whole_ms": fp.get("whole_ms"),
            "timed_tasks": len(fp.get("timed", [])), "changed": sorted(fp.get("changed", [])),
            "retimings": models["final"].cold_measurements,
            "compile_s": [round(t1 - t0, 1), round(t2 - t1, 1)], "round_trip_ns": trip, "rounds": rounds}


def _cells(r: dict) -> list:
    own = "-" if not r["compile_whole_ms"] else " / ".join(f"{v:.3f}" for v in r["compile_whole_ms"])
    return [r["date"], r["hardware"], r["commit"], f"`{r['records']}`", r["workload"], f"{r['records_ms']:.3f}",
            f"{r['final_ms']:.3f}", f"{r['records_ms'] / r['final_ms']:.3f}x", r["verdict"], own,
            f"{len(r['changed'])} of {r['timed_tasks']}", r["retimings"], " / ".join(str(s) for s in r["compile_s"]),
            r["round_trip_ns"], r["rounds"]]


HEADER = ("date | hardware | commit | records | workload | records' pick ms | default compile ms | speedup | "
          "final pick | compile's own rounds ms (records / final) | tasks changed | re-timings | compile s "
          "(records / default) | round trip ns | rounds")


def write(rows: list[dict], out: Path) -> None:
    write_table(out, "The final pick (tlm.compiler.cold_pick)",
                "Command: `python bench/final_pick.py` (see the script's docstring). Medians in ms of whole models "
                "compiled from the same records, both checked against PyTorch and timed interleaved: `records' pick` "
                "is `tlm compile --cold-pick 0`, `default compile` is `tlm compile` (each heavy task's 4 best records "
                "re-timed cold on the cores; the final pick's build kept only where the compile's own interleaved "
                "rounds find the whole model faster, else the records' pick). speedup: records' pick over default.",
                HEADER, _cells, rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dbs", default=None, help="records directory per workload, with {workload} in it")
    p.add_argument("--db-root", default=None, help="a run's record shards: DIR/<workload>/<method>")
    p.add_argument("--method", default="tlm@10g")
    p.add_argument("--workloads", default="mobilenet_v2,resnet_50,bert_tiny,bert_base,gpt2")
    p.add_argument("--rounds", type=int, default=21, help="interleaved rounds of the whole models")
    p.add_argument("--out", default=str(ROOT / "bench/results/final_pick"))
    args = p.parse_args(argv)
    if bool(args.dbs) == bool(args.db_root):
        raise SystemExit("give --dbs PATTERN or --db-root DIR")
    import tlm  # noqa: F401 - sets TVM's thread count before TVM starts its pool
    from ort_gap import _db_from_shards, _hardware

    out = Path(args.out)
    rows = json.loads(out.with_suffix(".json").read_text()) if out.with_suffix(".json").exists() else []
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    stamp = {"date": time.strftime("%Y-%m-%d %H:%M"), "hardware": _hardware()[1], "commit": commit}
    scratch = ROOT / "work" / "final_pick" / _hardware()[0]
    scratch.mkdir(parents=True, exist_ok=True)
    for w in args.workloads.split(","):
        if args.dbs:
            db, label = args.dbs.format(workload=w), args.dbs.format(workload=w)
        else:
            shards = Path(args.db_root) / w / args.method
            if not shards.is_dir():
                raise SystemExit(f"no record shards in {shards}")
            db, label = _db_from_shards(str(shards), scratch / "dbs" / f"{w}@{args.method}"), f"{shards}"
        if not Path(db).is_dir():
            raise SystemExit(f"no records directory {db}")
        rows.append({**stamp, "records": label, **whole(w, db, args.rounds, scratch)})
        write(rows, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
