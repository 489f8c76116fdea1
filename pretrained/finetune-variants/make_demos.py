"""Demonstration sets for the session-25 GPU fine-tuning runs: every CPU of the collector's DB,
the loop's training tasks. best8s: the 8 best distinct programs per task and CPU, each weighted
by (task's best / its latency)^4 (bench/learning.py's `speed`). Run in the repository root where
TVM is, then: `cp work/collect-llvm-znver3-2c-train-set/demos/round-3.jsonl work/gpu-s25/ && xz
work/gpu-s25/*.jsonl` (what travels to the GPU machine is 64 MiB at most), and `bash
pretrained/finetune-variants/run.sh` there (device run, carry work/gpu-s25)."""
import os
os.makedirs("work/gpu-s25", exist_ok=True)
import json, time
from dataclasses import replace
from tlm.graph.tasks import Task
from tlm.measure.database import open_db
from tlm.model.demos import every_target_demos, write_demos

W = "work/collect-llvm-znver3-2c-train-set"
t0 = time.time()
tasks = [Task.from_json(t) for t in json.load(open(W + "/tasks.json"))]
T3 = {"kind": "llvm", "num-cores": 2, "mtriple": "x86_64-unknown-linux-gnu", "mcpu": "znver3"}
with open_db(W + "/db", create=False) as db:
    demos, counts = every_target_demos(db, tasks, T3, 8)
print(len(demos), counts, f"{time.time() - t0:.0f} s")
best = {}
for d in demos:
    k = (d.task_hash, d.sentence.split()[:d.prompt_len].__str__())
    best[k] = min(best.get(k, 1e9), d.median_s)
out = [replace(d, weight=(best[(d.task_hash, d.sentence.split()[:d.prompt_len].__str__())] / d.median_s) ** 4) for d in demos]
write_demos(out, "work/gpu-s25/best8s.jsonl")
print("weights sum", sum(d.weight for d in out), "n", len(out))
