"""Pack model directories for a smaller trip between machines: each as OUT/NAME.tar with its
weights in fp16 (half the size), optionally split into OUT/NAME.tar.partN pieces of at most
--part-mib MiB. tools/unpack_models.py joins the pieces, untars and widens the weights back to fp32.

    python3 tools/pack_fp16.py MODELS_DIR OUT NAME [NAME...] [--part-mib 15]

Needs safetensors and torch only (no TVM); NAME is a model directory under MODELS_DIR (with tlm.json).
"""
import argparse
import shutil
import tarfile
import tempfile
from pathlib import Path

from safetensors.torch import load_file, save_file


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models")
    p.add_argument("out")
    p.add_argument("names", nargs="+")
    p.add_argument("--part-mib", type=int, default=0, help="split larger tarballs into pieces of this size (0: whole)")
    a = p.parse_args(argv)
    out, part = Path(a.out), a.part_mib << 20
    out.mkdir(parents=True, exist_ok=True)
    for name in a.names:
        d = Path(a.models) / name
        if not (d / "tlm.json").is_file():
            print("missing", name)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            h = Path(tmp) / name
            h.mkdir()
            for f in d.iterdir():
                if f.is_file():
                    shutil.copy(f, h / f.name)
            sd = load_file(str(d / "model.safetensors"))
            save_file({k: v.half() for k, v in sd.items()}, str(h / "model.safetensors"), metadata={"format": "pt"})
            tar = out / f"{name}.tar"
            with tarfile.open(tar, "w") as t:
                t.add(h, arcname=name)
        data = tar.read_bytes()
        if part and len(data) > part:
            tar.unlink()
            for i in range(0, len(data), part):
                (out / f"{name}.tar.part{i // part}").write_bytes(data[i:i + part])
        print(name, len(data))


if __name__ == "__main__":
    main()
