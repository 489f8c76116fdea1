"""Sampling benchmark: programs/s per core and sentence length per task type.

    .venv/bin/python bench/sampling.py [--seconds S] [--tiny]

For each task type it times, on one core (one process, one thread):
  - `ms`: plain MetaSchedule random sampling (replay a design space letting TVM draw every
    decision, then the postprocessors), the reference;
  - `tlm`: our uniform random walk + postprocessors + rendering the sentence;
  - `parse`: sentence -> program (replay with validation + postprocessors).
Writes bench/results/sampling.json and sampling.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the shared TIR task builders live with the tests


def _rate(fn, seconds: float, min_n: int = 5) -> tuple[float, int]:
    n, start = 0, time.perf_counter()
    while n < min_n or time.perf_counter() - start < seconds:
        fn()
        n += 1
    return n / (time.perf_counter() - start), n


def bench_task(name: str, task, target, seconds: float) -> dict:
    from tvm.s_tir import Schedule

    from tlm.space.design import random_policy, task_space, walk
    from tlm.space.language import parse, render

    t0 = time.perf_counter()
    space = task_space(task, target)
    setup = time.perf_counter() - t0
    rng = random.Random(12345)

    def plain():
        trace = space.traces[rng.randrange(len(space))]
        sch = Schedule(space.mod, seed=rng.randrange(1, 2**30), debug_mask=0)
        trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=lambda inst, i, a, d: None)
        for proc in space.postprocs:
            if not proc.apply(sch):
                break

    policy = random_policy(rng)
    sentences: list[str] = []
    errors = [0]

    def ours():
        prog = walk(space, policy)
        if prog.error:
            errors[0] += 1
        else:
            sentences.append(render(prog, task, target))

    ms_rate, _ = _rate(plain, seconds)
    tlm_rate, tries = _rate(ours, seconds)
    it = iter(sentences)
    parse_rate, _ = _rate(lambda: parse(next(it), task, target, space=space), seconds / 2, min_n=min(5, len(sentences)))
    lengths = [len(s.split()) for s in sentences]
    return {
        "task": name, "task_name": task.name, "spaces": len(space), "setup_s": round(setup, 3),
        "ms_programs_per_s": round(ms_rate, 1), "tlm_programs_per_s": round(tlm_rate, 1),
        "parse_per_s": round(parse_rate, 1), "overhead": round(ms_rate / tlm_rate, 2),
        "invalid_fraction": round(errors[0] / tries, 3), "distinct": len(set(sentences)), "samples": len(sentences),
        "mean_tokens": round(sum(lengths) / len(lengths), 1), "max_tokens": max(lengths),
        "example": sentences[0],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=4.0, help="timing window per measurement")
    ap.add_argument("--tiny", action="store_true", help="toy shapes (quick check)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "sampling"))
    args = ap.parse_args()

    import os

    os.environ.setdefault("TVM_NUM_THREADS", "1")
    from tlm.space.intrin import light_tensor_intrin

    light_tensor_intrin()
    import workloads_tir as W

    from tlm.graph.target import host_target
    from tlm.space.language import SENTENCE_VERSION

    target = host_target()
    rows = []
    for name, build in (W.TINY if args.tiny else W.REALISTIC).items():
        row = bench_task(name, build(), target, args.seconds)
        rows.append(row)
        print(f"{name:15s} ms {row['ms_programs_per_s']:7.1f}/s  tlm {row['tlm_programs_per_s']:7.1f}/s  "
              f"parse {row['parse_per_s']:7.1f}/s  tokens mean {row['mean_tokens']} max {row['max_tokens']}", flush=True)
    meta = {"sentence_version": SENTENCE_VERSION, "target": target.config, "machine": platform.node(),
            "cpu": platform.processor() or target.cpu, "shapes": "tiny" if args.tiny else "realistic",
            "seconds_per_measurement": args.seconds, "note": "one process, single core; machine shared"}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = [
        f"# Sampling benchmark ({meta['shapes']} shapes, sentence v{SENTENCE_VERSION}, {target.cpu}, one core)", "",
        "| task | spaces | MetaSchedule prog/s | tlm prog/s | ratio | parse/s | mean tokens | max tokens |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['task']} | {r['spaces']} | {r['ms_programs_per_s']} | {r['tlm_programs_per_s']} | "
                     f"{r['overhead']} | {r['parse_per_s']} | {r['mean_tokens']} | {r['max_tokens']} |")
    lines += ["", "Example sentences:", ""] + [f"- {r['task']}: `{r['example']}`" for r in rows]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
