#!/usr/bin/env bash
# Everything the next GPU call needs (issue 49), built here without a GPU; re-running resumes.
#
#   bash tools/gpu_prepare.sh            # build (bundle C: ~1.5 h on 2 cores, plans: ~3 min each)
#   bash tools/gpu_prepare.sh --print    # only print what is ready and the device call
#
# (built last) 1. bundle C: random programs of the training tasks of 20 more workloads (those of bundles A
#    and B left out) for the H100: 571 tasks, 5,105 programs, ~30 MiB (BUNDLE_C);
# 2. one work database per contender of the held-out H100 run (TLM's 10 and MetaSchedule's 64
#    programs per task; never into the corpus) and, from them, whole-model plans of bert_base and
#    gpt2 with each contender's best programs, and with dlight for every task; dlight plans of
#    resnet_50 and mobilenet_v2 (PLANS_DIR, ~0.6 MiB each);
# 3. TLM@0 plans of the four (`tlm compile W --target h100 --budget 0`: the shipped GPU TLM's
#    samples, the shipped GPU cost model's pick, nothing measured; ~0.6 MiB each);
# 4. the held-out tasks of bert_base and gpt2 with every contender in one bundle (HELDOUT_ALL, 1,591
#    programs, ~7 MiB): the shipped GPU TLM's 32 samples per task, MetaSchedule@64's first-round
#    programs and 10 random ones (tools/gpu_heldout_all.py), so that all are measured on one card in
#    one call (the lent card may be an H200: same code, other timings).
# The call (one, ~9 minutes: plans, PyTorch eager in the same call, then the bundle for what is
# left of BUDGET) carries about 55 MiB with `tools/device_tree.sh drop` (restore after it).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
TLM=${TLM:-.venv/bin/tlm}
BUNDLE_C=${BUNDLE_C:-work/gpu2/bundle-c}
DBS=${DBS:-work/gpu3}
PLANS_DIR=${PLANS_DIR:-work/gpu3/plans}
HELDOUT_ALL=${HELDOUT_ALL:-work/gpu3/bundle-heldout-all}
HELDOUT=results/gpu/bundles/bundle-heldout
HELDOUT_RUN=results/gpu/run-2026-11-27-h100-b
SOURCES_C="bert_base-b1-s256 gpt2-b1-s256 bert_medium-b1-s128 bert_large-b1-s128 llama-b1-s128 bert_base-b2-s128
gpt2-b2-s128 vit-b1-i224 bert_tiny-b1-s256 llama-b2-s64 resnet_50-b1-i256 mobilenet_v2-b1-i256 densenet_121-b1-i224
resnext_50-b1-i240 vgg_16-b1-i224 inception_v3-b1-i299 efficientnet-b1-i240 mobilenet_v3-b1-i240 wide_resnet_50-b1-i224
resnet_18-b1-i224"

if [ "${1:-}" != "--print" ]; then
  for p in tlm metaschedule; do
    $TLM gpu ingest $HELDOUT $HELDOUT_RUN --db "$DBS/db-$p" --proposer $p
  done
  for w in bert_base-b1-s128 gpt2-b1-s128; do
    for p in tlm metaschedule; do
      [ -f "$PLANS_DIR/$w-$p/plan.json" ] || $TLM gpu plan $w --target h100 --db "$DBS/db-$p" --out "$PLANS_DIR/$w-$p"
    done
  done
  for w in bert_base-b1-s128 gpt2-b1-s128 resnet_50-b1-i224 mobilenet_v2-b1-i224; do
    [ -f "$PLANS_DIR/$w-dlight/plan.json" ] || $TLM gpu plan $w --target h100 --out "$PLANS_DIR/$w-dlight"
  done
  for w in bert_base-b1-s128 gpt2-b1-s128 resnet_50-b1-i224 mobilenet_v2-b1-i224; do
    [ -f "$PLANS_DIR/$w-tlm0/plan.json" ] || $TLM compile $w --target h100 --budget 0 --db "$DBS/db-tlm0" \
      -o "$PLANS_DIR/$w-tlm0"
  done
  [ -f "$DBS/heldout-tlm/candidates.jsonl" ] || $TLM gpu-heldout propose --target h100 \
    --model pretrained/tlm-ft-cuda-sm90 --tlm 32 --metaschedule 0 --out "$DBS/heldout-tlm"
  [ -f "$DBS/candidates-all.jsonl" ] || .venv/bin/python tools/gpu_heldout_all.py "$DBS/heldout-tlm/candidates.jsonl" \
    "$DBS/candidates-all.jsonl"
  [ -f "$HELDOUT_ALL/manifest.json.gz" ] || $TLM gpu bundle --target h100 --sources bert_base-b1-s128 gpt2-b1-s128 \
    --hold-out none --candidates "$DBS/candidates-all.jsonl" --jobs 1 --task-seconds 120 --out "$HELDOUT_ALL"
  # last: the longest step, and only more corpus data; the steps above are the evaluation's
  [ -f "$BUNDLE_C/manifest.json.gz" ] && [ -f "$BUNDLE_C/tasks.json.xz" ] ||
    nice -n 10 $TLM gpu bundle --target h100 --sources $SOURCES_C --per-task 12 --jobs 2 --task-seconds 30 \
      --skip results/gpu/bundles/bundle-a results/gpu/bundles/bundle-b --out "$BUNDLE_C"
fi
du -sh "$BUNDLE_C" "$PLANS_DIR" "$HELDOUT_ALL" 2>/dev/null || true
cat <<EOF
Ready. The call (device tool, one command; check \`status\` first, and give_back if no second call follows):
  bash tools/device_tree.sh drop
  run: command='PLANS="\$(ls -d $PLANS_DIR/*)" PLAN_SECONDS=60 PYTORCH=1 PYTORCH_SECONDS=120 BUDGET=560 bash bench/gpu_device.sh $HELDOUT_ALL:240 $BUNDLE_C:480 2>&1 | grep -v pow_by_natural'
       carry=["$HELDOUT_ALL", "$BUNDLE_C", "$PLANS_DIR"] timeout_s=600
  bash tools/device_tree.sh restore
Then, here: copy the call's files to results/gpu/run-<date>-<card>-<letter>/ (the card: status's device;
the plans and bundles were built for the H100, whose code the H200 shares), and
  python bench/gpu_plans.py results/gpu/run-...            (bench/results/gpu-e2e.md)
  $TLM gpu ingest $BUNDLE_C results/gpu/run-... --db work/gpu/db --corpus data/corpus   (+ --card h200 on an H200)
  $TLM gpu-heldout report $HELDOUT_ALL results/gpu/run-... --random $HELDOUT_ALL results/gpu/run-... \
    --proposals $DBS/heldout-tlm --cost-model pretrained/costmodel-cuda-sm90 --out bench/results/gpu-heldout-shipped
  (copy the plans' and bundles' manifests to results/gpu/bundles/ as results/gpu/README.md says)
A bundle cut short by BUDGET resumes in a second call on the same warm machine (same command).
EOF
