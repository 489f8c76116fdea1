"""Nearest-task donors (tlm.search.donors): a corpus task's measured program carried to a task of
the same operators at another shape, found by shape, ranked with the first choice's samples.

TVM CPU tests on tiny matmuls; the corpus is a synthetic index (or a shard written here)."""

import json
import math
import random

import pytest
import workloads_tir as w

from tlm.search.donors import Donor, _nearest, carry, donor_programs, find, shape_distance


def _words(task, target, seed: int) -> tuple:
    """Decision words (the sentence after its prompt) of a random program of `task`."""
    from tlm.space.design import random_program
    from tlm.space.language import prompt_tokens, render

    prog = random_program(task, target, random.Random(seed))
    assert prog.ok
    return tuple(render(prog, task, target).split()[len(prompt_tokens(task, target)):])


def _index(donor_task, target, words, median=1e-4):
    from tlm.graph.tasks import op_names

    return {"version": 1,
            "tasks": {donor_task.hash: [op_names(donor_task.name), [[a["dtype"], a["shape"]] for a in donor_task.args]]},
            "best": {donor_task.hash: {target.key: [[median, " ".join(words)]]}}}


class _Point:
    def __init__(self, kind, choices):
        self.kind, self.choices = kind, tuple(choices)


def test_nearest_keeps_a_valid_value_and_else_the_nearest_in_log_scale():
    tiles = _Point("tile", [(1, 32), (2, 16), (4, 8), (8, 4), (16, 2), (32, 1)])
    assert _nearest(tiles, (4, 8)) == (4, 8)
    assert _nearest(tiles, (8, 8)) == (4, 8)  # the innermost (vector lanes) counts twice
    assert _nearest(_Point("cat", range(4)), 7) == 3
    assert _nearest(_Point("loc", [-2, -1, 0, 1]), 5) == 1


def test_shape_distance_needs_same_dtypes_and_ranks():
    a = [{"dtype": "float32", "shape": [128, 768]}, {"dtype": "float32", "shape": [768, 3072]}]
    assert shape_distance(a, [["float32", [128, 768]], ["float32", [768, 3072]]]) == 0
    assert shape_distance(a, [["float32", [64, 768]], ["float32", [768, 3072]]]) == pytest.approx(math.log(2))
    assert shape_distance(a, [["float16", [128, 768]], ["float32", [768, 3072]]]) == math.inf
    assert shape_distance(a, [["float32", [1, 128, 768]], ["float32", [768, 3072]]]) == math.inf
    assert shape_distance(a, [["float32", [128, 768]]]) == math.inf


def test_a_donor_carries_to_a_valid_program_of_the_other_shape(host):
    from tlm.space.language import parse, prompt_tokens

    small, big = w.matmul(16, 32, 64), w.matmul(32, 32, 64)
    for seed in range(6):
        words = _words(small, host, seed)
        prog = carry(big, host, words)
        assert prog.ok, prog.error
        tiles = [(p.context, d) for p, d in zip(prog.points[1:], prog.decisions) if p.kind == "tile"]
        for ctx, factors in tiles:
            assert math.prod(factors) == ctx["extent"]
        # the same shapes: the donor's own program, word for word
        same = carry(small, host, words)
        from tlm.space.language import render

        assert render(same, small, host).split()[len(prompt_tokens(small, host)):] == list(words)
        parse(render(prog, big, host), big, host)  # a sentence of the task's own space


def test_a_donor_of_another_structure_gives_an_error_not_an_exception(host):
    words = _words(w.matmul(16, 32, 64), host, 0)
    prog = carry(w.softmax(), host, words)
    assert not prog.ok and prog.error


def test_find_takes_the_nearest_task_with_the_same_operators(host):
    small, big = w.matmul(16, 32, 64), w.matmul(32, 32, 64)
    index = _index(small, host, _words(small, host, 1))
    got = find(big, host, index)
    assert [d.task_hash for d in got] == [small.hash] and got[0].distance == pytest.approx(2 * math.log(2))  # A and C: 16 -> 32 rows
    assert find(w.softmax(), host, index) == []
    assert find(big, host, index, k_tasks=0) == []
    progs = donor_programs(big, host, index)
    assert len(progs) == 1 and isinstance(progs[0][0], Donor) and progs[0][1].ok
    assert donor_programs(big, host, None) == []


def test_the_index_is_built_from_shards_and_cached(tmp_path, monkeypatch, host):
    """A shard of one task with two correct records and a failed one: the index keeps the faster
    correct one first; a second load reads the cache."""
    import lzma

    from tlm.search import donors
    from tlm.space.language import prompt_tokens

    monkeypatch.setenv("TLM_CACHE", str(tmp_path / "cache"))
    task = w.matmul(16, 32, 64)
    prompt = " ".join(prompt_tokens(task, host))
    fast, slow = _words(task, host, 1), _words(task, host, 2)
    header = {"shard": 1, "records": 3, "target": host.config, "target_key": host.key}
    lines = [header, {"task": task.to_json(with_mod=True)},
             {"t": task.hash, "s": f"{prompt} {' '.join(slow)}", "lat": [3e-4, 3e-4], "err": None, "by": "tlm"},
             {"t": task.hash, "s": f"{prompt} {' '.join(fast)}", "lat": [1e-4, 2e-4], "err": None, "by": "tlm"},
             {"t": task.hash, "s": f"{prompt} {' '.join(fast)}", "lat": [], "err": "failed", "by": "tlm"}]
    folder = tmp_path / "corpus" / "llvm-test-2c"
    folder.mkdir(parents=True)
    (folder / "a-1-3.jsonl.xz").write_bytes(lzma.compress("\n".join(json.dumps(x) for x in lines).encode() + b"\n"))
    index = donors.load_index(tmp_path / "corpus")
    if fast != slow:
        assert [words for _, words in index["best"][task.hash][host.key]] == [" ".join(fast), " ".join(slow)]
    assert (tmp_path / "cache" / "donors").is_dir()
    donors._LOADED.clear()
    assert donors.load_index(tmp_path / "corpus") == index  # from the cache file
    assert donors.load_index(tmp_path / "no-corpus") is None


def test_the_first_choice_ranks_donors_with_the_samples(tmp_path, monkeypatch, host):
    """With a cost model, a donor joins the ranked samples (log-prob NaN: no model wrote it);
    with donors=0 it does not."""
    from tlm.measure.database import open_db
    from tlm.search import donors
    from tlm.search.base import TuneConfig
    from tlm.search.tlm_tuner import TlmTuner
    from tlm.space.language import parse, prompt_tokens

    small, big = w.matmul(16, 32, 64), w.matmul(32, 32, 64)
    index = _index(small, host, _words(small, host, 3))
    monkeypatch.setattr(donors, "load_index", lambda corpus=None: index)

    class Gen:  # the model's samples: one random program (a test double of the language model)
        def generate(self, task, n, **kw):
            from tlm.model.generate import Generated
            from tlm.space.design import random_program
            from tlm.space.language import render

            prog = random_program(task, host, random.Random(9))
            return [Generated(task.hash, render(prog, task, host), prog.space, list(prog.decisions), -1.0, None, prog.sch)]

    class Ranking:  # every program scored alike: the order is the pool's
        model = object()

        def ranked(self, task, items, schedule):
            return list(items)

    for d, n in ((3, 2), (0, 1)):
        with open_db(str(tmp_path / f"db{d}")) as db:
            tuner = TlmTuner([big], db, host, TuneConfig(budget="0", donors=d, cost_model="none"), progress=False, generator=Gen())
            tuner.ranking = Ranking()
            got = tuner.choices(big)
        assert len(got) == n
        if d:
            assert math.isnan(got[1].logprob)
            parse(got[1].sentence, big, host)
    with pytest.raises(Exception, match="donors"):
        TlmTuner([big], None, host, TuneConfig(budget="0", donors=-1))


def test_no_corpus_is_said_once_and_gives_no_donors(monkeypatch, capsys, host):
    from tlm.search import donors

    monkeypatch.setattr(donors, "load_index", lambda corpus=None: None)
    monkeypatch.setattr(donors, "_NO_CORPUS", [])
    task = w.matmul(32, 32, 64)
    assert donors.donor_samples(task, host, 3, set()) == []
    assert donors.donor_samples(task, host, 3, set()) == []
    err = capsys.readouterr().err
    assert err.count("tlm: note: no corpus") == 1
    assert donors.donor_samples(task, host, 0, set()) == []


def test_a_gpu_task_takes_gpu_donors_and_a_cpu_task_cpu_ones(host):
    """Each target's programs go to targets of its kind: an H100 task takes an H200 program (the same
    code: same arch, threads, shared memory, registers), never a CPU's; a CPU task never a GPU's."""
    from tlm.graph.target import resolve_target
    from tlm.measure.gpu_bundle import sample_programs
    from tlm.space.language import prompt_tokens

    h100, h200 = resolve_target("h100"), resolve_target("h200")
    small, big = w.matmul(64, 64, 64), w.matmul(128, 64, 64)
    ((_, sentence, _),), _ = sample_programs(small, h200, 1, seed=1, seconds=60, max_tries=50)
    gpu_words = " ".join(sentence.split()[len(prompt_tokens(small, h200)):])
    index = _index(small, host, _words(small, host, 1))
    index["best"][small.hash][h200.key] = [[5e-5, gpu_words]]
    (got,) = find(big, h100, index, k_records=1)
    assert got.target_key == h200.key and " ".join(got.words) == gpu_words
    (cpu,) = find(big, host, index)
    assert cpu.target_key == host.key
    (prog,) = donor_programs(big, h100, index)
    assert prog[1].ok
    del index["best"][small.hash][host.key]
    assert find(big, host, index) == []  # only a GPU's program: none for a CPU
