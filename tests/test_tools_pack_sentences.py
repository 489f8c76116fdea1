"""tools/pack_sentences.py: a sampling directory's new sentences packed once each, append-only.

Fast: a made-up sampling directory (no TVM sampled these sentences; the target is a named GPU)."""

import gzip
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from pack_sentences import main, pack_new  # noqa: E402

from tlm.model.pretrain import read_corpus  # noqa: E402


def _sampling_dir(path: Path, sentences: list[str]) -> Path:
    (path / "shards").mkdir(parents=True)
    with gzip.open(path / "shards" / "t.jsonl.gz", "wt") as f:
        f.writelines(json.dumps({"sentence": s}) + "\n" for s in sentences)
    (path / "manifest.json").write_text(json.dumps({
        "version": 2, "target": {"kind": "cuda", "arch": "sm_90a", "model": "h100"}, "target_id": "925cbd02fa80",
        "tasks": {"t": {"hash": "t", "shard": "shards/t.jsonl.gz"}}}))
    return path


def test_only_new_sentences_are_packed_and_earlier_files_stay(tmp_path):
    out = tmp_path / "packed"
    first, n, held = pack_new(_sampling_dir(tmp_path / "s1", ["a b", "c d", "a b"]), out, "d1")
    assert (first.name, n, held) == ("d1-corpus.json.xz", 2, 0)
    before = first.read_bytes()
    second, n, held = pack_new(_sampling_dir(tmp_path / "s2", ["c d", "e f"]), out, "d2")
    assert (n, held) == (1, 2) and first.read_bytes() == before
    sentences, meta = read_corpus(sorted(out.glob("*-corpus.json.xz")))
    assert sorted(sentences) == ["a b", "c d", "e f"]
    assert meta["target_id"] == "925cbd02fa80"
    assert pack_new(tmp_path / "s2", out) == (None, 0, 3)  # nothing new: no file


def test_a_name_taken_or_a_bad_directory_is_one_line(tmp_path, capsys):
    out = tmp_path / "packed"
    pack_new(_sampling_dir(tmp_path / "s1", ["a b"]), out, "d1")
    _sampling_dir(tmp_path / "s2", ["x y"])
    assert main([str(tmp_path / "s2"), str(out), "--name", "d1"]) == 2
    assert main([str(tmp_path / "missing"), str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("pack_sentences: error:") for e in err)
