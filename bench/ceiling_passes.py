"""bench/ceiling.py --part passes: tlm's compiler passes before and after, whole workloads (issue 13, item 5).

    python bench/ceiling.py --part passes [--workloads bert_base gpt2 resnet_50 mobilenet_v2] [--budget 16g]
        [--rounds 7] [--work work/ceiling-passes]

For each workload, the same model (same random weights) is imported twice:
- before: TVM's own pipeline as tlm found it: scalar libm math (no `FAST_MATH`), elementwise ops
  left after the reshapes (no `sink_reshapes`), weights in the model's layout (no pre-packing),
  convs in NCHW;
- after: today's default (tlm.graph.passes and tlm.graph.layout: all of the above, convs in NHWC).
Zero pads fold into convs in both (tlm.graph.layout.fold_pads has no switch). Each variant's tasks
are tuned by MetaSchedule with the same budget through the checked measurer, into a database of
its own under --work (a killed run resumes there: a tuned variant is not tuned again). Tasks the
passes leave unchanged (same hash in both variants) were then tuned twice by a search whose result
varies from run to run (bert_base at 64g: one run's best layer norm 25 us, the other's 3.5 ms), so
both models are compiled from the union of the two databases: such a task runs the same program in
both, and the difference is the passes' alone. Outputs are checked against PyTorch, and both builds,
PyTorch eager and ONNX Runtime run interleaved on the same threads: --rounds rounds, medians.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Callable

WORKLOADS = ("bert_base", "gpt2", "resnet_50", "mobilenet_v2")
VARIANTS = ("before", "after")
TOP = 4  # tasks named per workload and variant


def run_passes(workloads: list[str], budget: str, rounds: int, target, work: Path, done: dict | None = None,
               save: Callable[[dict], None] | None = None) -> dict:
    """{"workload@budget": row} for each workload (rows in `done` are kept; one of the same workload and
    budget is not measured again)."""
    import numpy as np
    import torch
    import tvm

    from tlm.compiler.build import CompileConfig, compile_imported
    from tlm.errors import quiet_stderr
    from tlm.eval.run import interleaved, reference_runners
    from tlm.graph.extract import extract_from_relax
    from tlm.graph.importer import import_torch
    from tlm.graph.zoo import get_workload
    from tlm.measure.database import open_db
    from tlm.measure.shards import hardware_slug
    from tlm.search.base import TuneConfig
    from tlm.search.tune import tune

    torch.set_num_threads(target.cores)
    rows = {f"{r['workload']}@{r['budget']}": r for r in (done or {}).values()}
    for w in workloads:
        workload = get_workload(w)
        key = f"{workload.name}@{budget}"
        if rows.get(key, {}).get("shared_db"):  # rows of the first runs (own databases) are made again
            continue
        module, inputs = workload.build()
        row, fns, built = {"workload": workload.name, "budget": budget, "rounds": rounds, "shared_db": True}, {}, {}
        here = work / hardware_slug(target.key) / w / budget
        for variant in VARIANTS:
            after = variant == "after"
            with quiet_stderr():
                imported = import_torch(module, inputs, source=workload.name, sink_reshapes=after,
                                        conv_layout=None if after else "NCHW")
                tasks = extract_from_relax(imported.mod, target, fast_math=after, prepack=after)
            db = here / variant
            marker = db / "tuned"
            t0 = time.perf_counter()
            if not marker.exists():  # resumable: the tuner counts what the database holds
                tune(tasks, "metaschedule", budget, str(db), target=target, config=TuneConfig(seed=0), progress=False)
                marker.write_text(f"{time.perf_counter() - t0:.1f}\n")
            with open_db(str(db)) as d:
                measured = sum(d.count(t.hash, target.key) for t in tasks)
            built[variant] = (imported, tasks)
            row[variant] = {"tasks": len(tasks), "measurements": measured, "tune_s": float(marker.read_text()),
                            "task_names": [t.name for t in tasks]}
        # A task the passes leave unchanged (same hash in both) is tuned twice by a search whose
        # result varies from run to run; both builds take its best program of either run, so the
        # difference between them is the passes' alone.
        shared = merged_db([here / v for v in VARIANTS], here / "shared")
        row["shared_tasks"] = len({t.hash for t in built["before"][1]} & {t.hash for t in built["after"][1]})
        for variant, (imported, tasks) in built.items():
            after = variant == "after"
            with quiet_stderr():
                m = compile_imported(imported, str(shared), target=target, tasks=tasks,
                                     config=CompileConfig(repeat=3, min_repeat_ms=50, compare=False, fast_math=after,
                                                          prepack=after))
            row[variant].update({"task_ms": (m.weighted_task_latency_us or 0) / 1e3, "matches": m.matches,
                                 "max_abs_diff": m.max_abs_diff, "untuned": list(m.untuned_tasks),
                                 "top": top_tasks(m.task_rows)})
            args = [tvm.runtime.tensor(np.ascontiguousarray(x), tvm.cpu()) for x in imported.inputs]
            fns[variant] = lambda vm=m.vm, args=args: vm["main"](*args)
            print(f"[passes] {w} {variant}: {len(tasks)} tasks, {row[variant]['measurements']} measurements, "
                  f"output {'ok' if m.matches else 'WRONG'}", flush=True)
        refs, note = reference_runners(imported, target.cores)
        fns.update(refs)
        if note:
            row["onnxruntime_note"] = note
        times = interleaved(fns, rounds, min_ms=200)
        row["ms"] = {k: statistics.median(v) for k, v in times.items()}
        row["times_ms"] = times
        row["created"] = time.strftime("%Y-%m-%d %H:%M:%S")
        rows[key] = row
        print(f"[passes] {w}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in row["ms"].items()), flush=True)
        if save is not None:  # after each workload: a killed run keeps what it timed
            save(rows)
    return rows


def merged_db(dbs: list[Path], out: Path) -> Path:
    """A database holding every record of `dbs` (through the corpus' shards), made once."""
    import tempfile

    from tlm.measure.database import open_db
    from tlm.measure.shards import flush, ingest

    if not (out / "merged").exists():
        with tempfile.TemporaryDirectory(prefix="tlm-passes-") as tmp:
            for db in dbs:
                with open_db(str(db)) as d:
                    flush(d, tmp)
            with open_db(str(out)) as d:
                ingest(d, tmp)
        (out / "merged").write_text("\n".join(str(db) for db in dbs) + "\n")
    return out


def top_tasks(task_rows: list[dict], n: int = TOP) -> list[dict]:
    """The n tasks that hold most of a build's time: weight x best measured latency (ms)."""
    held = [{"task": r["name"], "weight": r["weight"], "ms": r["weight"] * r["best_us"] / 1e3}
            for r in task_rows if r.get("best_us")]
    return sorted(held, key=lambda h: -h["ms"])[:n]


def passes_lines(part: dict) -> list[str]:
    m, rows = part["machine"], part["rows"]
    budgets = sorted({r["budget"] for r in rows.values()}, key=lambda b: float(b.rstrip("g")))
    cmds = " and ".join(f"`python bench/ceiling.py --part passes --workloads "
                        f"{' '.join(r['workload'] for r in rows.values() if r['budget'] == b)} --budget {b} "
                        f"--rounds {part['rounds']}`" for b in budgets)
    lines = ["", f"## End to end: the passes before and after ({m['cpu']}, {m['isa']}, {m['threads']} threads)", "",
             f"Run {', '.join(sorted({r['created'] for r in rows.values()}))} with {cmds}. Before: TVM's own "
             "pipeline (scalar libm math, activations left after reshapes, weights in the model's layout, convs "
             "NCHW); after: today's default (fast vectorizable math, elementwise ops sunk into matmul epilogues, "
             "pre-packed matmul weights, NHWC convs). Each variant tuned by MetaSchedule with the same budget "
             "through the checked measurer; whole models compiled from the union of the two databases (a task the "
             "passes leave unchanged, counted in brackets, runs the best program either search found, in both "
             "builds), outputs checked against PyTorch; both builds, PyTorch eager and ONNX Runtime timed "
             "interleaved, medians (ms).", "",
             "| workload (budget) | tasks before -> after (same in both) | measurements before / after | task sum "
             "before -> after | before | after | speedup | PyTorch | ONNX Runtime | after / ORT | outputs ok |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows.values():
        b, a, t = r["before"], r["after"], r["ms"]
        ort = t.get("onnxruntime")
        ok = "yes" if b["matches"] and a["matches"] else "**NO**"
        same = f" ({r['shared_tasks']})" if "shared_tasks" in r else ""
        lines.append(f"| {r['workload']} ({r['budget']}) | {b['tasks']} -> {a['tasks']}{same} | {b['measurements']} / "
                     f"{a['measurements']} | {b['task_ms']:.2f} -> {a['task_ms']:.2f} | {t['before']:.2f} | "
                     f"{t['after']:.2f} | {t['before'] / t['after']:.2f}x | {t['pytorch']:.2f} | "
                     + (f"{ort:.2f} | {t['after'] / ort:.2f}x" if ort else "- | -") + f" | {ok} |")
    untuned = [f"{r['workload']} {v}: {', '.join(r[v]['untuned'])}" for r in rows.values() for v in VARIANTS
               if r[v]["untuned"]]
    if untuned:
        lines += ["", "Tasks left untuned (TVM's default schedule): " + "; ".join(untuned) + "."]
    lines += ["", "Where each build's time goes (weight x best measured latency, ms, the measurer's timing):", ""]
    for r in rows.values():
        for v in VARIANTS:
            if r[v].get("top"):
                lines.append(f"- {r['workload']} ({r['budget']}) {v}: "
                             + "; ".join(f"{h['task']} (x{h['weight']}) {h['ms']:.1f}" for h in r[v]["top"]))
    return lines
