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
