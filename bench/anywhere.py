"""Any machine, any model (issue 14): the shipped TLM on the host at hand.

    python bench/anywhere.py [--part prime|zoo0|transfer ...] [--workload dcgan] [--out bench/results]

- prime: Linear(512, 1031) + ReLU on [1, 64, 512] (a prime the vocabulary spells digit by digit)
  against the same model with 1024 outputs, both compiled at budget 0 (the model's most likely
  program per task, no measurement), timed interleaved with PyTorch: `--rounds` rounds, medians.
- zoo0: every held-out test workload tuned at budget 0: tasks whose program came from the
  model, from the random fallback, or from nowhere (untuned); `--compile`: each whole model
  built from those programs, its output checked against PyTorch.
- transfer: on a held-out workload's tasks, the shipped fine-tuned model at 10 measurements per
  task against random programs at 10 per task, on this CPU (the model was fine-tuned on
  AVX-512 demonstrations only). Task estimate: sum of weight x best measured latency.
Each part replaces its section of OUT/anywhere.json; OUT/anywhere.md is written from all parts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def part_prime(target, rounds: int) -> dict:
    import numpy as np
    import torch
    import tvm

    from tlm.compiler.build import CompileConfig
    from tlm.compiler.job import compile_model
    from tlm.eval.run import interleaved
    from tlm.model.lm import default_model_dir

    torch.set_num_threads(target.cores)
    fns, out = {}, {"model": str(default_model_dir(target).name)}
    for n in (1024, 1031):
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(512, n), torch.nn.ReLU()).eval()
        x = torch.randn(1, 64, 512)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = compile_model(net, (x,), target=target, budget=0, db=tempfile.mkdtemp(prefix="tlm-prime-"),
                              config=CompileConfig(repeat=3, min_repeat_ms=50, compare=False))
        args = [tvm.runtime.tensor(np.ascontiguousarray(x.numpy()), tvm.cpu())]
        fns[f"tlm {n}"] = lambda vm=m.vm, args=args: vm["main"](*args)
        fns[f"pytorch {n}"] = lambda net=net, x=x: net(x)
        out[str(n)] = {"matches": m.matches, "untuned": m.untuned_tasks, "tasks": m.tasks,
                       "greedy_tasks": m.greedy_tasks}
    times = interleaved(fns, rounds, min_ms=100)
    out["ms"] = {k: statistics.median(v) for k, v in times.items()}
    out["ratio_1031_over_1024"] = out["ms"]["tlm 1031"] / out["ms"]["tlm 1024"]
    print(f"prime: {out['ms']}, ratio {out['ratio_1031_over_1024']:.2f}", flush=True)
    return out


def part_zoo0(target, compile_too: bool = False, save=None, only: list[str] | None = None) -> dict:
    from tlm.compiler.build import CompileConfig
    from tlm.compiler.job import compile_model
    from tlm.graph.extract import tasks_for_source
    from tlm.graph.zoo import list_workloads
    from tlm.model.lm import default_model_dir
    from tlm.search.costmodel import default_cost_model
    from tlm.search.tune import tune

    cm = default_cost_model(target)
    rows = []
    out = {"rows": rows, "model": default_model_dir(target).name, "cost_model": cm.name if cm else None}
    for w in list_workloads("test"):
        if only and w.name not in only and w.family not in only:
            continue
        tasks = tasks_for_source(w.name, target=target).tasks
        t0 = time.perf_counter()
        db = tempfile.mkdtemp(prefix="tlm-zoo0-")
        summary = tune(tasks, "tlm", 0, db, target=target, progress=False)
        fallback = sum(1 for r in summary if r.get("fallback"))
        missing = sum(1 for r in summary if r.get("status") == "untuned")
        row = {"workload": w.name, "tasks": len(tasks), "fallback": fallback, "untuned": missing,
               "seconds": time.perf_counter() - t0}
        if compile_too:  # the whole model from those greedy programs, output checked
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                m = compile_model(w.name, db=db, target=target, config=CompileConfig(repeat=3, compare=False))
            row.update(matches=m.matches, max_abs_diff=m.max_abs_diff, tolerance=m.tolerance,
                       latency_ms=m.latency_ms, compile_untuned=len(m.untuned_tasks))
        rows.append(row)
        print(rows[-1], flush=True)
        if save is not None:  # a long part: what it checked so far is kept
            save(out)
    return out


def _estimate(tasks, db_dir: str, target) -> tuple[float, int, int]:
    from tlm.measure.database import open_db

    total, measured, missing = 0.0, 0, 0
    with open_db(db_dir, create=False) as db:
        for t in tasks:
            recs = [r for r in db.records(t.hash, target.key) if r.latencies_s or r.error]
            measured += len(recs)
            ok = [r.median_s for r in recs if r.median_s is not None and not r.error]
            if ok:
                total += t.weight * min(ok)
            else:
                missing += 1
    return total * 1e3, measured, missing


def part_transfer(target, workload: str, per_task: int) -> dict:
    from tlm.graph.extract import tasks_for_source
    from tlm.model.lm import default_model_dir, load_model
    from tlm.search.tune import tune

    tasks = tasks_for_source(workload, target=target).tasks
    model = default_model_dir(target)
    out = {"workload": workload, "tasks": len(tasks), "per_task": per_task, "model": model.name,
           "model_targets": [t.get("cpu") for t in load_model(model).meta.get("targets", [])]}
    for tuner in ("tlm", "random"):
        db = tempfile.mkdtemp(prefix=f"tlm-transfer-{tuner}-")
        t0 = time.perf_counter()
        tune(tasks, tuner, f"{per_task}g", db, target=target, progress=False)
        ms, measured, missing = _estimate(tasks, db, target)
        out[tuner] = {"estimate_ms": ms, "measurements": measured, "tasks_without_program": missing,
                      "seconds": time.perf_counter() - t0}
        print(f"transfer {tuner}: {out[tuner]}", flush=True)
    out["tlm_speedup_over_random"] = out["random"]["estimate_ms"] / out["tlm"]["estimate_ms"]
    return out


def write(out: Path, data: dict, target) -> None:
    lines = ["# Any machine, any model", "", "Each part names the CPU it ran on (2 threads).", ""]

    def on(part: dict) -> str:  # parts run in different sessions, on whatever CPU the session had
        return f" ({part.get('cpu', target.cpu)}, {part.get('isa', target.isa)})"

    if "prime" in data:
        p = data["prime"]
        lines += [f"## A dimension the vocabulary spells digit by digit (budget 0){on(p)}", "",
                  f"Run {p['created']} with `{p['command']}` (model `{p['model']}`; medians of {p['rounds']} "
                  "interleaved rounds, ms).", "",
                  "| outputs | tlm ms | PyTorch ms | tasks | untuned | output ok |", "|---|---|---|---|---|---|"]
        for n in ("1024", "1031"):
            lines.append(f"| {n} | {p['ms'][f'tlm {n}']:.3f} | {p['ms'][f'pytorch {n}']:.3f} | {p[n]['tasks']} | "
                         f"{len(p[n]['untuned'])} | {p[n]['matches']} |")
        lines += ["", f"1031 / 1024 outputs: {p['ratio_1031_over_1024']:.2f}x (target: at most 1.5x).", ""]
    if "zoo0" in data:
        z = data["zoo0"]
        lines += [f"## Held-out workloads at budget 0{on(z)}", "", f"Run {z['created']} with `{z['command']}`"
                  + (f" (models `{z['model']}`, cost model `{z['cost_model']}`)" if z.get("model") else "") + ".", "",
                  "| workload | tasks | random fallback | untuned | compiled: output ok (max abs diff) | ms | run |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['workload']} | {r['tasks']} | {r['fallback']} | {r['untuned']} | "
                  + (f"{r['matches']} ({r['max_abs_diff']:.2g}) | {r['latency_ms']:.2f} |" if "matches" in r else "- | - |")
                  + f" {r.get('cpu', z.get('cpu', ''))} {r.get('created', z['created'])[:10]} |" for r in z["rows"]]
        lines.append("")
    if "transfer" in data:
        t = data["transfer"]
        lines += [f"## Cross-hardware transfer{on(t)}", "", f"Run {t['created']} with `{t['command']}`: `{t['model']}` "
                  f"(fine-tuned on AVX-512 demonstrations only) on this {t.get('isa', target.isa)} CPU, against random programs, "
                  f"{t['per_task']} measurements per task on the {t['tasks']} tasks of {t['workload']} (held out).", "",
                  "| tuner | measurements | task estimate ms | tasks without a correct program | tuning s |",
                  "|---|---|---|---|---|"]
        for k in ("tlm", "random"):
            r = t[k]
            lines.append(f"| {k} | {r['measurements']} | {r['estimate_ms']:.2f} | {r['tasks_without_program']} | "
                         f"{r['seconds']:.0f} |")
        lines += ["", f"TLM / random: {t['tlm_speedup_over_random']:.2f}x faster programs.", ""]
    (out / "anywhere.md").write_text("\n".join(lines))
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", nargs="+", default=["prime", "transfer"], choices=["prime", "zoo0", "transfer"])
    ap.add_argument("--workload", default="dcgan")
    ap.add_argument("--per-task", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--compile", action="store_true", help="zoo0: also compile each workload and check its output")
    ap.add_argument("--workloads", nargs="+", default=None,
                    help="zoo0: these test workloads only (their rows replace the same workloads' rows)")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args(argv)
    from tlm.graph.target import host_target

    target = host_target()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "anywhere.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    created = time.strftime("%Y-%m-%d %H:%M:%S")
    for part in args.part:
        if part == "prime":
            res = part_prime(target, args.rounds)
            res.update(rounds=args.rounds, command=f"python bench/anywhere.py --part prime --rounds {args.rounds}")
        elif part == "zoo0":
            command = "python bench/anywhere.py --part zoo0" + (" --compile" if args.compile else "")
            command += f" --workloads {' '.join(args.workloads)}" if args.workloads else ""
            kept = [r for r in data.get("zoo0", {}).get("rows", []) if args.workloads and r.get("cpu")]

            def save(res, command=command):  # rows of other runs stay, each naming its run
                mine = [dict(r, cpu=target.cpu, created=created, command=command) for r in res["rows"]]
                names = {r["workload"] for r in mine}
                res = dict(res, rows=[r for r in kept if r["workload"] not in names] + mine)
                data["zoo0"] = dict(res, command=command, created=created, cpu=target.cpu, isa=target.isa)
                path.write_text(json.dumps(data, indent=1, default=str))
                write(out, data, target)

            part_zoo0(target, args.compile, save, args.workloads)
            res = data["zoo0"]  # this run's rows beside the kept ones, as save() wrote them
        else:
            res = part_transfer(target, args.workload, args.per_task)
            res.update(command=f"python bench/anywhere.py --part transfer --workload {args.workload} "
                               f"--per-task {args.per_task}")
        data[part] = dict(res, created=created, cpu=target.cpu, isa=target.isa)
        path.write_text(json.dumps(data, indent=1, default=str))
    write(out, data, target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
