"""Conv output widths padded to a multiple of 8 (tlm.graph.widths.conv_width_parts, 2026-12-06):
whole models compiled at budget 0 with the padding (`padded`) and without it (`as imported`), in
one interleaved run with PyTorch eager.

    python bench/conv_widths.py --models densenet_block,gn_decoder,dcgan-b8 [--rounds 9]

A model is a battery entry (bench/outside_models.py) or a zoo workload. Each variant is compiled
in this process from an empty record database and its own task cache (the cache key does not
know the patch), its output checked against PyTorch's; `as imported` patches
`conv_width_parts` to leave every conv as it is. Then both libraries and PyTorch eager are
timed in one interleaved run (tlm.eval.timing.interleaved: medians of the rounds). Rows go to
bench/results/conv_widths.json (appended, keyed by host and commit) and conv_widths.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"


def model_and_inputs(name: str):
    """(torch module, example inputs) of a battery entry or a zoo workload."""
    from outside_models import _BY_NAME, get

    if name in _BY_NAME:
        return get(name).make()
    from tlm.graph.zoo import get_workload

    return get_workload(name).build()


def compile_variant(module, inputs, padded: bool, host):
    """(compiled model, padded conv tasks) of `module` at budget 0, with or without the padding."""
    from tlm.compiler.build import CompileConfig
    from tlm.compiler.job import tune_and_compile
    from tlm.graph import widths
    from tlm.graph.extract import load

    work = tempfile.mkdtemp(prefix="conv-widths-")
    leave = contextlib.nullcontext() if padded else mock.patch.object(widths, "conv_width_parts", lambda n: None)
    with mock.patch.dict(os.environ, {"TLM_CACHE": os.path.join(work, "cache")}), leave:
        imported, tasks = load(module, inputs, host)
        compiled = tune_and_compile(imported, tasks, host, db=os.path.join(work, "db"), budget=0,
                                    config=CompileConfig(compare=False), output=os.path.join(work, "model.so"))
    return compiled, sum("strided_slice" in t.name and "conv" in t.name for t in tasks)


def run_model(name: str, host, rounds: int) -> dict:
    import torch

    from tlm.compiler.apply import to_tvm
    from tlm.eval.timing import interleaved

    module, inputs = model_and_inputs(name)
    row = {"model": name}
    fns = {}
    for variant, padded in (("padded", True), ("as imported", False)):
        compiled, changed = compile_variant(module, inputs, padded, host)
        row[variant] = {"matches": compiled.matches, "max_abs_diff": compiled.max_abs_diff, "tasks": compiled.tasks,
                        "padded_convs": changed}
        args = to_tvm(inputs)
        fns[variant] = (lambda main, args: lambda: main(*args))(compiled.vm["main"], args)
    with torch.no_grad():
        fns["PyTorch"] = lambda: module(*inputs)
        times = interleaved(fns, rounds)
    for k, v in times.items():
        row.setdefault(k, {})["ms"] = round(statistics.median(v), 4)
    return row


def main() -> None:
    from outside_zoo import _commit

    from tlm.graph.target import resolve_target
    from tlm.measure.shards import host_label

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", required=True)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    host = resolve_target(None)
    run = {"date": time.strftime("%Y-%m-%d %H:%M"), "hardware": host_label(host), "commit": _commit(),
           "command": "python bench/conv_widths.py " + " ".join(sys.argv[1:]), "rows": []}
    path = RESULTS / "conv_widths.json"
    runs = json.loads(path.read_text()) if path.exists() else []
    runs.append(run)
    for name in args.models.split(","):
        row = run_model(name, host, args.rounds)
        run["rows"].append(row)
        print(f"{name}: padded {row['padded']['ms']} ms, as imported {row['as imported']['ms']} ms", file=sys.stderr)
        path.write_text(json.dumps(runs, indent=1) + "\n")  # after each model: a stopped run keeps its rows
        (RESULTS / "conv_widths.md").write_text(report(runs))


def report(runs: list[dict]) -> str:
    lines = ["# Conv output widths padded to a multiple of 8 (tlm.graph.widths.conv_width_parts)", "",
             "Each run: whole models at budget 0, compiled with the padding and without it, both checked against "
             "PyTorch, then timed in one interleaved run with PyTorch eager (ms, median of the rounds). "
             "`convs padded`: conv tasks that compute a padded width.", ""]
    for r in runs:
        lines += [f"## {r['date']}, {r['hardware']}, commit {r['commit']}", "", f"Command: `{r['command']}`", "",
                  "| model | convs padded | padded ms | as imported ms | as imported / padded | PyTorch ms | "
                  "both match | max abs diff (padded) |", "|---|---|---|---|---|---|---|---|"]
        for x in r["rows"]:
            p, a = x["padded"], x["as imported"]
            lines.append(f"| {x['model']} | {p['padded_convs']} | {p['ms']} | {a['ms']} | {a['ms'] / p['ms']:.2f}x | "
                         f"{x['PyTorch']['ms']} | {p['matches'] and a['matches']} | {p['max_abs_diff']:.1e} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
