# GPU fine-tunings of TLM-base (no TVM there), side by side, fp16 tarballs back in $OUT.
# On the GPU machine, in the repository root (device run with carry: [G]):
#   G=work/gpu-s29 JOBS="final-s1:best1:1:0 final-s2:best1:2:0 final-8k:best1:1:8000" bash pretrained/finetune-variants/run.sh
# Each job is NAME:DEMOS:SEED:STEPS (DEMOS: G/DEMOS.jsonl.xz from make_demos.py; STEPS 0: the
# collector's recipe, 3 epochs capped at FinetuneConfig's 2,000 steps). Without TVM the models'
# `targets` cannot name the demonstrations' CPUs: unpack.py, here, joins what comes back, widens it
# to fp32 and copies them from the shipped model. Session 25 ran r3, r3-8k, s8-8k and s8-16k this way.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=${G:?} M=/tmp/m B=pretrained/tlm-base-llvm-x86_64
nvidia-smi -L; python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.is_available())"
for f in $G/*.jsonl.xz; do xz -dk "$f"; done; wc -l $G/*.jsonl
ft() {  # name demos seed steps
  start=$(date +%s)
  timeout ${FT_TIMEOUT:-470} python3 -m tlm.model.finetune --base $B --demos $G/$2.jsonl --out $M/$1 --seed $3 \
      --steps $4 --device ${DEVICE:-cuda} > $OUT/$1.log 2>&1
  echo "$1 rc $? in $(( $(date +%s) - start )) s" | tee -a $OUT/$1.log
}
names=()
for job in ${JOBS:?}; do
  IFS=: read -r name demos seed steps <<< "$job"
  ft "$name" "$demos" "$seed" "$steps" &
  names+=("$name")
done
wait
python3 pretrained/pack_fp16.py $M "${names[@]}"
ls -la $OUT
