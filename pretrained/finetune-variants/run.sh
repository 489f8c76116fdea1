# Session 25 GPU fine-tunings (no TVM there): four runs side by side from TLM-base, fp16 tarballs back.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=work/gpu-s25 M=/tmp/m B=pretrained/tlm-base-llvm-x86_64
nvidia-smi -L; python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.is_available())"
xz -dk $G/round-3.jsonl.xz $G/best8s.jsonl.xz; wc -l $G/*.jsonl
ft() {  # name demos seed steps
  start=$(date +%s)
  timeout 470 python3 -m tlm.model.finetune --base $B --demos $G/$2 --out $M/$1 --seed $3 --steps $4 --device cuda > $OUT/$1.log 2>&1
  echo "$1 rc $? in $(( $(date +%s) - start )) s" | tee -a $OUT/$1.log
}
ft r3 round-3.jsonl 3 0 &
ft r3-8k round-3.jsonl 3 8000 &
ft s8-8k best8s.jsonl 3 8000 &
ft s8-16k best8s.jsonl 3 16000 &
wait
python3 pretrained/pack_fp16.py /tmp/m r3 r3-8k s8-8k s8-16k
ls -la $OUT
