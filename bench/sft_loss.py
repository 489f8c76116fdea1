"""Which fine-tuning loss: every token of the demonstration sentences, or only the decisions?

    .venv/bin/python bench/sft_loss.py --db DIR --base MODEL [--steps S] [--measure --k 8] [--out DIR]

The tasks of the database that have a demonstration (their best correct program as a sentence,
tlm.model.demos.demo_records) are sorted by kind and split alternately into a training half and
a held-out half. TLM-base is fine-tuned twice on the training half's demonstrations, with the
same seed, steps and learning rate, once per loss ("sentence": all tokens; "decisions": only
the value words). Each model (and the base) is then scored on the held-out demonstrations:

  - value log-prob: summed log-probability of the value words under teacher forcing, over
    the whole vocabulary (mean per demonstration, and per value word);
  - generation log-prob: `Generator.logprob`, the log-probability generation assigns to the
    sentence (renormalized over the valid choices at every decision), when it exists;
  - with --measure: k programs generated per held-out task, measured with the Measurer
    (nothing is written to the database); the best latency per task relative to the
    held-out demonstration's (geometric mean; < 1 means faster than the demonstration).

Higher log-probabilities of unseen tasks' best programs mean a model generalizes the
demonstrations better; the measured latencies are the end that matters. Writes
OUT/sft_loss.json and OUT/sft_loss.md (default OUT: bench/results).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODELS = ("base", "sentence", "decisions")


def _db_tasks(db, key: str) -> list:
    hashes = sorted({r.task_hash for r in db.records(target_key=key)})
    return [t for t in (db.task(h) for h in hashes) if t is not None]


def split_demos(demos: list, tasks_by_hash: dict) -> tuple[list, list]:
    """Tasks sorted by kind (tlm.search.loop_state.batch_key), alternately to train and held-out."""
    from tlm.search.loop_state import batch_key

    order = sorted({d.task_hash for d in demos}, key=lambda h: batch_key(tasks_by_hash[h]))
    held = set(order[1::2])
    return [d for d in demos if d.task_hash not in held], [d for d in demos if d.task_hash in held]


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def score(model_dir: Path, demos: list, tasks_by_hash: dict, target) -> dict:
    """Held-out log-probabilities of the demonstrations under one model."""
    from tlm.model.demos import value_logprobs
    from tlm.model.generate import Generator
    from tlm.model.lm import load_model

    lm = load_model(model_dir)
    sums, words = zip(*value_logprobs(lm, demos, with_words=True)) if demos else ((), ())
    out = {"value_logprob": sum(sums) / len(sums), "value_logprob_per_word": sum(sums) / max(1, sum(words)),
           "generation_logprob": None, "generation_failures": 0}
    gen = Generator(lm, target)
    if hasattr(gen, "logprob"):
        vals = []
        for d in demos:
            try:
                vals.append(gen.logprob(tasks_by_hash[d.task_hash], d.sentence))
            except Exception:  # a sentence with words outside the vocabulary
                out["generation_failures"] += 1
        out["generation_logprob"] = sum(vals) / len(vals) if vals else None
    return out


def measure_models(models: dict[str, Path], demos: list, tasks_by_hash: dict, target, k: int, seed: int,
                   measure_cfg) -> dict:
    """Best measured latency of k generated programs per held-out task, per model."""
    from tlm.measure.measurer import Candidate, Measurer
    from tlm.model.generate import Generator
    from tlm.space.design import task_space
    from tlm.space.language import parse

    demo_best = {}
    for d in demos:
        if d.median_s is not None:
            demo_best[d.task_hash] = min(demo_best.get(d.task_hash, math.inf), d.median_s)
    out: dict[str, dict] = {}
    with Measurer(target, measure_cfg) as measurer:
        for name, path in models.items():
            gen = Generator.from_dir(path, target)
            per_task = {}
            for h in sorted(demo_best):
                task = tasks_by_hash[h]
                cands = []
                for g in gen.generate(task, k, seed=seed):
                    sch = getattr(g, "schedule", None)
                    if sch is None:
                        sch = parse(g.sentence, task, target, space=task_space(task, target)).sch
                    cands.append(Candidate(task, schedule=sch, proposer=f"bench-{name}", sentence=g.sentence))
                results = measurer.measure(cands) if cands else []
                ok = [r.median_s for r in results if r.ok]
                per_task[h] = {"task": task.name, "generated": len(cands), "valid": len(ok),
                               "best_s": min(ok) if ok else None, "demo_s": demo_best[h]}
            ratios = [v["best_s"] / v["demo_s"] for v in per_task.values() if v["best_s"] and v["demo_s"]]
            out[name] = {"geomean_vs_demo": _geomean(ratios), "tasks_with_program": len(ratios),
                         "tasks": per_task}
    return out


def _fmt(x, spec=".3f") -> str:
    return "-" if x is None else format(x, spec)


def write_report(res: dict, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "sft_loss.json").write_text(json.dumps(res, indent=1))
    s = res["settings"]
    lines = [
        "# Fine-tuning loss: whole sentence vs decisions only", "",
        f"Database `{s['db']}`, base `{s['base']}`, target {s['cpu']}; {res['train_tasks']} training tasks "
        f"({res['train_demos']} demonstrations), {res['heldout_tasks']} held-out tasks ({res['heldout_demos']}). "
        f"Both fine-tunings: {s['steps']} steps, lr {s['lr']:g}, batch {s['batch_size']}, seed {s['seed']} "
        f"({s['seconds_sentence']:.0f} s and {s['seconds_decisions']:.0f} s). Generated by `bench/sft_loss.py` "
        f"on {s['host']}.", "",
        "Held-out demonstrations (best programs of tasks the fine-tuning did not see); higher log-probability "
        "is better.", "",
        "| model | value log-prob / demo | per value word | generation log-prob / demo | train fit (value log-prob) |",
        "|---|---:|---:|---:|---:|",
    ]
    for m in MODELS:
        h, t = res["heldout"][m], res["train"][m]
        lines.append(f"| {m} | {_fmt(h['value_logprob'])} | {_fmt(h['value_logprob_per_word'], '.4f')} | "
                     f"{_fmt(h['generation_logprob'])} | {_fmt(t['value_logprob'])} |")
    if res.get("measured"):
        lines += ["", f"Measured: {s['k']} generated programs per held-out task, best latency relative to the "
                  "task's demonstration (geometric mean; lower is better).", "",
                  "| model | best / demonstration | tasks with a valid program |", "|---|---:|---:|"]
        for m in MODELS:
            r = res["measured"][m]
            lines.append(f"| {m} | {_fmt(r['geomean_vs_demo'])} | {r['tasks_with_program']}/{res['heldout_tasks']} |")
    lines += ["", f"**Verdict** (measured here, not assumed): {res['verdict']}", ""]
    (out_dir / "sft_loss.md").write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--db", required=True, help="record database directory (e.g. a loop's WORK/db)")
    p.add_argument("--base", required=True, help="TLM-base model directory")
    p.add_argument("--out", default=str(ROOT / "bench" / "results"), help="where sft_loss.{json,md} go")
    p.add_argument("--work", default=None, help="where the two fine-tuned models go (default: a temp dir)")
    p.add_argument("--target", default=None)
    p.add_argument("--per-task", type=int, default=1, help="demonstrations per task")
    p.add_argument("--max-tasks", type=int, default=0, help="cap on the tasks with demonstrations (0: all)")
    p.add_argument("--steps", type=int, default=0, help="0: FinetuneConfig's default")
    p.add_argument("--lr", type=float, default=0.0)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--epochs", type=float, default=3.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--measure", action="store_true", help="also generate and measure programs of held-out tasks")
    p.add_argument("--k", type=int, default=8, help="programs per held-out task with --measure")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--min-repeat-ms", type=int, default=30)
    args = p.parse_args(argv)

    from tlm.errors import TlmError
    from tlm.graph.target import resolve_target
    from tlm.measure.database import open_db
    from tlm.measure.config import MeasureConfig
    from tlm.model.demos import demo_records
    from tlm.model.finetune import FinetuneConfig, finetune
    from tlm.search.loop_state import select_tasks

    target = resolve_target(args.target)
    with open_db(args.db, create=False) as db:
        tasks = _db_tasks(db, target.key)
        demos = demo_records(db, tasks, target, args.per_task)
    by_hash = {t.hash: t for t in tasks}
    if args.max_tasks:
        keep = {t.hash for t in select_tasks([by_hash[h] for h in sorted({d.task_hash for d in demos})], args.max_tasks)}
        demos = [d for d in demos if d.task_hash in keep]
    train, held = split_demos(demos, by_hash)
    if not train or not held:
        raise TlmError(f"need demonstrations of at least 2 tasks (have {len({d.task_hash for d in demos})})")
    work = Path(args.work or tempfile.mkdtemp(prefix="tlm-sft-loss-"))
    models = {"base": Path(args.base)}
    seconds = {}
    cfg = None
    for loss in ("sentence", "decisions"):
        c = FinetuneConfig(steps=args.steps, lr=args.lr, batch_size=args.batch_size, loss=loss, seed=args.seed,
                           epochs=args.epochs, threads=args.threads)
        t0 = time.perf_counter()
        models[loss] = finetune(args.base, train, work / loss, c, target=target, progress=True)
        seconds[loss] = time.perf_counter() - t0
        cfg = json.loads((models[loss] / "finetune.json").read_text())["config"]
    res = {
        "settings": {"db": args.db, "base": args.base, "cpu": target.cpu, "host": platform.node(), "k": args.k,
                     "steps": cfg["steps"], "lr": cfg["lr"], "batch_size": cfg["batch_size"], "seed": args.seed,
                     "seconds_sentence": seconds["sentence"], "seconds_decisions": seconds["decisions"],
                     "work": str(work)},
        "train_tasks": len({d.task_hash for d in train}), "train_demos": len(train),
        "heldout_tasks": len({d.task_hash for d in held}), "heldout_demos": len(held),
        "heldout": {m: score(models[m], held, by_hash, target) for m in MODELS},
        "train": {m: score(models[m], train, by_hash, target) for m in MODELS},
        "measured": None,
    }
    if args.measure:
        mc = MeasureConfig(repeat=args.repeat, min_repeat_ms=args.min_repeat_ms)
        res["measured"] = measure_models(models, held, by_hash, target, args.k, args.seed, mc)
    h = res["heldout"]
    key = "generation_logprob" if h["sentence"]["generation_logprob"] is not None else "value_logprob"
    better = max(("sentence", "decisions"), key=lambda m: h[m][key])
    verdict = f"held-out {key.replace('_', ' ')}: {better} loss higher ({_fmt(h['sentence'][key])} vs {_fmt(h['decisions'][key])})"
    if res["measured"]:
        g = {m: res["measured"][m]["geomean_vs_demo"] for m in ("sentence", "decisions")}
        if None not in g.values():
            faster = min(g, key=g.get)
            verdict += f"; measured: {faster} loss faster ({_fmt(g['sentence'])} vs {_fmt(g['decisions'])} of the demonstrations)"
    res["verdict"] = verdict
    write_report(res, Path(args.out))
    print(verdict)
    print(f"wrote {Path(args.out) / 'sft_loss.md'} and sft_loss.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
