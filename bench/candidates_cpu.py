"""CPU time of the collector's candidate generation, across checkouts (issue 15: generation speed).

    python bench/candidates_cpu.py [--checkouts DIR ...] [--tasks 24] [--rounds 2] [--out bench/results]

What the collector does for each task before measuring it (`tlm.search.proposals.candidates`: the
shipped fine-tuned model samples 32 programs on one PyTorch thread, the shipped cost model picks
6 and 2 are plain samples) for `--tasks` training tasks (the corpus's tasks archive, round robin
over kinds, as bench/collect_rate.py picks them), each checkout in its own process with its own
`tlm` first on the path, in interleaved rounds (A B, B A, ...). Design spaces are built before the
clock. Reports the process CPU time (the lanes' threads included; CPU time, not wall time, so the
figure holds beside other work) and a digest of the candidates' sentences: the same digest means
the same programs. To compare with an older revision:

    git worktree add /tmp/tlm-old REV && python bench/candidates_cpu.py --checkouts /tmp/tlm-old .

Writes OUT/candidates_cpu.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

WORKER = """
import hashlib, json, sys, tempfile, time
checkout, n = sys.argv[1], int(sys.argv[2])
sys.path.insert(0, checkout)
import torch
torch.set_num_threads(1)
import tlm  # this checkout's, before the bench folder's helpers put the main one on the path
sys.path.append(sys.argv[3])
from collect_rate import _tasks
from tlm.graph.target import host_target
from tlm.measure.database import open_db
from tlm.model.generate import Generator
from tlm.search.costmodel import CostModel, default_cost_model
from tlm.search.loop import LoopConfig
from tlm.search.proposals import candidates
from tlm.space.design import task_space
target = host_target()
tasks = _tasks(n, 0, target)
gen = Generator.from_dir(sys.argv[4], target, "cpu")
cm = CostModel.load(default_cost_model(target), target)
cfg = LoopConfig(base="", work=tempfile.mkdtemp(), cost_model="auto")
db = open_db(tempfile.mkdtemp() + "/db")
for t in tasks:
    task_space(t, target)
candidates(db, gen, tasks[0], target, cfg, cm, [], 8, 0, 0)  # warm: the choice tries, the cost model
t0 = time.process_time()
out = [[c.sentence for c in candidates(db, gen, t, target, cfg, cm, [], 8, 1, 0)[0]] for t in tasks]
cpu = time.process_time() - t0
print(json.dumps({"cpu_s": cpu, "digest": hashlib.sha1(json.dumps(out).encode()).hexdigest()[:12],
                  "programs": sum(map(len, out)), "tlm": tlm.__file__}))
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkouts", nargs="+", default=["."])
    p.add_argument("--tasks", type=int, default=24)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--model", default=str(ROOT / "pretrained" / "tlm-ft-llvm-x86_64"))
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT / "bench"))
    from measure_rate import _revision
    from results_file import write_results

    checkouts = [str(Path(c).resolve()) for c in args.checkouts]
    for c in checkouts:
        if not (Path(c) / "tlm" / "search" / "proposals.py").is_file():
            print(f"error: {c} is not a tlm checkout with tlm/search/proposals.py", file=sys.stderr)
            return 2
    runs: dict[str, list[dict]] = {c: [] for c in checkouts}
    for r in range(args.rounds):
        for c in (checkouts if r % 2 == 0 else checkouts[::-1]):
            out = subprocess.run([sys.executable, "-c", WORKER, c, str(args.tasks), str(ROOT / "bench"), args.model],
                                 capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=c), cwd=c)
            line = next((ln for ln in reversed(out.stdout.splitlines()) if ln.startswith("{")), None)
            if out.returncode or line is None:
                print(f"error: the worker failed in {c}: {(out.stderr.strip().splitlines() or ['?'])[-1]}",
                      file=sys.stderr)
                return 1
            res = json.loads(line)
            runs[c].append(res)
            print(f"round {r} {c}: {res['cpu_s']:.2f} CPU s, {res['programs']} programs, digest {res['digest']}",
                  flush=True)
    command = "python bench/candidates_cpu.py " + " ".join(sys.argv[1:] if argv is None else argv)
    med = {c: statistics.median(x["cpu_s"] for x in v) for c, v in runs.items()}
    from tlm.graph.target import host_target

    summary = {"command": command, "host": host_target().key, "tasks": args.tasks, "model": args.model,
               "checkouts": {c: {"revision": _revision(c), "cpu_s_median": med[c], "runs": v} for c, v in runs.items()}}
    first = checkouts[0]
    lines = ["# CPU time of the collector's candidate generation", "",
             f"`{command}` on `{summary['host']}`: {args.tasks} training tasks, 8 candidates each (32 samples of "
             f"the shipped fine-tuned model, the shipped cost model's picks), {args.rounds} interleaved rounds; "
             "process CPU time.", "",
             "| checkout | revision | CPU s (median) | per task | vs first | sentences digest |", "|---|---|---|---|---|---|"]
    for c, v in runs.items():
        lines.append(f"| {c} | {summary['checkouts'][c]['revision']} | {med[c]:.2f} | {med[c] / args.tasks:.3f} | "
                     f"{med[first] / med[c]:.2f}x | {', '.join(sorted({x['digest'] for x in v}))} |")
    write_results(args.out, "candidates_cpu", summary, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
