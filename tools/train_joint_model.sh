#!/usr/bin/env bash
# One TLM for CPUs and GPUs (issue 49 item 5; pretrained/README.md, "One TLM for CPUs and GPUs"):
#   bash tools/train_joint_model.sh [W]     (W default work/joint; ~1 h 10 min + 16 min on 2 cores; resumes)
# the shipped CPU TLM-base warm-started on the GPU's pretraining sentences and two CPUs' measured ones, then
# fine-tuned on the best correct program of every corpus task, CPU and GPU (the GPU ones 4 times).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
TLM=${TLM:-.venv/bin/tlm}
W=${1:-work/joint}
mkdir -p "$W"
[ -f "$W/base/tlm.json" ] && grep -q '"step": 2500' "$W/base/tlm.json" ||
  $TLM pretrain --init pretrained/tlm-base-llvm-x86_64 --data data/pretrain/cuda-h100/2026-12-07[a-e]-corpus.json.xz \
    results/gpu/bundles/bundle-a results/gpu/bundles/bundle-b results/gpu/bundles/bundle-c \
    data/corpus/cuda-h100 data/corpus/cuda-h200 data/corpus/llvm-znver4-2c data/corpus/llvm-rocketlake-2c \
    --out "$W/base" --preset small --steps 2500 --batch-size 64 --lr 5e-4 \
    --source bert_base-b1-s128 gpt2-b1-s128 resnet_50-b1-i224 mobilenet_v2-b1-i224 --target h100
[ -f "$W/demos.jsonl" ] || .venv/bin/python - "$W" <<'PY'
import json, sys
from tlm.measure.database import open_db
from tlm.measure.shards import ingest
from tlm.model.demos import db_demos, write_demos
w = sys.argv[1]
with open_db(f"{w}/db") as db:
    ingest(db, "data/corpus")
cpu_t, cpu = db_demos(f"{w}/db", ["all"], 1)
gpu_t, gpu = db_demos(f"{w}/db", ["h100", "h200"], 1)
json.dump([t.config for t in cpu_t + gpu_t], open(f"{w}/demo-targets.json", "w"))
write_demos(cpu + gpu * 4, f"{w}/demos.jsonl")  # 988 GPU ones against ~14,500: ~10 passes in 2,500 steps
print(f"{len(cpu)} CPU and {len(gpu)} GPU demonstrations")
PY
mapfile -t T < <(.venv/bin/python -c "import json, sys; [print(json.dumps(t)) for t in json.load(open(sys.argv[1]))]" "$W/demo-targets.json")
[ -f "$W/ft/tlm.json" ] || $TLM finetune --base "$W/base" --demos "$W/demos.jsonl" --target "${T[@]}" --loss sentence \
  --steps 2500 --batch-size 16 --lr 1e-4 --seed 1 --threads 2 --out "$W/ft"
echo "joint TLM: $W/ft"
