#!/usr/bin/env bash
# The shipped GPU models (issue 49), trained here on CPUs from what the repository holds; re-running resumes.
#
#   bash tools/train_gpu_models.sh [WORK]      # WORK default work/gpu-lm; ~1.5 h on 2 cores
#
# 1. TLM-base for CUDA: the vocabulary and the pretraining corpus are the random programs of the
#    GPU bundles (results/gpu/bundles/bundle-a, bundle-b: measured; bundle-c: measured in part;
#    pretraining needs sentences, not latencies),
#    with the choices of the four GPU test workloads' spaces in the vocabulary; the `small` preset,
#    3,000 steps of batch 64 on the CPU (a GPU does it in minutes: bench/gpu_device.sh TRAIN=).
# 2. TLM for CUDA: TLM-base fine-tuned on the best measured program of every training task on each
#    card of the corpus (data/corpus/cuda-h100, cuda-h200; the prompts name the card).
# 3. The GPU cost model: XGBoost ranking each task's GPU records (tlm costmodel --kind cuda
#    --objective pairwise, as shipped since 2026-12-04).
# PRETRAIN_EXTRA: more pretraining sentences for step 1 (packed files or sampling directories), e.g.
#    PRETRAIN_EXTRA="$(ls data/pretrain/cuda-h100/*-corpus.json.xz)"; the shipped TLM-base had none.
# Then copy WORK/ft to pretrained/tlm-ft-cuda-sm90 and WORK/costmodel-cuda to
# pretrained/costmodel-cuda-sm90 (TLM-base stays in WORK: compiling needs only the fine-tuned one);
# `make gpu-models` does both steps.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
TLM=${TLM:-.venv/bin/tlm}
W=${1:-work/gpu-lm}
# bundle-c: the committed manifest (5,138 programs; the shipped base read the 5,105 of the bundle as
# first built in work/gpu2/bundle-c, which a fresh clone has not)
DATA="results/gpu/bundles/bundle-a results/gpu/bundles/bundle-b results/gpu/bundles/bundle-c ${PRETRAIN_EXTRA:-}"
mkdir -p "$W/corpus"
ln -sfn "$PWD/data/corpus/cuda-h100" "$W/corpus/cuda-h100"
ln -sfn "$PWD/data/corpus/cuda-h200" "$W/corpus/cuda-h200"
[ -f "$W/base/tokenizer.json" ] ||
  $TLM pretrain --vocab-only --data $DATA --out "$W/base" --target h100 \
    --source bert_base-b1-s128 gpt2-b1-s128 resnet_50-b1-i224 mobilenet_v2-b1-i224
$TLM pretrain --data "$W/base/corpus.json.xz" --out "$W/base" --preset small --steps 3000 --batch-size 64 --device cpu
[ -f "$W/costmodel-cuda/costmodel-meta.json" ] ||
  $TLM costmodel --corpus "$W/corpus" --kind cuda --objective pairwise --out "$W/costmodel-cuda" --work "$W/cm-work"
[ -f "$W/ft/tlm.json" ] ||
  $TLM finetune --base "$W/base" --db "$W/cm-work/db" --target h100 h200 --per-task 1 --loss sentence \
    --epochs 10 --seed 1 --threads 2 --out "$W/ft"
echo "models in $W/ft and $W/costmodel-cuda"
