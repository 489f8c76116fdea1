"""On the GPU machine: pack model directories for the trip back (`device run` returns 8 files of
at most 16 MiB): each as `$OUT/NAME.tar` with its weights in fp16 (split into `.partN` pieces of
15 MiB when larger; concatenate them here, untar, and widen the safetensors to fp32).

    python3 pretrained/pack_fp16.py MODELS_DIR NAME [NAME...]
"""
import os
import shutil
import sys
import tarfile
from pathlib import Path

from safetensors.torch import load_file, save_file

PART = 15 << 20


def main(models: str, names: list[str]) -> None:
    out = Path(os.environ["OUT"])
    for name in names:
        d = Path(models) / name
        if not (d / "tlm.json").is_file():
            print("missing", name)
            continue
        h = Path("/tmp/fp16") / name
        h.mkdir(parents=True)
        for f in d.iterdir():
            if f.is_file():
                shutil.copy(f, h / f.name)
        sd = load_file(str(d / "model.safetensors"))
        save_file({k: v.half() for k, v in sd.items()}, str(h / "model.safetensors"), metadata={"format": "pt"})
        tar = out / f"{name}.tar"
        with tarfile.open(tar, "w") as t:
            t.add(h, arcname=name)
        data = tar.read_bytes()
        if len(data) > PART:
            tar.unlink()
            for i in range(0, len(data), PART):
                (out / f"{name}.tar.part{i // PART}").write_bytes(data[i:i + PART])
        print(name, len(data))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
