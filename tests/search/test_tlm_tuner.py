"""The TLM tuner with a tiny untrained model: exact budgets, stored sentences, resume, --budget 0."""

import json

import pytest
import workloads_tir as w

from tlm.errors import TlmError
from tlm.search.base import TuneConfig


def tiny_model(tasks, target, out):
    """An untrained tiny model whose vocabulary covers the tasks' design spaces."""
    from tlm.model.lm import build_tokenizer, new_model, save_model, space_words
    from tlm.space.sampling import target_id

    tok = build_tokenizer(space_words(tasks, target, walks=1))
    save_model(new_model("tiny", tok.get_vocab_size(), seed=1), tok, out,
               {"preset": "tiny", "target": target.config, "target_id": target_id(target)})
    return str(out)


@pytest.fixture(scope="module")
def tasks(matmul32):
    return [matmul32, w.softmax()]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tasks, host):
    return tiny_model(tasks, host, tmp_path_factory.mktemp("tlm-tiny"))


def _config(**kw):
    from tlm.measure.config import MeasureConfig
    from tlm.search.base import TuneConfig

    kw = {"cost_model": "none", "pick_samples": 16, **kw}  # the cost model's tests: tests/search/test_costmodel.py
    return TuneConfig(batch_size=4, measure=MeasureConfig(repeat=2, min_repeat_ms=2, remeasure_top=1, builder_workers=1), **kw)


def test_budget_zero_parses_for_tlm_only():
    from tlm.search.base import parse_budget
    from tlm.search.tlm_tuner import total_budget
    from tlm.search.tune import tune

    assert parse_budget("0", 3, allow_zero=True) == [0, 0, 0]
    assert parse_budget("0g", 2, allow_zero=True) == [0, 0]
    assert total_budget("3g", 4) == 12 and total_budget(5, 3) == 5
    with pytest.raises(TlmError, match="bad budget"):
        parse_budget("0", 2)
    with pytest.raises(TlmError, match="bad budget"):
        tune([], "random", "0")


def _fake_target(isa, arch="x86_64", kind="llvm"):
    from tlm.graph.target import TargetInfo

    return TargetInfo({"kind": kind, "mtriple": f"{arch}-unknown-linux-gnu", "mcpu": f"cpu-{isa}"}, kind,
                      f"cpu-{isa}", 2, 256, isa)


def _shipped(root, name, *targets, version=None):
    """A fake model directory: only its tlm.json (selection never loads the weights)."""
    from tlm.model.lm import model_targets
    from tlm.space.language import SENTENCE_VERSION
    from tlm.space.sampling import target_id

    path = root / "pretrained" / name
    path.mkdir(parents=True)
    entries = [{"kind": t.kind, "arch": t.arch, "isa": t.isa, "cpu": t.cpu, "target_id": target_id(t),
                "target": t.config} for t in targets]
    meta = {"targets": entries, "sentence_version": version or SENTENCE_VERSION}
    assert model_targets(meta) == entries
    (path / "tlm.json").write_text(json.dumps(meta))
    return path


def test_default_model_dir_exact_first(tmp_path, monkeypatch, host):
    import tlm.model.lm as tt

    monkeypatch.setattr(tt, "repo_root", lambda: tmp_path)
    base = tmp_path / "pretrained" / f"tlm-base-{host.kind}-{host.isa}"
    ft = tmp_path / "pretrained" / f"tlm-ft-{host.kind}-{host.isa}"
    with pytest.raises(TlmError, match=f"no TLM model for {host.kind}/{host.isa}") as err:
        tt.default_model_dir(host)
    assert "\n" not in str(err.value)
    base.mkdir(parents=True)
    assert tt.default_model_dir(host) == base
    ft.mkdir()
    assert tt.default_model_dir(host) == ft


def test_default_model_dir_nearest_model_with_a_note(tmp_path, monkeypatch, capsys):
    """No model for the ISA: the nearest of the kind (several targets of the same arch, then the
    same arch, then several targets, then any), with one note on stderr; never an error."""
    import tlm.model.lm as tt

    monkeypatch.setattr(tt, "repo_root", lambda: tmp_path)
    avx2, avx512, sse4 = _fake_target("avx2"), _fake_target("avx512"), _fake_target("sse4")
    neon = _fake_target("neon", "aarch64")
    arm = _shipped(tmp_path, "tlm-ft-llvm-neon", neon)
    assert tt.default_model_dir(avx2) == arm  # any llvm model rather than an error
    note = capsys.readouterr().err
    assert note.startswith("tlm: note: no model for llvm/avx2; using pretrained/tlm-ft-llvm-neon (trained for llvm/neon")
    assert note.count("\n") == 1
    one = _shipped(tmp_path, "tlm-ft-llvm-avx512", avx512)
    assert tt.default_model_dir(avx2) == one  # same arch
    both = _shipped(tmp_path, "tlm-base-llvm-x86_64", avx512, sse4)
    assert tt.default_model_dir(avx2) == both  # several targets of the same arch
    assert tt.default_model_dir(sse4) == both and tt.default_model_dir(avx512) == one  # exact: no note
    capsys.readouterr()
    tt.default_model_dir(avx512)
    assert capsys.readouterr().err == ""
    exact = _shipped(tmp_path, "tlm-base-llvm-avx2", avx2, version=1)  # an older sentence version
    assert tt.default_model_dir(avx2) == both
    exact_ft = _shipped(tmp_path, "tlm-ft-llvm-avx2", avx2)
    assert tt.default_model_dir(avx2) == exact_ft and exact.is_dir()
    with pytest.raises(TlmError, match="no TLM model for cuda/cuda"):
        tt.default_model_dir(_fake_target("cuda", kind="cuda"))


def test_model_targets_and_the_other_target_warning(tmp_path, host):
    """tlm.json `targets` (or an old single `target`) decides whether Generator warns."""
    import warnings

    from tlm.graph.target import resolve_target
    from tlm.model.generate import Generator
    from tlm.model.lm import LoadedModel, model_targets, serves
    from tlm.space.sampling import target_id

    icx = resolve_target({"kind": "llvm", "mcpu": "icelake-server", "num-cores": 2})
    skx = resolve_target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 8})
    zen = resolve_target({"kind": "llvm", "mcpu": "znver3", "num-cores": 2})
    old = {"target": icx.config, "target_id": target_id(icx)}  # a version-1 meta
    assert [(t["isa"], t["arch"], t["cpu"]) for t in model_targets(old)] == [("avx512", "x86_64", "icelake-server")]
    assert serves(old, skx) and not serves(old, zen)  # same ISA class serves; avx2 does not
    multi = {"targets": model_targets(old) + model_targets({"target": zen.config})}
    assert serves(multi, zen) and serves(multi, skx)
    h100, h200, a100 = (resolve_target(n) for n in ("h100", "h200", "a100"))
    gpu = {"targets": model_targets({"target": h200.config})}
    assert serves(gpu, h100) and not serves(gpu, a100)  # one SM architecture serves; sm_80 is another

    def warned(meta, target):
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            Generator(LoadedModel(None, None, meta, tmp_path), target)
        return [str(x.message) for x in got if "trained for another target" in str(x.message)]

    assert warned(old, zen) and not warned(old, skx) and not warned(multi, zen) and not warned({}, zen)


def test_old_sentence_version_is_refused_in_one_line(tmp_path, matmul32, host):
    """A model of sentence version 1 (e.g. the models shipped before the number encoding)."""
    from tlm.model.lm import load_model, save_model
    from tlm.space.language import SENTENCE_VERSION

    out = tmp_path / "m"
    save_model(_tiny_untrained(), _tiny_tokenizer(), out, {"preset": "tiny"})
    meta = json.loads((out / "tlm.json").read_text())
    (out / "tlm.json").write_text(json.dumps(dict(meta, sentence_version=SENTENCE_VERSION - 1)))
    with pytest.raises(TlmError, match="sentence version 1.*retrain") as err:
        load_model(out)
    assert "\n" not in str(err.value)


def _tiny_tokenizer():
    from tlm.model.lm import build_tokenizer

    return build_tokenizer({"x"})


def _tiny_untrained():
    from tlm.model.lm import new_model

    return new_model("tiny", _tiny_tokenizer().get_vocab_size())


def test_missing_default_model_is_a_clean_error(tmp_path, monkeypatch, capsys, host, matmul32):
    from types import SimpleNamespace

    import tlm.graph.extract
    import tlm.model.lm as tt
    from tlm.cli import main
    from tlm.search.tune import tune

    monkeypatch.setattr(tt, "repo_root", lambda: tmp_path)
    with pytest.raises(TlmError, match="no TLM model"):
        tune([matmul32], "tlm", "0", str(tmp_path / "db"), target=host)
    assert not (tmp_path / "db").exists()  # nothing touched
    monkeypatch.setattr(tlm.graph.extract, "tasks_for_source", lambda source, target=None: SimpleNamespace(
        tasks=[matmul32], target=host))
    assert main(["tune", "toy", "--tuner", "tlm", "--budget", "0", "--db", str(tmp_path / "db")]) == 2
    assert "no TLM model" in capsys.readouterr().err
    assert main(["tune", "toy", "--tuner", "random", "--model", "m", "--db", str(tmp_path / "db")]) == 2


@pytest.mark.tvm
def test_budget_zero_stores_greedy_programs(tmp_path, host, tasks, model_dir):
    from tlm.compiler.apply import compile_database
    from tlm.measure.database import GREEDY, open_db
    from tlm.model.generate import Generator
    from tlm.search.base import seeds
    from tlm.search.tune import tune

    db_dir = str(tmp_path / "db")
    rows = tune(tasks, "tlm", "0", db_dir, target=host, config=_config(), progress=False, model=model_dir)
    assert [r["status"] for r in rows] == ["greedy", "greedy"] and all(r["measured"] == 0 for r in rows)
    gen = Generator.from_dir(model_dir, host)
    with open_db(db_dir) as db:
        recs = db.records(target_key=host.key)
        assert len(recs) == 2 and {r.proposer for r in recs} == {GREEDY}
        assert all(r.median_s is None and r.latencies_s == [] and r.error is None for r in recs)
        msdb, crows = compile_database(db, tasks, host)
        for task in tasks:
            assert db.best(task.hash, host.key) is None  # best() ignores unmeasured records
            samples = gen.generate(task, 16, seed=seeds(0, task, 0, 2)[1])
            want = max(samples, key=lambda g: g.logprob).sentence  # the most likely of 16 samples
            assert db.compile_record(task.hash, host.key).sentence == want
            # What compile_relax applies for the task: the model's first choice.
            assert msdb.query_ir_module(task.mod, host.tvm(), "main") is not None
        assert [r["status"] for r in crows] == ["greedy", "greedy"]
    tune(tasks, "tlm", "0", db_dir, target=host, config=_config(), progress=False, model=model_dir)
    with open_db(db_dir) as db:
        assert db.count() == 2  # re-running stores nothing new
    greedy_db = str(tmp_path / "greedy")
    tune(tasks, "tlm", "0", greedy_db, target=host, config=_config(pick="greedy"), progress=False, model=model_dir)
    with open_db(greedy_db) as db:
        for task in tasks:  # the word-by-word argmax program instead
            assert db.compile_record(task.hash, host.key).sentence == gen.generate(task, 1, greedy=True)[0].sentence
    with pytest.raises(TlmError):
        tune(tasks, "tlm", "0", greedy_db, target=host, config=_config(pick="best"), progress=False, model=model_dir)


class _Stub:
    """A generator over a fixed pool of programs per task and a measurer with fixed latencies:
    the tuner's budget and round logic without building anything."""

    def __init__(self, pools, latency_us):
        self.pools, self.latency_us, self.calls = pools, latency_us, []

    def generate(self, task, n, *, greedy=False, seen=None, seed=0, **_):
        from types import SimpleNamespace

        pool = self.pools[task.hash][:1] if greedy else self.pools[task.hash]
        out = []
        for s in pool:
            if len(out) < n and s not in (seen or ()):
                trace = SimpleNamespace(as_json=lambda s=s: [s])
                out.append(SimpleNamespace(sentence=s, logprob=0.0, schedule=SimpleNamespace(trace=trace)))
        return out

    def measure(self, cands):
        from tlm.measure.measurer import MeasureResult

        self.calls.append([(c.task.name, c.round, c.sentence) for c in cands])
        return [MeasureResult(c, [c.sentence], [self.latency_us[c.task.hash] * 1e-6]) for c in cands]

    def close(self):
        pass


def _fake_task(name, h, weight):
    from tlm.graph.tasks import Task

    return Task(name=name, hash=h, weight=weight, flops=1.0, kind=name, args=[], mod_json="{}")


def test_budget_rounds_and_resume_logic(tmp_path):
    """Greedy first for every task, then rounds to the largest weight x latency; an exhausted
    task drops out; sentences and traces in the database are skipped; re-running resumes."""
    from tlm.graph.target import TargetInfo
    from tlm.measure.database import GREEDY, open_db
    from tlm.search.tlm_tuner import PROPOSER, TlmTuner

    target = TargetInfo({"kind": "llvm"}, "llvm", "fake", 1, 256, "avx2")
    heavy, light = _fake_task("heavy", "aa01", 10), _fake_task("light", "bb02", 1)
    pools = {heavy.hash: [f"heavy {i}" for i in range(3)], light.hash: [f"light {i}" for i in range(20)]}
    stub = _Stub(pools, {heavy.hash: 100.0, light.hash: 50.0})

    def run(budget):
        with open_db(str(tmp_path / "db")) as db:
            tuner = TlmTuner([heavy, light], db, target, _config(budget=budget, tuner="tlm"), progress=False,
                             generator=stub)
            tuner.measurer = stub
            return tuner.run()

    with open_db(str(tmp_path / "db")) as db:
        db.add_record(light, target.key, ["light 1"], [1e-3], proposer="random")  # same trace: skipped
        db.add_record(heavy, target.key, ["heavy 0"], [], proposer=GREEDY, sentence="heavy 0")
    rows = run("10")
    assert [r["measured"] for r in rows] == [3, 7]  # heavy's space is exhausted after 3 programs
    # Round 0: each task's greedy program first, plus samples up to half its share (light's
    # sample "light 1" is the trace of the random record: skipped).
    assert stub.calls[0] == [("heavy", 0, "heavy 0"), ("heavy", 0, "heavy 1"), ("light", 0, "light 0")]
    assert stub.calls[1][0] == ("heavy", 1, "heavy 2")  # then the heaviest task, until exhausted
    assert all(len(c) <= 4 for c in stub.calls)  # batch size
    with open_db(str(tmp_path / "db")) as db:
        recs = db.records(proposer=PROPOSER)
        assert len(recs) == 10 and len({r.sentence for r in recs}) == 10
        assert "light 1" not in {r.sentence for r in recs}  # measured before by another proposer
    n = len(stub.calls)
    assert [r["measured"] for r in run("10")] == [3, 7] and len(stub.calls) == n  # resumed: nothing to do
    assert [r["measured"] for r in run("12")] == [3, 9]
    with open_db(str(tmp_path / "db")) as db:
        recs = db.records(proposer=PROPOSER)
        assert len({r.sentence for r in recs}) == 12 and recs[-1].round > recs[-3].round
    assert [r["measured"] for r in run("40")] == [3, 19]  # both spaces exhausted: the budget is not spent


@pytest.mark.tvm
def test_tlm_tuner_measures_with_the_model(tmp_path, host, tasks, model_dir):
    from tlm.compiler.apply import compile_database
    from tlm.measure.database import open_db
    from tlm.model.generate import Generator
    from tlm.search.base import seeds
    from tlm.search.tlm_tuner import PROPOSER
    from tlm.search.tune import tune
    from tlm.space.language import prompt_tokens

    db_dir = str(tmp_path / "db")
    tune(tasks, "tlm", "0", db_dir, target=host, config=_config(), progress=False, model=model_dir)
    rows = tune(tasks, "tlm", "1g", db_dir, target=host, config=_config(), progress=False, model=model_dir)
    assert [r["measured"] for r in rows] == [1, 1] and all(r["best_us"] > 0 for r in rows)
    gen = Generator.from_dir(model_dir, host)
    with open_db(db_dir) as db:
        recs = db.records(target_key=host.key, proposer=PROPOSER)
        assert len(recs) == 2 and db.get_meta("tune_config/tlm")["model"] == model_dir
        for task, rec in zip(tasks, recs):
            # The first choice (the one --budget 0 stored) is measured first, with its sentence.
            assert rec.task_hash == task.hash and rec.round == 0 and rec.trace_json and rec.error is None
            samples = gen.generate(task, 16, seed=seeds(0, task, 0, 2)[1])
            assert rec.sentence == max(samples, key=lambda g: g.logprob).sentence
            assert rec.sentence.startswith(" ".join(prompt_tokens(task, host)) + " ")
        _, crows = compile_database(db, tasks, host)
        assert [r["status"] for r in crows] == ["tuned", "tuned"]  # measured records beat greedy ones
    tune(tasks, "tlm", "1g", db_dir, target=host, config=_config(), progress=False, model=model_dir)
    with open_db(db_dir) as db:
        assert db.count(proposer=PROPOSER) == 2  # resumed: nothing measured twice


@pytest.mark.tvm
def test_cli_tune_tlm_json(tmp_path, monkeypatch, capsys, host, tasks, model_dir):
    from types import SimpleNamespace

    import tlm.graph.extract
    from tlm.cli import main

    monkeypatch.setattr(tlm.graph.extract, "tasks_for_source", lambda source, target=None: SimpleNamespace(
        tasks=tasks, target=host))
    argv = ["tune", "toy", "--tuner", "tlm", "--budget", "0", "--model", model_dir, "--db", str(tmp_path / "db"), "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["measurements"] == 0 and [t["status"] for t in out["tasks"]] == ["greedy", "greedy"]


def _gap_generator(target):
    """A real Generator whose hand-made tokenizer lacks the length words of multi-word numbers
    (build_tokenizer never makes such a tokenizer): it can propose nothing for a task with an
    extent above the one-word numbers. The model is tiny and untrained; nothing is mocked."""
    from pathlib import Path

    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    from tlm.model.generate import Generator
    from tlm.model.lm import LoadedModel, Vocab, build_tokenizer, new_model

    full = build_tokenizer({"x"}).get_vocab()
    kept = [wd for wd in sorted(full, key=full.get) if not (wd.startswith("n") and wd[1:].isdigit())]
    vocab = Vocab(Tokenizer(WordLevel({wd: i for i, wd in enumerate(kept)}, unk_token="<unk>")))
    return Generator(LoadedModel(new_model("tiny", len(vocab)).eval(), vocab, {}, Path("gap")), target)


@pytest.mark.tvm
def test_budget_zero_falls_back_to_a_random_program(tmp_path, capsys, host):
    """Issue 14 point 3: the model proposes no valid program of a task (every try fails), so the
    task gets a random valid program of its design space instead of TVM's naive default, with a
    one-line warning and `fallback` in its summary row; the other task keeps the model's."""
    from tlm.measure.database import GREEDY, open_db
    from tlm.search.tlm_tuner import TlmTuner
    from tlm.space.language import parse

    odd, fine = w.matmul(1031, 16, 16), w.matmul(16)
    gen = _gap_generator(host)
    for _ in range(2):  # the second run resumes: nothing new stored
        with open_db(str(tmp_path / "db")) as db:
            rows = TlmTuner([odd, fine], db, host, _config(budget="0", tuner="tlm"), progress=False, generator=gen).run()
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "tlm: warning" in ln]
    assert len(lines) == 2 and odd.name in lines[0] and "random programs" in lines[0] and "vocabulary" in lines[0]
    assert [r["status"] for r in rows] == ["greedy", "greedy"]
    assert [r["fallback"] for r in rows] == ["random", None]
    with open_db(str(tmp_path / "db")) as db:
        recs = db.records(odd.hash, host.key, GREEDY)
        assert len(recs) == 1 and parse(recs[0].sentence, odd, host).ok  # a valid program, not the default
        assert db.compile_record(odd.hash, host.key) is not None


@pytest.mark.tvm
def test_budget_falls_back_to_random_programs(tmp_path, capsys, host):
    """With a budget: the model (a stub that never proposes anything; the measurer is a stub
    with fixed latencies) fails, so the task's measurements go to distinct random valid programs
    with proposer tlm and their sentences, and the summary row says `fallback: random`."""
    from tlm.measure.database import open_db
    from tlm.search.tlm_tuner import PROPOSER, TlmTuner
    from tlm.space.language import parse

    task = w.matmul(16)
    stub = _Stub({task.hash: []}, {task.hash: 10.0})
    with open_db(str(tmp_path / "db")) as db:
        tuner = TlmTuner([task], db, host, _config(budget="5", tuner="tlm"), progress=False, generator=stub)
        tuner.measurer = stub
        rows = tuner.run()
        recs = db.records(task.hash, host.key, PROPOSER)
    assert "tlm: warning: the model proposed no valid program" in capsys.readouterr().err
    assert rows[0]["measured"] == 5 and rows[0]["fallback"] == "random" and rows[0]["status"] == "tuned"
    assert len({r.sentence for r in recs}) == 5 and all(parse(r.sentence, task, host).ok for r in recs)


def test_first_choice_that_llvm_builds_in_time(capsys):
    """Unit test with a stand-in build cost (no TVM): the pick skips programs with too many
    odd-width vector lanes and says so; when every one has too many, the first stays, with a warning."""
    from types import SimpleNamespace

    from tlm.search.tlm_tuner import TlmTuner

    tuner = TlmTuner.__new__(TlmTuner)
    tuner.config = TuneConfig()
    tuner.target = SimpleNamespace(kind="llvm")
    task = SimpleNamespace(name="fused_conv1d")
    costs = {"a": 77616, "b": 9000, "c": 0, "d": 0}
    tuner._build_cost = lambda t, g: costs[g]
    tuner._redone_work = lambda t, g: 1.0
    assert tuner.first_choice(task, ["c", "a"]) == ["c"]
    assert capsys.readouterr().err == ""
    assert tuner.first_choice(task, ["a", "b", "c", "d"]) == ["c"]
    err = capsys.readouterr().err
    assert "fused_conv1d" in err and "77,616" in err and "choice #3" in err
    assert tuner.first_choice(task, ["a", "b"]) == ["a"]
    assert "tlm: warning: fused_conv1d" in capsys.readouterr().err
    assert tuner.first_choice(task, []) == []


def test_a_first_choice_that_redoes_work_gives_way_to_a_lean_one(capsys):
    """Unit test with made-up flop ratios (no TVM): a program counting far more flops than its
    task (a reduction redone in a loop) is skipped, said in a note; where every ranked program
    counts more (an inlined select), the limit follows the leanest and nothing is skipped."""
    from types import SimpleNamespace

    from tlm.search.tlm_tuner import TlmTuner

    tuner = TlmTuner.__new__(TlmTuner)
    tuner.config = TuneConfig()
    tuner.target = SimpleNamespace(kind="llvm")
    tuner._build_cost = lambda t, g: 0
    task = SimpleNamespace(name="group_norm2")
    ratios = {"slow": 28.4, "mild": 2.8, "lean": 1.0, "select": 4.0, "select2": 7.9, "select3": 8.1}
    tuner._redone_work = lambda t, g: ratios[g]
    assert tuner.first_choice(task, ["slow", "mild", "lean"]) == ["mild"]
    assert capsys.readouterr().err == ("tlm: note: group_norm2: the model's first choice redoes work (28x the task's work: "
                                       "a reduction inside a loop it does not depend on); its choice #2 is used\n")
    assert tuner.first_choice(task, ["select2", "select"]) == ["select2"] and capsys.readouterr().err == ""
    assert tuner.first_choice(task, ["select3", "select"]) == ["select"]  # 8.1 > 2 x 4.0
    tuner._redone_work = lambda t, g: None  # no estimate: not judged
    assert tuner.first_choice(task, ["slow"]) == ["slow"] and capsys.readouterr().err.count("note") == 1
    tuner._redone_work = lambda t, g: ratios[g]
    tuner.config = TuneConfig(lean_check=False)  # the check off (bench/pick.py --lean-check both): kept
    assert tuner.first_choice(task, ["slow", "mild"]) == ["slow"] and capsys.readouterr().err == ""
    assert tuner._lean(task, "slow")


def test_the_shipped_gpu_models_serve_the_hopper_cards_and_name_themselves_for_others(capsys):
    """`tlm compile --target h100 --budget 0` finds a shipped TLM and cost model for CUDA, trained
    for sm_90a (H100 and H200): exact, no note; an A100 (sm_80) gets them with a one-line note."""
    from tlm.graph.target import resolve_target
    from tlm.model.lm import default_model_dir, read_meta
    from tlm.search.costmodel import default_cost_model

    for card in ("h100", "h200"):
        lm, cm = default_model_dir(resolve_target(card)), default_cost_model(resolve_target(card))
        assert lm.name.startswith("tlm-ft-cuda-") and cm is not None and cm.name.startswith("costmodel-cuda-")
    assert capsys.readouterr().err == ""
    assert {t["cpu"] for t in read_meta(lm)["targets"]} == {"sm_90a"}
    assert default_model_dir(resolve_target("a100")) == lm
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no model for cuda/sm_80" in err and "sm_90a" in err


def test_a_cuda_pick_that_does_not_lower_gives_way_to_the_next(monkeypatch, capsys):
    """Budget 0 on a GPU measures nothing, so the pick itself is checked: the first of the ranked
    choices that lowers to CUDA C, said in a note when it is not the first. A unit test: the
    lowering's verdicts are made up (programs stand in as names)."""
    from types import SimpleNamespace

    import tlm.measure.cuda_build as cb
    from tlm.graph.target import resolve_target
    from tlm.search.tlm_tuner import TlmTuner

    tuner = TlmTuner.__new__(TlmTuner)
    tuner.config = TuneConfig()
    tuner.target = resolve_target("h100")
    monkeypatch.setattr(tuner, "schedule", lambda task, g: SimpleNamespace(mod=g), raising=False)
    monkeypatch.setattr(cb, "lower_cuda", lambda mod, target: cb.CudaProgram(error=None if mod.startswith("ok") else
                                                                             "lowering failed: made up\nmore"))
    task = SimpleNamespace(name="mean", flops=0.0)  # no flop count: redone work is not judged
    assert tuner.first_choice(task, ["ok1", "bad"]) == ["ok1"] and capsys.readouterr().err == ""
    assert tuner.first_choice(task, ["bad", "ok2", "ok3"]) == ["ok2"]
    err = capsys.readouterr().err
    assert err == "tlm: note: mean: the model's first choice does not lower to CUDA (lowering failed: made up); its choice #2 is used\n"
    assert tuner.first_choice(task, ["bad", "bad"]) == ["bad"] and "none of the model's 2 choices" in capsys.readouterr().err
