"""Cost model: features of real programs, trained on really measured latencies read back from a
records database (traces and sentences), ranks, saves and loads; bad input is a TlmError."""

import json
import math

import numpy as np
import pytest

pytestmark = pytest.mark.tvm


@pytest.fixture(scope="module")
def measured(tasks, host, measurer, tmp_path_factory):
    """A database with 10 measured random programs per task (matmul: by trace; softmax: by sentence)."""
    from tlm.measure.database import open_db
    from tlm.measure.measurer import Candidate
    from tlm.space.design import plain_json, random_program
    from tlm.space.language import render

    db = open_db(str(tmp_path_factory.mktemp("cm-db")))
    for j, task in enumerate(tasks):
        progs = [p for p in (random_program(task, host, 100 * j + s) for s in range(30)) if p.ok][:14]
        res = measurer.measure([Candidate(task, schedule=p.sch, proposer="random") for p in progs])
        # A random program TVM's LLVM build refuses is data, as in the collector (once in a CI run of
        # 2026-11-29 a softmax program hit "VectorizeLoop before LiftStorageAlloc" there and not alone:
        # open); a wrong result never is.
        assert all(r.ok or r.error.startswith("BuildError") for r in res), [r.error for r in res]
        kept = [(p, r) for p, r in zip(progs, res) if r.ok][:10]
        assert len(kept) >= 8
        for p, r in kept:
            if j == 0:
                db.add_record(task, host.key, plain_json(p.sch.trace.as_json()), r.latencies_s)
            else:
                db.add_record(task, host.key, None, r.latencies_s, sentence=render(p, task, host))
    yield db
    db.close()


def test_trained_on_records_it_ranks_and_round_trips(measured, tasks, host, tmp_path):
    from tvm.s_tir import Schedule

    from tlm.errors import TlmError
    from tlm.search.costmodel import (CONFIG_FILE, LEGACY_MODEL_FILE, MODEL_FILE, CostModel, CostModelConfig,
                                      features, model_file)
    from tlm.search.costmodel_data import training_groups

    groups = training_groups(measured, host, tasks)
    assert len(groups) == 2 and all(len(lat) >= 8 for _, lat in groups)
    x, lat = groups[0]
    assert x.shape == (len(lat), 2 * 164 + 1) and not np.isnan(x).any()
    model = CostModel(CostModelConfig(trees=50)).fit(groups)
    score = model.predict(x)
    # Fitted on these very programs, its top pick is among the faster half.
    assert lat[int(np.argmax(score))] <= sorted(lat)[len(lat) // 2]
    model.save(tmp_path / "cm")
    again = CostModel.load(tmp_path / "cm")
    assert np.array_equal(again.predict(x), score)  # the compressed binary file loses nothing
    # A directory saved before 2026-11-26 (plain XGBoost JSON) still loads; a save replaces it.
    model.booster.save_model(str(tmp_path / "cm" / LEGACY_MODEL_FILE))
    (tmp_path / "cm" / MODEL_FILE).unlink()
    assert model_file(tmp_path / "cm").name == LEGACY_MODEL_FILE
    assert np.array_equal(CostModel.load(tmp_path / "cm").predict(x), score)
    model.save(tmp_path / "cm")
    assert sorted(p.name for p in (tmp_path / "cm").iterdir()) == sorted([MODEL_FILE, CONFIG_FILE])
    (tmp_path / "cm" / MODEL_FILE).write_bytes(b"not xz")
    with pytest.raises(TlmError, match="unreadable cost model"):
        CostModel.load(tmp_path / "cm")
    order = model.rank(tasks[0], [Schedule(tasks[0].mod)] * 3, host)
    assert sorted(order) == [0, 1, 2]
    bad = x[:2].copy()
    bad[1, 3] = math.nan
    assert model.predict(bad)[1] == -math.inf and features(tasks[0], [], host).shape == (0, 329)


@pytest.mark.parametrize("objective", ["pairwise", "ndcg"])  # the default (reg): above
def test_other_objectives_learn_within_each_task(measured, tasks, host, tmp_path, objective):
    from tlm.errors import TlmError
    from tlm.search.costmodel import CostModel, CostModelConfig
    from tlm.search.costmodel_data import training_groups

    groups = training_groups(measured, host, tasks)
    model = CostModel(CostModelConfig(trees=50, objective=objective)).fit(groups)
    # Fitted on these programs, its top pick is among the faster half of the task whose programs
    # differ most; ndcg's labels are steps of a quarter of log latency, so programs up to e^0.25 =
    # 1.28x apart can share a label (a tie it may break either way; seen: 1.06x beside a busy CPU)
    x, lat = max(groups, key=lambda g: max(g[1]) / min(g[1]))
    tie = math.exp(0.25) if objective == "ndcg" else 1.05
    assert lat[int(np.argmax(model.predict(x)))] <= sorted(lat)[len(lat) // 2] * tie
    model.save(tmp_path / objective)
    assert CostModel.load(tmp_path / objective).config.objective == objective
    with pytest.raises(TlmError, match="objective"):
        CostModel(CostModelConfig(objective="mse")).fit(groups)


def test_nothing_to_learn_is_a_one_line_error(tmp_path):
    from tlm.errors import TlmError
    from tlm.search.costmodel import CostModel

    with pytest.raises(TlmError, match="two or more"):
        CostModel().fit([(np.zeros((1, 329), "float32"), [1e-3])])
    with pytest.raises(TlmError, match="holds no cost model"):
        CostModel.load(tmp_path)
    with pytest.raises(TlmError, match="not trained"):
        CostModel().predict(np.zeros((1, 329), "float32"))


def test_order_counts_each_programs_gain_on_the_threads(monkeypatch):
    """`gains` (speedup on the model's threads) move a program whose predicted one-thread latency
    is a little worse ahead (the booster's scores are stood in for: -log latency up to a constant)."""
    from tlm.search.costmodel import CostModel

    cm = CostModel()
    monkeypatch.setattr(cm, "predict", lambda x, target=None: np.array([0.0, -0.1, -1.0]))
    x = np.zeros((3, 4), "float32")
    assert cm.order(x) == [0, 1, 2]
    assert cm.order(x, gains=[1.0, 2.0, 2.0]) == [1, 0, 2]  # e^0.1 < 2 < e^1
    assert cm.order(x, gains=[1.0, 1.0, 1.0]) == [0, 1, 2]


@pytest.fixture(scope="module")
def cm_dir(measured, tasks, host, tmp_path_factory):
    """A real cost model (20 trees) trained on the measured random programs."""
    from tlm.search.costmodel import CostModel, CostModelConfig
    from tlm.search.costmodel_data import training_groups

    out = tmp_path_factory.mktemp("cm")
    CostModel(CostModelConfig(trees=20)).fit(training_groups(measured, host, tasks)).save(out)
    return out


def _target(isa, arch="x86_64"):
    from tlm.graph.target import TargetInfo

    return TargetInfo({"kind": "llvm", "mtriple": f"{arch}-unknown-linux-gnu", "mcpu": f"cpu-{isa}"}, "llvm",
                      f"cpu-{isa}", 2, 256, isa)


def test_default_cost_model_exact_then_same_arch_with_a_note(tmp_path, monkeypatch, capsys):
    import json

    import tlm.model.lm as lm
    from tlm.model.lm import target_summary
    from tlm.search.costmodel import META_FILE, MODEL_FILE, default_cost_model, load_cost_model

    monkeypatch.setattr(lm, "repo_root", lambda: tmp_path)
    avx2, avx512, neon = _target("avx2"), _target("avx512"), _target("neon", "aarch64")
    assert default_cost_model(avx2) is None and load_cost_model("none", avx2) is None
    assert load_cost_model("auto", avx2) is None  # said once, in one line
    assert capsys.readouterr().err == "tlm: note: no cost model for llvm/avx2 (x86_64); the model's samples are measured unranked (train one: tlm costmodel)\n"
    assert load_cost_model("auto", avx2) is None and capsys.readouterr().err == ""
    path = tmp_path / "pretrained" / "costmodel-llvm-x86_64"
    path.mkdir(parents=True)
    (path / MODEL_FILE).write_text("{}")
    (path / META_FILE).write_text(json.dumps({"targets": [target_summary(avx512)]}))
    assert default_cost_model(avx512) == path and capsys.readouterr().err == ""
    assert default_cost_model(avx2) == path  # learned on another CPU of the arch: said once
    err = capsys.readouterr().err
    assert err.startswith("tlm: note: no cost model for llvm/avx2; ranking with pretrained/costmodel-llvm-x86_64")
    assert err.count("\n") == 1 and default_cost_model(neon) is None


def test_tuner_picks_and_ranks_with_the_cost_model(cm_dir, tasks, host, base_dir, tmp_path, monkeypatch, capsys):
    """--budget 0 stores the first of the samples, in the cost model's order, without a flaw an
    unmeasured pick would keep (a note says when that is not the first); a proposal of n programs
    keeps the first choice first and the cost model's top n - 1 of the other samples (the real
    cost model, spied on to see what it ranked)."""
    from tlm.measure.database import open_db
    from tlm.measure.config import MeasureConfig
    from tlm.model.generate import Generator
    from tlm.search.base import TuneConfig, seeds
    from tlm.search.costmodel import CostModel, features
    from tlm.search.donors import donor_samples
    from tlm.search.tlm_tuner import TlmTuner
    from tlm.search.tune import tune
    from tlm.space.language import parse
    from tlm.space.threads import ranking_gains

    cfg = TuneConfig(cost_model=str(cm_dir), pick_samples=8, cm_pool=3, batch_size=4,
                     measure=MeasureConfig(repeat=2, min_repeat_ms=1, remeasure_top=0))
    drawn, generate = {}, Generator.generate  # the samples the tuner drew for its pick

    def keep(self, task, n, **kw):
        got = generate(self, task, n, **kw)
        if kw.get("seed") == seeds(0, task, 0, 2)[1] and n == 8:
            drawn[task.hash] = got
        return got

    monkeypatch.setattr(Generator, "generate", keep)
    tune(tasks, "tlm", "0", str(tmp_path / "db"), target=host, config=cfg, progress=False, model=str(base_dir))
    monkeypatch.setattr(Generator, "generate", generate)
    said = capsys.readouterr().err
    cm, gen = CostModel.load(cm_dir), Generator.from_dir(base_dir, host)
    with open_db(str(tmp_path / "db")) as db:
        picker = TlmTuner(tasks, db, host, cfg, progress=False)  # its flaw checks (redone work, build cost)
        for task in tasks:
            # the model's samples and the corpus's donors of the task, ranked together as the
            # tuner ranks them (a donor softmax outranked every sample on znver3)
            samples = drawn[task.hash]
            samples = samples + donor_samples(task, host, cfg.donors, {g.sentence for g in samples})
            schs = [parse(g.sentence, task, host).sch for g in samples]
            # the cost model's order with each program's parallel loops counted on the cores (the
            # model learned one-thread latencies); a 20-tree model on a few programs ties samples
            # often: the earlier one first
            order = picker.cost_model.order(features(task, schs, host), gains=ranking_gains(task.mod, schs, host.cores))
            ranked = [samples[i] for i in order]
            stored = db.compile_record(task.hash, host.key).sentence
            assert stored == picker.first_choice(task, ranked)[0].sentence
            assert stored == ranked[0].sentence or f"{task.name}: the model's first choice" in said
        picker.measurer.close()

    import tlm.search.costmodel as costmodel

    calls, featurize = [], costmodel.features

    def spy(task, schs, target):  # what the tuner ranked, and the real cost model's order of it
        x = featurize(task, schs, target)
        calls.append((schs, list(np.argsort(-cm.predict(x), kind="stable"))))
        return x

    monkeypatch.setattr(costmodel, "features", spy)
    with open_db(str(tmp_path / "db2")) as db:
        tuner = TlmTuner(tasks, db, host, cfg, progress=False)
        tuner._generator = gen
        st = tuner._state(tasks[0], 4)
        cands = tuner._propose(st, 3, 0, greedy=True)
        tuner.measurer.close()
    (pick_schs, pick_order), (schs, order) = calls
    assert len(pick_schs) == 8 and len(schs) == 3 * 3 - 1 and len(cands) == 3
    assert cands[0].schedule is pick_schs[pick_order[0]]
    assert [c.schedule for c in cands[1:]] == [schs[i] for i in order[:2]]


def test_cli_costmodel_trains_on_the_corpus(measured, host, tmp_path, monkeypatch, capsys, tasks):
    from types import SimpleNamespace

    import tlm.graph.extract
    from tlm.cli import main
    from tlm.measure.shards import flush
    from tlm.errors import TlmError
    from tlm.search.costmodel import META_FILE, CostModel
    from tlm.search.costmodel_data import training_groups

    flush(measured, tmp_path / "corpus")
    out = tmp_path / "cm"
    argv = ["costmodel", "--corpus", str(tmp_path / "corpus"), "--out", str(out), "--work", str(tmp_path / "w"),
            "--trees", "5", "--eta", "0.2"]
    assert main(argv) == 0
    meta = json.loads((out / META_FILE).read_text())
    assert meta["programs"] == 20 and meta["tasks"] == 2 and [t["cpu"] for t in meta["targets"]] == [host.cpu]
    assert "cost model in" in capsys.readouterr().out and CostModel.load(out).config.trees == 5
    assert CostModel.load(out).config.eta == 0.2
    groups = training_groups(measured, host, tasks)
    assert CostModel.load(out).config.cpu_columns  # the default of `tlm costmodel`
    assert len(CostModel.load(out, host).predict(groups[0][0])) == len(groups[0][1])
    with pytest.raises(TlmError, match="per CPU"):  # such a model ranks for a target
        CostModel.load(out).predict(groups[0][0])
    assert main(["costmodel", "--corpus", str(tmp_path / "none"), "--out", str(out)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert main(["costmodel", "--out", str(out), "--eta", "0"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    monkeypatch.setattr(tlm.graph.extract, "tasks_for_source", lambda source, target=None: SimpleNamespace(
        tasks=tasks, target=host))
    argv = ["tune", "toy", "--tuner", "tlm", "--budget", "0", "--cost-model", str(tmp_path / "none"),
            "--db", str(tmp_path / "db")]
    assert main(argv) == 2 and not (tmp_path / "db").exists()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no cost model" in err


def test_cpu_columns_let_one_model_rank_each_cpu_its_own_way(tmp_path):
    """Trained on two CPUs that disagree (synthetic labels: small x0 fast on one, large x0 on the
    other), a model with CPU columns ranks each CPU's way; it must know which CPU it ranks for."""
    from tlm.errors import TlmError
    from tlm.graph.target import resolve_target
    from tlm.search.costmodel import CostModel, CostModelConfig

    avx2, avx512 = (resolve_target({"kind": "llvm", "mcpu": c, "mtriple": "x86_64-unknown-linux-gnu", "num-cores": 2})
                    for c in ("znver3", "znver5"))
    rng = np.random.default_rng(0)
    groups, targets = [], []
    for _ in range(40):
        x = rng.random((10, 329)).astype("float32")
        for target, sign in ((avx2, 1.0), (avx512, -1.0)):
            groups.append((x, list(1e-3 * np.exp(3 * sign * x[:, 0]))))
            targets.append(target)
    CostModel(CostModelConfig(trees=30, cpu_columns=True)).fit(groups, targets).save(tmp_path / "cm")
    x = rng.random((20, 329)).astype("float32")
    ranks = sorted(x[:, 0])
    assert x[CostModel.load(tmp_path / "cm", avx2).order(x)[0], 0] <= ranks[2]
    model = CostModel.load(tmp_path / "cm", avx512)
    assert x[model.order(x)[0], 0] >= ranks[-3] and model.order(x) == model.order(x, avx512)
    assert model.order(x, avx2) == CostModel.load(tmp_path / "cm", avx2).order(x)
    adapted = model.adapted(x[:5], list(1e-3 * np.exp(-x[:5, 0])), trees=2)
    assert adapted.target is avx512 and len(adapted.predict(x)) == 20
    with pytest.raises(TlmError, match="per CPU"):
        CostModel.load(tmp_path / "cm").predict(x)
    with pytest.raises(TlmError, match="one target per group"):
        CostModel(CostModelConfig(cpu_columns=True)).fit(groups)


def test_features_cache_featurizes_each_program_once(measured, tasks, host, tmp_path, monkeypatch):
    import tlm.search.costmodel_data as cmod

    first = cmod.training_groups(measured, host, tasks, cache=tmp_path / "f")
    assert np.array_equal(first[0][0], cmod.training_groups(measured, host, tasks[:1])[0][0])  # = uncached
    monkeypatch.setattr(cmod, "features", lambda *a, **k: (_ for _ in ()).throw(AssertionError("featurized again")))
    again = cmod.training_groups(measured, host, tasks, cache=tmp_path / "f")
    assert len(first) == len(again) == 2
    for (x, lat), (y, lat2) in zip(first, again):
        assert np.array_equal(x, y) and lat == lat2


def test_adapted_learns_the_task_and_leaves_the_model_alone():
    """The tuner's online update: boosted on one task's measurements, the model ranks that task's
    programs by what was measured (here the opposite of what it learned), and the shipped model
    is not changed; nothing to learn from gives the model itself."""
    from tlm.search.costmodel import FEATURES, CostModel

    rng = np.random.default_rng(0)
    x = rng.random((400, FEATURES)).astype("float32")
    lat = list(np.exp(x[:, 0]))  # the corpus: feature 0 is latency
    cm = CostModel().fit([(x[i:i + 20], lat[i:i + 20]) for i in range(0, 400, 20)])
    task_x = rng.random((12, FEATURES)).astype("float32")
    task_lat = list(np.exp(2 * task_x[:, 1]))  # this task: feature 1 is latency
    before = cm.predict(task_x)
    ad = cm.adapted(task_x, task_lat, trees=20)
    assert np.array_equal(cm.predict(task_x), before)
    truth = -np.asarray(task_lat)
    corr = lambda a: np.corrcoef(a, truth)[0, 1]  # noqa: E731
    assert corr(ad.predict(task_x)) > corr(before) + 0.3
    assert cm.adapted(task_x[:1], task_lat[:1], trees=20) is cm and cm.adapted(task_x, task_lat, trees=0) is cm


def test_collector_ranks_with_the_cost_model_boosted_on_the_task(measured, cm_dir, tasks, host, tmp_path):
    """LoopConfig.cm_adapt_trees: the collector's cost model for a task is boosted on that task's
    measured programs (their features cached in WORK/features); 0 leaves the cost model as is."""
    from tlm.search.costmodel import CostModel
    from tlm.search.loop import LoopConfig
    from tlm.search.proposals import task_model

    cm = CostModel.load(cm_dir)
    got = task_model(measured, tasks[0], host, cm, LoopConfig(base="", work=str(tmp_path), cm_adapt_trees=5))
    assert got is not cm and got.booster.num_boosted_rounds() == cm.booster.num_boosted_rounds() + 5
    assert list((tmp_path / "features").rglob("*.npz"))
    assert task_model(measured, tasks[0], host, cm, LoopConfig(base="", work=str(tmp_path))) is cm


_GROUP_NORM_FEATURES = """
import sys
import numpy as np
from tvm import te, topi
from tlm.graph.target import host_target
from tlm.graph.tasks import task_from_mod
from tlm.search.costmodel import features
from tlm.space.design import random_program

x = te.placeholder((1, 32, 32, 32), "float32", name="x")
g, b = te.placeholder((32,), "float32", name="g"), te.placeholder((32,), "float32", name="b")
task = task_from_mod(te.create_prim_func([x, g, b, topi.nn.group_norm(x, g, b, 8, 3, [1, 2], 1e-5)]),
                     name="fused_group_norm")
progs = [random_program(task, host_target(), s) for s in range(6)]
np.save(sys.argv[1], features(task, [p.sch for p in progs if p.ok], host_target()))
"""


def test_a_programs_features_are_the_same_in_every_process(tmp_path):
    """TOPI's group norm names three buffers `T_reshape`; PerStoreFeature broke their ties in
    hash-map order, so two processes gave the same programs other features (36 values of 6 NHWC
    1x32x32x32 programs differed before `unique_buffer_names`)."""
    import subprocess
    import sys

    import tvm
    import tvm_ffi
    from tvm import te

    from tlm.search.costmodel import unique_buffer_names

    script = tmp_path / "gn.py"
    script.write_text(_GROUP_NORM_FEATURES)
    for k in range(2):
        subprocess.run([sys.executable, str(script), str(tmp_path / f"{k}.npy")], check=True, timeout=300)
    first, second = np.load(tmp_path / "0.npy"), np.load(tmp_path / "1.npy")
    assert first.shape == (6, 329) and not np.isnan(first).any()
    assert np.array_equal(first, second)

    a = te.placeholder((4, 4), "float32", name="A")
    b = te.compute((4, 4), lambda i, j: a[i, j] * 2, name="T_reshape")
    c = te.compute((4, 4), lambda i, j: a[j, i] + 1, name="T_reshape")
    d = te.compute((4, 4), lambda i, j: b[i, j] + c[i, j], name="T_reshape_1")  # the next suffix is taken
    mod = tvm.IRModule({"main": te.create_prim_func([a, d])})
    renamed = unique_buffer_names(mod)
    names = [buf.name for buf in renamed["main"].body.block.alloc_buffers]
    assert sorted(names) == ["T_reshape", "T_reshape_2"]  # the output T_reshape_1 is a parameter
    assert tvm_ffi.structural_equal(renamed, mod)
    assert unique_buffer_names(renamed) is renamed  # nothing to rename: the same object
