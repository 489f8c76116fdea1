"""Demonstration sets for GPU fine-tuning runs (no TVM there), from the collector's record
database: the loop's training tasks, every CPU the database holds (each prompt names its own CPU).

    python pretrained/finetune-variants/make_demos.py --out work/gpu-s29 --name best1            # the paper's SFT
    python pretrained/finetune-variants/make_demos.py --out work/gpu-s25 --name best8s --per-task 8 --speed-power 4

`--per-task 8 --speed-power 4`: the 8 best distinct programs per task and CPU, each weighted by
(task's best / its latency)^4 (bench/learning.py's `speed`; `tlm finetune --per-task 8
--speed-power 4`), session 25's `best8s`. Writes OUT/NAME.jsonl.xz (what travels to the GPU
machine is 64 MiB at most); then `bash pretrained/finetune-variants/run.sh` there (device run,
carry OUT)."""
import argparse
import json
import lzma
import os
import time

from tlm.graph.tasks import Task
from tlm.measure.database import open_db
from tlm.model.demos import every_target_demos, write_demos

p = argparse.ArgumentParser()
p.add_argument("--work", default="work/collect-llvm-znver3-2c-train-set", help="the collector's folder")
p.add_argument("--out", required=True)
p.add_argument("--name", required=True)
p.add_argument("--per-task", type=int, default=1)
p.add_argument("--speed-power", type=float, default=0.0)
a = p.parse_args()
os.makedirs(a.out, exist_ok=True)
t0 = time.time()
tasks = [Task.from_json(t) for t in json.load(open(a.work + "/tasks.json"))]
target = json.load(open(a.work + "/config.json"))["target"]
with open_db(a.work + "/db", create=False) as db:
    demos, counts = every_target_demos(db, tasks, target, a.per_task, speed_power=a.speed_power)
path = f"{a.out}/{a.name}.jsonl"
write_demos(demos, path)
with open(path, "rb") as f, lzma.open(path + ".xz", "wb") as g:
    g.write(f.read())
os.remove(path)
print(len(demos), "demonstrations", counts, "weights sum", round(sum(d.weight for d in demos), 1),
      f"{time.time() - t0:.0f} s")
