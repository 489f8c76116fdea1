"""`tlm gpu`: GPU programs built here, measured where a GPU is.

    tlm gpu bundle --target h200 --sources ... --out BUNDLE     (here, no GPU: tlm.measure.gpu_bundle)
    tlm gpu bundle --target h100 --rest-of BUNDLE RUN... --out B (what RUNs left of BUNDLE, no sampling)
    tlm gpu precompile BUNDLE|PLAN ... [--jobs N]               (here: cubins carried along, tlm.measure.precompile)
    tlm gpu run BUNDLE --out RESULTS [--seconds S]              (on the GPU machine: tlm.measure.cuda_runner)
    tlm gpu ingest BUNDLE RESULTS [--corpus data/corpus]        (here: tlm.measure.gpu_ingest)
    tlm gpu plan WORKLOAD --target h100 --out PLAN              (here: tlm.compiler.gpu_plan, a whole model)

On a machine without TVM, `python -m tlm.measure.cuda_runner BUNDLE --out RESULTS` is `tlm gpu run`,
and `python -m tlm.measure.cuda_plan PLAN --out RESULTS` runs a plan.
"""

from __future__ import annotations

import argparse
import os


def _cmd_bundle(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tlm.errors import TlmError
    from tlm.graph.target import resolve_target
    from tlm.measure.gpu_bundle import BundleConfig, build_bundle, bundle_hashes, bundle_tasks, read_tasks

    if args.rest_of:  # the programs an earlier bundle's runs left unmeasured, as candidates
        from tlm.measure.gpu_ingest import write_unmeasured

        if args.candidates:
            raise TlmError("--rest-of and --candidates both name the programs: give one")
        args.candidates = str(Path(args.out) / "candidates-rest.jsonl")
        n = write_unmeasured(args.rest_of[0], args.rest_of[1:], args.candidates)
        print(f"{args.rest_of[0]}: {n} programs not measured by {', '.join(args.rest_of[1:]) or 'any run'}")
    cfg = BundleConfig(target=args.target, per_task=args.per_task, seed=args.seed, jobs=args.jobs,
                       task_seconds=args.task_seconds, candidates=args.candidates)
    target = resolve_target(args.target)
    skip = {h for b in args.skip for h in bundle_hashes(b)}
    # --rest-of: the earlier bundle's own tasks (its TIR as measured then; no extraction)
    found = list(read_tasks(args.rest_of[0]).values()) if args.rest_of else \
        bundle_tasks(args.sources, target, args.hold_out, None)
    tasks = [t for t in found if t.hash not in skip]
    tasks = tasks[: args.limit] if args.limit else tasks
    manifest = build_bundle(tasks, cfg, args.out)
    n = sum(len(t.get("candidates", [])) for t in manifest["tasks"])
    print(f"{args.out}: {len(manifest['tasks'])} tasks, {n} programs for {manifest['card'] or manifest['arch']}")
    return 0


def _add_bundle_cli(sub) -> None:
    """`tlm gpu bundle`."""
    p = sub.add_parser("bundle", help="build a GPU measurement bundle here (no GPU needed)")
    p.add_argument("--target", default="h200", help="a GPU name (h100, h200, a100, ...) or a CUDA target dict")
    p.add_argument("--sources", nargs="+", default=["train-set"], help="workloads (zoo names, train-set)")
    p.add_argument("--hold-out", default="test", choices=["test", "none"], help="drop tasks of the test workloads")
    p.add_argument("--per-task", type=int, default=10)
    p.add_argument("--limit", type=int, default=None, help="first N tasks only")
    p.add_argument("--skip", nargs="*", default=[], help="bundles whose tasks this one leaves out")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--task-seconds", type=float, default=60.0)
    p.add_argument("--candidates", default=None,
                   help="JSON lines {task, proposer, sentence}: bundle these programs of those tasks instead of random ones")
    p.add_argument("--rest-of", nargs="+", default=None, metavar=("BUNDLE", "RUN"),
                   help="the programs of BUNDLE's manifest that no RUN (a GPU run's folder) measured, as "
                        "--candidates, of BUNDLE's own tasks (--sources is not read)")
    p.add_argument("--out", required=True)
    p.set_defaults(func=_cmd_bundle)


def _cmd_run(args: argparse.Namespace) -> int:
    from tlm.measure import cuda_runner

    argv = [args.bundle, "--out", args.out, "--seconds", str(args.seconds), "--hang-seconds", str(args.hang_seconds)]
    if args.jobs:
        argv += ["--jobs", str(args.jobs)]
    if args.compile_only:
        argv.append("--compile-only")
    return cuda_runner.main(argv)


def _cmd_precompile(args: argparse.Namespace) -> int:
    from tlm.measure.precompile import ahead_status, precompile

    if args.check:
        for folder, (ahead, n) in ahead_status(args.folders).items():
            print(f"{folder}: {ahead} of {n} files compiled ahead")
        return 0
    res = precompile(args.folders, jobs=args.jobs)
    now = sum(n["compiled"] for n in res["folders"].values())
    before = sum(n["files"] for n in res["folders"].values()) - now
    print(f"{now} files compiled ahead now in {res['seconds']} s ({res['nvcc']}), {before} before")
    return 0


def _cmd_ingest(args: argparse.Namespace) -> int:
    from tlm.errors import TlmError
    from tlm.measure.gpu_ingest import ingest_results

    if args.first is not None and (args.proposer is None or args.first < 1):
        raise TlmError("--first N needs --proposer and N >= 1")
    report = ingest_results(args.bundle, args.results, args.db, args.corpus, card=args.card, proposer=args.proposer,
                            first=args.first, only=args.only)
    print(report)
    if args.corpus is None and not report.skipped:
        print(f"no --corpus: the records are in {args.db} only, no shard written")
    return 0


def register_cli(sub) -> None:
    gpu = sub.add_parser("gpu", help="GPU programs: bundle here, run on a GPU machine, ingest here")
    gsub = gpu.add_subparsers(dest="gpu_command", required=True)
    gpu.set_defaults(gpu_subparsers=gsub)  # later stages add theirs (tlm.compiler.gpu_plan: `tlm gpu plan`)
    _add_bundle_cli(gsub)
    p = gsub.add_parser("run", help="compile and measure a bundle on this machine's GPU")
    p.add_argument("bundle")
    p.add_argument("--out", required=True)
    p.add_argument("--seconds", type=float, default=420.0)
    p.add_argument("--jobs", type=int, default=0, help="nvcc processes (default: cores - 2)")
    p.add_argument("--hang-seconds", type=float, default=30.0)
    p.add_argument("--compile-only", action="store_true", help="compile and check resources only (no GPU)")
    p.set_defaults(func=_cmd_run)
    p = gsub.add_parser("precompile", help="compile bundles' and plans' CUDA C to cubins here, carried with them "
                                           "so that the GPU machine only times (needs the `cuda` extra)")
    p.add_argument("folders", nargs="+", metavar="FOLDER", help="a bundle (tlm gpu bundle) or a plan (tlm gpu plan)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="nvcc processes (default: all cores)")
    p.add_argument("--check", action="store_true", help="only say how many files are compiled ahead (no nvcc needed)")
    p.set_defaults(func=_cmd_precompile)
    p = gsub.add_parser("ingest", help="measured results into the work database and the corpus's shards")
    p.add_argument("bundle")
    p.add_argument("results", help="the run's --out folder")
    p.add_argument("--db", default="work/gpu/db", help="work database (not in git)")
    p.add_argument("--corpus", default=None,
                   help="where the shards go (data/corpus for training tasks; none by default: a held-out "
                        "bundle's records must never reach the corpus)")
    p.add_argument("--card", default=None,
                   help="the card measured on, when not the bundle's (its programs must be the same: h200 -> h100)")
    p.add_argument("--proposer", default=None,
                   help="only this proposer's programs (tlm, metaschedule, random): one contender of a held-out bundle")
    p.add_argument("--first", type=int, default=None,
                   help="with --proposer: only its first N programs of each task, in the bundle's order "
                        "(TLM@10 of a bundle that holds 32 TLM samples a task)")
    p.add_argument("--only", default=None, metavar="FILE",
                   help="only the programs a candidates file names (JSON lines {task, proposer, sentence}; "
                        "`tlm gpu-heldout candidates --cm-top 10`: TLM@10 as the tuner measures it)")
    p.set_defaults(func=_cmd_ingest)
