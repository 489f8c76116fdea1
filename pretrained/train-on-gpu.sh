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
python3 - <<'PY'
import os, tarfile, torch, shutil
from pathlib import Path
from safetensors.torch import load_file, save_file
out = Path(os.environ["OUT"])
for name in ("small", "small-ft", "medium", "medium-ft"):
    d = Path("/tmp/m") / name
    if not (d / "tlm.json").is_file():
        print("missing", name); continue
    h = Path("/tmp/h") / name; h.mkdir(parents=True)
    for f in d.iterdir():
        if f.is_file():
            shutil.copy(f, h / f.name)
    sd = load_file(str(d / "model.safetensors"))
    save_file({k: v.half() for k, v in sd.items()}, str(h / "model.safetensors"), metadata={"format": "pt"})
    with tarfile.open(out / f"{name}.tar", "w") as t:
        t.add(h, arcname=name)
    tar = out / f"{name}.tar"
    data = tar.read_bytes()
    if len(data) > 15 << 20:  # one file comes back at most 16 MiB
        tar.unlink()
        for i in range(0, len(data), 15 << 20):
            (out / f"{name}.tar.part{i // (15 << 20)}").write_bytes(data[i:i + (15 << 20)])
    print(name, len(data))
PY
ls -la $OUT
