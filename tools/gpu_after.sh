#!/usr/bin/env bash
# After a GPU call of tools/gpu_prepare.sh: file what it brought back and make every report of it (issue 49).
#
#   bash tools/gpu_after.sh FILES RUN
#
# FILES: the folder the device tool put the call's files in (its files_at); RUN: the run's folder to be,
# results/gpu/run-<date>-<card>-<letter> (the card: the device's, h100 or h200). Re-running redoes the
# reports and skips what is filed already (ingest adds only programs a shard does not hold). What it does,
# each only where the call measured it:
# - copies FILES into RUN (no file overwritten) and reads the card from its log (nvidia-smi's line);
# - plans.jsonl: bench/gpu_plans.py (bench/results/gpu-e2e.md), and each plan's manifest kept in
#   results/gpu/bundles/plans-<date>/ (as results/gpu/README.md says);
# - the picks bundle: bench/gpu_picks.py against dlight (bench/results/gpu-picks-<date>);
# - the training bundles (bundle C's rest, the rounds R1 and R2): their records into the corpus (`tlm gpu ingest
#   --corpus data/corpus`, `--card h200` on an H200);
# - the CNN calls' held-out bundles: `tlm gpu-heldout report` per workload (bench/results/gpu-heldout-W-<date>).
# Then it prints what is left by hand (the run's line in results/gpu/README.md, the figures in the README).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: bash tools/gpu_after.sh FILES RUN (e.g. results/gpu/run-2026-12-08-h100-a)" >&2; exit 2; }
FILES=$1 RUN=$2
cd "$(git rev-parse --show-toplevel)"
source tools/gpu_paths.sh
[ -d "$FILES" ] || { echo "gpu_after: $FILES is not a folder" >&2; exit 2; }
[[ "$(basename "$RUN")" =~ ^run-([0-9]{4}-[0-9]{2}-[0-9]{2})-(h100|h200)-[a-z]$ ]] ||
  { echo "gpu_after: name the run results/gpu/run-<date>-<h100|h200>-<letter>, not $RUN" >&2; exit 2; }
DATE=${BASH_REMATCH[1]} NAMED=${BASH_REMATCH[2]}
CARD=$(grep -oE -m1 "NVIDIA H(100|200)" "$FILES/log.txt" 2>/dev/null | head -1 | sed "s/NVIDIA H/h/" || true)
[ -n "$CARD" ] || { echo "gpu_after: $FILES/log.txt names no H100 or H200 (the card is read from it)" >&2; exit 1; }
[ "$CARD" = "$NAMED" ] || { echo "gpu_after: the log says $CARD, the run's name $NAMED" >&2; exit 1; }
mkdir -p "$RUN"
cp -rn "$FILES"/. "$RUN"/
CARD_ARG=(); [ "$CARD" = h200 ] && CARD_ARG=(--card h200)  # the bundles are built for the H100 (same code)
done_any=0
has() { [ -f "$RUN/$(basename "$1")-results.jsonl" ]; }

if [ -f "$RUN/plans.jsonl" ]; then
  python3 bench/gpu_plans.py "$RUN"
  mkdir -p "results/gpu/bundles/plans-$DATE"
  for name in $(python3 -c "import json, sys; print(*[json.loads(l)['plan'] for l in open(sys.argv[1])])" "$RUN/plans.jsonl"); do
    for dir in "$PLANS_DIR/$name" "$CNN/plans/$name"; do
      out="results/gpu/bundles/plans-$DATE/$name.plan.json.xz"
      [ -f "$dir/plan.json" ] && [ ! -f "$out" ] && xz -c "$dir/plan.json" > "$out"
    done
  done
  done_any=1
fi
if has "$PICKS"; then
  python3 bench/gpu_picks.py "$PICKS" "$RUN" --proposals "$DBS/heldout-tlm" "$CNN/heldout-cnn" --out "bench/results/gpu-picks-$DATE"
  done_any=1
fi
for b in "$BUNDLE_C" "$R1" "$R2"; do
  if has "$b"; then
    $TLM gpu ingest "$b" "$RUN" --db work/gpu/db --corpus data/corpus "${CARD_ARG[@]}"
    done_any=1
  fi
done
for w in $CNN_WORKLOADS; do
  b="$CNN/bundle-heldout-${w%%-*}"
  if has "$b"; then
    more=(); has "$b-rest" && more=(--more "$b-rest" "$RUN")
    $TLM gpu-heldout report "$b" "$RUN" --random "$b" "$RUN" "${more[@]}" --proposals "$CNN/heldout-cnn" \
      --cost-model "$CM" --out "bench/results/gpu-heldout-${w%%-*}-$DATE"
    done_any=1
  fi
done
[ $done_any = 1 ] || { echo "gpu_after: $RUN holds none of the calls' results (plans.jsonl, <bundle>-results.jsonl)" >&2; exit 1; }
cat <<EOT
Filed $RUN ($CARD). By hand now: its line in results/gpu/README.md (bundles, programs, seconds: the log's
bundle summaries), the figures in README.md's GPU section and bench/results/gpu.md (python bench/gpu_report.py
with this run added to the command in it); where a picker beat tlm-cm, pretrained/candidates/README.md says how
to ship it; with new training records, the GPU models refit (bash tools/train_gpu_models.sh).
EOT
