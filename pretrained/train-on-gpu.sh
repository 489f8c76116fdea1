# The GPU half of making the shipped models (pretrained/README.md): run on a GPU machine without TVM,
# in the repository root, with work/gpu holding tokenizer.json and corpus.json.xz (`tlm pretrain
# --vocab-only` made them where TVM is) and round-2.jsonl (demonstrations: the collector's demos/).
# Pretrains small and medium TLM-base, fine-tunes each, brings the four back as fp16 tarballs in
# $OUT (a device call returns 8 files of 16 MiB at most; converted back to fp32 here).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=work/gpu M=/tmp/m
nvidia-smi -L; python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.is_available())"
train() {  # preset steps pretrain-timeout
  mkdir -p $M/$1; cp $G/tokenizer.json $M/$1/
  timeout $3 python3 -m tlm.cli pretrain --data $G/corpus.json.xz --out $M/$1 --preset $1 --steps $2 \
      --batch-size 64 --device cuda > $OUT/$1.log 2>&1
  echo "pretrain $1 rc $?" >> $OUT/$1.log
  timeout 100 python3 -m tlm.model.finetune --base $M/$1 --demos $G/round-2.jsonl --out $M/$1-ft --seed 2 \
      --device cuda >> $OUT/$1.log 2>&1
  echo "finetune $1 rc $?" >> $OUT/$1.log
}
train small ${SMALL_STEPS:-12000} 420 &
train medium ${MEDIUM_STEPS:-10000} 450 &
wait
python3 pretrained/pack_fp16.py /tmp/m small small-ft medium medium-ft
ls -la $OUT
