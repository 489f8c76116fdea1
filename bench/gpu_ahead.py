"""What compiling the GPU calls' files ahead costs here (issue 49: `tlm gpu precompile`).

    python bench/gpu_ahead.py FOLDER ... [--out bench/results/gpu-ahead]

FOLDER: bundles and plans compiled ahead (tools/gpu_prepare.sh step 6). Per folder, from each
source's `cubin/X.json`: files, refused by nvcc/ptxas, nvcc's seconds (each call's wall time, one
process per file, summed; and the median file: where other jobs share the cores, more than its CPU
time) and the bytes a call carries (CUDA C, cubins xz). Rows are
appended to OUT.json with the date, the hardware and the commit; OUT.md is written from them all.
For comparison, the GPU machine's own compile of bundle-c (run-2026-12-04-h200-a): 1,756 files,
3,283.8 s of nvcc on 14 processes, while it measured 2,072 programs in 255.5 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tlm.measure.precompile import ahead_paths, sources_of  # noqa: E402
from xcore import append_table, run_stamp  # noqa: E402  (bench/ is on the path when a bench script runs)


def folder_row(folder: str | Path) -> dict:
    _, srcs = sources_of(folder)
    paths = [ahead_paths(s) for s in srcs]  # (json, cubin.xz) of each source
    metas = [json.loads(m.read_text()) for m, _ in paths if m.exists()]
    secs = [m["seconds"] for m in metas]
    xz = sum(c.stat().st_size for _, c in paths if c.exists())
    return {"folder": str(folder), "files": len(srcs), "ahead": len(metas),
            "refused": sum("error" in m for m in metas), "nvcc_s": round(sum(secs), 1),
            "median_s": round(statistics.median(secs), 3) if secs else None,
            "src_mb": round(sum(s.stat().st_size for s in srcs) / 2**20, 2), "cubin_xz_mb": round(xz / 2**20, 2),
            "nvcc": metas[0]["nvcc"] if metas else None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folders", nargs="+")
    p.add_argument("--out", default="bench/results/gpu-ahead")
    args = p.parse_args(argv)
    stamp = run_stamp()
    rows = [dict(stamp, **folder_row(f)) for f in args.folders]
    total = {k: sum(r[k] for r in rows) for k in ("files", "ahead", "refused", "nvcc_s", "src_mb", "cubin_xz_mb")}
    rows.append(dict(stamp, folder="all of them", median_s=None, nvcc=rows[0]["nvcc"],
                     **{k: round(v, 2) for k, v in total.items()}))
    header = ("date | hardware | commit | folder | files | compiled ahead | refused | nvcc s (summed) | "
              "s a file (median) | CUDA C xz MB | cubins xz MB")

    def cells(r: dict) -> list:
        med = "-" if r["median_s"] is None else f"{r['median_s']:.2f}"
        return [r["date"], r["hardware"], r["commit"], r["folder"], r["files"], r["ahead"], r["refused"],
                f"{r['nvcc_s']:.1f}", med, f"{r['src_mb']:.2f}", f"{r['cubin_xz_mb']:.2f}"]

    intro = (f"Made by `python bench/gpu_ahead.py FOLDER ...` ({rows[0]['nvcc']}). {__doc__.split(chr(10) + chr(10))[2]}"
             .replace("\n", " "))
    append_table(Path(args.out), rows, "GPU calls' files compiled ahead, here (issue 49)", intro, header, cells)
    for r in rows:
        print(" | ".join(str(c) for c in cells(r)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
