"""The evaluation's plan: suites (workloads and budgets), the config saved with the results,
and the resumable steps (each skipped when its outputs exist) with their output paths.

`tlm eval` runs the plan (tlm.eval.run), then writes the tables (tlm.eval.tables) and the
report (tlm.eval.report).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from tlm.errors import TlmError, interrupted

SUITES = {
    # quick (< 1 h here) is a subset of standard with the same budgets: both can share one --out.
    "quick": dict(workloads=["dcgan", "bert_tiny"], ms_budget="16g",
                  tlm_budgets=["0", "1g", "10g"], subgraph_ks=[1, 10]),
    "standard": dict(workloads=["dcgan", "bert_tiny", "bert_base", "gpt2", "resnet_50"], ms_budget="16g",
                     tlm_budgets=["0", "1g", "10g"], subgraph_ks=[1, 10]),
    # MetaSchedule at the large budget (64g) on one transformer, in its own --out.
    "large": dict(workloads=["bert_base"], ms_budget="64g", tlm_budgets=["0", "1g", "10g"],
                  subgraph_ks=[1, 10]),
    # Issue 15's evaluation: end to end TLM@{0,1g,10g,32g} against MetaSchedule@64g on six test
    # workloads, and the held-out subgraph benchmark (tlm.eval.heldout) on 20 of their tasks.
    "full": dict(workloads=["bert_base", "gpt2", "resnet_50", "mobilenet_v2", "bert_tiny", "dcgan"],
                 ms_budget="64g", tlm_budgets=["0", "1g", "10g", "32g"], subgraph_ks=[], heldout_tasks=20,
                 corpus=True),
    # The held-out subgraph benchmark alone (no end-to-end steps): about 6,600 measurements.
    "heldout": dict(workloads=["bert_base", "gpt2", "resnet_50", "mobilenet_v2", "bert_tiny", "dcgan"],
                    ms_budget="64g", tlm_budgets=[], subgraph_ks=[], heldout_tasks=20, e2e=False, corpus=True),
}
COMPUTE_KINDS = ("conv1d", "conv2d", "conv3d", "conv1d_transpose", "conv2d_transpose", "conv3d_transpose", "matmul",
                 "batch_matmul", "dense")


@dataclass
class EvalConfig:
    suite: str = "quick"
    out: str = "results"
    workloads: list[str] = field(default_factory=list)
    ms_budget: str = "16g"
    tlm_budgets: list[str] = field(default_factory=list)
    subgraph_ks: list[int] = field(default_factory=list)
    rounds: int = 5
    seed: int = 0
    generator_tasks: int = 4
    e2e: bool = True  # the per-workload steps (tuning, end-to-end timing, cost, efficiency)
    heldout_tasks: int = 0  # tasks of the held-out subgraph benchmark (0: none)
    heldout_tlm_ks: list[int] = field(default_factory=lambda: [0, 1, 10, 32])  # random@k: the same k > 0
    heldout_ms_ks: list[int] = field(default_factory=lambda: [1, 10, 64, 256])
    hardware: str = ""  # the machine's hardware key slug (set by `evaluate`): a run resumes only there
    heldout_model: str = ""  # the held-out TLM model's tag (set by `evaluate`): a new model is measured anew
    # the held-out TLM tuner's online cost model update (TuneConfig.cm_adapt_trees; None: its default)
    heldout_adapt_trees: int | None = None
    # after the tuning, each held-out task's winners are timed together in this many interleaved
    # rounds (tlm.eval.retime; 0: off, the report keeps the tuning-time latencies)
    heldout_retime_rounds: int = 3
    # the held-out TLM's generator: a model directory ("": the shipped model for the target), so a
    # candidate is measured beside the shipped one (its tag keys its records) before it is shipped
    heldout_generator: str = ""
    # the report's corpus section (tlm.eval.corpus): data/corpus read again whenever the tables are written
    corpus: bool = False
    # the end-to-end TLM's model tag (set by `evaluate`, tlm.eval.heldout.model_tag of the shipped
    # generator and cost model): a run resumed with other models retires its TLM results (retire_tlm)
    e2e_model: str = ""

    @classmethod
    def for_suite(cls, suite: str, out: str, workloads: list[str] | None = None, **kw) -> EvalConfig:
        if suite not in SUITES:
            raise TlmError(f"bad suite {suite!r}: use one of {', '.join(SUITES)}")
        base = {k: list(v) if isinstance(v, list) else v for k, v in SUITES[suite].items()}
        if workloads:
            base["workloads"] = list(workloads)
        base.update({k: v for k, v in kw.items() if v is not None})
        cfg = cls(suite=suite, out=str(out), **{**base, "tlm_budgets": [str(b) for b in base["tlm_budgets"]]})
        if cfg.e2e and cfg.subgraph_ks and max(cfg.subgraph_ks) > per_task(cfg.ms_budget):
            raise TlmError(f"subgraph k up to {max(cfg.subgraph_ks)} needs a MetaSchedule budget of at "
                           f"least {max(cfg.subgraph_ks)}g (have {cfg.ms_budget})")
        return cfg

    @classmethod
    def load(cls, out: str | os.PathLike) -> EvalConfig:
        """The config a run saved in OUT/config.json (`save`); keys of other tlm versions are dropped."""
        path = Path(out) / "config.json"
        if not path.is_file():
            raise TlmError(f"{out}: no tlm eval run there (no config.json)")
        return cls(**{k: v for k, v in json.loads(path.read_text()).items() if k in cls.__dataclass_fields__})

    def save(self) -> None:
        """Write OUT/config.json; a resumed run must keep the budgets and seed (else a new --out)."""
        path = Path(self.out) / "config.json"
        keys = ("ms_budget", "tlm_budgets", "subgraph_ks", "seed", "heldout_tasks", "heldout_tlm_ks", "heldout_ms_ks")
        new = asdict(self)
        old = json.loads(path.read_text()) if path.is_file() else new
        if old.get("hardware") != self.hardware:  # timings of two machines never share a table
            raise TlmError(f"{path} holds a run on {old.get('hardware') or 'an unrecorded machine'}, not on this "
                           f"{self.hardware}; use another --out")
        grown = ("heldout_tlm_ks", "heldout_ms_ks")  # more ks extend a run: the first k records stay the same
        # a run without the held-out benchmark may gain one: it has no held-out records to contradict
        gained = ("heldout_tasks",) if old.get("heldout_tasks", 1) == 0 else ()
        if any(not set(old.get(k, [])) <= set(new[k]) for k in grown) or any(
                old.get(k, new[k]) != new[k] for k in keys if k not in grown + gained):
            raise TlmError(f"{path} holds other budgets ({ {k: old.get(k) for k in keys} }); use another --out")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(new, indent=1))


def per_task(budget: str | int, zero_ok: bool = False) -> int:
    m = re.fullmatch(r"(\d+)g", str(budget).strip().lower())
    if not m and not (zero_ok and str(budget) == "0"):
        raise TlmError(f"eval budgets are per task (Kg, or 0 for TLM), not {budget!r}")
    return int(m.group(1)) if m else 0


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.@-]+", "_", text)


@dataclass
class Step:
    id: str
    kind: str  # peak | tune | subgraph | heldout | retime | generator | e2e
    outputs: list[str]
    workload: str | None = None
    method: str | None = None  # metaschedule | tlm
    budget: str | None = None
    deps: list[str] = field(default_factory=list)
    measurements: int | None = None  # estimate (None: unknown until the tasks are known)

    def done(self) -> bool:
        return all(os.path.exists(p) for p in self.outputs)


def db_dir(cfg: EvalConfig, workload: str, name: str) -> str:
    return os.path.join(cfg.out, "dbs", slug(workload), name)


def workload_dbs(cfg: EvalConfig, workload: str):
    """The workload's tuning databases (MetaSchedule's, TLM's live one and its per-budget
    snapshots) kept in git as record shards OUT/records/WORKLOAD/NAME while open
    (tlm.measure.shards.kept_in_git): a fresh clone on the same hardware resumes the run and
    rewrites the report without measuring anything twice."""
    from tlm.measure.shards import kept_in_git

    names = ["metaschedule", "tlm"] + [f"tlm@{b}" for b in cfg.tlm_budgets]
    return kept_in_git(os.path.join(cfg.out, "dbs", slug(workload)), Path(cfg.out) / "records" / slug(workload),
                       names)


def log_path(cfg: EvalConfig, step_id: str) -> str:
    return os.path.join(cfg.out, "logs", slug(step_id) + ".json")


def tlm_results(out: str | os.PathLike) -> list[Path]:
    """What the end-to-end TLM of one model left in OUT: its tuning databases and their record
    shards (every workload's, and the representative tasks'), its steps' logs, the end-to-end
    timings that compiled it (beside MetaSchedule's, which are timed again), the generator's cost."""
    out = Path(out)
    found = [p for p in out.glob("dbs/*/tlm*") if p.parent.name != "heldout"]
    found += list(out.glob("records/*/tlm*")) + list(out.glob("e2e/*.json")) + [out / "generator.csv"]
    found += [p for p in out.glob("logs/*")
              if (p.name.startswith("tune_") and "_tlm@" in p.name) or p.name.startswith("subgraph_")]
    return sorted(p for p in found if p.exists())


def retire_tlm(out: str | os.PathLike, tag: str, log=print) -> int:
    """Move `tlm_results` to OUT/retired/TAG/ (same relative paths; kept, out of the tables; the
    databases to OUT/dbs/retired/TAG/, which git ignores: their shards are retired beside the
    logs), so that the plan tunes and times TLM again with the models of today while
    MetaSchedule's tuning stays; returns how many paths moved."""
    out, moved, tag = Path(out), 0, tag or "unrecorded"
    for p in tlm_results(out):
        rel = p.relative_to(out)
        dst = (out / "dbs" / "retired" / tag / rel.relative_to("dbs") if rel.parts[0] == "dbs"
               else out / "retired" / tag / rel)
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.exists():  # retired twice under one tag: keep both
            dst = dst.with_name(dst.name + f".{int(os.path.getmtime(p))}")
        os.replace(p, dst)
        moved += 1
    log(f"[eval] TLM's models changed since this run tuned with `{tag}`: its end-to-end TLM "
        f"results ({moved} paths) moved to {out / 'retired' / tag}; TLM is tuned and every "
        "workload timed again, MetaSchedule's tuning is kept")
    return moved


def build_plan(cfg: EvalConfig, task_counts: dict[str, int] | None = None,
               num_types: int | None = None) -> list[Step]:
    """The ordered steps; `task_counts` (tasks per workload) and `num_types` only feed estimates."""
    counts = task_counts or {}
    out = cfg.out
    steps = [Step("peak", "peak", [os.path.join(out, "peak.json")], measurements=0)]
    for w in (cfg.workloads if cfg.e2e else []):
        n = counts.get(w)
        ms_id = f"tune:{w}:metaschedule@{cfg.ms_budget}"
        steps.append(Step(ms_id, "tune", [log_path(cfg, ms_id)], w, "metaschedule", cfg.ms_budget,
                          measurements=None if n is None else n * per_task(cfg.ms_budget)))
        prev, deps = 0, [ms_id]
        for b in cfg.tlm_budgets:  # each budget continues the previous one (same database)
            sid, k = f"tune:{w}:tlm@{b}", per_task(b, zero_ok=True)
            steps.append(Step(sid, "tune", [db_dir(cfg, w, f"tlm@{b}"), log_path(cfg, sid)], w, "tlm", b,
                              deps=deps[1:][-1:], measurements=None if n is None else n * max(0, k - prev)))
            prev, deps = max(prev, k), deps + [sid]
        steps.append(Step(f"e2e:{w}", "e2e", [os.path.join(out, "e2e", slug(w) + ".json")], w, deps=deps,
                          measurements=0))
    if cfg.e2e and cfg.subgraph_ks:  # MS after k is read from the workloads' MetaSchedule tuning
        sub_id = "subgraph:" + "+".join(cfg.workloads)  # more workloads add task types: run again
        steps.append(Step(sub_id, "subgraph", [log_path(cfg, sub_id)], method="tlm",
                          budget=f"{max(cfg.subgraph_ks)}g",
                          measurements=None if num_types is None else num_types * max(cfg.subgraph_ks)))
    if cfg.heldout_tasks:
        ks = "-".join(map(str, cfg.heldout_tlm_ks)) + "_ms-" + "-".join(map(str, cfg.heldout_ms_ks))
        ks += f"_model-{cfg.heldout_model}" if cfg.heldout_model else ""
        steps.append(Step("heldout", "heldout", [log_path(cfg, f"heldout_{ks}")], measurements=planned_measurements(
            cfg.heldout_tasks, cfg.heldout_tlm_ks, cfg.heldout_ms_ks)))
        if cfg.heldout_retime_rounds:  # timings again, no new program: no measurement counted
            steps.append(Step("heldout-retime", "retime", [log_path(cfg, f"heldout-retime_{ks}")], deps=["heldout"],
                              measurements=0))
    steps.append(Step("generator", "generator", [os.path.join(out, "generator.csv")], measurements=0))
    return steps


def contenders(tlm_ks: list[int], ms_ks: list[int], model: str | None = None) -> list[tuple[str, str, list[int]]]:
    """(database name, tuner, the ks read from it), cheapest first: TLM@0, TLM@k, random, MetaSchedule.
    `model`: the TLM model's tag (tlm.eval.heldout.model_tag); its databases are model-TAG/tlm@k,
    so a new model never reads an older model's records."""
    rand_ks = sorted({k for k in tlm_ks if k > 0})
    out = [((f"model-{model}/" if model else "") + f"tlm@{k}", "tlm", [k]) for k in sorted(set(tlm_ks))]
    if rand_ks:
        out.append(("random", "random", rand_ks))
    if ms_ks:
        out.append(("metaschedule", "metaschedule", sorted(set(ms_ks))))
    return out


def planned_measurements(n_tasks: int, tlm_ks: list[int], ms_ks: list[int]) -> int:
    """Measurements of a whole run: TLM@0 counts one (its program, timed here)."""
    per = sum(max(ks) if name in ("random", "metaschedule") else max(1, ks[0])
              for name, _, ks in contenders(tlm_ks, ms_ks))
    return n_tasks * per


def run_plan(steps: list[Step], runner: Callable[[Step], None], log=print) -> dict[str, str]:
    """Run the steps whose outputs are missing, in order; {step id: done|skipped|failed|blocked}."""
    status: dict[str, str] = {}
    for st in steps:
        if st.done() or any(status.get(d) in ("failed", "blocked") for d in st.deps):
            status[st.id] = "skipped" if st.done() else "blocked"
            log(f"[eval] {st.id}: {status[st.id]}")
            continue
        log(f"[eval] {st.id} ...")
        try:
            runner(st)
            status[st.id] = "done"
        except KeyboardInterrupt:
            raise
        except Exception as err:  # one failed step does not lose the others
            if interrupted():  # a Ctrl-C that TVM wrapped in its own error stops the plan
                raise KeyboardInterrupt from err
            status[st.id] = "failed"
            log(f"[eval] {st.id}: FAILED: {type(err).__name__}: {str(err).strip()[:300]}")
    return status


def describe_plan(cfg: EvalConfig, steps: list[Step]) -> str:
    lines = [f"tlm eval --suite {cfg.suite} --out {cfg.out}",
             f"workloads: {', '.join(cfg.workloads)}; MetaSchedule {cfg.ms_budget}; TLM budgets "
             f"{', '.join(cfg.tlm_budgets) or 'none'}; subgraph k {cfg.subgraph_ks or 'none'}; {cfg.rounds} timing rounds"
             + (f"; held-out subgraph benchmark: {cfg.heldout_tasks} tasks, TLM@{cfg.heldout_tlm_ks}, "
                f"MetaSchedule@{cfg.heldout_ms_ks}" if cfg.heldout_tasks else ""), ""]
    for st in steps:
        lines.append(f"  {st.id:<40} {'?' if st.measurements is None else st.measurements:>7} measurements  "
                     + ("done (skipped)" if st.done() else "to run"))
    unknown = " (some unknown)" if any(s.measurements is None for s in steps) else ""
    lines.append(f"estimated measurements: {sum(s.measurements or 0 for s in steps)}{unknown}")
    return "\n".join(lines)
