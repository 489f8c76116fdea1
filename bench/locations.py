"""Compute-location choice sets: computed by TVM's rules (`location_choices`) against probing
TVM's sampling (`probed_location_choices`, the method before session 22).

    python bench/locations.py [--tasks 200] [--walks 6] [--gen-tasks 6] [--samples 32] [--rounds 3]

1. Agreement and cost: `--walks` random walks of each of `--tasks` training tasks (the corpus's
   tasks archive, round robin over kinds); at every compute-location decision both sets are
   computed on the live schedule; reports the points, how many sets agree, and the thread CPU
   time of each method per kind.
2. Generation: the shipped fine-tuned model generates `--samples` programs (the collector's
   pool: 4 x 8) for each of `--gen-tasks` tasks with the most location decisions, with each
   method, the same seeds, in `--rounds` interleaved rounds (A B, B A, ...); reports the CPU
   seconds per task of the whole generation (model passes and replays; process time, since the
   collector may share the machine) and whether both generated the same sentences.

Writes OUT/locations.{json,md}.
"""

from __future__ import annotations

import argparse
import collections
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def _agreement(tasks, target, walks: int) -> dict:
    import tlm.space.design as D
    import tlm.space.locations as L

    per_kind: dict[str, collections.Counter] = {}
    for t in tasks:
        try:
            space = D.task_space(t, target)
        except Exception:  # a task without a design space here: nothing to compare
            continue
        rng = random.Random(1)
        st = per_kind.setdefault(t.kind, collections.Counter())

        def policy(p):
            if p.kind == "loc":
                sch, blk = p._probe
                t0 = time.thread_time()
                new = L.location_choices(sch, blk)
                t1 = time.thread_time()
                old = L.probed_location_choices(sch, blk)
                t2 = time.thread_time()
                st["points"] += 1
                st["agree"] += new == old
                st["rules_s"] += t1 - t0
                st["probed_s"] += t2 - t1
                return old[rng.randrange(len(old))]
            return p.choices[rng.randrange(len(p.choices))]

        for _ in range(walks):
            D.walk(space, policy, postproc=False)
    return {k: dict(v) for k, v in per_kind.items() if v["points"]}


def _generation(tasks, target, samples: int, rounds: int) -> dict:
    import torch

    import tlm.space.design as D
    import tlm.space.locations as L
    from tlm.model.generate import Generator

    torch.set_num_threads(1)  # as the collector generates
    gen = Generator.from_dir(ROOT / "pretrained" / "tlm-ft-llvm-x86_64", target, "cpu")
    methods = {"rules": L.location_choices, "probed": L.probed_location_choices}
    cpu: dict[str, list[float]] = {m: [] for m in methods}
    sentences: dict[str, list] = {}
    for t in tasks:
        D.task_space(t, target)
    gen.generate(tasks[0], 2, seed=99)  # warm the model and the choice tries
    for r in range(rounds):
        order = list(methods) if r % 2 == 0 else list(methods)[::-1]
        for m in order:
            D.location_choices = methods[m]
            t0 = time.process_time()
            got = [[g.sentence for g in gen.generate(t, samples, seed=1 + i)] for i, t in enumerate(tasks)]
            cpu[m].append((time.process_time() - t0) / len(tasks))
            sentences.setdefault(m, got)
    D.location_choices = methods["rules"]
    return {"cpu_s_per_task": {m: statistics.median(v) for m, v in cpu.items()}, "runs": cpu,
            "same_sentences": sentences["rules"] == sentences["probed"],
            "tasks": [t.name for t in tasks]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=200)
    p.add_argument("--walks", type=int, default=6)
    p.add_argument("--gen-tasks", type=int, default=6)
    p.add_argument("--samples", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = p.parse_args(argv)
    from results_file import write_results


    from collect_rate import _tasks

    from tlm.graph.target import host_target

    target = host_target()
    tasks = _tasks(args.tasks, args.seed, target)
    agree = _agreement(tasks, target, args.walks)
    # the kinds with the costliest location decisions, one task each
    heavy = sorted(agree, key=lambda k: -agree[k]["probed_s"] / agree[k]["points"])[: args.gen_tasks]
    gen_tasks = [next(t for t in tasks if t.kind == k) for k in heavy]
    gen = _generation(gen_tasks, target, args.samples, args.rounds)
    command = "python bench/locations.py " + " ".join(sys.argv[1:] if argv is None else argv)
    points = sum(v["points"] for v in agree.values())
    same = sum(v["agree"] for v in agree.values())
    rules = sum(v["rules_s"] for v in agree.values())
    probed = sum(v["probed_s"] for v in agree.values())
    summary = {"command": command, "host": target.key, "points": points, "agree": same, "rules_s": rules,
               "probed_s": probed, "per_kind": agree, "generation": gen}
    g = gen["cpu_s_per_task"]
    lines = ["# Compute-location choice sets: TVM's rules vs probing TVM's sampling", "",
             f"`{command}` on `{target.key}` (beside the collector; CPU time, not wall time).", "",
             f"Random walks of {len(tasks)} training tasks: {points} location decisions, the two sets agree at "
             f"**{same}**; CPU time {rules:.2f} s with the rules, {probed:.2f} s probing "
             f"(**{probed / max(rules, 1e-9):.1f}x**).", "",
             "| kind | points | agree | ms per point, rules | ms per point, probed |", "|---|---|---|---|---|"]
    for k, v in sorted(agree.items(), key=lambda kv: -kv[1]["probed_s"]):
        lines.append(f"| {k} | {v['points']} | {v['agree']} | {1e3 * v['rules_s'] / v['points']:.2f} | "
                     f"{1e3 * v['probed_s'] / v['points']:.2f} |")
    lines += ["", f"Generation of {args.samples} programs per task with the shipped fine-tuned model (one PyTorch "
              f"thread), {len(gen_tasks)} tasks ({', '.join(heavy)}), {args.rounds} interleaved rounds: CPU s per "
              f"task {g['rules']:.3f} with the rules, {g['probed']:.3f} probing "
              f"(**{g['probed'] / max(g['rules'], 1e-9):.2f}x**); the same sentences: {gen['same_sentences']}."]
    write_results(args.out, "locations", summary, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
