#!/usr/bin/env bash
# One call on the GPU machine (issue 49): measure GPU bundles, then PyTorch's baselines.
#   bash bench/gpu_device.sh BUNDLE[:SECONDS] ...   (SECONDS_PER_BUNDLE default, PYTORCH=0/1, COMPILE=0/1)
# Writes under $OUT (8 files come back): <bundle>-results.jsonl and <bundle>-summary.json (the
# device in it) per bundle, log.txt, pytorch.json. The bundles are built here (tlm gpu bundle) and
# carried; nothing is downloaded there. Needs python3 with numpy + CuPy, nvcc, torch.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/tlm-out}
mkdir -p "$OUT"
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  command -v nvcc && nvcc --version | tail -1
  python3 -c "import cupy, numpy; print('cupy', cupy.__version__, 'numpy', numpy.__version__)"
  for arg in "$@"; do
    b=${arg%%:*}; secs=${SECONDS_PER_BUNDLE:-360}
    [ "$b" != "$arg" ] && secs=${arg#*:}
    name=$(basename "$b")
    timeout $(( secs + 90 )) python3 -m tlm.measure.cuda_runner "$b" --out "/tmp/tlm-run/$name" \
      --work "/tmp/tlm-work/$name" --seconds "$secs"
    for f in results.jsonl summary.json; do
      cp "/tmp/tlm-run/$name/$f" "$OUT/$name-$f" 2>/dev/null
    done
    tail -3 "/tmp/tlm-run/$name/child.log" 2>/dev/null
  done
  if [ "${PYTORCH:-1}" = 1 ]; then
    extra=""; [ "${COMPILE:-0}" = 1 ] && extra="--compile"
    timeout ${PYTORCH_SECONDS:-240} python3 bench/gpu_pytorch.py --out "$OUT/pytorch.json" $extra
  fi
  date -u
} 2>&1 | tee "$OUT/log.txt"
