"""Large-scale sampling: shards, manifest, de-duplication, resume, CLI."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tlm.errors import TlmError


def test_seeds_are_well_spread():
    from tlm.space.sampling import task_seed

    seeds = {task_seed(s, "0123456789abcdef") for s in range(100)}
    assert len(seeds) == 100
    assert task_seed(0, "0123456789abcdef") != task_seed(0, "0123456789abcdee")
    assert max(seeds) > 2**60  # not small consecutive numbers


def test_cli_module_does_not_import_tvm():
    code = "import sys, tlm.cli; tlm.cli.build_parser(); assert 'tvm' not in sys.modules, 'tvm imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


@pytest.fixture(scope="module")
def small_tasks():
    import workloads_tir as W

    return [W.matmul(16), W.softmax(4, 8), W.conv3x3(2, 6, 4)]


@pytest.mark.tvm
def test_sample_writes_shards_and_resumes(tmp_path, host, small_tasks):
    from tlm.space.language import SENTENCE_VERSION, parse
    from tlm.space.sampling import read_shards, sample, target_id

    res = sample(small_tasks, host, per_task=12, out=tmp_path, jobs=1, progress=False)
    assert res["failed"] == [] and res["tasks"] == 3 and res["written"] == res["total"] > 0
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["version"] == SENTENCE_VERSION and manifest["target_id"] == target_id(host)
    records = list(read_shards(tmp_path))
    assert len(records) == res["total"]
    by_hash = {t.hash: t for t in small_tasks}
    pairs = {(r["task"], r["sentence"]) for r in records}
    assert len(pairs) == len(records)  # de-duplicated
    for entry in manifest["tasks"].values():
        assert entry["count"] == 12 and entry["max_tokens"] <= 1024
    for r in records[::7]:
        assert r["target"] == target_id(host)
        prog = parse(r["sentence"], by_hash[r["task"]], host)
        assert prog.space == r["space"]

    again = sample(small_tasks, host, per_task=12, out=tmp_path, jobs=1, progress=False)
    assert again["written"] == 0 and again["skipped"] == 3 and again["total"] == res["total"]
    more = sample(small_tasks[:1], host, per_task=20, out=tmp_path, jobs=1, progress=False)
    assert more["tasks"] == 1 and more["written"] == 20


@pytest.mark.tvm
def test_tiny_space_is_exhausted_without_duplicates(tmp_path, host):
    import workloads_tir as W

    from tlm.space.sampling import sample_task

    task = W.softmax(2, 2)
    res = sample_task(task, host, n=300, seed=1, max_tries=150)
    sentences = [r["sentence"] for r in res.records]
    assert len(set(sentences)) == len(sentences) < 300


@pytest.mark.tvm
def test_other_version_or_target_is_refused(tmp_path, host, small_tasks):
    from tlm.graph.target import resolve_target
    from tlm.space.sampling import sample

    sample(small_tasks[:1], host, per_task=2, out=tmp_path, progress=False)
    with pytest.raises(TlmError):
        sample(small_tasks[:1], resolve_target("a100"), per_task=2, out=tmp_path, progress=False)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["version"] = -1
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(TlmError):
        sample(small_tasks[:1], host, per_task=2, out=tmp_path, progress=False)


@pytest.mark.tvm
def test_cli_sample(tmp_path, host, small_tasks, monkeypatch, capsys):
    import tlm.graph.sources
    from tlm import cli

    class FakeSet:
        def __init__(self, source):
            if source == "bad":
                raise TlmError("unknown workload bad")
            self.source, self.target, self.tasks = source, host, small_tasks[:2]

    monkeypatch.setattr(tlm.graph.sources, "tasks_for_sources",
                        lambda sources, target=None, jobs=None: [FakeSet(s) for s in sources])
    out = tmp_path / "out"
    assert cli.main(["sample", "tiny", "--per-task", "3", "--out", str(out), "--jobs", "1"]) == 0
    assert "programs/s" in capsys.readouterr().out
    with gzip.open(next((out / "shards").glob("*.jsonl.gz")), "rt") as f:
        assert len(f.readlines()) == 3
    assert cli.main(["sample", "tiny", "--per-task", "3", "--out", str(out), "--jobs", "1"]) == 0
    assert "2 tasks already done" in capsys.readouterr().out
    assert cli.main(["sample", "bad", "--out", str(out)]) == 2
    assert "unknown workload bad" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.tvm
def test_parallel_workers(tmp_path, host, small_tasks):
    from tlm.space.sampling import read_shards, sample

    res = sample(small_tasks, host, per_task=10, out=tmp_path, jobs=2, progress=False)
    assert res["failed"] == [] and res["written"] == 30
    assert len(list(read_shards(tmp_path))) == 30


def test_source_sets():
    from tlm.graph.zoo import list_workloads
    from tlm.space.sampling import PRETRAIN_SET, expand_sources

    train = expand_sources(["train-set"])
    assert set(train) == {w.name for w in list_workloads("train")} and len(train) > len(PRETRAIN_SET)
    assert not set(train) & {w.name for w in list_workloads("test")}
    assert expand_sources(["pretrain-set", "bert_base"]) == [*PRETRAIN_SET, "bert_base"]
