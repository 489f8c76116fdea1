"""The compiler's ceiling (issue 13): each change before and after, same tuner and budget.

    python bench/ceiling.py [--part ops] [--budget 32g] [--rounds 7] [--only NAME] [--out bench/results]
    python bench/ceiling.py --part matmul [--trials 512] [--variants packed unpacked] [--rounds 7]
    python bench/ceiling.py --part workloads --from results/full-llvm-znver5-2c

Part `ops` (tlm.graph.passes): the single ops that the issue measured, each as a small PyTorch
model on its real shape:
- fast math: GELU (erf form, BERT) and GPT-2's tanh GELU (`0.5 x (1 + tanh(c (x + 0.044715 x^3)))`,
  as torch ops, so `pow` is in it) on [1, 128, 3072]; softmax on [1, 12, 128, 128] (attention
  scores) and layer norm on [1, 128, 768]. Before: TVM's own legalization; after: fast math.
- epilogue fusion: BERT's Linear(768 -> 3072) + GELU on [1, 128, 768]. Before: the reshape that
  torch.export writes stays, GELU is a task of its own; after: GELU in the matmul's task.
- pre-packed weights: BERT's Linear(768 -> 768), ResNet-50's 3x3 and 1x1 convs, MobileNet-V2's
  depthwise conv. Before: weights in the model's layout; after: packed (RewriteLayout), convs too.
Before and after get the same random-program budget per task through the checked measurer,
the whole model is built from those records and its output checked against PyTorch, and both
builds run interleaved with PyTorch eager and ONNX Runtime on the same threads: `--rounds`
rounds, medians.

Part `matmul`: the ceiling of the search itself on bert_base's attention projection (the task of
Linear(768 -> 768) on [1, 128, 768]: 128x768x768 + bias): MetaSchedule with `--trials`
measurements, weights pre-packed (today's default) and not, GFLOPS of the best program after
16/64/128/256/512 measurements (the measurer's timing) against PyTorch's addmm on the same shape
and threads (timed interleaved with the two whole one-op models and ONNX Runtime).

Part `workloads` (bench/ceiling_workloads.py): the end-to-end targets, MetaSchedule at 64g
against ONNX Runtime, read from a `tlm eval --suite full` run (it measures nothing itself).

Writes OUT/ceiling.{json,md} (each part keeps the others' results, and names the machine it ran on).
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _ops():
    import torch

    class Gelu(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.gelu(x)

    class NewGelu(torch.nn.Module):  # transformers' GPT-2 activation, op for op
        def forward(self, x):
            return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

    class Softmax(torch.nn.Module):
        def forward(self, x):
            return torch.softmax(x, dim=-1)

    class LinearGelu(torch.nn.Module):  # BERT's intermediate dense + GELU
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(768, 3072)

        def forward(self, x):
            return torch.nn.functional.gelu(self.fc(x))

    def conv(cin, cout, k, groups=1):
        return torch.nn.Conv2d(cin, cout, k, padding=k // 2, groups=groups, bias=False)

    # name -> (change measured, module, input shape)
    return {
        "linear 768->768 [1,128,768] (bert_base)": ("pre-packed weights", torch.nn.Linear(768, 768), (1, 128, 768)),
        "conv2d 3x3 64->64 [1,64,56,56] (resnet_50)": ("pre-packed weights", conv(64, 64, 3), (1, 64, 56, 56)),
        "conv2d 1x1 256->64 [1,256,56,56] (resnet_50)": ("pre-packed weights", conv(256, 64, 1), (1, 256, 56, 56)),
        "depthwise 3x3 96 [1,96,56,56] (mobilenet_v2)": ("pre-packed weights", conv(96, 96, 3, 96), (1, 96, 56, 56)),
        "gelu (erf) [1,128,3072]": ("fast math", Gelu(), (1, 128, 3072)),
        "gelu (tanh, GPT-2) [1,128,3072]": ("fast math", NewGelu(), (1, 128, 3072)),
        "softmax [1,12,128,128]": ("fast math", Softmax(), (1, 12, 128, 128)),
        "layer_norm [1,128,768]": ("fast math", torch.nn.LayerNorm(768), (1, 128, 768)),
        "linear 768->3072 + gelu [1,128,768]": ("epilogue fusion", LinearGelu(), (1, 128, 768)),
    }


def run_ops(budget: str, rounds: int, target, only: str | None = None) -> list[dict]:
    import numpy as np
    import torch
    import tvm

    from tlm.compiler.build import CompileConfig, compile_imported
    from tlm.eval.run import interleaved, reference_runners
    from tlm.graph.extract import extract_from_relax
    from tlm.graph.importer import import_torch
    from tlm.graph.passes import PREPACK_OPS
    from tlm.search.base import TuneConfig
    from tlm.search.tune import tune

    torch.set_num_threads(target.cores)
    rows = []
    for name, (change, module, shape) in _ops().items():
        if only and only not in name and only != change:
            continue
        torch.manual_seed(0)
        x = torch.randn(*shape)
        fns, row = {}, {"op": name, "change": change}
        for label, new in (("before", False), ("after", True)):
            # "before": TVM's math (fast math rows), the reshape left in place (fusion rows) or
            # weights in the model's layout (pre-packing rows; "after" packs convs too, to decide).
            fast = new or change != "fast math"
            prepack = (PREPACK_OPS | {"conv2d"} if new else False) if change == "pre-packed weights" else True
            imported = import_torch(module.eval(), (x,), sink_reshapes=new or change != "epilogue fusion")
            args = [tvm.runtime.tensor(np.ascontiguousarray(v), tvm.cpu()) for v in imported.inputs]
            tasks = extract_from_relax(imported.mod, target, fast_math=fast, prepack=prepack)
            db = tempfile.mkdtemp(prefix=f"tlm-ceiling-{label}-")
            tune(tasks, "random", budget, db, target=target, config=TuneConfig(seed=0), progress=False)
            m = compile_imported(imported, db, target=target, tasks=tasks,
                                 config=CompileConfig(repeat=3, min_repeat_ms=50, compare=False, fast_math=fast,
                                                     prepack=prepack))
            row[f"{label}_tasks"] = [t.name for t in tasks]
            row[f"{label}_matches"], row[f"{label}_max_abs_diff"] = m.matches, m.max_abs_diff
            row[f"{label}_measurements"] = m.measurements
            row[f"{label}_task_us"] = m.weighted_task_latency_us  # sum of weight x best, measurer's timing
            fns[label] = lambda vm=m.vm, args=args: vm["main"](*args)
        refs, note = reference_runners(imported, target.cores)
        fns.update(refs)
        if note:
            row["onnxruntime_note"] = note
        times = interleaved(fns, rounds, min_ms=100)
        row.update({f"{k}_us": statistics.median(v) * 1e3 for k, v in times.items()})
        row["times_ms"] = times
        print(f"{name}: " + ", ".join(f"{k} {row[k + '_us']:.1f} us" for k in fns), flush=True)
        rows.append(row)
    return rows


MATMUL = (128, 768, 768)  # M, K, N of bert_base's attention projection
CHECKPOINTS = (16, 64, 128, 256, 512)


def run_matmul(trials: int, variants: list[str], rounds: int, target) -> dict:
    """MetaSchedule on the matmul task, packed and not; GFLOPS curves and PyTorch's addmm."""
    import numpy as np
    import torch
    import tvm

    from tlm.compiler.build import CompileConfig, compile_imported
    from tlm.graph.extract import extract_from_relax
    from tlm.graph.importer import import_torch
    from tlm.measure.database import open_db
    from tlm.search.base import TuneConfig
    from tlm.search.tune import tune

    torch.set_num_threads(target.cores)
    torch.manual_seed(0)
    m, k, n = MATMUL
    module, x = torch.nn.Linear(k, n).eval(), torch.randn(1, m, k)
    imported = import_torch(module, (x,))
    args = [tvm.runtime.tensor(np.ascontiguousarray(v), tvm.cpu()) for v in imported.inputs]
    out: dict = {"shape_mkn": list(MATMUL), "trials": trials, "rounds": rounds, "variants": {}}
    fns = {}
    for variant in variants:
        prepack = variant == "packed"
        tasks = extract_from_relax(imported.mod, target, prepack=prepack)
        task = max(tasks, key=lambda t: t.flops)  # the matmul (+ bias); the rest are reshapes
        db = tempfile.mkdtemp(prefix=f"tlm-ceiling-matmul-{variant}-")
        t0 = time.perf_counter()
        tune([task], "metaschedule", str(trials), db, target=target, config=TuneConfig(seed=0), progress=False)
        wall = time.perf_counter() - t0
        rest = [t for t in tasks if t is not task]  # reshapes: a few random programs, so none runs untuned
        if rest:
            tune(rest, "random", "4g", db, target=target, config=TuneConfig(seed=0), progress=False)
        with open_db(db) as d:
            recs = d.records(task.hash, target.key)
        best, curve = math.inf, {}
        for i, r in enumerate(recs, 1):
            if r.median_s is not None:
                best = min(best, r.median_s)
            if i in CHECKPOINTS or i == len(recs):
                curve[i] = task.flops / best / 1e9 if best < math.inf else None
        cm = compile_imported(imported, db, target=target, tasks=tasks,
                              config=CompileConfig(repeat=3, min_repeat_ms=50, compare=False, prepack=prepack))
        out["variants"][variant] = {
            "task": task.name, "flops": task.flops, "measurements": len(recs),
            "errors": sum(r.median_s is None for r in recs), "best_us": best * 1e6, "tune_s": round(wall, 1),
            "gflops_after": curve, "matches": cm.matches, "max_abs_diff": cm.max_abs_diff}
        fns[f"tvm {variant}"] = lambda vm=cm.vm: vm["main"](*args)
        print(f"matmul {variant}: {len(recs)} measurements in {wall:.0f} s, best {best * 1e6:.1f} us, "
              f"GFLOPS {curve}", flush=True)
    from ceiling_matmul import time_with_references

    times = time_with_references(fns, module, x, imported, target, rounds, out)
    out["us"] = {key: statistics.median(v) * 1e3 for key, v in times.items()}
    out["times_ms"] = times
    out["pytorch_gflops"] = 2.0 * m * k * n / (out["us"]["pytorch addmm"] * 1e-6) / 1e9
    print("matmul, whole calls: " + ", ".join(f"{key} {v:.1f} us" for key, v in out["us"].items()), flush=True)
    return out


def _matmul_lines(mm: dict, created: str) -> list[str]:
    pt = mm["pytorch_gflops"]
    cps = sorted({int(c) for v in mm["variants"].values() for c in v["gflops_after"]})
    cmd = (f"python bench/ceiling.py --part matmul --trials {mm['trials']} --variants {' '.join(mm['variants'])} "
           f"--rounds {mm['rounds']}")
    mach = mm.get("machine") or {}
    where = f" ({mach['cpu']}, {mach['isa']}, {mach['threads']} threads)" if mach else ""
    lines = ["", f"## The search's ceiling: bert_base's matmul (128x768x768 + bias){where}", "",
             f"Run {created} with `{cmd}`. MetaSchedule (evolutionary search, XGBoost cost model) "
             "through the checked measurer; GFLOPS of the best program after the first N measurements "
             "(task FLOPs / the measurer's median), and that as a share of PyTorch's `torch.addmm` on the "
             f"same shape and threads ({pt:.1f} GFLOPS, median of the interleaved rounds below). "
             "The issue's target: at least 75% at 512 measurements.", "",
             "| weights | " + " | ".join(f"after {c}" for c in cps) + " | share of PyTorch (last) | errors | "
             "tuning s | output ok |",
             "|---|" + "---|" * len(cps) + "---|---|---|---|"]
    for name, v in mm["variants"].items():
        g = {int(c): x for c, x in v["gflops_after"].items()}
        last = g[max(g)]
        cells = " | ".join("-" if g.get(c) is None else f"{g[c]:.1f}" for c in cps)
        lines.append(f"| {name} | {cells} | {last / pt:.0%} | {v['errors']} | {v['tune_s']:.0f} | "
                     f"{'yes' if v['matches'] else 'NO'} |")
    lines += ["", "Whole one-op models (reshapes included) and PyTorch, interleaved, median us per call: " +
              ", ".join(f"{k} {u:.1f}" for k, u in mm["us"].items()) + "."]
    if ort := mm["us"].get("onnxruntime"):  # MLAS, tuned per CPU: the rate a user's alternative reaches
        flop, best = 2.0 * math.prod(mm["shape_mkn"]), min(v["best_us"] for v in mm["variants"].values())
        lines += ["", f"ONNX Runtime's whole call runs at {flop / ort / 1e3:.0f} GFLOPS; the best program above "
                  f"reaches {ort / best:.0%} of that rate."]
    return lines


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.1f}"


def machine(target) -> dict:
    return {"target": target.config, "cpu": target.cpu, "isa": target.isa, "threads": target.cores}


def write(out: Path, rows: list[dict], args, ops_machine: dict, matmul: dict | None = None,
          workloads: dict | None = None, passes: dict | None = None) -> None:
    """`ops_machine`: where the ops rows ran (machine()); matmul and workloads name their own."""
    out.mkdir(parents=True, exist_ok=True)
    created = time.strftime("%Y-%m-%d %H:%M:%S")
    (out / "ceiling.json").write_text(json.dumps(
        {"created": created, **ops_machine, "budget": args.budget, "rounds": args.rounds, "ops": rows,
         "matmul": matmul, "workloads": workloads, "passes": passes}, indent=1))
    cmd = f"python bench/ceiling.py --part ops --budget {args.budget} --rounds {args.rounds}"
    om = ops_machine
    lines = [
        "# The compiler's ceiling: before/after", "",
        f"## Single ops (tlm.graph.passes; {om['cpu']}, {om['isa']}, {om['threads']} threads)", "",
        f"Rows run {', '.join(sorted({r.get('created', created) for r in rows}))} with `{cmd}` "
        f"(`--only` reruns replace their rows). Same random-program budget ({args.budget}, checked measurer) "
        "before and after; whole one-op models built from those records, outputs checked against "
        f"PyTorch; all contenders timed interleaved, median of {args.rounds} rounds (us per call). "
        "Task sum: weight x best latency over the model's tasks, as the measurer timed them.", "",
        "Fast math: TVM's scalar libm calls (before) vs vectorizable polynomials (after). Epilogue fusion:",
        "the activation in a task of its own after the reshape (before) vs in the matmul's task (after).",
        "Pre-packed weights: weights in the model's layout (before) vs packed by MetaSchedule's RewriteLayout",
        "in the layout each program reads best, folded into the constants at compile time (after; convs",
        "were packed here to decide the default, `tlm.graph.passes.PREPACK_OPS`).", "",
        "| op | change | tasks before -> after | task sum before -> after | before | after | speedup | PyTorch "
        "| ONNX Runtime | after / PyTorch | outputs ok |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        sp = r["before_us"] / r["after_us"]
        vs = r["after_us"] / r["pytorch_us"]
        ok = "yes" if r["before_matches"] and r["after_matches"] else "NO"
        lines.append(f"| {r['op']} | {r['change']} | {len(r['before_tasks'])} -> {len(r['after_tasks'])} | "
                     f"{_fmt(r['before_task_us'])} -> {_fmt(r['after_task_us'])} | "
                     f"{_fmt(r['before_us'])} | {_fmt(r['after_us'])} | {sp:.1f}x | "
                     f"{_fmt(r['pytorch_us'])} | {_fmt(r.get('onnxruntime_us'))} | {vs:.2f} | {ok} |")
    lines += ["", "`after / PyTorch` below 1.0: TVM's program is faster than PyTorch's own op (the issue's "
              "target: at most 1.5).", "",
              "Pre-packing rows compare the best of two different random draws, so search variance dominates "
              "them; the paired pre-packing experiment (`prepack` in bench/README.md) measured the same programs "
              "with and without packing, "
              "which is what decided `PREPACK_OPS` (matmuls yes, convs no)."]
    if matmul:
        lines += _matmul_lines(matmul, matmul.get("created", created))
    if workloads:
        from ceiling_workloads import workload_lines

        lines += workload_lines(workloads, workloads.get("created", created))
    if passes:
        from ceiling_passes import passes_lines

        lines += passes_lines(passes)
    (out / "ceiling.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", choices=("ops", "matmul", "workloads", "passes"), default="ops")
    ap.add_argument("--budget", default=None, help="ops: random programs per task, before and after (default 32g); "
                    "passes: MetaSchedule's measurements per task (default 16g)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--only", default=None, help="only the ops whose name contains this (or whose change is this)")
    ap.add_argument("--trials", type=int, default=512, help="matmul: MetaSchedule measurements per variant")
    ap.add_argument("--variants", nargs="+", choices=("packed", "unpacked"), default=["packed", "unpacked"])
    ap.add_argument("--from", dest="run", default=None, help="workloads: a `tlm eval --suite full` folder")
    ap.add_argument("--workloads", nargs="+", default=None, help="passes: zoo workloads (default the four targets)")
    ap.add_argument("--work", default="work/ceiling-passes", help="passes: tuning databases (resumable)")
    args = ap.parse_args(argv)
    from tlm.graph.target import host_target

    target = host_target()
    old = Path(args.out) / "ceiling.json"
    prev = json.loads(old.read_text()) if old.exists() else {}
    now = time.strftime("%Y-%m-%d %H:%M:%S")
    matmul, workloads, passes = prev.get("matmul"), prev.get("workloads"), prev.get("passes")
    kept = [dict(r, created=r.get("created", prev.get("created"))) for r in prev.get("ops", [])]
    if args.part in ("matmul", "workloads", "passes"):  # the ops rows stay as they are, with their machine
        ops_machine = {k: prev[k] for k in ("target", "cpu", "isa", "threads")} if "cpu" in prev else machine(target)
        if args.part == "passes":
            from ceiling_passes import WORKLOADS, run_passes

            if passes and passes["machine"]["target"] != target.config:  # rows of two CPUs never share a table
                passes = None
            budget, rounds = args.budget or "16g", args.rounds
            args.budget, args.rounds = prev.get("budget"), prev.get("rounds")  # the ops rows' own

            def save(rows):
                write(Path(args.out), kept, args, ops_machine, matmul, workloads,
                      {"rows": rows, "rounds": rounds, "machine": machine(target)})

            save(run_passes(args.workloads or list(WORKLOADS), budget, rounds, target, Path(args.work),
                            (passes or {}).get("rows"), save))
            return 0
        if args.part == "matmul":
            matmul = dict(run_matmul(args.trials, args.variants, args.rounds, target), created=now,
                          machine=machine(target))
        else:
            if not args.run:
                raise SystemExit("ceiling: --part workloads needs --from DIR (a `tlm eval --suite full` folder)")
            from ceiling_workloads import read_workloads

            workloads = dict(read_workloads(args.run, target), created=now, machine=machine(target))
        rows = kept
        args.budget, args.rounds = prev.get("budget", args.budget), prev.get("rounds", args.rounds)
        write(Path(args.out), rows, args, ops_machine, matmul, workloads, passes)
        return 0
    if args.only and prev and prev.get("cpu") != target.cpu:
        raise SystemExit(f"ceiling: the ops rows were measured on {prev.get('cpu')}, not this {target.cpu}: "
                         "rerun them all (no --only) to replace them")
    args.budget = args.budget or "32g"
    rows = run_ops(args.budget, args.rounds, target, args.only)
    for r in rows:
        r["created"] = time.strftime("%Y-%m-%d %H:%M:%S")
    if args.only and prev:  # a partial run replaces its rows and keeps the others
        names = {r["op"] for r in rows}
        rows = [r for r in kept if r["op"] not in names] + rows
    write(Path(args.out), rows, args, machine(target), matmul, workloads, passes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
