"""Demonstration sets for fine-tuning on a GPU machine (no TVM there), from the collector's record
database: the loop's training tasks, every CPU the database holds (each prompt names its own CPU).

    python tools/make_demos.py --out work/gpu-ft --name best1            # the paper's SFT: each task's best
    python tools/make_demos.py --out work/gpu-ft --name best8s --per-task 8 --speed-power 4

`--work` is the collector's folder (default work/collect-llvm-znver3-2c-train-set: its tasks.json,
config.json and db/). `--per-task 8 --speed-power 4`: the 8 best distinct programs per task and
CPU, each weighted by (task's best / its latency)^4 (bench/learning.py's `speed`; `tlm finetune
--per-task 8 --speed-power 4`). Writes OUT/NAME.jsonl.xz; then, with OUT copied to the GPU
machine, `bash tools/finetune-on-gpu.sh OUT MODELS ft:NAME:1:0` there (or `xz -dk` it to
OUT/demos.jsonl for tools/train-on-gpu.sh)."""
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
