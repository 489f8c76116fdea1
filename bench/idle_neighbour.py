"""Timings beside a fine-tuning process at idle priority (issue 15: fine-tune while measuring).

    python bench/idle_neighbour.py [--sources resnet_50 bert_base mobilenet_v2] [--tasks 16]
                                   [--programs 8] [--rounds 3] [--threads 2] [--out bench/results]

The collector stops measuring while it fine-tunes between rounds (about 8 minutes per round of
~1,054 tasks on 2 cores), because a fine-tuning process at normal priority would share the cores
the timed programs run on. Here the same random programs (bench/measure_rate.py's, with the
collector's timing rules) are measured `quiet` and `beside` a training process under SCHED_IDLE
(Linux: it runs only on a core nothing else wants) and nice 19 (the `small` GPT-2 preset trained
with AdamW on random sentences of the fine-tuning's shape, `--threads` PyTorch threads), in
interleaved rounds (quiet beside, beside quiet, ...), each measuring run in its own process.
Reports per condition the programs per second, how far the programs' medians move (beside vs
quiet, against quiet vs quiet across rounds: the machine's own noise), and the training steps
the neighbour made per second while the measurer ran (what a fine-tuning would get).

Writes OUT/idle_neighbour.{json,md}.
"""

from __future__ import annotations

import argparse
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
sys.path.insert(0, str(ROOT / "bench"))

TRAINER = """
import os, sys, time
os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
os.nice(19)
import torch
torch.set_num_threads(int(sys.argv[2]))
from tlm.model.lm import new_model
model = new_model("small", 1400, seed=0)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
ids = torch.randint(10, 1400, (16, 160))  # a fine-tuning batch: 16 sentences of ~160 words
steps = 0
while True:
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward(); opt.step(); opt.zero_grad()
    steps += 1
    with open(sys.argv[1], "w") as f:
        f.write(f"{steps} {time.time()}")
"""


def _measure(programs_file: str, result_file: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, str(ROOT / "bench" / "measure_rate.py"), "--worker", programs_file, result_file,
                    json.dumps({"min_repeat_ms": 10})], cwd=str(ROOT), env=env, check=True)
    with open(result_file) as f:
        res = json.load(f)
    res["rate"] = res["programs"] / res["seconds"]
    return res


def _steps(path: str) -> tuple[int, float]:
    try:
        n, t = Path(path).read_text().split()
        return int(n), float(t)
    except (OSError, ValueError):
        return 0, time.time()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sources", nargs="+", default=["resnet_50", "bert_base", "mobilenet_v2"])
    p.add_argument("--tasks", type=int, default=16)
    p.add_argument("--programs", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = p.parse_args(argv)
    from results_file import write_results

    if not hasattr(os, "SCHED_IDLE"):
        print("error: SCHED_IDLE needs Linux", file=sys.stderr)
        return 2

    from measure_rate import _per_program_median, _programs, _spread

    from tlm.graph.target import host_target

    work = _programs(args.sources, args.tasks, args.programs, args.seed)
    tmp = tempfile.mkdtemp(prefix="tlm-idle-")
    programs_file = os.path.join(tmp, "programs.json")
    with open(programs_file, "w") as f:
        json.dump(work, f)
    runs: dict[str, list[dict]] = {"quiet": [], "beside": []}
    for r in range(args.rounds):
        for cond in (["quiet", "beside"] if r % 2 == 0 else ["beside", "quiet"]):
            trainer = None
            steps_file = os.path.join(tmp, f"steps-{r}")
            if cond == "beside":
                trainer = subprocess.Popen([sys.executable, "-c", TRAINER, steps_file, str(args.threads)],
                                           cwd=str(ROOT), env=dict(os.environ, PYTHONPATH=str(ROOT)))
                while not _steps(steps_file)[0]:  # started: model built, first step done
                    time.sleep(0.5)
            s0 = _steps(steps_file)
            res = _measure(programs_file, os.path.join(tmp, f"result-{r}-{cond}.json"))
            if trainer is not None:
                s1 = _steps(steps_file)
                trainer.kill()
                trainer.wait()
                res["neighbour_steps_per_s"] = (s1[0] - s0[0]) / max(1e-9, s1[1] - s0[1])
            runs[cond].append(res)
            extra = f", neighbour {res['neighbour_steps_per_s']:.2f} steps/s" if trainer else ""
            print(f"round {r} {cond}: {res['programs']} programs ({res['ok']} correct) in {res['seconds']:.1f} s: "
                  f"{res['rate']:.3f}/s{extra}", flush=True)
    # the neighbour alone, for scale: its steps per second on the idle machine
    steps_file = os.path.join(tmp, "steps-alone")
    trainer = subprocess.Popen([sys.executable, "-c", TRAINER, steps_file, str(args.threads)], cwd=str(ROOT),
                               env=dict(os.environ, PYTHONPATH=str(ROOT)))
    while not _steps(steps_file)[0]:
        time.sleep(0.5)
    s0 = _steps(steps_file)
    time.sleep(30)
    s1 = _steps(steps_file)
    trainer.kill()
    trainer.wait()
    alone = (s1[0] - s0[0]) / max(1e-9, s1[1] - s0[1])

    quiet, beside = runs["quiet"], runs["beside"]
    noise = statistics.median(_spread(quiet[i]["medians_s"], quiet[j]["medians_s"])
                              for i in range(len(quiet)) for j in range(i + 1, len(quiet)))
    moved = _spread(_per_program_median(quiet), _per_program_median(beside))
    quiet_med = _per_program_median(quiet)
    beside_med = _per_program_median(beside)
    ratios = sorted(b / q for q, b in zip(quiet_med, beside_med) if q and b)
    slower = statistics.median(ratios) if ratios else None
    command = "python bench/idle_neighbour.py " + " ".join(sys.argv[1:] if argv is None else argv)
    summary = {"command": command, "host": host_target().key, "threads": args.threads,
               "rate": {k: statistics.median(x["rate"] for x in v) for k, v in runs.items()},
               "quiet_rounds_disagree": noise, "beside_vs_quiet_disagree": moved,
               "beside_over_quiet_median_ratio": slower,
               "neighbour_steps_per_s_beside": statistics.median(x["neighbour_steps_per_s"] for x in beside),
               "neighbour_steps_per_s_alone": alone, "runs": runs}
    lines = ["# Timings beside an idle-priority fine-tuning process", "",
             f"`{command}` on `{summary['host']}`: {len(work)} tasks, {sum(len(w['traces']) for w in work)} random "
             f"programs, the collector's timing rules, {args.rounds} interleaved rounds; the neighbour trains the "
             f"`small` preset with {args.threads} PyTorch threads under SCHED_IDLE and nice 19.", "",
             "| condition | programs/s (median) | per round | correct |", "|---|---|---|---|"]
    for k, v in runs.items():
        lines.append(f"| {k} | {summary['rate'][k]:.3f} | {', '.join(format(x['rate'], '.3f') for x in v)} | "
                     f"{v[0]['ok']} |")
    lines += ["", f"Programs' medians: quiet rounds disagree with each other by {noise:.1%} (median over programs "
              f"and pairs of rounds of |log ratio|); beside vs quiet (medians over rounds) by {moved:.1%}; "
              f"the median program's latency beside / quiet: {slower:.3f}.", "",
              f"The neighbour's training steps per second: {summary['neighbour_steps_per_s_beside']:.2f} beside the "
              f"measurer, {alone:.2f} alone."]
    write_results(args.out, "idle_neighbour", summary, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
