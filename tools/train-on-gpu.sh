#!/usr/bin/env bash
# Pretrain TLM-base and fine-tune it on a GPU machine: the GPU half of making the shipped models
# (pretrained/README.md). Run in the repository root:
#
#   bash tools/train-on-gpu.sh IN OUT [PRESET...]        # PRESETs (tlm.model.lm presets): default small medium
#
# The machine needs this repository, Python with torch (CUDA) and transformers; no TVM. IN holds
#   tokenizer.json, corpus.json.xz   the vocabulary and packed corpus, made where TVM is by
#                                    `tlm pretrain --vocab-only --out IN ...` (pretrained/README.md)
#   demos.jsonl                      the demonstrations to fine-tune on (tools/make_demos.py, xz -d)
# Writes, per preset (all side by side on the one GPU): OUT/PRESET (TLM-base), OUT/PRESET-ft (fine-tuned)
# and OUT/PRESET.log. Steps: SMALL_STEPS (default 12000), MEDIUM_STEPS (10000), STEPS for other presets;
# FT_SEED (default 2) seeds the fine-tuning. Without TVM the fine-tuned models cannot name the
# demonstrations' CPUs: copy OUT back and run tools/unpack_models.py where TVM is.
set -u
if [ $# -lt 2 ]; then sed -n '5p' "$0"; exit 2; fi
IN=$1 OUT=$2; shift 2
PRESETS=${*:-small medium}
for f in tokenizer.json corpus.json.xz demos.jsonl; do
  [ -f "$IN/$f" ] || { echo "missing $IN/$f" >&2; exit 2; }
done
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi -L; python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.is_available())"
train() {  # preset steps
  mkdir -p "$OUT/$1"; cp "$IN/tokenizer.json" "$OUT/$1/"
  python3 -m tlm.cli pretrain --data "$IN/corpus.json.xz" --out "$OUT/$1" --preset "$1" --steps "$2" \
      --batch-size 64 --device cuda > "$OUT/$1.log" 2>&1
  echo "pretrain $1 rc $?" >> "$OUT/$1.log"
  python3 -m tlm.model.finetune --base "$OUT/$1" --demos "$IN/demos.jsonl" --out "$OUT/$1-ft" --seed "${FT_SEED:-2}" \
      --device cuda >> "$OUT/$1.log" 2>&1
  echo "finetune $1 rc $?" >> "$OUT/$1.log"
}
for preset in $PRESETS; do
  case $preset in
    small) steps=${SMALL_STEPS:-12000} ;;
    medium) steps=${MEDIUM_STEPS:-10000} ;;
    *) steps=${STEPS:?STEPS: the pretraining steps of preset $preset} ;;
  esac
  train "$preset" "$steps" &
done
wait
tail -n 2 "$OUT"/*.log
