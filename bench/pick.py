"""TLM@0 end to end: which of the model's programs `--budget 0` compiles, per task.

    python bench/pick.py [--workloads bert_tiny dcgan mobilenet_v2 ...] [--rounds 7] [--out bench/results]
    python bench/pick.py --workloads conv1d_audio hubert ...   # models of the outside-zoo battery
    python bench/pick.py --models old=DIR new=DIR --picks cost --name pick-models   # models compared
    python bench/pick.py --picks cost --cost-models old=DIR new=DIR --name pick-costmodels   # cost models
    python bench/pick.py --picks cost --models old=DIR new=DIR --cost-models old=DIR new=DIR --paired   # both refit
    python bench/pick.py --picks cost --lean-check both --name pick-lean   # the redone-work check, off and on

For each held-out workload, the TLM tuner at budget 0 (no measurement) with each pick of
`TuneConfig.pick`: "greedy" (word-by-word argmax), "logprob" (the most likely of 32 samples by
generation log-prob) and "cost" (the shipped cost model's top pick of the same 32 samples,
`pretrained/costmodel-*`), each into its own database; each whole model compiled from those
programs and its output checked against PyTorch; then the compiled models, PyTorch and ONNX
Runtime timed in one interleaved run (`--rounds` rounds, medians). Writes OUT/NAME.{json,md}
(NAME: --name, default pick). `--models LABEL=DIR ...`: each pick of each model (default: the
shipped model for the host); `--cost-models LABEL=DIR ...`: the cost pick with each cost model
(default: the shipped one for the host). `--paired`: the i-th model with the i-th cost model only
(a refit of both judged as one), not every model with every cost model. `--lean-check both`: each
contender also without the check that a first choice redoes no work (`TuneConfig.lean_check`),
labelled `... no-lean`, before it.
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
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/outside_models.py

PICKS = ("greedy", "logprob", "cost")


def contenders(models: dict[str, str | None], picks: list[str], cost_models: dict[str, str],
               paired: bool = False) -> list[tuple]:
    """(label, pick, model dir, cost model) of each contender: every pick of every model, the
    cost pick once per cost model ("auto": the shipped one for the host); `paired`: the cost pick
    of each model with its own cost model (same order), labelled by the model."""
    if paired:
        if len(models) != len(cost_models) or list(picks) != ["cost"]:
            raise SystemExit("pick: --paired needs --picks cost and as many --models as --cost-models")
        return [(f"{m}:cost", "cost", d, cm) for (m, d), cm in zip(models.items(), cost_models.values())]
    out = []
    for m, d in models.items():
        for p in picks:
            for c, cm in (cost_models.items() if p == "cost" else [("", "none")]):
                words = [m] * (len(models) > 1) + [c] * (len(cost_models) > 1 and p == "cost")
                out.append(("+".join(words) + ":" + p if words else p, p, d, cm))
    return out


def with_lean(runs: list[tuple], mode: str) -> list[tuple]:
    """The contenders (label, pick, model dir, cost model, lean check) for `--lean-check` MODE
    (on, off or both: each without the check, then with it)."""
    if mode not in ("on", "off", "both"):
        raise SystemExit(f"pick: --lean-check is on, off or both, not {mode!r}")
    out = []
    for label, *rest in runs:
        if mode != "on":
            out.append((f"{label} no-lean", *rest, False))
        if mode != "off":
            out.append((label, *rest, True))
    return out


def run_workload(name: str, target, rounds: int, samples: int, runs: list[tuple]) -> dict:
    import numpy as np
    import torch
    import tvm

    from tlm.compiler.build import CompileConfig, compile_imported
    from tlm.eval.run import interleaved, reference_runners
    from tlm.search.base import TuneConfig
    from tlm.search.tune import tune
    from outside_models import load_named

    torch.set_num_threads(target.cores)
    imported, tasks = load_named(name, target)  # a zoo workload or a battery model
    args = [tvm.runtime.tensor(np.ascontiguousarray(x), tvm.cpu()) for x in imported.inputs]
    rows, fns = [], {}
    for label, pick, model, cost_model, lean in runs:
        db = tempfile.mkdtemp(prefix=f"tlm-pick-{pick}-")
        cfg = TuneConfig(pick=pick, pick_samples=samples, cost_model=cost_model, lean_check=lean)
        t0 = time.perf_counter()
        summary = tune(tasks, "tlm", 0, db, target=target, config=cfg, progress=False, model=model)
        tune_s = time.perf_counter() - t0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = compile_imported(imported, db, target=target, tasks=tasks,
                                 config=CompileConfig(repeat=3, min_repeat_ms=50, compare=False))
        rows.append({"workload": name, "pick": label, "tasks": len(tasks), "tune_s": round(tune_s, 1),
                     "fallback": sum(1 for r in summary if r.get("fallback")), "matches": m.matches,
                     "max_abs_diff": m.max_abs_diff, "greedy_tasks": m.greedy_tasks, "untuned": m.tasks - m.tuned_tasks - m.greedy_tasks})
        fns[label] = lambda vm=m.vm: vm["main"](*args)
        print(rows[-1], flush=True)
    refs, note = reference_runners(imported, target.cores)
    if note:
        print(f"onnxruntime skipped: {note}", flush=True)
    fns.update(refs)
    times = interleaved(fns, rounds)
    ms = {k: statistics.median(v) for k, v in times.items()}
    for r in rows:
        r["ms"] = ms[r["pick"]]
    print(name, {k: round(v, 3) for k, v in ms.items()}, flush=True)
    return {"rows": rows, "ms": ms, "times_ms": times}


def write(out: Path, data: dict) -> None:
    labels = data["labels"]
    lines = [f"# TLM@0 end to end: {', '.join(labels)} ({data['cpu']}, {data['threads']} threads)",
             "", f"Run {data['created']} with `{data['command']}` (models {data['models']}, cost model "
             f"`{data['cost_model']}`; medians of {data['rounds']} interleaved rounds, ms; every compiled output "
             "checked against PyTorch).", "",
             "| workload | tasks | " + " | ".join(labels) + f" | PyTorch | ONNX Runtime | {labels[-1]} / {labels[-2]} | outputs ok |",
             "|---|---:|" + "---:|" * (len(labels) + 3) + "---|"]
    fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    ratios = []
    for name, w in data["workloads"].items():
        ms = w["ms"]
        ratios.append(ms[labels[-1]] / ms[labels[-2]])
        ok = all(r["matches"] for r in w["rows"])
        lines.append(f"| {name} | {w['rows'][0]['tasks']} | " + " | ".join(fmt(ms[k]) for k in labels)
                     + f" | {fmt(ms.get('pytorch'))} | {fmt(ms.get('onnxruntime'))} | {ratios[-1]:.2f} | {ok} |")
    if ratios:
        geo = statistics.geometric_mean(ratios)
        lines += ["", f"Geometric mean of {labels[-1]} / {labels[-2]}: {geo:.2f} (below 1: {labels[-1]} is faster)."]
    (out / f"{data['name']}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", nargs="+", default=["bert_tiny", "dcgan", "mobilenet_v2", "resnet_50"])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--samples", type=int, default=32, help="samples the logprob and cost picks choose from")
    ap.add_argument("--models", nargs="+", default=None, help="LABEL=DIR ... (default: the shipped model)")
    ap.add_argument("--picks", nargs="+", default=list(PICKS), choices=PICKS)
    ap.add_argument("--cost-models", nargs="+", default=None,
                    help="LABEL=DIR ... for the cost pick (default: the shipped one for the host)")
    ap.add_argument("--paired", action="store_true", help="the i-th model with the i-th cost model only")
    ap.add_argument("--lean-check", default="on", help="on, off or both: the redone-work check of first choices")
    ap.add_argument("--name", default="pick", help="results file name")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args(argv)
    from tlm.graph.target import host_target
    from tlm.model.lm import default_model_dir
    from tlm.search.costmodel import default_cost_model

    target = host_target()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cm = default_cost_model(target)
    models = dict(m.split("=", 1) for m in args.models) if args.models else {"shipped": None}
    cost_models = dict(c.split("=", 1) for c in args.cost_models) if args.cost_models else {"shipped": "auto"}
    runs = with_lean(contenders(models, args.picks, cost_models, args.paired), args.lean_check)
    labels = [r[0] for r in runs]
    data = {"created": time.strftime("%Y-%m-%d %H:%M:%S"), "cpu": target.cpu, "threads": target.cores,
            "rounds": args.rounds, "name": args.name, "labels": labels,
            "cost_model": ", ".join(f"{c}={Path(d).name}" for c, d in cost_models.items()) if args.cost_models
            else (cm.name if cm else None),
            "models": {m: d or default_model_dir(target).name for m, d in models.items()},
            "command": "python bench/pick.py --workloads " + " ".join(args.workloads)
                       + f" --rounds {args.rounds} --samples {args.samples}"
                       + (" --models " + " ".join(args.models) if args.models else "")
                       + ("" if args.picks == list(PICKS) else " --picks " + " ".join(args.picks))
                       + (" --cost-models " + " ".join(args.cost_models) if args.cost_models else "")
                       + (" --paired" if args.paired else "")
                       + ("" if args.lean_check == "on" else f" --lean-check {args.lean_check}")
                       + ("" if args.name == "pick" else f" --name {args.name}"), "workloads": {}}
    for name in args.workloads:
        data["workloads"][name] = run_workload(name, target, args.rounds, args.samples, runs)
        (out / f"{args.name}.json").write_text(json.dumps(data, indent=1, default=str))
    write(out, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
