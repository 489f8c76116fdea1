#!/usr/bin/env bash
# Fine-tunings of TLM-base side by side on a GPU machine. Run in the repository root:
#
#   bash tools/finetune-on-gpu.sh IN OUT NAME:DEMOS:SEED:STEPS [...]
#
# e.g. `bash tools/finetune-on-gpu.sh work/gpu-ft work/gpu-ft/models final-s1:best1:1:0 final-8k:best1:1:8000`.
# The machine needs this repository (with pretrained/), Python with torch (CUDA) and transformers;
# no TVM. IN holds DEMOS.jsonl.xz for each job's DEMOS (tools/make_demos.py --out IN --name DEMOS).
# STEPS 0: the collector's recipe (3 epochs, capped at FinetuneConfig's 2,000 steps). BASE: the
# model fine-tuned (default pretrained/tlm-base-llvm-x86_64). Writes OUT/NAME (the model) and
# OUT/NAME.log per job. Without TVM the models cannot name the demonstrations' CPUs: copy OUT back
# and run `python tools/unpack_models.py OUT DEST NAME...` where TVM is.
set -u
if [ $# -lt 3 ]; then sed -n '4p' "$0"; exit 2; fi
IN=$1 OUT=$2; shift 2
B=${BASE:-pretrained/tlm-base-llvm-x86_64}
mkdir -p "$OUT/demos"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi -L; python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.is_available())"
ft() {  # name demos seed steps
  start=$(date +%s)
  python3 -m tlm.model.finetune --base "$B" --demos "$OUT/demos/$2.jsonl" --out "$OUT/$1" --seed "$3" \
      --steps "$4" --device "${DEVICE:-cuda}" > "$OUT/$1.log" 2>&1
  echo "$1 rc $? in $(( $(date +%s) - start )) s" | tee -a "$OUT/$1.log"
}
for job in "$@"; do
  IFS=: read -r name demos seed steps <<< "$job"
  if [ ! -f "$OUT/demos/$demos.jsonl" ]; then
    [ -f "$IN/$demos.jsonl.xz" ] || { echo "missing $IN/$demos.jsonl.xz" >&2; exit 2; }
    xz -dc "$IN/$demos.jsonl.xz" > "$OUT/demos/$demos.jsonl"
  fi
done
for job in "$@"; do
  IFS=: read -r name demos seed steps <<< "$job"
  ft "$name" "$demos" "$seed" "$steps" &
done
wait
