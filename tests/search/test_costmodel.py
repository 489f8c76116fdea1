"""Cost model: features of real programs, trained on really measured latencies read back from a
records database (traces and sentences), ranks, saves and loads; bad input is a TlmError."""

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
        progs = [p for p in (random_program(task, host, 100 * j + s) for s in range(30)) if p.ok][:10]
        res = measurer.measure([Candidate(task, schedule=p.sch, proposer="random") for p in progs])
        for p, r in zip(progs, res):
            assert r.ok, r.error
            if j == 0:
                db.add_record(task, host.key, plain_json(p.sch.trace.as_json()), r.latencies_s)
            else:
                db.add_record(task, host.key, None, r.latencies_s, sentence=render(p, task, host))
    yield db
    db.close()


def test_trained_on_records_it_ranks_and_round_trips(measured, tasks, host, tmp_path):
    from tvm.s_tir import Schedule

    from tlm.search.costmodel import CostModel, CostModelConfig, features, training_groups

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
    assert np.allclose(again.predict(x), score)
    order = model.rank(tasks[0], [Schedule(tasks[0].mod)] * 3, host)
    assert sorted(order) == [0, 1, 2]
    bad = x[:2].copy()
    bad[1, 3] = math.nan
    assert model.predict(bad)[1] == -math.inf and features(tasks[0], [], host).shape == (0, 329)


def test_nothing_to_learn_is_a_one_line_error(tmp_path):
    from tlm.errors import TlmError
    from tlm.search.costmodel import CostModel

    with pytest.raises(TlmError, match="two or more"):
        CostModel().fit([(np.zeros((1, 329), "float32"), [1e-3])])
    with pytest.raises(TlmError, match="holds no cost model"):
        CostModel.load(tmp_path)
    with pytest.raises(TlmError, match="not trained"):
        CostModel().predict(np.zeros((1, 329), "float32"))
