"""Which way of learning from the corpus makes the best TLM on held-out tasks (issue 15, item 2)?

    .venv/bin/python bench/learning.py [--corpus data/corpus] [--work DIR] [--tasks 20] [--k 10] [--n 16]

1. Every committed shard of the corpus is ingested into WORK/corpus-db; the training tasks are
   the tasks with correct records on this hardware.
2. Held-out tasks: of the evaluation workloads (test split), the largest task (weight x flops)
   of every kind, then the largest others, up to --tasks; a task the corpus holds is refused,
   and so is a task whose space has fewer than k programs (a reshape: nothing to search).
3. TLM-base is fine-tuned with one seed on the demonstrations of each method:
     best1     the single best program per task (the paper's SFT), the default config
     best1x    the same demonstrations trained harder: 10 epochs at 3x the learning rate
     top4      the 4 best distinct programs per task, equal weights
     speed     the 8 best per task, each weighted by (task's best latency / its latency)^4
4. For the base and each model, per held-out task: --n distinct programs generated with one
   seed (the same for every model). Contenders: TLM@k = best measured of the first k; TLM@0
   greedy = word-by-word argmax; TLM@0 logprob = the highest generation log-prob of the n
   samples (pick without measuring); random@k = k random programs of the task's space.
   A task's programs of all contenders are measured in one interleaved batch, each distinct
   program once, in WORK/eval-db (resumable; never written to the corpus: held-out tasks).
   With --cost-model, an XGBoost cost model (tlm.search.costmodel) trained on the corpus ranks
   pools of --cm-n programs the measurer never saw: TLM@k cm = best measured of the cost model's
   top k of --cm-n generated programs, TLM@0 cm = its top 1, random@k cm = the same over --cm-n
   random programs (a MetaSchedule-like baseline without evolution). --cm-dir: an existing cost
   model instead (the shipped one was fit on the corpus too: no held-out task in it).
5. Scores per contender: geometric mean over tasks of (its best latency / the best latency any
   contender found) and the weighted total latency relative to random@k; lower is better.

Writes OUT/learning.json and OUT/learning.md (default OUT: bench/results).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

METHODS = {  # name: (programs per task, speed-weight exponent (0: equal weights), epochs, lr factor)
    "best1": (1, 0.0, 3.0, 1.0),
    "best1x": (1, 0.0, 10.0, 3.0),
    "top4": (4, 0.0, 3.0, 1.0),
    "speed": (8, 4.0, 3.0, 1.0),
}
EVAL_WORKLOADS = ["bert_base", "gpt2", "resnet_50", "mobilenet_v2", "bert_tiny", "dcgan"]


def heldout_tasks(workloads: list[str], corpus_db, n: int, target, k: int, seed: int) -> list[tuple]:
    """Up to n (task, its k random sentences) of the workloads, none in the corpus, each with at
    least k programs: per kind the largest, then the largest (tlm.eval.heldout.select_heldout)."""
    from tlm.eval.heldout import select_heldout
    from tlm.graph.extract import tasks_for_source

    tbw = {w: tasks_for_source(w, target=target).tasks for w in workloads}
    trained = {t.hash for ts in tbw.values() for t in ts if corpus_db.task(t.hash) is not None}
    return [(t, random_sentences(t, target, k, seed)) for _, t in select_heldout(tbw, n, target, k, seed, trained)]


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


class Bench:
    """The evaluation database and measurer: each (task, sentence) is measured once."""

    def __init__(self, work: Path, target, measure_cfg):
        from tlm.measure.database import open_db
        from tlm.measure.measurer import Measurer

        self.target, self.db = target, open_db(str(work / "eval-db"))
        self.measurer = Measurer(target, measure_cfg)

    def latencies(self, task, sentences: list[str]) -> dict[str, float]:
        """Median latency (inf: invalid or wrong) of every sentence, measuring the new ones together."""
        from tlm.errors import TlmError
        from tlm.measure.measurer import Candidate
        from tlm.space.design import task_space
        from tlm.space.language import parse

        self.db.add_task(task)
        known = {r.sentence: r for r in self.db.records(task.hash, self.target.key) if r.sentence}
        cands, out = [], {}
        for s in dict.fromkeys(sentences):
            if s in known:
                continue
            try:
                sch = parse(s, task, self.target, space=task_space(task, self.target)).sch
            except TlmError:
                out[s] = math.inf
                continue
            cands.append(Candidate(task, schedule=sch, proposer="bench-learning", sentence=s))
        if cands:
            self.db.add_results(self.measurer.measure(cands), self.target.key)
            known = {r.sentence: r for r in self.db.records(task.hash, self.target.key) if r.sentence}
        for s in sentences:
            r = known.get(s)
            out.setdefault(s, math.inf if r is None or r.error or r.median_s is None else r.median_s)
        return out

    def close(self) -> None:
        self.measurer.close()
        self.db.close()


def programs(gen, task, n: int, seed: int) -> dict[str, list[str]]:
    """{"samples": n distinct sentences in try order, "greedy": [1], "logprob": [the most likely]}."""
    samples = gen.generate(task, n, seed=seed)
    greedy = gen.generate(task, 1, greedy=True)
    out = {"samples": [g.sentence for g in samples], "greedy": [g.sentence for g in greedy[:1]]}
    out["logprob"] = [max(samples, key=lambda g: g.logprob).sentence] if samples else []
    return out


def cost_model(work: Path, corpus: str, target, n_records: int, max_tasks: int, seed: int):
    """The cost model trained on the corpus's records on this hardware (cached in WORK/models)."""
    from tlm.measure.database import open_db
    from tlm.search.costmodel import CostModel, CostModelConfig
    from tlm.search.costmodel_data import training_groups

    out = work / "models" / (f"costmodel-{n_records}" + (f"-{max_tasks}t" if max_tasks else ""))
    try:
        return CostModel.load(out)
    except Exception:  # noqa: BLE001 - none cached yet: train it
        pass
    t0 = time.time()
    with open_db(str(work / "corpus-db")) as db:
        tasks = [t for h in sorted(db.best_by_task(target.key)) if (t := db.task(h)) is not None]
        groups = training_groups(db, target, tasks[:max_tasks] if max_tasks else tasks, cache=work / "features")
    # the trees of the results recorded so far (the shipped model's defaults grew on 2026-11-26)
    model = CostModel(CostModelConfig(trees=300, depth=6, eta=0.1, seed=seed, threads=target.cores)).fit(groups)
    model.save(out)
    print(f"cost model: {len(groups)} tasks, {sum(len(g[1]) for g in groups)} programs, {time.time() - t0:.0f} s")
    return model


def cm_top(cm, task, target, sentences: list[str], k: int) -> list[str]:
    """The k of `sentences` the cost model predicts fastest (unparsable ones last)."""
    from tlm.errors import TlmError
    from tlm.space.design import task_space
    from tlm.space.language import parse

    sentences = list(dict.fromkeys(sentences))
    schs, ok = [], []
    for s in sentences:
        try:
            schs.append(parse(s, task, target, space=task_space(task, target)).sch)
            ok.append(s)
        except TlmError:
            continue
    return [ok[i] for i in cm.rank(task, schs, target)[:k]] if ok else []


def random_sentences(task, target, k: int, seed: int) -> list[str]:
    from tlm.eval.heldout import random_sentences as sample

    return sample(task, target, k, seed)


def score(per_task: list[dict], contenders: list[str], reference: str) -> dict[str, dict]:
    """Per contender: geomean of best / best of all, weighted total relative to `reference`."""
    out = {}
    ref_total = sum(t["weight"] * t["best"][reference] for t in per_task if math.isfinite(t["best"][reference]))
    for c in contenders:
        lat = [t["best"][c] for t in per_task]
        oracle = [min(v for v in t["best"].values()) for t in per_task]
        both = [(t, x) for t, x in zip(per_task, lat) if math.isfinite(x) and math.isfinite(t["best"][reference])]
        out[c] = {"geomean_vs_best": _geomean([x / o for x, o in zip(lat, oracle) if math.isfinite(x)]),
                  "total_vs_" + reference: (sum(t["weight"] * x for t, x in both) / ref_total) if ref_total else None,
                  "tasks_with_program": sum(math.isfinite(x) for x in lat)}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", default=str(ROOT / "data" / "corpus"))
    p.add_argument("--base", default=None, help="TLM-base (default: the shipped one for this target)")
    p.add_argument("--work", default=None, help="models and databases (default work/learning-<hardware>)")
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    p.add_argument("--workloads", nargs="+", default=EVAL_WORKLOADS)
    p.add_argument("--methods", nargs="*", default=list(METHODS), choices=list(METHODS),
                   help="fine-tuning methods (none: the base model only)")
    p.add_argument("--tasks", type=int, default=20)
    p.add_argument("--k", type=int, default=10, help="measured programs per task of TLM@k and random@k")
    p.add_argument("--n", type=int, default=16, help="samples per task (TLM@0 logprob picks among them)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timing-budget-ms", type=float, default=400.0)
    p.add_argument("--cost-model", action="store_true", help="add the cost-model contenders (step 4)")
    p.add_argument("--cm-n", type=int, default=40, help="programs per pool the cost model ranks")
    p.add_argument("--cm-tasks", type=int, default=0, help="train the cost model on this many tasks (0: all)")
    p.add_argument("--cm-dir", default=None,
                   help="use this cost model (e.g. pretrained/costmodel-llvm-x86_64) instead of training one")
    args = p.parse_args(argv)

    from tlm.graph.target import resolve_target
    from tlm.measure.database import open_db
    from tlm.measure.config import MeasureConfig
    from tlm.measure.shards import corpus_summary, hardware_slug, ingest
    from tlm.model.demos import demo_records
    from tlm.model.finetune import FinetuneConfig, finetune, model_done
    from tlm.model.generate import Generator
    from tlm.model.lm import read_meta
    from tlm.search.collect import default_base

    target = resolve_target(None)
    work = Path(args.work or ROOT / "work" / f"learning-{hardware_slug(target.key)}")
    base = Path(args.base) if args.base else default_base(target)
    t0 = time.time()
    with open_db(str(work / "corpus-db")) as cdb:
        ingest(cdb, args.corpus)
        train = [t for h in sorted(cdb.best_by_task(target.key)) if (t := cdb.task(h)) is not None]
        held = heldout_tasks(args.workloads, cdb, args.tasks, target, args.k, args.seed)
        demos = {m: demo_records(cdb, train, target, *METHODS[m][:2]) for m in args.methods}
        n_records = cdb.count(target_key=target.key)
    models, ft_info = {"base": base}, {}
    for m in args.methods:
        out = work / "models" / f"{m}-{n_records}"
        if not model_done(out):
            epochs, lr_factor = METHODS[m][2:]
            lr = FinetuneConfig().resolved(1, read_meta(base).get("preset")).lr * lr_factor
            finetune(base, demos[m], out, FinetuneConfig(seed=args.seed, epochs=epochs, lr=lr), progress=True)
        models[m] = out
        rep = json.loads((out / "finetune.json").read_text())
        ft_info[m] = {"demonstrations": rep["demonstrations"], "steps": rep["config"]["steps"],
                      "lr": rep["config"]["lr"], "seconds": rep["seconds"], "final_loss": rep["final_loss"]}
        print(f"{m}: {rep['demonstrations']} demonstrations, {rep['config']['steps']} steps, {rep['seconds']:.0f} s")

    if args.cm_dir:
        from tlm.search.costmodel import CostModel

        cm = CostModel.load(args.cm_dir, target)
    else:
        cm = cost_model(work, args.corpus, target, n_records, args.cm_tasks, args.seed) if args.cost_model else None
    gens = {name: Generator.from_dir(path, target) for name, path in models.items()}
    k = args.k
    kinds = (f"TLM@{k}", "TLM@0 greedy", "TLM@0 logprob") + ((f"TLM@{k} cm", "TLM@0 cm") if cm else ())
    contenders = [f"random@{k}"] + ([f"random@{k} cm"] if cm else []) + [f"{g}:{c}" for g in gens for c in kinds]
    bench = Bench(work, target, MeasureConfig(timing_budget_ms=args.timing_budget_ms))
    per_task = []
    try:
        for i, (task, rand) in enumerate(held):
            progs = {g: programs(gen, task, args.n, args.seed) for g, gen in gens.items()}
            picks = {}  # contender -> the sentences the cost model chose to measure
            if cm:
                pool = random_sentences(task, target, args.cm_n, args.seed + 1)
                picks[f"random@{k} cm"] = cm_top(cm, task, target, pool, k)
                for g, gen in gens.items():
                    pool = [x.sentence for x in gen.generate(task, args.cm_n, seed=args.seed + 1)]
                    picks[f"{g}:TLM@{k} cm"] = cm_top(cm, task, target, pool, k)
                    picks[f"{g}:TLM@0 cm"] = picks[f"{g}:TLM@{k} cm"][:1]
            wanted = rand + [s for pr in progs.values() for s in pr["samples"][:k] + pr["greedy"] + pr["logprob"]]
            lat = bench.latencies(task, wanted + [s for v in picks.values() for s in v])
            best = {f"random@{k}": min((lat[s] for s in rand), default=math.inf)}
            best.update({c: min((lat[s] for s in v), default=math.inf) for c, v in picks.items()})
            for g, pr in progs.items():
                best[f"{g}:TLM@{k}"] = min((lat[s] for s in pr["samples"][:k]), default=math.inf)
                best[f"{g}:TLM@0 greedy"] = min((lat[s] for s in pr["greedy"]), default=math.inf)
                best[f"{g}:TLM@0 logprob"] = min((lat[s] for s in pr["logprob"]), default=math.inf)
            per_task.append({"task": task.name, "kind": task.kind, "hash": task.hash, "weight": task.weight,
                             "best": best})
            print(f"[{i + 1}/{len(held)}] {task.name}: " + ", ".join(
                f"{c} {v * 1e6:.0f}" for c, v in best.items() if c.endswith(f"TLM@{k}") or c.startswith("random")))
    finally:
        bench.close()
    res = {"settings": {**vars(args), "base": str(base), "cpu": target.cpu, "hardware": hardware_slug(target.key),
                        "host": platform.node(), "seconds": round(time.time() - t0)},
           "corpus": corpus_summary(args.corpus), "train_tasks": len(train), "train_records": n_records,
           "finetune": ft_info, "tasks": per_task,
           "scores": score(per_task, contenders, f"random@{k}")}
    write_report(res, Path(args.out), contenders)
    return 0


def _fmt(x, spec=".3f") -> str:
    return "-" if x is None else format(x, spec)


def write_report(res: dict, out: Path, contenders: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "learning.json").write_text(json.dumps(res, indent=1, default=str))
    s, k = res["settings"], res["settings"]["k"]
    ref = f"total_vs_random@{k}"
    cm_flags = f" --cost-model --cm-n {s['cm_n']}" if s.get("cost_model") or s.get("cm_dir") else ""
    cm_flags += f" --cm-dir {s['cm_dir']}" if s.get("cm_dir") else ""
    lines = ["# Learning from the corpus: which demonstrations, which TLM@0 pick", "",
             f"Corpus: {res['train_records']} records over {res['train_tasks']} training tasks on {s['hardware']}; "
             f"{len(res['tasks'])} held-out tasks of {', '.join(s['workloads'])} (largest per kind, then largest). "
             f"Base `{Path(s['base']).name}`, fine-tuned with the default config, seed {s['seed']}; "
             f"{s['n']} samples per task, one seed for all models. Every program measured once (timing budget "
             f"{s['timing_budget_ms']:g} ms), a task's programs of all contenders in one batch. {s['seconds']} s.", "",
             f"Command: `.venv/bin/python bench/learning.py --tasks {s['tasks']} --k {k} --n {s['n']}"
             f"{'' if s['methods'] == list(METHODS) else ' --methods ' + ' '.join(s['methods'])}"
             f"{cm_flags}`", "",
             "| method | demonstrations | steps | lr | fine-tune s | final loss |", "|---|---:|---:|---:|---:|---:|"]
    for m, f in res["finetune"].items():
        lines.append(f"| {m} | {f['demonstrations']} | {f['steps']} | {f.get('lr', 0):.2g} | {f['seconds']:.0f} | "
                     f"{_fmt(f['final_loss'])} |")
    lines += ["", f"Lower is better. `vs best`: geometric mean over tasks of the contender's best latency over the "
              f"best any contender found; `total vs random@{k}`: weighted total latency over random@{k}'s.", "",
              f"| contender | vs best | total vs random@{k} | tasks with a program |", "|---|---:|---:|---:|"]
    for c in contenders:
        r = res["scores"][c]
        lines.append(f"| {c} | {_fmt(r['geomean_vs_best'])} | {_fmt(r[ref])} | {r['tasks_with_program']}/{len(res['tasks'])} |")
    cols = [c for c in contenders if c.startswith("random") or c.endswith((f"TLM@{k}", f"TLM@{k} cm"))]
    lines += ["", f"Per task: the best latency any contender found (us) and each TLM@{k} / random@{k} over it.", "",
              "| task | weight | best us | " + " | ".join(cols) + " |", "|---|---:|---:|" + "---:|" * len(cols)]
    for t in res["tasks"]:
        o = min(t["best"].values())
        lines.append(f"| {t['task'][:48]} | {t['weight']:g} | {o * 1e6:.0f} | "
                     + " | ".join(_fmt(t["best"][c] / o, ".2f") for c in cols) + " |")
    (out / "learning.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'learning.md'}")


if __name__ == "__main__":
    sys.exit(main())
