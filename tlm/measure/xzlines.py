"""Files of text lines as concatenated xz streams, each with its own integrity check, written
atomically, and read back up to any damage (tlm.measure.shards keeps the corpus in them).

One xz stream's check comes at its end: what the decoder gives before it may be garbage, even
lines copied from earlier ones (LZMA copies earlier text), so a corrupt stream is lost whole and
what precedes it is kept; a cut one keeps its lines before the cut (the decoder's output up to a
cut is exact). The first line goes alone in the first stream, so a damaged file keeps its header.
xz and Python's lzma read such a file as one.
"""

from __future__ import annotations

import lzma
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tlm.errors import TlmError

_CHUNK = 1024  # xz bytes decompressed at a time: what precedes a cut is kept, but for its chunk
# Text per xz stream, what a corrupt byte can cost: ~1 MiB makes a shard 1.005-1.03x the size of
# one stream (the corpus's shards measured on 2026-12-02).
STREAM_BYTES = 1 << 20


def streams(lines: list[str]) -> Iterator[bytes]:
    """`lines` as concatenated xz streams: the first line (the header) alone, then ~STREAM_BYTES of
    text each, every stream with its own integrity check (xz and lzma.open read them as one file)."""
    group, size = [], 0
    for i, line in enumerate(lines):
        group.append(line)
        size += len(line) + 1
        if i == 0 or size >= STREAM_BYTES or i == len(lines) - 1:
            yield lzma.compress(("\n".join(group) + "\n").encode(), preset=9)
            group, size = [], 0


def write_atomic(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("wb", dir=path.parent, delete=False, suffix=".tmp") as tmp:
        for stream in streams(lines):
            tmp.write(stream)
        tmp.flush()
        os.fsync(tmp.fileno())
    os.chmod(tmp.name, 0o644)  # a temporary file is private; a shard is data like any other
    os.replace(tmp.name, path)


def decompress(path: str | os.PathLike) -> tuple[bytes, str | None]:
    """What `path` decompresses to, up to any damage, and what the damage is (None if none). Fed in
    small chunks, so a cut stream still gives what precedes the cut (lzma.open's reader loses the
    whole read that raised); of a corrupt stream nothing is kept, since its check comes at its end
    and what the decoder gave before it noticed may be garbage (older shards are one stream: all of
    it is lost then). Streams may be concatenated, as xz's may; the whole ones before are kept."""
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise TlmError(f"{path}: unreadable: {err}") from None
    out: list[bytes] = []
    while True:
        dec, pos, start = lzma.LZMADecompressor(), 0, len(out)
        try:
            while not dec.eof and pos < len(data):
                out.append(dec.decompress(data[pos:pos + _CHUNK]))
                pos += _CHUNK
        except lzma.LZMAError as err:  # also between streams: a damaged stream header loses what follows
            return b"".join(out[:start]), f"corrupt xz data: {err}"
        if not dec.eof:
            return b"".join(out), "truncated xz stream" if data else "empty file"
        data = dec.unused_data + data[pos:]
        if not data.strip(b"\0"):  # nothing more, or stream padding
            return b"".join(out), None
