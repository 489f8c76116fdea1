#!/usr/bin/env bash
# Everything the next GPU call needs (issue 49), built here without a GPU; re-running resumes.
#
#   bash tools/gpu_prepare.sh            # build (plans: ~3 min each; bundle C's rest, if absent: 4.6 min on 2 cores, 17 MB)
#   bash tools/gpu_prepare.sh --print    # only print what is ready and the device call
#
# The call after run-2026-12-04-h200-a (H200; its held-out bundle measured every contender):
# 1. whole-model plans (PLANS_DIR) of bert_base and gpt2 with TLM@10g's and MetaSchedule@64g's
#    programs as that run measured them (the shipped GPU TLM's first 10 samples a task, MetaSchedule's
#    first round of 64; `tlm gpu ingest --proposer P [--first 10] --card h200`), built for the H200;
#    and TLM@10g as the tuner measures with its cost model (`-tlmcm`: the cost model's top 10 of the
#    32 samples, `tlm gpu-heldout candidates --cm-top 10`, then `tlm gpu ingest --only`);
# 2. TLM@0 plans of the four workloads with the shipped models (the GPU cost model refit on that
#    run's records), and dlight plans of the four again (resnet_50's and mobilenet_v2's: the zoo's
#    BatchNorm statistics are calibrated since, and the plans carry the CPU output they are checked
#    against; all four: every whole-model figure of the table from the same call);
# 3. the rest of bundle C (BUNDLE_C: training tasks of 20 more workloads, 571 tasks, 5,138 programs, of
#    which run -a measured the first 2,072): `tlm gpu bundle --rest-of` builds the 3,066 left from the
#    committed manifest's sentences and tasks (results/gpu/bundles/bundle-c), with no sampling and no
#    extraction (was: the whole bundle rebuilt with seed 0, ~1.5 h, and the runner seeded with RESUME).
# 7. (since 2026-12-07, in the first call after the picks) a GPU training round: the joint TLM's 16 programs of
#    each of the 94 matmul, softmax, layer-norm and mean training tasks of 15 transformer workloads (R1, 1,492
#    programs; the held-out sums turn on a few matmuls, and the GPU corpus has random programs of such tasks
#    only): `tlm gpu-heldout propose --hold-out test --kinds ...`, then `tlm gpu bundle --hold-out test
#    --candidates`; committed as results/gpu/bundles/r1-2026-12-07 (its candidates, manifest and tasks), its
#    records go into the corpus like any training bundle's.
# 8. a second training round for a later call (R2, results/gpu/bundles/r2-2026-12-07): the same joint TLM's 8
#    programs of each of the 98 conv2d training tasks of resnet_50 and mobilenet_v2 at 240 and 256 pixels (771
#    programs; `--kinds conv2d --tlm 8`), built and compiled ahead the same way.
# The call (one, ~9 minutes) carries about 49 MiB with `tools/device_tree.sh drop` (the tree itself 3 MiB, the rest its
# bundles and plans with their cubins compiled ahead; restore after it).
# 4. a second call, in the same session if 6 minutes of device time are left, else the next: the whole-model
#    TLM@10g and MetaSchedule@64g of mobilenet_v2 and resnet_50 (issue 49's end-to-end target names all
#    four workloads; only bert_base and gpt2 have them). `tlm gpu-heldout propose` made the shipped GPU
#    TLM's 32 samples and MetaSchedule's first round of 64 of each of their 62 held-out tasks ($CNN/heldout-cnn,
#    ~1 h here); per workload, a bundle of TLM's first 10, the cost model's top 10 of its 32 (--cm-top 10;
#    $CNN/W-cm10.jsonl names them) and MetaSchedule's 64 per task
#    ($CNN/bundle-heldout-W, `tlm gpu-heldout candidates`: mobilenet_v2 34 tasks, resnet_50 29) and a dlight
#    plan whose functions name their tasks ($CNN/plans/W-dlight): the GPU machine measures the bundle, then
#    puts each contender's picks into that plan and runs both (ASSEMBLE=, tlm.measure.plan_assemble).
# 5. (before 4's calls, in the first call) zero-measurement picks of all 91 held-out tasks of the four
#    workloads in one small bundle (PICKS, 371 programs, ~50 s of the GPU; 459 since 2026-12-07c, below): the shipped cost model's pick of
#    the shipped GPU TLM's 32 samples (`tlm-cm`: TLM@0 as `tlm compile --budget 0` applies it; the CNNs'
#    never measured), the GPU donors it would put first (`donor`: tlm.search.donors with the GPU shards,
#    held back from first choices until measured) and the pick of the same TLM fine-tuned again on all 604 GPU
#    training tasks (`tlm-ft604-cm`; FT604, `tlm finetune --base pretrained/tlm-ft-cuda-sm90 --db DB --target
#    h100 h200 --per-task 1 --loss sentence --epochs 5 --seed 1`, DB: the corpus's GPU shards ingested),
#    and the shipped cost model's pick of 64 samples of the shipped TLM instead of 32 (`tlm-cm64`:
#    `TuneConfig.pick_samples`), and the pick of a GPU TLM pretrained on 2.3x the sentences (B2:
#    data/pretrain/cuda-h100 beside the bundles, `PRETRAIN_EXTRA=... bash tools/train_gpu_models.sh`,
#    fine-tuned from its base on all 604 tasks, 10 epochs; `tlm-b2-cm`), each against dlight's in the
#    same call (PICKS_COMMITTED: 379 lines, 371 programs built): `python bench/gpu_picks.py PICKS RUN --proposals ...`.
#    With them, the pick of one TLM for CPUs and GPUs (`tlm-joint-cm`; JOINT: the CPU TLM-base warm-started on the
#    GPU sentences and two CPUs' measured ones, fine-tuned on every corpus task's best program, CPU and GPU:
#    pretrained/README.md), PICKS_COMMITTED since 2026-12-07c (469 lines: 90 tasks have a pick).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
source tools/gpu_paths.sh  # TLM, BUNDLE_C, DBS, PLANS_DIR, CNN, PICKS, R1, ... (the calls' folders)
ahead() {  # the bundles and plans the calls carry, in the order they run (the first call's, then the CNN calls')
  echo "$PICKS" "$R1" $(ls -d "$PLANS_DIR"/* 2>/dev/null) "$BUNDLE_C" "$R2"
  for w in $CNN_WORKLOADS; do echo "$CNN/bundle-heldout-${w%%-*}" "$CNN/plans/$w-dlight" "$CNN/bundle-heldout-${w%%-*}-rest"; done
}
# Bundle C itself was `tlm gpu bundle --target h100 --per-task 12 --jobs 2 --task-seconds 30 --skip
# results/gpu/bundles/bundle-a results/gpu/bundles/bundle-b --sources bert_base-b1-s256 gpt2-b1-s256
# bert_medium-b1-s128 bert_large-b1-s128 llama-b1-s128 bert_base-b2-s128 gpt2-b2-s128 vit-b1-i224
# bert_tiny-b1-s256 llama-b2-s64 resnet_50-b1-i256 mobilenet_v2-b1-i256 densenet_121-b1-i224 resnext_50-b1-i240
# vgg_16-b1-i224 inception_v3-b1-i299 efficientnet-b1-i240 mobilenet_v3-b1-i240 wide_resnet_50-b1-i224
# resnet_18-b1-i224` (seed 0).

if [ "${1:-}" != "--print" ]; then
  if [ ! -f "$HELDOUT_ALL/manifest.json.gz" ]; then
    echo "$HELDOUT_ALL/manifest.json.gz is missing (the committed one is results/gpu/bundles/bundle-heldout-all)" >&2
    exit 1
  fi
  $TLM gpu ingest $HELDOUT_ALL $RUN_A --db "$DBS/db-tlm" --proposer tlm --first 10 --card h200
  $TLM gpu ingest $HELDOUT_ALL $RUN_A --db "$DBS/db-metaschedule" --proposer metaschedule --card h200
  if [ ! -f "$DBS/tlm-cm10.jsonl" ]; then  # the committed proposals, their config and calls
    mkdir -p "$DBS/heldout-tlm" && tar -C "$DBS/heldout-tlm" -xJf "$HELDOUT_ALL/proposals.tar.xz"
    cp "$HELDOUT_ALL/propose-config.json" "$DBS/heldout-tlm/config.json"
    cp "$HELDOUT_ALL/tasks.json" "$DBS/heldout-tlm/"
    $TLM gpu-heldout candidates "$DBS/heldout-tlm" --tlm 0:0 --metaschedule 0:0 --cm-top 10 \
      --cost-model pretrained/costmodel-cuda-sm90 --out "$DBS/tlm-cm10.jsonl"
  fi
  $TLM gpu ingest $HELDOUT_ALL $RUN_A --db "$DBS/db-tlmcm" --proposer tlm --only "$DBS/tlm-cm10.jsonl" --card h200
  for w in bert_base-b1-s128 gpt2-b1-s128; do
    for p in tlm tlmcm metaschedule; do
      [ -f "$PLANS_DIR/$w-$p/plan.json" ] || $TLM gpu plan $w --target h200 --db "$DBS/db-$p" --out "$PLANS_DIR/$w-$p"
    done
  done
  for w in $ALL4; do  # dlight's plans again in the same call: every whole-model figure from one machine
    [ -f "$PLANS_DIR/$w-dlight/plan.json" ] || $TLM gpu plan $w --target h100 --out "$PLANS_DIR/$w-dlight"
  done
  for w in bert_base-b1-s128 gpt2-b1-s128 resnet_50-b1-i224 mobilenet_v2-b1-i224; do
    [ -f "$PLANS_DIR/$w-tlm0/plan.json" ] || $TLM compile $w --target h100 --budget 0 --db "$DBS/db-tlm0" \
      -o "$PLANS_DIR/$w-tlm0"
  done
  [ -f "$BUNDLE_C/manifest.json.gz" ] && [ -f "$BUNDLE_C/tasks.json.xz" ] ||
    nice -n 10 $TLM gpu bundle --target h100 --jobs 2 --out "$BUNDLE_C" \
      --rest-of results/gpu/bundles/bundle-c $RUN_A results/gpu/run-2026-12-04-h200-b
  # 4. (resumes: each task's proposals are kept as made; the committed ones are unpacked first)
  if [ ! -d "$CNN/heldout-cnn/proposals" ] && [ -f results/gpu/bundles/heldout-cnn/proposals.tar.xz ]; then
    mkdir -p "$CNN/heldout-cnn" && tar -C "$CNN/heldout-cnn" -xJf results/gpu/bundles/heldout-cnn/proposals.tar.xz
    cp results/gpu/bundles/heldout-cnn/config.json results/gpu/bundles/heldout-cnn/tasks.json "$CNN/heldout-cnn/"
  fi
  # (the workloads in the order they were proposed in: another order is another config)
  $TLM gpu-heldout propose --target h100 --workloads resnet_50-b1-i224 mobilenet_v2-b1-i224 --model pretrained/tlm-ft-cuda-sm90 \
    --tlm 32 --metaschedule 64 --out "$CNN/heldout-cnn"
  for w in $CNN_WORKLOADS; do
    [ -f "$CNN/plans/$w-dlight/plan.json" ] || $TLM gpu plan $w --target h100 --out "$CNN/plans/$w-dlight"
    b="$CNN/bundle-heldout-${w%%-*}"
    if [ ! -f "$b/manifest.json.gz" ]; then
      $TLM gpu-heldout candidates "$CNN/heldout-cnn" --workloads $w --tlm 0:0 --metaschedule 0:0 --cm-top 10 \
        --cost-model pretrained/costmodel-cuda-sm90 --out "$CNN/$w-cm10.jsonl"
      $TLM gpu-heldout candidates "$CNN/heldout-cnn" --workloads $w --tlm 0:10 --metaschedule 0:64 --cm-top 10 \
        --cost-model pretrained/costmodel-cuda-sm90 --out "$CNN/$w-e2e.jsonl"
      $TLM gpu bundle --target h100 --jobs 2 --sources $w --hold-out none --candidates "$CNN/$w-e2e.jsonl" --out "$b"
    fi
    if [ ! -f "$b-rest/manifest.json.gz" ]; then  # TLM's samples 10-32: TLM@32 and the cost model's pick of 32
      $TLM gpu-heldout candidates "$CNN/heldout-cnn" --workloads $w --tlm 10:32 --metaschedule 0:0 \
        --except "$CNN/$w-e2e.jsonl" --out "$CNN/$w-rest.jsonl"
      $TLM gpu bundle --target h100 --jobs 2 --sources $w --hold-out none --candidates "$CNN/$w-rest.jsonl" --out "$b-rest"
    fi
  done
  # 5. (the CNN proposals unpacked by 4); the committed candidates go into the bundle; without them they
  #    are made again from the models (FT604, B2 and JOINT: pretrained/candidates)
  if [ ! -f "$PICKS/manifest.json.gz" ] && [ -f "$PICKS_COMMITTED" ]; then
    mkdir -p "$DBS" && xz -dc "$PICKS_COMMITTED" > "$DBS/picks.jsonl"
  elif [ ! -f "$PICKS/manifest.json.gz" ]; then
    [ -f "$FT604/tlm.json" ] && [ -f "$B2/tlm.json" ] && [ -f "$JOINT/tlm.json" ] ||
      { echo "no $FT604, $B2 or $JOINT (the TLMs of 5. above)" >&2; exit 1; }
    $TLM gpu-heldout propose --target h100 --workloads $ALL4 --model "$FT604" --tlm 32 --metaschedule 0 --out "$FT604_PROPOSALS"
    for P in "$DBS/heldout-tlm" "$CNN/heldout-cnn"; do
      $TLM gpu-heldout candidates "$P" --tlm 0:0 --metaschedule 0:0 --cm-top 1 --cost-model $CM --label tlm-cm --out "$P-pick.jsonl"
      $TLM gpu-heldout donors "$P" --cost-model $CM --out "$P-donors.jsonl"
    done
    $TLM gpu-heldout candidates "$FT604_PROPOSALS" --tlm 0:0 --metaschedule 0:0 --cm-top 1 --cost-model $CM \
      --label tlm-ft604-cm --out "$FT604_PROPOSALS-pick.jsonl"
    $TLM gpu-heldout propose --target h100 --workloads $ALL4 --model pretrained/tlm-ft-cuda-sm90 --tlm 64 \
      --metaschedule 0 --out "$S64_PROPOSALS"
    $TLM gpu-heldout candidates "$S64_PROPOSALS" --tlm 0:0 --metaschedule 0:0 --cm-top 1 --cost-model $CM \
      --label tlm-cm64 --out "$S64_PROPOSALS-pick.jsonl"
    $TLM gpu-heldout propose --target h100 --workloads $ALL4 --model "$B2" --tlm 32 --metaschedule 0 --out "$B2_PROPOSALS"
    $TLM gpu-heldout candidates "$B2_PROPOSALS" --tlm 0:0 --metaschedule 0:0 --cm-top 1 --cost-model $CM \
      --label tlm-b2-cm --out "$B2_PROPOSALS-pick.jsonl"
    $TLM gpu-heldout propose --target h100 --workloads $ALL4 --model "$JOINT" --tlm 32 --metaschedule 0 --out "$JOINT_PROPOSALS"
    $TLM gpu-heldout candidates "$JOINT_PROPOSALS" --tlm 0:0 --metaschedule 0:0 --cm-top 1 --cost-model $CM \
      --label tlm-joint-cm --out "$JOINT_PROPOSALS-pick.jsonl"
    cat "$DBS/heldout-tlm-pick.jsonl" "$CNN/heldout-cnn-pick.jsonl" "$DBS/heldout-tlm-donors.jsonl" \
      "$CNN/heldout-cnn-donors.jsonl" "$FT604_PROPOSALS-pick.jsonl" "$S64_PROPOSALS-pick.jsonl" \
      "$B2_PROPOSALS-pick.jsonl" "$JOINT_PROPOSALS-pick.jsonl" > "$DBS/picks.jsonl"
  fi
  [ -f "$PICKS/manifest.json.gz" ] ||
    $TLM gpu bundle --target h100 --jobs 2 --sources $ALL4 --hold-out none --candidates "$DBS/picks.jsonl" --out "$PICKS"
  # 7. and 8. the training rounds' bundles, from the committed candidates (the same programs; no model, no sampling)
  for r in "$R1:$R1_COMMITTED" "$R2:$R2_COMMITTED"; do
    b=${r%%:*} c=${r#*:}
    if [ ! -f "$b/manifest.json.gz" ]; then
      mkdir -p "$(dirname "$b")" && xz -dc "$c/candidates.jsonl.xz" > "$b.candidates.jsonl"
      $TLM gpu bundle --target h100 --jobs 2 --hold-out test --candidates "$b.candidates.jsonl" --out "$b" \
        --sources $(python3 -c "import json, sys; print(*json.load(open(sys.argv[1]))['workloads'])" "$c/propose-config.json")
    fi
  done
  # 6. every file of every call compiled ahead, here (tlm gpu precompile, resumes; the first call's 1,572 files
  #    took ~1 h of 2 cores shared with other work, the CNN calls' 730 ~50 min more, bench/results/gpu-ahead.md): the
  #    GPU machine then times programs instead of running nvcc (run-2026-12-04-h200-a was compile-bound: 14
  #    nvcc processes busy for all of bundle-c's 255 s, 8.1 programs a second)
  nice -n 5 $TLM gpu precompile $(ahead) --jobs 2
fi
du -sh "$BUNDLE_C" "$PLANS_DIR" "$PICKS" 2>/dev/null || true
$TLM gpu precompile --check $(ahead) || true  # what is not compiled ahead, the GPU machine compiles (slower; its log says)
EST1=$(bash tools/device_tree.sh estimate "$PICKS" "$R1" "$BUNDLE_C" "$PLANS_DIR")
cat <<EOT
Ready. The call (device tool, one command; check \`status\` first, and give_back if no second call follows):
  bash tools/device_tree.sh drop
  run: command='PLANS="\$(ls -d $PLANS_DIR/*)" PLAN_SECONDS=60 PYTORCH=1 COMPILE=1 PYTORCH_SECONDS=200 BUDGET=560 bash bench/gpu_device.sh $PICKS:60 $R1:120 $BUNDLE_C:420 2>&1 | grep -v pow_by_natural'
       carry=["$PICKS", "$R1", "$BUNDLE_C", "$PLANS_DIR"] timeout_s=600   (carries $EST1)
  bash tools/device_tree.sh restore
Then, here: bash tools/gpu_after.sh FILES results/gpu/run-<date>-<card>-<letter> (FILES: the call's files_at; the
card: status's device) files them and runs all of these:
  python bench/gpu_plans.py results/gpu/run-...            (bench/results/gpu-e2e.md)
  python bench/gpu_picks.py $PICKS results/gpu/run-... --proposals $DBS/heldout-tlm $CNN/heldout-cnn --out bench/results/gpu-picks-<date>
  $TLM gpu ingest $BUNDLE_C results/gpu/run-... --db work/gpu/db --corpus data/corpus   (+ --card h200 on an H200)
  $TLM gpu ingest $R1 results/gpu/run-... --db work/gpu/db --corpus data/corpus        (the same; then the GPU cost model
     refit on the corpus, \`bash tools/train_gpu_models.sh\`, and its picks of the held-out samples measured before:
     python bench/gpu_costmodel_cv.py ... as bench/results/gpu-costmodel-cv-2026-12-06.md says)
  (and keeps the plans' manifests in results/gpu/bundles/plans-<date>/, as results/gpu/README.md says)

The second call (4.), one workload a call (~9.5 minutes each, its files compiled ahead or not; mobilenet_v2 first):
EOT
for w in $CNN_WORKLOADS; do
  b="$CNN/bundle-heldout-${w%%-*}"
  echo "  run: command='ASSEMBLE=\"$w-tlm=$CNN/plans/$w-dlight:$b:tlm:10 $w-tlmcm=$CNN/plans/$w-dlight:$b:tlm:$CNN/$w-cm10.jsonl $w-metaschedule=$CNN/plans/$w-dlight:$b:metaschedule:64\" PLAN_SECONDS=60 PYTORCH=0 BUDGET=560 bash bench/gpu_device.sh $b:300 $b-rest:90'"
  echo "       carry=[\"$b\", \"$b-rest\", \"$CNN/plans/$w-dlight\", \"$CNN/$w-cm10.jsonl\"] timeout_s=600   (the tree dropped as above)"
done
asm="" carry="" main="" rest=""
for w in $CNN_WORKLOADS; do
  b="$CNN/bundle-heldout-${w%%-*}"
  asm="$asm $w-tlm=$CNN/plans/$w-dlight:$b:tlm:10 $w-tlmcm=$CNN/plans/$w-dlight:$b:tlm:$CNN/$w-cm10.jsonl $w-metaschedule=$CNN/plans/$w-dlight:$b:metaschedule:64"
  carry="$carry, \"$b\", \"$b-rest\", \"$CNN/plans/$w-dlight\", \"$CNN/$w-cm10.jsonl\""
  main="$main $b:200" rest="$rest $b-rest:45" dirs="${dirs:-} $b $b-rest $CNN/plans/$w-dlight $CNN/$w-cm10.jsonl"
done
EST2=$(bash tools/device_tree.sh estimate $dirs)
cat <<EOT
  or, when every file of both is compiled ahead (the --check above) and the first call's bundles ran at 20
  programs a second or more (its log's bundle summaries: programs / seconds), both workloads in one call:
  run: command='ASSEMBLE="${asm# }" PLAN_SECONDS=30 ASSEMBLE_RESERVE=40 PYTORCH=0 BUDGET=560 bash bench/gpu_device.sh${main}${rest}'
       carry=[${carry#, }] timeout_s=600   (carries $EST2)
  (mobilenet_v2: 2,574 + 382 programs, resnet_50: 2,185 + 402. Their files are large: 16 conv programs a file,
  up to 1.4 MB of CUDA C and ~47 CPU-seconds of nvcc; compiled here the bundles took 2,609 and 2,729 s of nvcc
  (bench/results/gpu-ahead.md), ~3 minutes of each call's 300 s on the GPU machine's 14 processes if its
  cores are like these; compiled ahead (step 6), the call only times them. The -rest bundles, TLM's samples
  10-32, get what is left and may be cut: RESUME finishes them later.)
Then, here: bash tools/gpu_after.sh FILES RUN, which runs python bench/gpu_plans.py RUN (TLM@10g against
MetaSchedule@64g), and the held-out report of the
bundle's tasks (B: the bundle): tlm gpu-heldout report B RUN --random B RUN --more B-rest RUN --proposals $CNN/heldout-cnn \
  --cost-model pretrained/costmodel-cuda-sm90 --out bench/results/gpu-heldout-W-<date>
(random@10 has no program there: its target is said not measured). Bundles ready:
EOT
for w in $CNN_WORKLOADS; do
  b="$CNN/bundle-heldout-${w%%-*}"
  for x in "$b" "$b-rest"; do
    [ -f "$x/manifest.json.gz" ] && echo "  $x ($(du -sh "$x" | cut -f1))" || echo "  $x: not built yet"
  done
done
cat <<EOT

A later call (when the calls above are done, or one whose CNN call has no time for it): the second training round,
  run: command='BUDGET=560 PYTORCH=0 bash bench/gpu_device.sh $R2:500'
       carry=["$R2"] timeout_s=600   (carries $(bash tools/device_tree.sh estimate "$R2"); the tree dropped as above)
then bash tools/gpu_after.sh FILES RUN ingests it (771 conv programs; 98 training tasks).
EOT
