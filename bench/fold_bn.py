"""Batch norms folded into the convs before them (tlm.graph.batchnorm) against left as arithmetic
in each conv task's epilogue, whole models.

    python bench/fold_bn.py [--workloads mobilenet_v2 resnet_50] [--budgets 0 10g] [--rounds 9]

For each workload the same model (same random weights) is imported twice: `kept` (fold_bn=False,
the default: the norm decomposed into subtract, divide, multiply and add, fused into every conv
task) and `folded` (fold_bn=True: `conv(x, W') + b'`). Each variant's
tasks are tuned by the TLM tuner with the shipped models at each budget into a database of its
own under work/fold-bn/<cpu>-<cores>c/ (a killed run resumes: a tuned build is not tuned again),
compiled as `tlm compile` does (final pick included), its output checked against PyTorch, and all
builds timed in one interleaved run (tlm.eval.timing.interleaved: each contender settled, the order
rotated each round) beside PyTorch eager and ONNX Runtime on the host's threads. Appends rows to
bench/results/fold_bn.json and rewrites fold_bn.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from xcore import write_table  # noqa: E402 - bench/ is on the path when a bench script runs

VARIANTS = {"kept": False, "folded": True}  # variant: fold_bn
HEADER = ("date | hardware | commit | workload | budget | kept ms | folded ms | kept / folded | PyTorch ms | "
          "ONNX Runtime ms | measured (kept, folded) | matches | rounds")


def _cells(r: dict) -> list:
    ms = r["ms"]
    return [r["date"], r["hardware"], r["commit"], r["workload"], r["budget"], f"{ms['kept']:.3g}",
            f"{ms['folded']:.3g}", f"{ms['kept'] / ms['folded']:.2f}x", f"{r['pytorch_ms']:.3g}",
            f"{r['onnxruntime_ms']:.3g}" if r.get("onnxruntime_ms") else "-",
            f"{r['measured']['kept']}, {r['measured']['folded']}", r["matches"], r["rounds"]]


def write(rows: list[dict], out: Path) -> None:
    write_table(out, "Batch norms folded into convs, whole models",
                "`python bench/fold_bn.py --workloads W --budgets B --rounds R` (see its docstring): the same model "
                "compiled with its batch norms left as arithmetic in each conv task's epilogue (`kept`, tlm's "
                "default) and folded into the convs' weights and a bias (`folded`, tlm.graph.batchnorm), each tuned "
                "by the TLM tuner (shipped models) at the budget into its own database, outputs checked against "
                "PyTorch, timed in one interleaved run beside PyTorch eager and ONNX Runtime (settled, rotated; "
                "medians in ms; above 1x: folding is faster).", HEADER, _cells, rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workloads", nargs="+", default=["mobilenet_v2", "resnet_50"])
    p.add_argument("--budgets", nargs="+", default=["0", "10g"])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--out", default=str(ROOT / "bench/results/fold_bn"))
    args = p.parse_args(argv)

    import numpy as np
    import torch
    import tvm

    from tlm.compiler.job import tune_and_compile
    from tlm.errors import quiet_stderr
    from tlm.eval.timing import interleaved, reference_runners
    from tlm.graph.extract import extract_from_relax
    from tlm.graph.importer import import_torch
    from tlm.graph.target import host_target, runtime_threads
    from tlm.graph.zoo import get_workload
    from tlm.measure.database import open_db
    from tlm.search.base import TuneConfig

    target, threads = host_target(), runtime_threads()
    torch.set_num_threads(threads)
    work = ROOT / "work" / "fold-bn" / f"{target.cpu}-{target.cores}c"
    out = Path(args.out)
    path = out.with_suffix(".json")
    rows = json.loads(path.read_text()) if path.is_file() else []
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    for name in args.workloads:
        workload = get_workload(name)
        module, inputs = workload.build()
        for budget in args.budgets:
            fns, measured, matches, imported = {}, {}, [], None
            for variant, fold in VARIANTS.items():
                with quiet_stderr():
                    imported = import_torch(module, inputs, source=workload.name, fold_bn=fold)
                    tasks = extract_from_relax(imported.mod, target)
                db = work / name / f"{variant}@{budget}"
                marker = db / "tuned"
                t0 = time.perf_counter()
                model = tune_and_compile(imported, tasks, target, db=str(db),
                                         budget=None if marker.exists() else budget,
                                         tune_config=TuneConfig(seed=0))
                if not marker.exists():  # resumable: a tuned build is compiled from its records next time
                    marker.write_text(f"{time.perf_counter() - t0:.1f}\n")
                with open_db(str(db), create=False) as d:  # budget 0 stores its picks unmeasured
                    measured[variant] = 0 if budget == "0" else sum(d.count(t.hash, target.key) for t in tasks)
                matches.append(bool(model.matches))
                args_ = [tvm.runtime.tensor(np.ascontiguousarray(x), tvm.cpu()) for x in imported.inputs]
                fns[variant] = lambda vm=model.vm, a=args_: vm["main"](*a)
                print(f"[fold-bn] {name}@{budget} {variant}: {len(tasks)} tasks, output "
                      f"{'ok' if model.matches else 'WRONG'} (max abs diff {model.max_abs_diff:.2e})", flush=True)
            refs, _ = reference_runners(imported, threads)
            fns.update(refs)
            times = interleaved(fns, args.rounds)
            ms = {k: statistics.median(v) for k, v in times.items()}
            rows.append({"date": time.strftime("%Y-%m-%d %H:%M"), "hardware": f"{target.cpu} ({threads} threads)",
                         "commit": commit, "workload": name, "budget": budget, "rounds": args.rounds,
                         "ms": {k: ms[k] for k in VARIANTS}, "pytorch_ms": ms.get("pytorch"),
                         "onnxruntime_ms": ms.get("onnxruntime"), "measured": measured, "matches": all(matches),
                         "times_ms": times})
            print(f"[fold-bn] {name}@{budget}: " + ", ".join(f"{k} {v:.3g} ms" for k, v in ms.items())
                  + f"; kept / folded {ms['kept'] / ms['folded']:.2f}x", flush=True)
            write(rows, out)  # after each pair: a killed run keeps what it timed
    return 0


if __name__ == "__main__":
    sys.exit(main())
