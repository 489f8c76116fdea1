"""Generation speed on a quiet and on a busy machine, per PyTorch threading setting (issue 15).

    python bench/generation.py [--sources resnet_50 bert_base mobilenet_v2] [--tasks 6]
                               [--samples 28] [--rounds 3] [--out bench/results]

The collector alternates generation (the language model's constrained sampling, PyTorch on the
CPU) with measurement in worker processes, on a 2-core machine that other jobs share. PyTorch's
OpenMP threads spin-wait between operations by default; a spinning thread that shares its core
with another busy process takes that core's time slice from the thread that has work, and a model
pass of a few milliseconds waits for it. Per setting, each run in its own process (OpenMP reads
OMP_WAIT_POLICY once, when PyTorch loads):
- `default`: PyTorch's threads (one per core), OpenMP's default wait policy;
- `passive`: the same threads, OMP_WAIT_POLICY=PASSIVE;
- `1thread`: torch.set_num_threads(1) (what `tlm collect` does: `--gen-threads 1`).
Conditions (the neighbours beside the generation): `quiet`; `busy`, one process spinning in pure
Python per core; `torch`, one process running PyTorch with its default threads (a test run, an
eval's PyTorch reference). Each run generates `--samples` programs (the collector's 4 x 7
cost-model pool) for each of `--tasks` tasks (the heaviest task of each of the heaviest kinds of
`--sources`), the same seeds in every run; rounds alternate the settings' order. Reports the
median seconds per task over rounds and whether every setting generated the same sentences.
Writes OUT/generation.{json,md}.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SETTINGS = {"default": {}, "passive": {"OMP_WAIT_POLICY": "PASSIVE"}, "1thread": {"TLM_BENCH_THREADS": "1"}}
CONDITIONS = ("quiet", "busy", "torch")
# The neighbours: `busy`, one pure-Python spinning process per core; `torch`, one process timing
# PyTorch matmuls with PyTorch's default threads (a test run or an eval's PyTorch reference).
NEIGHBOURS = {"quiet": [], "busy": ["while True: pass"] * (os.cpu_count() or 1),
              "torch": ["import torch\nx = torch.randn(256, 256)\nwhile True: x = torch.tanh(x @ x)"]}


def _tasks(sources: list[str], n: int) -> list[dict]:
    from tlm.graph.extract import tasks_for_source
    from tlm.graph.target import host_target

    target = host_target()
    tasks = {t.hash: t for src in sources for t in tasks_for_source(src, target).tasks}
    # The heaviest task of each kind, heaviest kinds first: where the collector's time goes.
    best: dict[str, object] = {}
    for t in sorted(tasks.values(), key=lambda t: (-t.flops, t.hash)):
        best.setdefault(t.kind, t)
    picked = sorted(best.values(), key=lambda t: -t.flops)[:n]
    return [t.to_json(with_mod=True) for t in picked]


def _worker(tasks_file: str, out_file: str, samples: int) -> None:
    threads = os.environ.get("TLM_BENCH_THREADS")
    import torch

    if threads:
        torch.set_num_threads(int(threads))
    from tlm.graph.tasks import Task
    from tlm.model.generate import Generator

    tasks = [Task.from_json(t) for t in json.loads(Path(tasks_file).read_text())]
    gen = Generator.from_dir(ROOT / "pretrained" / "tlm-base-llvm-x86_64")
    gen.generate(tasks[-1], 2, seed=1)  # warm: intrinsics, spaces' first build
    secs, digest = [], hashlib.sha256()
    for i, task in enumerate(tasks):
        t0 = time.perf_counter()
        progs = gen.generate(task, samples, seed=1000 + i)
        secs.append(time.perf_counter() - t0)
        for p in progs:
            digest.update(p.sentence.encode())
    Path(out_file).write_text(json.dumps({"seconds": secs, "sentences": digest.hexdigest()[:16],
                                          "torch_threads": torch.get_num_threads()}))


def _run(setting: str, condition: str, tasks_file: str, samples: int) -> dict:
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    env.update(SETTINGS[setting])
    burners = [subprocess.Popen([sys.executable, "-c", code], env={k: v for k, v in os.environ.items()
                                                                  if k != "OMP_WAIT_POLICY"})
               for code in NEIGHBOURS[condition]]
    try:
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            subprocess.run([sys.executable, __file__, "--worker", tasks_file, out.name, str(samples)], env=env,
                           check=True, stderr=subprocess.DEVNULL)
            return json.loads(Path(out.name).read_text())
    finally:
        for b in burners:
            b.kill()
            b.wait()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sources", nargs="+", default=["resnet_50", "bert_base", "mobilenet_v2"])
    p.add_argument("--tasks", type=int, default=6)
    p.add_argument("--samples", type=int, default=28)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = p.parse_args(argv)
    from tlm.graph.target import host_target

    target = host_target()
    tasks = _tasks(args.sources, args.tasks)
    runs: dict[str, list] = {f"{s}/{c}": [] for c in CONDITIONS for s in SETTINGS}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(tasks, f)
        tasks_file = f.name
    try:
        for r in range(args.rounds):
            order = list(SETTINGS) if r % 2 == 0 else list(SETTINGS)[::-1]
            for cond in CONDITIONS:
                for s in order:
                    res = _run(s, cond, tasks_file, args.samples)
                    runs[f"{s}/{cond}"].append(res)
                    print(f"round {r} {s}/{cond}: {sum(res['seconds']):.2f} s", file=sys.stderr, flush=True)
    finally:
        os.unlink(tasks_file)
    rows = []
    for key, rs in runs.items():
        per_task = statistics.median(sum(x["seconds"]) / len(x["seconds"]) for x in rs)
        rows.append({"setting": key, "s_per_task": round(per_task, 3), "rounds": [round(sum(x["seconds"]), 2) for x in rs],
                     "sentences": sorted({x["sentences"] for x in rs}), "torch_threads": rs[0]["torch_threads"]})
    same = len({d for row in rows for d in row["sentences"]}) == 1
    cmd = "python bench/generation.py " + " ".join(argv if argv is not None else sys.argv[1:])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "generation.json").write_text(json.dumps({"target": target.config, "cpu": target.cpu, "command": cmd,
                                                     "tasks": [t["name"] for t in tasks], "samples": args.samples,
                                                     "rows": rows, "same_sentences": same}, indent=1))
    lines = [f"# Generation speed, quiet and busy, per PyTorch threading setting", "",
             f"`{cmd.strip()}` on `{json.dumps(target.config)}` ({target.cpu}): {len(tasks)} tasks "
             f"({', '.join(t['name'] for t in tasks)}), {args.samples} programs each, {args.rounds} rounds.", "",
             "| setting / machine | torch threads | s per task (median) | per round (s, all tasks) |", "|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['setting']} | {row['torch_threads']} | {row['s_per_task']:.3f} | "
                     f"{', '.join(str(x) for x in row['rounds'])} |")
    lines += ["", "Every setting generated the same sentences." if same else
              "**The settings generated different sentences** (see the digests in generation.json)."]
    (out / "generation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        _worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit(main())
