"""Where a compiled model's time goes beyond its tasks' isolated latencies (issues 13 and 15).

    .venv/bin/python bench/incontext.py --from results/full-llvm-znver5-2c \
        --workloads gpt2 mobilenet_v2 --contenders metaschedule tlm@10g [--runs 7] [--out bench/results]

For each workload of a full eval (`tlm eval --suite full`, its record shards in DIR/records) and
each contender, the model is compiled from the contender's records as `tlm eval` compiles it
(output checked against PyTorch), then:
- in model: every kernel call timed inside the Relax VM (`VirtualMachine.set_instrument`), median
  over --runs whole-model runs of each kernel's summed time per run;
- isolated, now: each task's chosen program re-measured by the measurer in this run, as the corpus
  measures (`MeasureConfig()` defaults: 5 repeats of >= 30 ms each, so a 50 us program runs ~600
  times per repeat and its caches are warm; the cache flush precedes each repeat, not each call),
  and cold (number=1, min_repeat_ms=0: every timed call follows a flush of all arguments but the
  first, the input);
- recorded: the latency the tuning run stored (measured when that contender was tuned, so the
  machine's speed then is in it).
Per task with two contenders: whether the hot or the cold isolated order agrees with the in-model
order, and the in-model time of a model that took, per task, the contender the hot (cold)
isolated time prefers. Writes OUT/incontext.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PREPACKED = "_prepacked"  # suffix of a kernel whose weights the compile packed (tlm.graph.passes)


def kernel_task(symbol: str) -> str:
    return symbol[: -len(PREPACKED)] if symbol.endswith(PREPACKED) else symbol


def in_model_ms(vm, args, runs: int) -> tuple[dict[str, float], float]:
    """({kernel symbol: median ms per whole-model run}, median instrumented run ms)."""
    per_run: list[dict[str, float]] = []
    started: dict[str, float] = {}

    def instrument(func, symbol, before, ret, *a):  # called around every VM call instruction
        now = time.perf_counter()
        if before:
            started[symbol] = now
        else:
            run = per_run[-1]
            run[symbol] = run.get(symbol, 0.0) + (now - started.pop(symbol, now)) * 1e3
        return 0

    vm.set_instrument(instrument)
    try:
        for i in range(runs + 1):  # the first run warms up and is dropped
            per_run.append({})
            vm["main"](*args)
    finally:
        vm.set_instrument(None)
    per_run = per_run[1:]
    symbols = set().union(*per_run)
    kernels = {s: statistics.median(r.get(s, 0.0) for r in per_run) for s in symbols}
    return kernels, statistics.median(sum(r.values()) for r in per_run)


def remeasure(tasks, records: dict[str, dict[str, object]], info, cold: bool) -> dict[tuple[str, str], float]:
    """{(contender, task hash): median us} of each contender's chosen program, timed now."""
    from tlm.measure.measurer import Candidate, MeasureConfig, Measurer

    cfg = MeasureConfig(remeasure_top=0)
    if cold:
        cfg = MeasureConfig(remeasure_top=0, number=1, repeat=20, min_repeat_ms=0)
    out = {}
    with Measurer(info, cfg) as m:
        for t in tasks:  # the contenders' programs of one task back to back: same machine state
            names = [c for c in records if records[c].get(t.hash) is not None]
            res = m.measure([Candidate(t, trace=records[c][t.hash].trace_json, proposer="incontext") for c in names])
            for c, r in zip(names, res):
                out[(c, t.hash)] = r.median_s * 1e6 if r.ok else None
    return out


def run_workload(src: Path, w: str, contenders: list[str], runs: int, work: Path) -> dict:
    import numpy as np
    import tvm

    from tlm.compiler.build import CompileConfig, compile_imported
    from tlm.graph.extract import extract_from_relax
    from tlm.graph.importer import import_source
    from tlm.graph.target import resolve_target
    from tlm.measure.database import open_db
    from tlm.measure.shards import ingest

    info = resolve_target(None)
    imported = import_source(w)
    tasks = extract_from_relax(imported.mod, info, True, True)
    args = [tvm.runtime.tensor(np.ascontiguousarray(x), tvm.cpu()) for x in imported.inputs]
    records, kernels, e2e, instrumented, ok = {}, {}, {}, {}, {}
    for c in contenders:
        db_dir = work / w / c
        with open_db(str(db_dir)) as db:
            ingest(db, src / "records" / w / c)
            records[c] = {t.hash: db.best(t.hash, info.key) for t in tasks}
            for t in tasks:  # a language model's records come from the shards as sentences only
                if records[c][t.hash] is not None:
                    db.trace_of(records[c][t.hash], t)
        m = compile_imported(imported, str(db_dir), target=info, tasks=tasks,
                             config=CompileConfig(repeat=15, min_repeat_ms=50, compare=False))
        ok[c] = m.matches
        e2e[c] = m.latency_ms
        kernels[c], instrumented[c] = in_model_ms(m.vm, args, runs)
    hot = remeasure(tasks, records, info, cold=False)
    cold = remeasure(tasks, records, info, cold=True)
    rows = []
    for t in tasks:
        row = {"task": t.name, "hash": t.hash, "weight": t.weight}
        for c in contenders:
            rec = records[c][t.hash]
            model = sum(v for s, v in kernels[c].items() if kernel_task(s) == t.name)
            row[c] = {"recorded_us": rec.median_s * 1e6 if rec else None, "hot_us": hot.get((c, t.hash)),
                      "cold_us": cold.get((c, t.hash)), "in_model_us": model * 1e3 / t.weight if model else None}
        rows.append(row)
    other = {c: sum(v for s, v in kernels[c].items() if kernel_task(s) not in {t.name for t in tasks})
             for c in contenders}
    return {"workload": w, "contenders": contenders, "e2e_ms": e2e, "instrumented_ms": instrumented,
            "outputs_ok": ok, "other_calls_ms": other, "tasks": rows, "target": info.config}


def summarize(res: dict) -> dict:
    """Task sums per contender and measure, and how well each isolated measure predicts in-model."""
    cs, rows = res["contenders"], res["tasks"]
    sums = {}
    for c in cs:
        sums[c] = {k: sum(r["weight"] * (r[c][k] or 0) for r in rows) / 1e3
                   for k in ("recorded_us", "hot_us", "cold_us", "in_model_us")}
    pred = {}
    for k in ("hot_us", "cold_us"):
        logs = [math.log(r[c][k] / r[c]["in_model_us"]) for r in rows for c in cs
                if r[c][k] and r[c]["in_model_us"]]
        mu = statistics.fmean(logs) if logs else math.nan
        pred[k] = {"log_ratio_mean": mu, "log_ratio_sd": statistics.pstdev(logs) if logs else math.nan}
    if len(cs) >= 2:
        a, b = cs[0], cs[1]
        both = [r for r in rows if all(r[c]["hot_us"] and r[c]["cold_us"] and r[c]["in_model_us"] for c in (a, b))]
        for k in ("hot_us", "cold_us"):
            agree = sum((r[a][k] < r[b][k]) == (r[a]["in_model_us"] < r[b]["in_model_us"]) for r in both)
            picked = sum(r["weight"] * (r[a] if r[a][k] < r[b][k] else r[b])["in_model_us"] for r in both) / 1e3
            pred[k].update(agree=agree, tasks=len(both), picked_in_model_ms=picked)
        pred["oracle_in_model_ms"] = sum(r["weight"] * min(r[a]["in_model_us"], r[b]["in_model_us"]) for r in both) / 1e3
    return {"sums_ms": sums, "predictors": pred}


def write(out: Path, results: list[dict], argv: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "incontext.json").write_text(json.dumps(results, indent=1))
    cmd = "python bench/incontext.py " + " ".join(argv)
    t = results[0]["target"] if results else {}
    lines = ["# Kernels in the model against the same kernels measured alone", "",
             f"Run {time.strftime('%Y-%m-%d %H:%M:%S')} with `{cmd}` ({t.get('mcpu')}, {t.get('num-cores')} cores). "
             "All ms per whole-model run: recorded = the task sum the tuning run stored; hot = the chosen "
             "programs re-measured in this run as the corpus measures them (warm caches); cold = the same, "
             "every call after a flush of weights and output; in model = the kernels timed inside the "
             "compiled model (VM instrument, median of runs); e2e = the whole model, uninstrumented.", ""]
    for res in results:
        s = summarize(res)
        lines += [f"## {res['workload']}", "",
                  "| contender | recorded | hot | cold | in model | other VM calls | e2e | outputs ok |",
                  "|---|---|---|---|---|---|---|---|"]
        for c in res["contenders"]:
            x = s["sums_ms"][c]
            lines.append(f"| {c} | {x['recorded_us']:.2f} | {x['hot_us']:.2f} | {x['cold_us']:.2f} | "
                         f"{x['in_model_us']:.2f} | {res['other_calls_ms'][c]:.2f} | {res['e2e_ms'][c]:.2f} | "
                         f"{'yes' if res['outputs_ok'][c] else '**no**'} |")
        p = s["predictors"]
        lines += ["", "Isolated time as a predictor of in-model time, per task and contender "
                  "(log(isolated / in model): mean, sd):"]
        for k in ("hot_us", "cold_us"):
            q = p[k]
            extra = (f"; order of the two contenders agrees with in model on {q['agree']} of {q['tasks']} tasks, "
                     f"picking per task by it: {q['picked_in_model_ms']:.2f} ms in model"
                     if "agree" in q else "")
            lines.append(f"- {k[:-3]}: {q['log_ratio_mean']:+.3f}, {q['log_ratio_sd']:.3f}{extra}")
        if "oracle_in_model_ms" in p:
            lines.append(f"- per task the contender faster in model: {p['oracle_in_model_ms']:.2f} ms")
        lines += ["", "Kernels that lose most in the model (weight x (in model - hot), ms):", ""]
        gaps = []
        for r in res["tasks"]:
            for c in res["contenders"]:
                v = r[c]
                if v["in_model_us"] and v["hot_us"]:
                    gaps.append((r["weight"] * (v["in_model_us"] - v["hot_us"]) / 1e3, c, r, v))
        for g, c, r, v in sorted(gaps, key=lambda x: -x[0])[:6]:
            lines.append(f"- {c} {r['task'][:60]} (x{r['weight']}): +{g:.2f} ms; per call hot {v['hot_us']:.0f} us, "
                         f"cold {v['cold_us']:.0f}, in model {v['in_model_us']:.0f}")
        lines.append("")
    (out / "incontext.md").write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="src", required=True, help="a `tlm eval --suite full` folder")
    ap.add_argument("--workloads", nargs="+", required=True)
    ap.add_argument("--contenders", nargs="+", default=["metaschedule", "tlm@10g"])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args(argv)
    src = Path(args.src)
    missing = [f"{w}/{c}" for w in args.workloads for c in args.contenders if not (src / "records" / w / c).is_dir()]
    if missing:
        print(f"bench/incontext.py: error: no record shards for {', '.join(missing)} under {src}/records", file=sys.stderr)
        return 2
    from tlm.errors import quiet_stderr
    from tlm.graph.target import resolve_target
    from tlm.measure.shards import hardware_slug
    from tlm.space.intrin import light_tensor_intrin

    made_on = json.loads((src / "config.json").read_text()).get("hardware") if (src / "config.json").is_file() else None
    here = hardware_slug(resolve_target(None).key)
    if made_on != here:  # the records are keyed by their CPU: another host would compile untuned kernels
        print(f"bench/incontext.py: error: {src} was tuned on {made_on}, this host is {here}", file=sys.stderr)
        return 2

    light_tensor_intrin()
    results = []
    with tempfile.TemporaryDirectory(prefix="tlm-incontext-") as work:
        for w in args.workloads:
            with quiet_stderr():
                results.append(run_workload(src, w, args.contenders, args.runs, Path(work)))
            write(Path(args.out), results, argv)
            print(f"[incontext] {w} done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
