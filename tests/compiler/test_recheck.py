"""tlm.compiler.recheck: when a whole model built from unmeasured programs does not match, each
applied greedy program is run checked, a wrong one is recorded failed and the task picks again.
A unit test: the measurer is a stub that says which programs are wrong (the real one runs in
tests/measure); the database is real."""

from tlm.compiler import recheck
from tlm.graph.target import TargetInfo
from tlm.graph.tasks import Task
from tlm.measure.database import GREEDY, open_db
from tlm.measure.measurer import MeasureResult


def _task(name: str, h: str) -> Task:
    return Task(name=name, hash=h, weight=1, flops=1.0, kind=name, args=[], mod_json="{}")


class _StubMeasurer:  # not a runner: a program whose sentence ends in "bad" is wrong
    runs: list = []

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def measure(self, cands):
        _StubMeasurer.runs.append([c.sentence for c in cands])
        return [MeasureResult(c, c.trace, error="WrongResult: buffer 1: max abs diff 9 > 1e-4"
                              if c.sentence.endswith("bad") else None, latencies_s=[] if c.sentence.endswith("bad")
                              else [1e-3]) for c in cands]


def test_wrong_greedy_programs_are_recorded_and_replaced(tmp_path, monkeypatch):
    import tlm.measure.measurer as measurer

    monkeypatch.setattr(measurer, "Measurer", _StubMeasurer)
    target = TargetInfo({"kind": "llvm"}, "llvm", "fake", 1, 256, "avx2")
    a, b, c = _task("a", "aa01"), _task("b", "bb02"), _task("c", "cc03")
    with open_db(str(tmp_path / "db")) as db:
        db.add_record(a, target.key, ["a ok"], [], proposer=GREEDY, sentence="a ok")
        db.add_record(b, target.key, ["b next"], [], proposer=GREEDY, sentence="b next")
        db.add_record(b, target.key, ["b bad"], [], proposer=GREEDY, sentence="b bad")  # newest: applied first
        db.add_record(c, target.key, ["c bad"], [], proposer=GREEDY, sentence="c bad")
        picks = {t.hash: db.compile_record(t.hash, target.key) for t in (a, b, c)}
        assert [picks[t.hash].sentence for t in (a, b, c)] == ["a ok", "b bad", "c bad"]
        fix = recheck.recheck_greedy(db, [a, b, c], target, picks)
        assert _StubMeasurer.runs == [["a ok", "b bad", "c bad"], ["b next"]]  # each program once
        assert [w.split(":")[0] for w in fix.wrong] == ["b", "c"] and fix.checked == 4
        assert fix.picks[a.hash].sentence == "a ok" and fix.picks[b.hash].sentence == "b next"
        assert fix.picks[c.hash] is None  # no program left: TVM's default schedule
        failed = db.records(proposer=recheck.CHECK)
        assert sorted(r.sentence for r in failed) == ["b bad", "c bad"] and all(r.error for r in failed)
        # a later compile passes over them without running anything
        assert db.compile_record(b.hash, target.key).sentence == "b next" and db.compile_record(c.hash, target.key) is None
