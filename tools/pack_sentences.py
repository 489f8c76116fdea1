"""Commit a sampling directory's new sentences as one append-only packed corpus file.

    python tools/pack_sentences.py SAMPLE_DIR OUT_DIR [--name 2026-12-07a]

Writes OUT_DIR/NAME-corpus.json.xz (tlm.model.sentences.pack_corpus: the distinct sentences and
what they were sampled for) with the sentences of SAMPLE_DIR (`tlm sample --out`) that no earlier
`*-corpus.json.xz` of OUT_DIR holds, so the folder only grows; `tlm pretrain --data
OUT_DIR/*-corpus.json.xz` reads them all (tlm.model.sentences.read_corpus).
"""

from __future__ import annotations

import argparse
import datetime
import string
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tlm.errors import TlmError  # noqa: E402
from tlm.model.pretrain import pack_corpus, read_corpus  # noqa: E402

SUFFIX = "-corpus.json.xz"


def pack_new(sample_dir: str | Path, out_dir: str | Path, name: str | None = None) -> tuple[Path | None, int, int]:
    """(the file written or None when nothing is new, sentences written, sentences already held)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    earlier = sorted(out_dir.glob(f"*{SUFFIX}"))
    held = set(read_corpus(earlier)[0]) if earlier else set()
    sentences, meta = read_corpus([sample_dir])
    new = sorted(set(sentences) - held)
    if not new:
        return None, 0, len(held)
    if name is None:
        day = datetime.date.today().isoformat()
        name = next(f"{day}{c}" for c in string.ascii_lowercase if not (out_dir / f"{day}{c}{SUFFIX}").exists())
    path = out_dir / f"{name}{SUFFIX}"
    if path.exists():
        raise TlmError(f"{path} exists: packed files are never rewritten (choose another --name)")
    pack_corpus(new, {k: meta.get(k) for k in ("target", "target_id", "targets")}, path)
    return path, len(new), len(held)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sample_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--name", default=None, help="file name before -corpus.json.xz (default: today's date and a letter)")
    args = ap.parse_args(argv)
    try:
        path, n, held = pack_new(args.sample_dir, args.out_dir, args.name)
    except TlmError as err:
        print(f"pack_sentences: error: {err}", file=sys.stderr)
        return 2
    print(f"{n} new sentences in {path}; {held} held before" if path else f"nothing new ({held} sentences held)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
