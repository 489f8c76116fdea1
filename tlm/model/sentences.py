"""Pretraining sentences and what they were sampled for, from every place tlm keeps them.

`read_corpus` takes any mix of
    a sampling directory     (`tlm sample --out`: manifest.json and shards of random programs)
    a GPU bundle             (tlm.measure.gpu_bundle: its candidates are random valid programs)
    a packed corpus file     (PACKED, or data/pretrain/*/NAME-corpus.json.xz: distinct sentences + meta)
    a corpus hardware folder (data/corpus/llvm-znver4-2c: the measured programs of one machine)
so that one TLM can be pretrained on the sentences of several targets, CPU and GPU alike: the
hardware words of each prompt tell them apart (tlm.space.language.hardware_tokens).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tlm.errors import TlmError, first_line

PACKED = "corpus.json.xz"  # what `--vocab-only` writes beside the tokenizer: {"meta", "sentences"}


def shard_sentences(folder: str | Path) -> tuple[list[str], list[dict[str, Any]]]:
    """(sentences, targets' configs) of a corpus hardware folder's shards: every correct measured
    program (a record with no error) of this tlm's sentence version. A shard of another sentence
    version is named on stderr and skipped (its words mean other things); a damaged one gives the
    records before the damage (tlm.measure.shards.read_shard says so)."""
    import sys

    from tlm.measure.shards import SUFFIX, read_shard
    from tlm.space.language import SENTENCE_VERSION

    paths = sorted(Path(folder).glob(f"*{SUFFIX}"))
    if not paths:
        raise TlmError(f"{folder} holds no record shards (*{SUFFIX})")
    sentences: list[str] = []
    targets: dict[str, dict[str, Any]] = {}
    for path in paths:
        header, _, records = read_shard(path)
        if header.get("sentence_version") != SENTENCE_VERSION:
            print(f"tlm: warning: {path}: sentence version {header.get('sentence_version')}, not "
                  f"{SENTENCE_VERSION}; its sentences are skipped", file=sys.stderr)
            continue
        targets.setdefault(header["target_key"], header.get("target") or json.loads(header["target_key"]))
        sentences.extend(r["s"] for r in records if not r.get("err") and isinstance(r.get("s"), str))
    return sentences, list(targets.values())


def read_corpus(dirs: list[str | Path]) -> tuple[list[str], dict[str, Any]]:
    """The sentences of sampling directories (one per target, say), GPU bundles, packed corpus
    files and corpus hardware folders (the module's doc), and the tlm.json meta that says what they
    were sampled for (`target`: the first, `targets`: all, tlm.model.lm). A packed corpus file (a
    few MB to carry to a GPU machine without TVM) stands for the directories it was packed from."""
    import lzma

    from tlm.measure.cuda_measure import MANIFEST as GPU_MANIFEST, read_manifest
    from tlm.model.lm import model_targets, target_summary
    from tlm.space.sampling import read_shards

    sentences: list[str] = []
    meta: dict[str, Any] = {}
    targets: list[dict[str, Any]] = []
    seen: set[Any] = set()  # their target_ids
    for d in dirs:
        try:
            if Path(d).is_file():  # its targets are resolved already (no TVM needed)
                packed = json.loads(lzma.decompress(Path(d).read_bytes()))
                sentences.extend(packed["sentences"])
                manifest, found = packed["meta"], packed["meta"]["targets"]
            elif (Path(d) / GPU_MANIFEST).is_file():  # a GPU bundle: its candidates are random valid programs
                bundle = read_manifest(d)
                sentences.extend(c["sentence"] for e in bundle["tasks"] for c in e.get("candidates", []))
                summary = target_summary(bundle["target"])
                manifest, found = {"target": summary["target"], "target_id": summary["target_id"]}, [summary]
            elif (Path(d) / "manifest.json").is_file():
                manifest = json.loads((Path(d) / "manifest.json").read_text())
                sentences.extend(r["sentence"] for r in read_shards(d))
                found = model_targets({"target": manifest.get("target"), "target_id": manifest.get("target_id")})
            else:  # a corpus hardware folder: measured programs
                measured, configs = shard_sentences(d)
                sentences.extend(measured)
                found = [target_summary(c) for c in configs]
                manifest = {"target": found[0]["target"], "target_id": found[0]["target_id"]} if found else {}
        except (OSError, ValueError, KeyError, TypeError, lzma.LZMAError) as err:
            raise TlmError(f"unreadable sampling directory {d}: {first_line(err)}") from None
        meta.setdefault("target", manifest.get("target"))
        meta.setdefault("target_id", manifest.get("target_id"))
        for t in found:
            if t.get("target_id") not in seen:
                seen.add(t.get("target_id"))
                targets.append(t)
    return sentences, dict(meta, targets=targets)


def pack_corpus(sentences: list[str], meta: dict[str, Any], path: str | Path) -> None:
    """Write the distinct sentences and their meta as one xz-compressed JSON (read_corpus)."""
    import lzma

    Path(path).write_bytes(lzma.compress(json.dumps({"meta": meta, "sentences": sorted(set(sentences))}).encode()))


def is_data_dirs(data) -> bool:
    """A directory (or packed corpus) or a list of them (rather than a list of sentences)."""
    if isinstance(data, (str, Path)):
        return True

    def is_dir(d) -> bool:
        try:
            return " " not in str(d) and (Path(str(d)).is_dir() or str(d).endswith(PACKED))
        except OSError:  # a long sentence is no file name
            return False

    return bool(data) and all(is_dir(d) for d in data)
