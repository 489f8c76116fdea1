"""CostModelConfig.task_weight (fast, no TVM): each task's rows weigh (its best latency)^P, so the
tasks that hold the time decide what the model learns where tasks disagree."""

import numpy as np

from tlm.search.costmodel import CostModel, CostModelConfig


def test_task_weight_lets_the_heavy_task_decide():
    # Two tasks whose programs look alike but rank the other way round: in the heavy one (10 ms)
    # feature 0 set is 2x faster, in the light one (10 us) 2x slower.
    x = np.array([[i % 2, 0.0, 0.0] for i in range(10)], dtype="float32")
    heavy = [10e-3 if f else 20e-3 for f, _, _ in x]
    light = [20e-6 if f else 10e-6 for f, _, _ in x]

    def preference(weight):  # predicted score of feature 0 set, minus unset
        m = CostModel(CostModelConfig(trees=20, depth=2, task_weight=weight)).fit([(x, heavy), (x, light)])
        score = m.predict(np.array([[1, 0, 0], [0, 0, 0]], dtype="float32"))
        return score[0] - score[1]

    assert abs(preference(0.0)) < 1e-3  # every row the same: the two tasks cancel
    assert preference(1.0) > 0.3  # the heavy task's ranking wins
    assert preference(-1.0) < -0.3  # (and the light one's, weighted the other way)
    m = CostModel(CostModelConfig(trees=5, depth=2, task_weight=1.0)).fit([(x, heavy), (x, light)])
    assert m.config.task_weight == 1.0


def test_subsampling_is_seeded_and_saved(tmp_path):
    """CostModelConfig.subsample / colsample (stochastic boosting): each tree learns from a seeded
    part of the rows and columns, so two fits with one seed agree, another seed differs, and the
    settings travel with the saved model; 1.0 (the default) asks XGBoost for nothing new."""
    rng = np.random.default_rng(0)
    x = rng.random((200, 6), dtype="float32")
    lat = list(np.exp(-(x[:, 0] + 0.5 * x[:, 1])) * 1e-3)

    def fit(seed):
        return CostModel(CostModelConfig(trees=10, depth=3, subsample=0.5, colsample=0.5, seed=seed)).fit([(x, lat)])

    a, b, c = fit(0), fit(0), fit(1)
    assert np.array_equal(a.predict(x), b.predict(x)) and not np.array_equal(a.predict(x), c.predict(x))
    a.save(tmp_path)
    loaded = CostModel.load(tmp_path)
    assert (loaded.config.subsample, loaded.config.colsample) == (0.5, 0.5)
    assert np.allclose(loaded.predict(x), a.predict(x))
    assert "subsample" not in CostModel(CostModelConfig())._params()
    assert CostModel(CostModelConfig(subsample=0.8, colsample=0.7))._params()["colsample_bytree"] == 0.7


def test_cli_refuses_a_subsample_outside_0_1(tmp_path, capsys):
    from tlm.cli import main

    assert main(["costmodel", "--out", str(tmp_path / "cm"), "--subsample", "0"]) == 2
    err = capsys.readouterr().err
    assert "--subsample" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_cpu_balance_weighs_each_cpu_the_same():
    """CostModelConfig.cpu_balance: CPU a's three tasks rank feature 0 set 2x faster, CPU b's one
    task 2x slower. Every row the same, a's 30 rows outvote b's 10; balanced, each CPU's rows
    weigh the same in total and the two cancel. The CPU is the group's target (here a name)."""
    x = np.array([[i % 2, 0.0, 0.0] for i in range(10)], dtype="float32")
    fast = [1e-3 if f else 2e-3 for f, _, _ in x]
    slow = [2e-3 if f else 1e-3 for f, _, _ in x]

    def preference(balance):
        m = CostModel(CostModelConfig(trees=20, depth=2, cpu_balance=balance))
        m.fit([(x, fast)] * 3 + [(x, slow)], targets=["a", "a", "a", "b"])
        score = m.predict(np.array([[1, 0, 0], [0, 0, 0]], dtype="float32"))
        return score[0] - score[1]

    assert preference(False) > 0.2
    assert abs(preference(True)) < 1e-3


def test_cpu_balance_needs_the_groups_cpus():
    import pytest

    from tlm.errors import TlmError

    x = np.zeros((4, 3), dtype="float32")
    with pytest.raises(TlmError, match="one target per group"):
        CostModel(CostModelConfig(trees=2, depth=2, cpu_balance=True)).fit([(x, [1e-3, 2e-3, 3e-3, 4e-3])])
