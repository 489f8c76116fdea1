"""Demonstration sets for the session-25 GPU fine-tuning runs: every CPU of the collector's DB,
the loop's training tasks. best8s: the 8 best distinct programs per task and CPU, each weighted
by (task's best / its latency)^4 (bench/learning.py's `speed`; `tlm finetune --per-task 8 --speed-power 4`). Run in the repository root where
TVM is, then: `cp work/collect-llvm-znver3-2c-train-set/demos/round-3.jsonl work/gpu-s25/ && xz
work/gpu-s25/*.jsonl` (what travels to the GPU machine is 64 MiB at most), and `bash
pretrained/finetune-variants/run.sh` there (device run, carry work/gpu-s25)."""
import os
os.makedirs("work/gpu-s25", exist_ok=True)
import json, time
from tlm.graph.tasks import Task
from tlm.measure.database import open_db
from tlm.model.demos import every_target_demos, write_demos

W = "work/collect-llvm-znver3-2c-train-set"
t0 = time.time()
tasks = [Task.from_json(t) for t in json.load(open(W + "/tasks.json"))]
T3 = {"kind": "llvm", "num-cores": 2, "mtriple": "x86_64-unknown-linux-gnu", "mcpu": "znver3"}
with open_db(W + "/db", create=False) as db:
    out, counts = every_target_demos(db, tasks, T3, 8, speed_power=4.0)
write_demos(out, "work/gpu-s25/best8s.jsonl")
print(len(out), "demonstrations", counts, "weights sum", sum(d.weight for d in out), f"{time.time() - t0:.0f} s")
