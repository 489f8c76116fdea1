"""Fine-tuning speed: a batch padded whole against the same batch in two length parts (issue 15).

    python bench/finetune_speed.py [--demos 2000] [--steps 40] [--rounds 3] [--threads 2]
                                   [--out bench/results]

The collector fine-tunes TLM-base at the end of every round while it measures nothing (on 2 cores
the fine-tuning would share the cores the timed programs run on), so its steps are collection time.
Demonstrations: the fastest correct program of each task on each CPU of the committed corpus (what
`tlm collect --demo-targets all` fine-tunes on), the first `--demos` in a seeded order. Each round
fine-tunes the shipped TLM-base for `--steps` steps (batch 16, the default config otherwise) once
with every batch padded whole (`tlm.model.finetune.length_parts` replaced by one part) and once as
`tlm finetune` does it (two parts of similar lengths when that pads 10% less), the order alternating
between rounds, each in its own process. Reports seconds per step (median over rounds) and both
runs' final losses (the same batches and loss; dropout masks differ with the batch shapes).
Writes OUT/finetune_speed.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
ARMS = ("whole", "parts")


def _demos(corpus: Path, n: int, seed: int) -> list[dict]:
    best: dict[tuple[str, str], tuple[float, str]] = {}
    for shard in sorted(corpus.glob("*/*.jsonl.xz")):
        with lzma.open(shard, "rt") as f:
            for line in f:
                rec = json.loads(line)
                if "t" not in rec or rec.get("err") or not rec.get("lat") or not rec.get("s"):
                    continue
                key = (shard.parent.name, rec["t"])
                med = statistics.median(rec["lat"])
                if key not in best or med < best[key][0]:
                    best[key] = (med, rec["s"])
    demos = [{"task_hash": k[1], "sentence": s} for k, (_, s) in sorted(best.items())]
    random.Random(seed).shuffle(demos)
    return demos[:n]


def _worker(arm: str, demos_file: str, out_file: str, steps: int, threads: int) -> None:
    import time

    import tlm.model.finetune as ft
    from tlm.model.demos import Demo

    if arm == "whole":
        ft.length_parts = lambda picked, lengths: [list(picked)]
    demos = [Demo(d["task_hash"], d["sentence"], 0) for d in json.loads(Path(demos_file).read_text())]
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        ft.finetune(ROOT / "pretrained" / "tlm-base-llvm-x86_64", demos, Path(out) / "m",
                    ft.FinetuneConfig(steps=steps, threads=threads))
        wall = time.perf_counter() - t0
        rep = json.loads((Path(out) / "m" / ft.CONFIG_FILE).read_text())
    Path(out_file).write_text(json.dumps({"seconds": rep["seconds"], "wall_s": wall,
                                          "final_loss": rep["final_loss"], "first_loss": rep["first_loss"]}))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", default=str(ROOT / "data" / "corpus"))
    p.add_argument("--demos", type=int, default=2000)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = p.parse_args(argv)
    from tlm.graph.target import host_target

    target = host_target()
    demos = _demos(Path(args.corpus), args.demos, args.seed)
    runs: dict[str, list] = {a: [] for a in ARMS}
    with tempfile.TemporaryDirectory() as tmp:
        demos_file = os.path.join(tmp, "demos.json")
        Path(demos_file).write_text(json.dumps(demos))
        for r in range(args.rounds):
            for arm in (ARMS if r % 2 == 0 else ARMS[::-1]):
                out = os.path.join(tmp, f"{arm}-{r}.json")
                subprocess.run([sys.executable, __file__, "--worker", arm, demos_file, out, str(args.steps),
                                str(args.threads)], check=True, stderr=subprocess.DEVNULL)
                res = json.loads(Path(out).read_text())
                runs[arm].append(res)
                print(f"round {r} {arm}: {res['seconds'] / args.steps:.3f} s/step, final loss {res['final_loss']:.4f}",
                      file=sys.stderr, flush=True)
    rows = [{"arm": a, "s_per_step": round(statistics.median(x["seconds"] / args.steps for x in runs[a]), 4),
             "rounds": [round(x["seconds"] / args.steps, 4) for x in runs[a]],
             "final_loss": [round(x["final_loss"], 4) for x in runs[a]]} for a in ARMS]
    speedup = rows[0]["s_per_step"] / rows[1]["s_per_step"]
    cmd = ("python bench/finetune_speed.py " + " ".join(argv if argv is not None else sys.argv[1:])).strip()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "finetune_speed.json").write_text(json.dumps({"command": cmd, "target": target.config, "cpu": target.cpu,
                                                         "demos": len(demos), "steps": args.steps,
                                                         "threads": args.threads, "rows": rows,
                                                         "speedup": round(speedup, 3)}, indent=1))
    lines = ["# Fine-tuning speed: whole padded batches against two length parts", "",
             f"`{cmd}` on {target.cpu} ({json.dumps(target.config)}): TLM-base fine-tuned on {len(demos)} of the "
             f"corpus' demonstrations (each CPU's fastest program per task), {args.steps} steps of batch 16, "
             f"{args.threads} threads, {args.rounds} interleaved rounds, each run in its own process.", "",
             "| batches | s per step (median) | per round | final loss per round |", "|---|---:|---|---|"]
    for row in rows:
        lines.append(f"| {row['arm']} | {row['s_per_step']:.3f} | {', '.join(map(str, row['rounds']))} | "
                     f"{', '.join(map(str, row['final_loss']))} |")
    lines += ["", f"Two parts: {speedup:.2f}x the steps per second of whole batches."]
    (out / "finetune_speed.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        _worker(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]))
    else:
        sys.exit(main())
