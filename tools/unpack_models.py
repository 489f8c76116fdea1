"""Where TVM is, after tools/train-on-gpu.sh or tools/finetune-on-gpu.sh on a GPU machine: take
each model NAME from FILES_DIR (a model directory NAME/, or NAME.tar / NAME.tar.partN from
tools/pack_fp16.py), put it in DEST/NAME with fp32 weights, and give it the `targets` of a
reference model (the GPU machine has no TVM to resolve the demonstrations' CPUs; the reference is
a model fine-tuned on the same CPUs' records, by default the shipped one).

    python tools/unpack_models.py FILES_DIR DEST NAME [NAME...] [--targets-from MODEL]
"""
import argparse
import io
import json
import shutil
import tarfile
from pathlib import Path

from safetensors.torch import load_file, save_file

p = argparse.ArgumentParser()
p.add_argument("files")
p.add_argument("dest")
p.add_argument("names", nargs="+")
p.add_argument("--targets-from", default="pretrained/tlm-ft-llvm-x86_64")
a = p.parse_args()
targets = json.loads((Path(a.targets_from) / "tlm.json").read_text())["targets"]
files, dest = Path(a.files), Path(a.dest)
dest.mkdir(parents=True, exist_ok=True)
for name in a.names:
    d = dest / name
    if (files / name).is_dir():
        if (files / name).resolve() != d.resolve():
            shutil.copytree(files / name, d, dirs_exist_ok=True)
    else:
        whole = files / f"{name}.tar"
        parts = sorted(files.glob(f"{name}.tar.part*"), key=lambda f: int(f.name.rsplit("part", 1)[1]))
        data = whole.read_bytes() if whole.exists() else b"".join(f.read_bytes() for f in parts)
        with tarfile.open(fileobj=io.BytesIO(data)) as t:  # pack_fp16.py's pieces, joined in memory
            t.extractall(dest, filter="data")
    sd = load_file(str(d / "model.safetensors"))
    save_file({k: v.float() for k, v in sd.items()}, str(d / "model.safetensors"), metadata={"format": "pt"})
    meta = json.loads((d / "tlm.json").read_text())
    meta["targets"] = targets
    (d / "tlm.json").write_text(json.dumps(meta, indent=1))
    print(name, {k: meta.get(k) for k in ("demonstrations", "loss", "step")}, "->", d)
