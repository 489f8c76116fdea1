"""The held-out GPU subgraph benchmark (issue 49, item 6): proposals made here, measured on a GPU.

    tlm gpu-heldout propose --target h100 --workloads bert_base-b1-s128 gpt2-b1-s128 \\
        --model MODEL --out DIR                        # here (TVM, no GPU): DIR/candidates.jsonl
    tlm gpu bundle --target h100 --sources ... --hold-out none --candidates DIR/candidates.jsonl --out B
    bash bench/gpu_device.sh B                          # on the GPU machine
    tlm gpu-heldout report B RESULTS --random RB RRESULTS --out bench/results/gpu-heldout

Every task of the workloads (the test split: no task of theirs is in any training data) gets, in
the order a tuner would measure them:
- `tlm`: the language model's greedy program first (TLM@0: what `--budget 0` applies), then
  distinct samples of its distribution (TLM@k: the best of the first k). One round: the model is
  not refit between measurements as the tuner's rounds would refit it;
- `metaschedule`: the candidates of MetaSchedule's first search round (evolutionary search with an
  empty database and an untrained cost model, tlm.search.baselines.metaschedule_first_round):
  MetaSchedule@64 is the best of the 64 programs it measures first;
- random@k (best of the first k random programs) comes from a plain random bundle of the same
  tasks (`tlm gpu bundle`), and dlight (TVM's rule-based GPU schedules, zero measurements) is
  every bundle's reference.
Proposals are written per (task, proposer) as they are made, so a stopped run resumes. Parts of
them go to bundles as candidates lines (`candidates`, with the cost model's top N: `--cm-top`), the
GPU donors a first choice would take as more (`donors`); the report is tlm.eval.gpu_heldout_report.

`propose --hold-out test --kinds ...` serves a GPU training round the same way: a model's programs of
training workloads' tasks (none of a test workload's), bundled with `tlm gpu bundle --hold-out test
--candidates` and ingested into the corpus after the GPU run (tools/gpu_prepare.sh, step 7).
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tlm.errors import TlmError, first_line

CANDIDATES = "candidates.jsonl"


@dataclass
class ProposeConfig:
    target: str = "h100"
    workloads: list[str] = field(default_factory=lambda: ["bert_base-b1-s128", "gpt2-b1-s128"])
    model: str = ""
    tlm: int = 10  # programs of the model per task (greedy first)
    metaschedule: int = 64
    seed: int = 0
    # a training round's proposals (the same files, measured and ingested as training records):
    # "test" leaves out every task of the test workloads, as `tlm gpu bundle --hold-out test` does
    hold_out: str = "none"
    kinds: list[str] = field(default_factory=list)  # only tasks of these kinds (empty: every task)


def heldout_tasks(workloads: list[str], target, hold_out: str = "none", kinds: list[str] | None = None
                  ) -> tuple[list, dict[str, dict[str, float]]]:
    """The distinct tasks of the workloads, largest (calls x flops) first, and per workload the
    calls of each task (its weight in that model); with hold_out="test" none of a test workload's
    tasks (training workloads' proposals), with `kinds` only tasks of those kinds."""
    from tlm.graph.sources import held_out_split

    found, held_out = held_out_split(workloads, hold_out, target)  # one extraction of all (in workers)
    by_hash: dict[str, Any] = {}
    calls: dict[str, dict[str, float]] = {}
    for w, ts in zip(workloads, found):
        calls[w] = {}
        for t in ts.tasks:
            if t.hash in held_out or (kinds and t.kind not in kinds):
                continue
            calls[w][t.hash] = calls[w].get(t.hash, 0.0) + t.weight
            by_hash.setdefault(t.hash, t)
    tasks = sorted(by_hash.values(), key=lambda t: -max(c.get(t.hash, 0.0) for c in calls.values()) * t.flops)
    return tasks, calls


def _tlm_sentences(gen, task, n: int, seed: int) -> tuple[list[str], str | None]:
    first = gen.generate(task, 1, greedy=True)
    out = [g.sentence for g in first if g.error is None]
    if n > len(out):
        more = gen.generate(task, n - len(out), seen=set(out), seed=seed)
        out += [g.sentence for g in more if g.error is None]
    error = None if out else next((g.error for g in first if g.error), "no valid program")
    return out[:n], error


def _ms_sentences(task, target, n: int, seed: int) -> tuple[list[str], str | None]:
    from tlm.model.demos import trace_sentence
    from tlm.search.baselines import metaschedule_first_round
    from tlm.space.design import plain_json

    schs = metaschedule_first_round(task, target, n, seed)
    sentences = [trace_sentence(task, plain_json(s.trace.as_json()), target) for s in schs]
    lost = sum(s is None for s in sentences)
    error = f"{lost} of {len(schs)} candidates are no program of tlm's spaces" if lost else None
    return [s for s in sentences if s], error


def propose(cfg: ProposeConfig, out: str | Path, progress: bool = True) -> Path:
    """Write each task's proposals (resuming); returns DIR/candidates.jsonl (all of them)."""
    from tlm.graph.target import resolve_target
    from tlm.model.generate import Generator
    from tlm.space.sampling import task_seed

    out = Path(out)
    (out / "proposals").mkdir(parents=True, exist_ok=True)
    cfg_path = out / "config.json"
    # a folder proposed before a field existed was proposed with that field's default
    if cfg_path.exists() and {**asdict(ProposeConfig()), **json.loads(cfg_path.read_text())} != asdict(cfg):
        raise TlmError(f"{out} was proposed with another config ({cfg_path}): use another --out")
    cfg_path.write_text(json.dumps(asdict(cfg), indent=1))
    target = resolve_target(cfg.target)
    tasks, calls = heldout_tasks(cfg.workloads, target, cfg.hold_out, cfg.kinds)
    (out / "tasks.json").write_text(json.dumps({"calls": calls, "tasks": {t.hash: t.name for t in tasks}}, indent=1))
    gen = Generator.from_dir(cfg.model, target) if cfg.tlm else None
    for i, task in enumerate(tasks):
        seed = task_seed(cfg.seed, task.hash)
        for proposer, n in (("tlm", cfg.tlm), ("metaschedule", cfg.metaschedule)):
            path = out / "proposals" / f"{task.hash}-{proposer}.json"
            if n <= 0 or path.exists():
                continue
            try:
                sentences, error = (_tlm_sentences(gen, task, n, seed) if proposer == "tlm"
                                    else _ms_sentences(task, target, n, seed))
            except Exception as err:  # one task's failure is that task's error, never the run's
                sentences, error = [], first_line(err)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"task": task.hash, "name": task.name, "proposer": proposer,
                                       "sentences": sentences, "error": error}))
            os.replace(tmp, path)
            if progress:
                print(f"[{i + 1}/{len(tasks)}] {task.name} {proposer}: {len(sentences)} programs"
                      + (f" ({error})" if error else ""), flush=True)
    return write_candidates(out)


def write_candidates(out: Path, path: Path | None = None, workloads: list[str] | None = None,
                     slices: dict[str, tuple[int, int]] | None = None, ranked: dict[str, list[int]] | None = None,
                     cm_top: int = 0, exclude: set[tuple[str, str]] | None = None, label: str | None = None) -> Path:
    """DIR/candidates.jsonl (or `path`) from the proposals so far (tlm gpu bundle --candidates):
    those of `workloads`' tasks only (DIR/tasks.json's calls; None: all), each proposer's programs
    `slices[proposer]` = (start, stop) in proposal order (a proposer not named: all of them), so
    that one proposal run is measured in parts (TLM@10 and MetaSchedule@64 first, TLM@32 later).
    `ranked` (tlm.eval.gpu_ranked.proposal_orders) and `cm_top`: the model's proposals the cost
    model ranks in its first `cm_top` too (TLM@10+cm; kept in proposal order); `exclude`: (task,
    sentence) pairs left out (another part's, tlm.measure.cuda_measure.named_programs); `label`: the
    proposer name every line gets (one bundle holding several models' picks tells them apart by it)."""
    keep = None
    if workloads:
        calls = json.loads((out / "tasks.json").read_text())["calls"]
        unknown = [w for w in workloads if w not in calls]
        if unknown:
            raise TlmError(f"{out} proposed no task of {unknown} (it has {sorted(calls)})")
        keep = {h for w in workloads for h in calls[w]}
    lines = []
    for prop in sorted((out / "proposals").glob("*.json")):
        p = json.loads(prop.read_text())
        if keep is not None and p["task"] not in keep:
            continue
        start, stop = (slices or {}).get(p["proposer"], (0, None))
        chosen = set(range(len(p["sentences"]))[start:stop])
        if p["proposer"] == "tlm" and cm_top > 0 and p["sentences"]:
            if ranked is None or p["task"] not in ranked:
                raise TlmError(f"no cost-model order of task {p['task']}'s proposals")
            chosen |= set(ranked[p["task"]][:cm_top])
        lines += [json.dumps({"task": p["task"], "proposer": label or p["proposer"], "sentence": s})
                  for i, s in enumerate(p["sentences"]) if i in chosen and (p["task"], s) not in (exclude or ())]
    path = Path(path or out / CANDIDATES)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in lines))
    os.replace(tmp, path)
    return path


# ---------------------------------------------------------------- command line
def _cmd_propose(args: argparse.Namespace) -> int:
    cfg = ProposeConfig(target=args.target, workloads=args.workloads, model=args.model, tlm=args.tlm,
                        metaschedule=args.metaschedule, seed=args.seed, hold_out=args.hold_out, kinds=args.kinds or [])
    if cfg.tlm and not Path(cfg.model, "tlm.json").is_file():
        raise TlmError(f"no model in {cfg.model!r} (--model: a fine-tuned TLM directory)")
    path = propose(cfg, args.out)
    print(f"{sum(1 for _ in path.open())} proposals in {path}")
    return 0


def _cmd_candidates(args: argparse.Namespace) -> int:
    slices = {}
    for proposer, text in (("tlm", args.tlm), ("metaschedule", args.metaschedule)):
        if text:
            try:
                a, b = text.split(":")
                slices[proposer] = (int(a or 0), int(b) if b else None)
            except ValueError:
                raise TlmError(f"--{proposer} {text!r}: START:STOP, e.g. 0:10") from None
    if args.cm_top and not args.cost_model:
        raise TlmError("--cm-top needs --cost-model")
    from tlm.eval.gpu_ranked import proposal_orders
    from tlm.measure.cuda_measure import named_programs

    ranked = proposal_orders(args.proposals, args.cost_model, _proposal_tasks(args.proposals)) if args.cm_top else None
    exclude = named_programs(args.except_) if args.except_ else None
    path = write_candidates(Path(args.proposals), Path(args.out), args.workloads, slices, ranked, args.cm_top, exclude,
                            args.label)
    print(f"{sum(1 for _ in path.open())} proposals in {path}")
    return 0


def _proposal_tasks(proposals: str | Path) -> dict[str, Any]:
    """Hash -> Task of a propose folder's workloads, extracted again."""
    from tlm.graph.target import resolve_target

    cfg = json.loads((Path(proposals) / "config.json").read_text())
    return {t.hash: t for t in heldout_tasks(cfg["workloads"], resolve_target(cfg["target"]), cfg.get("hold_out", "none"),
                                             cfg.get("kinds"))[0]}


def _cmd_donors(args: argparse.Namespace) -> int:
    from tlm.eval.gpu_ranked import donor_picks

    lines, counts = donor_picks(args.proposals, args.cost_model, _proposal_tasks(args.proposals), args.donors)
    Path(args.out).write_text("".join(json.dumps(x) + "\n" for x in lines))
    print(f"{counts['donor_first']} donors first of {counts['with_donors']} tasks with donors ({counts['tasks']} tasks): {args.out}")
    return 0


def register_cli(subparsers) -> None:
    p = subparsers.add_parser("gpu-heldout", help="the held-out GPU subgraph benchmark: propose here, report after the GPU run")
    sub = p.add_subparsers(dest="heldout_command", required=True)
    q = sub.add_parser("propose", help="the model's and MetaSchedule's programs of the held-out tasks")
    q.add_argument("--target", default="h100")
    q.add_argument("--workloads", nargs="+", default=["bert_base-b1-s128", "gpt2-b1-s128"])
    q.add_argument("--model", default="", help="the GPU TLM (fine-tuned) directory")
    q.add_argument("--tlm", type=int, default=10, help="the model's programs per task")
    q.add_argument("--metaschedule", type=int, default=64, help="MetaSchedule's first-round programs per task")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--hold-out", choices=("none", "test"), default="none",
                   help="test: leave out every task of the test workloads (proposals of training workloads: a GPU round)")
    q.add_argument("--kinds", nargs="+", default=None, help="only tasks of these kinds (matmul, softmax, ...)")
    q.add_argument("--out", required=True)
    q.set_defaults(func=_cmd_propose)
    q = sub.add_parser("candidates", help="a part of the proposals as tlm gpu bundle --candidates lines")
    q.add_argument("proposals", help="the propose --out folder")
    q.add_argument("--workloads", nargs="+", default=None, help="only these workloads' tasks")
    q.add_argument("--tlm", default=None, help="START:STOP of the model's programs per task (all when not given)")
    q.add_argument("--metaschedule", default=None, help="START:STOP of MetaSchedule's programs per task")
    q.add_argument("--cost-model", default=None, help="a GPU cost model, for --cm-top")
    q.add_argument("--cm-top", type=int, default=0, metavar="N",
                   help="also the model's proposals the cost model ranks in its first N (TLM@N as the tuner measures)")
    q.add_argument("--except", dest="except_", default=None, metavar="FILE",
                   help="leave out the programs another candidates file names (a part measured apart)")
    q.add_argument("--label", default=None, help="write the lines with this proposer name (e.g. tlm-cm: a model's picks)")
    q.add_argument("--out", required=True)
    q.set_defaults(func=_cmd_candidates)
    q = sub.add_parser("donors", help="the GPU donors a first choice would take, as candidates lines (measure them)")
    q.add_argument("proposals", help="the propose --out folder")
    q.add_argument("--cost-model", required=True, help="the GPU cost model that picks")
    q.add_argument("--donors", type=int, default=3, help="nearest corpus tasks to take programs from")
    q.add_argument("--out", required=True)
    q.set_defaults(func=_cmd_donors)
    q = sub.add_parser("report", help="TLM@k, MetaSchedule@64, random@k and dlight from the GPU run's results")
    q.add_argument("bundle", help="the bundle of the proposals (tlm gpu bundle --candidates)")
    q.add_argument("results", help="its GPU run's results folder")
    q.add_argument("--random", nargs=2, required=True, metavar=("BUNDLE", "RESULTS"),
                   help="a random bundle of the same tasks and its results (random@k)")
    q.add_argument("--proposals", required=True, help="the propose --out folder (the workloads' calls)")
    q.add_argument("--cost-model", default=None, help="a GPU cost model (tlm costmodel --kind cuda): adds tlm@0+cm and tlm@10+cm")
    q.add_argument("--metaschedule", nargs=2, default=None, metavar=("BUNDLE", "RESULTS"),
                   help="MetaSchedule's programs of the same tasks from an earlier bundle and run")
    q.add_argument("--more", nargs=2, action="append", default=[], metavar=("BUNDLE", "RESULTS"),
                   help="the same tasks' later proposals from another bundle and run, appended in order (repeatable)")
    q.add_argument("--donors", nargs=2, default=None, metavar=("BUNDLE", "RESULTS"),
                   help="the measured `tlm gpu-heldout donors` picks: adds tlm@0+cm+donors (with --cost-model)")
    q.add_argument("--out", default="bench/results/gpu-heldout", help="OUT.md and OUT.json")
    q.set_defaults(func=_cmd_report)


def _cmd_report(args: argparse.Namespace) -> int:
    import sys

    from tlm.eval.gpu_heldout_report import heldout_report, report_markdown
    from tlm.eval.gpu_ranked import cost_model_orders

    orders = cost_model_orders(args.bundle, args.cost_model, [b for b, _ in args.more]) if args.cost_model else None
    rep = heldout_report(args.bundle, args.results, args.random[0], args.random[1], args.proposals, orders,
                         args.metaschedule, [tuple(x) for x in args.more], tuple(args.donors) if args.donors else None)
    if not rep["tasks"]:
        raise TlmError(f"no task of {args.bundle} has a measured reference in {args.results}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(rep, indent=1))
    out.with_suffix(".md").write_text(report_markdown(rep, "tlm " + " ".join(sys.argv[1:])))
    print(out.with_suffix(".md").read_text().split("Per task")[0])
    return 0
