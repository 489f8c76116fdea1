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
python3 - <<'PY'
import os, tarfile, shutil
from pathlib import Path
from safetensors.torch import load_file, save_file
out = Path(os.environ["OUT"])
for name in ("r3", "r3-8k", "s8-8k", "s8-16k"):
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
    print(name, (out / f"{name}.tar").stat().st_size)
PY
ls -la $OUT
