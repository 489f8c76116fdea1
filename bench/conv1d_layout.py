"""1-D convs in NCW (their import layout) or NWC (tlm.graph.layout since extraction version 6)?

    python bench/conv1d_layout.py [--models conv1d_audio,wav2vec2,...] [--budget 0] [--rounds 7]

Each model of the outside battery (bench/outside_models.py) is compiled at `--budget` with the
shipped model twice: with `conv_layout="NCHW"` (no conv changes layout; these models have no 2-D
conv) and with the default (1-D convs NWC/WIO), each output checked against PyTorch; then both
libraries and PyTorch eager are timed in one interleaved run (median of `--rounds` rounds, each
the median of 3 repeats of >= 50 ms), on the host's cores. Writes bench/results/conv1d_layout.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from outside_zoo import _commit  # bench/ is on the path when a bench script runs

MODELS = "conv1d_audio,wav2vec2,hubert,data2vec_audio,whisper_enc,tcn"
LAYOUTS = {"ncw": "NCHW", "nwc": None}  # None: the default (tlm.graph.layout.CONV_LAYOUT)


def build(name: str, layout: str | None, budget: str, work: Path) -> dict:
    """Compile one model in one layout; the library's path, tasks and check."""
    import warnings

    from outside_models import get
    from tlm.compiler.build import CompileConfig
    from tlm.compiler.job import tune_and_compile
    from tlm.graph.extract import extract_from_relax
    from tlm.graph.importer import import_torch
    from tlm.graph.target import resolve_target

    info = resolve_target(None)
    module, inputs = get(name).make()
    tag = "ncw" if layout else "nwc"
    db = work / f"{name}@{budget}-{tag}"
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        imported = import_torch(module, inputs, conv_layout=layout)
        tasks = extract_from_relax(imported.mod, info)
        compiled = tune_and_compile(imported, tasks, info, db=str(db), budget=int(budget) if budget.isdigit() else budget,
                                    config=CompileConfig(compare=False), output=str(db) + ".so")
    return {"artifact": str(db) + ".so", "tasks": compiled.tasks, "matches": bool(compiled.matches),
            "max_abs_diff": compiled.max_abs_diff, "compile_s": round(time.perf_counter() - t0, 1)}


def time_all(name: str, libs: dict[str, str], rounds: int) -> dict[str, float]:
    """Median ms of each library and PyTorch eager, interleaved round by round."""
    import torch
    import tvm
    from tvm import relax

    from outside_models import get
    from tlm.compiler.build import to_tvm
    from tlm.compiler.contenders import median_ms
    from tlm.graph.target import resolve_target

    torch.set_num_threads(resolve_target(None).cores)
    module, inputs = get(name).make()
    args = to_tvm(inputs)
    runners = {}
    for key, path in libs.items():
        f = relax.VirtualMachine(tvm.runtime.load_module(path), tvm.cpu())["main"]
        runners[key] = lambda f=f: f(*args)
    times: dict[str, list[float]] = {k: [] for k in [*runners, "pytorch"]}
    with torch.no_grad():
        runners["pytorch"] = lambda: module(*inputs)
        for _ in range(rounds):
            for key, fn in runners.items():
                times[key].append(median_ms(fn, repeat=3, min_repeat_ms=50))
    return {k: round(statistics.median(v), 4) for k, v in times.items()}


def report(rows: list[dict], meta: dict, out: Path) -> None:
    lines = ["# 1-D convs: NCW against NWC", "",
             f"Command: `{meta['command']}`. {meta['hardware']}, {meta['date']}, commit {meta['commit']}, "
             f"budget {meta['budget']}, {meta['rounds']} interleaved rounds, load {meta['load']}. Each library's "
             "output checked against PyTorch (`matches`). Times: median ms; speedup = NCW / NWC.", "",
             "| model | tasks NCW / NWC | NCW ms | NWC ms | PyTorch ms | NWC speedup | NWC / PyTorch | matches |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        t = r["ms"]
        lines.append(f"| {r['model']} | {r['ncw']['tasks']} / {r['nwc']['tasks']} | {t['ncw']:.3f} | {t['nwc']:.3f} | "
                     f"{t['pytorch']:.3f} | {t['ncw'] / t['nwc']:.2f}x | {t['nwc'] / t['pytorch']:.2f}x | "
                     f"{r['ncw']['matches'] and r['nwc']['matches']} |")
    speed = [r["ms"]["ncw"] / r["ms"]["nwc"] for r in rows]
    lines += ["", f"Geomean NWC speedup over {len(rows)} models: "
              f"{statistics.geometric_mean(speed):.2f}x (least {min(speed):.2f}x, most {max(speed):.2f}x)."]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


def main() -> None:
    from tlm.graph.target import resolve_target
    from tlm.measure.shards import host_label

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=MODELS)
    p.add_argument("--budget", default="0")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--work", default="work/conv1d-layout")
    p.add_argument("--out", default="bench/results/conv1d_layout")
    a = p.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in a.models.split(","):
        row = {"model": name}
        for tag, layout in LAYOUTS.items():
            row[tag] = build(name, layout, a.budget, work)
            print(name, tag, row[tag], flush=True)
        row["ms"] = time_all(name, {tag: row[tag]["artifact"] for tag in LAYOUTS}, a.rounds)
        print(name, row["ms"], flush=True)
        rows.append(row)
    meta = {"command": " ".join(["python bench/conv1d_layout.py", *sys.argv[1:]]), "hardware": host_label(resolve_target(None)),
            "date": time.strftime("%Y-%m-%d"), "commit": _commit(), "budget": a.budget, "rounds": a.rounds,
            "load": round(os.getloadavg()[0], 2)}
    report(rows, meta, Path(a.out))


if __name__ == "__main__":
    main()
