"""Fixtures of the loop and collector tests: two tiny tasks, an untrained tiny base model for
them, and one measurer per module (starting its worker pools is the slow part of a tiny loop)."""

import pytest
import workloads_tir as w


@pytest.fixture(scope="module")
def tasks():
    return [w.matmul(16), w.softmax()]


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory, tasks, host):
    from tlm.model.lm import build_tokenizer, new_model, save_model, space_words
    from tlm.space.sampling import target_id

    tok = build_tokenizer(space_words(tasks, host, walks=2))
    out = tmp_path_factory.mktemp("base")
    save_model(new_model("tiny", tok.get_vocab_size(), seed=1), tok, out,
               {"preset": "tiny", "target": host.config, "target_id": target_id(host)})
    return out


@pytest.fixture(scope="module")
def measurer(host):
    from tlm.measure.config import MeasureConfig
    from tlm.measure.measurer import Measurer

    with Measurer(host, MeasureConfig(repeat=2, min_repeat_ms=1, remeasure_top=0)) as m:
        yield m
