#!/usr/bin/env bash
# One call on the GPU machine (issue 49): train a GPU TLM, measure GPU bundles, then PyTorch's baselines.
#   bash bench/gpu_device.sh BUNDLE[:SECONDS] ...   (SECONDS_PER_BUNDLE default, PYTORCH=0/1, COMPILE=0/1)
# Writes under $OUT (8 files come back): <bundle>-results.jsonl and <bundle>-summary.json (the
# device in it) per bundle, log.txt, pytorch.json. The bundles are built here (tlm gpu bundle) and
# carried; nothing is downloaded there. Needs python3 with numpy + CuPy, nvcc, torch.
# TRAIN=DIR first pretrains TLM-base on DIR/corpus.json.xz with DIR/tokenizer.json (`tlm pretrain
# --vocab-only --data BUNDLE...` made both where TVM is), fine-tunes it on DIR/demos.jsonl
# (tlm.model.demos.write_demos) and brings both back as $OUT/tlm-base.tar and tlm-ft.tar (STEPS, FT_EPOCHS).
# PLANS="DIR ..." then runs whole-model GPU plans (`tlm gpu plan WORKLOAD --out DIR` made them here):
# each `python3 -m tlm.measure.cuda_plan DIR --out /tmp/tlm-plan/NAME` (compile, check against the
# CPU's output, time: whole plan, CUDA graph, per step; PLAN_SECONDS, default 240) adds one line
# to $OUT/plans.jsonl (its plan-result.json, "plan": NAME, the folder's name). A plan is at most
# 48 MiB: weights are regenerated there. Order: TRAIN, PLANS, PyTorch, then the bundles; with
# BUDGET=S (seconds for the whole script) each bundle runs for what is left, 45 s kept for the end.
# ASSEMBLE="NAME=PLAN:BUNDLE:PROPOSER[:FIRST|:FILE] ..." runs, after the bundles, whole-model plans put together
# here from what the call just measured (python3 -m tlm.measure.plan_assemble): PLAN's functions with
# PROPOSER's fastest correct program of its first FIRST in BUNDLE, or of those the candidates FILE names
# (--only: the cost model's top 10 of TLM's samples, `tlm gpu-heldout candidates --cm-top 10`; e.g. a dlight plan and a held-out
# bundle: TLM@10g and MetaSchedule@64g of a model in one call); each is a line of plans.jsonl named NAME
# (WORKLOAD-SCHEDULES, as bench/gpu_plans.py reads it). With BUDGET, ASSEMBLE_RESERVE seconds per plan are kept
# for them (default PLAN_SECONDS + 30; a plan whose bundle and dlight plan were compiled ahead needs no nvcc there).
# RESUME="RUN_DIR ..." (runs of the same bundles on an earlier machine, e.g. results/gpu/run-...):
# their <bundle>-results.jsonl seed the runner, which measures only the programs they lack;
# <bundle>-results.jsonl then holds only the new lines (ingest them like any run's).
# Bundles and plans compiled ahead here (`tlm gpu precompile`, tools/gpu_prepare.sh) carry their cubins: the
# runners take them and run nvcc only for the rest (each log says how many; TLM_AHEAD=0: compile all there).
# The tracked tree is over the 64 MiB a call carries: `bash tools/device_tree.sh drop` before the
# session's device calls, `restore` after (no commit in between).
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/tlm-out}
mkdir -p "$OUT"
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  command -v nvcc && nvcc --version | tail -1
  python3 -c "import cupy, numpy; print('cupy', cupy.__version__, 'numpy', numpy.__version__)"
  if [ -n "${TRAIN:-}" ]; then
    M=/tmp/tlm-models; mkdir -p $M/base; cp "$TRAIN/tokenizer.json" $M/base/
    timeout ${TRAIN_SECONDS:-300} python3 -m tlm.cli pretrain --data "$TRAIN/corpus.json.xz" --out $M/base \
      --preset small --steps ${STEPS:-2000} --batch-size 64 --device cuda
    echo "pretrain rc $?"
    timeout 200 python3 -m tlm.model.finetune --base $M/base --demos "$TRAIN/demos.jsonl" --out $M/ft \
      --epochs ${FT_EPOCHS:-10} --seed 1 --device cuda
    echo "finetune rc $?"
    rm -rf $M/base/checkpoint  # one tar per model: a file that comes back holds 16 MiB at most
    for m in base ft; do tar -C $M -cf "$OUT/tlm-$m.tar" $m && ls -la "$OUT/tlm-$m.tar"; done
  fi
  run_plan() {  # PLAN_DIR NAME: compile, check and time one plan; a line of plans.jsonl
    timeout $(( ${PLAN_SECONDS:-240} + 60 )) python3 -m tlm.measure.cuda_plan "$1" --out "/tmp/tlm-plan/$2" \
      --seconds "${PLAN_SECONDS:-240}"
    echo "plan $2 rc $?"
    [ -f "/tmp/tlm-plan/$2/plan-result.json" ] && python3 -c "import json, sys; r = json.load(open(sys.argv[1])); r['plan'] = sys.argv[2]; print(json.dumps(r))" \
      "/tmp/tlm-plan/$2/plan-result.json" "$2" >> "$OUT/plans.jsonl"
    tail -3 "/tmp/tlm-plan/$2/child.log" 2>/dev/null
  }
  for p in ${PLANS:-}; do
    run_plan "$p" "$(basename "$p")"
  done
  if [ "${PYTORCH:-1}" = 1 ]; then
    extra=""; [ "${COMPILE:-0}" = 1 ] && extra="--compile"
    timeout ${PYTORCH_SECONDS:-240} python3 bench/gpu_pytorch.py --out "$OUT/pytorch.json" $extra
  fi
  for arg in "$@"; do
    b=${arg%%:*}; secs=${SECONDS_PER_BUNDLE:-360}; name=$(basename "$b")
    [ "$b" != "$arg" ] && secs=${arg#*:}
    if [ -n "${BUDGET:-}" ]; then
      left=$(( BUDGET - SECONDS - 45 - $(echo ${ASSEMBLE:-} | wc -w) * ${ASSEMBLE_RESERVE:-$(( ${PLAN_SECONDS:-240} + 30 ))} ))
      [ $left -lt $secs ] && secs=$left
      [ $secs -lt 30 ] && { echo "bundle $name skipped: ${left}s left of BUDGET=$BUDGET"; continue; }
    fi
    seeded=0
    if [ -n "${RESUME:-}" ] && [ ! -f "/tmp/tlm-run/$name/results.jsonl" ]; then
      mkdir -p "/tmp/tlm-run/$name"
      for r in $RESUME; do
        [ -f "$r/$name-results.jsonl" ] && cat "$r/$name-results.jsonl" >> "/tmp/tlm-run/$name/results.jsonl"
      done
      [ -f "/tmp/tlm-run/$name/results.jsonl" ] && seeded=$(wc -l < "/tmp/tlm-run/$name/results.jsonl")
      echo "bundle $name: $seeded lines measured before (RESUME), measuring the rest"
      echo "$seeded" > "/tmp/tlm-run/$name/seeded"
    fi
    [ -f "/tmp/tlm-run/$name/seeded" ] && seeded=$(cat "/tmp/tlm-run/$name/seeded")
    timeout $(( secs + 90 )) python3 -m tlm.measure.cuda_runner "$b" --out "/tmp/tlm-run/$name" \
      --work "/tmp/tlm-work/$name" --seconds "$secs"
    tail -n +$(( seeded + 1 )) "/tmp/tlm-run/$name/results.jsonl" > "$OUT/$name-results.jsonl" 2>/dev/null
    cp "/tmp/tlm-run/$name/summary.json" "$OUT/$name-summary.json" 2>/dev/null
    tail -3 "/tmp/tlm-run/$name/child.log" 2>/dev/null
  done
  for a in ${ASSEMBLE:-}; do
    name=${a%%=*}; IFS=: read -r plan b proposer first <<< "${a#*=}"
    python3 -m tlm.measure.plan_assemble "$plan" "$b" "/tmp/tlm-run/$(basename "$b")/results.jsonl" \
      --proposer "$proposer" ${first:+$([[ $first =~ ^[0-9]+$ ]] && echo --first || echo --only) $first} \
      --out "/tmp/tlm-asm/$name" && run_plan "/tmp/tlm-asm/$name" "$name"
  done
  date -u
} 2>&1 | tee "$OUT/log.txt"
