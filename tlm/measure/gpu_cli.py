"""`tlm gpu`: GPU programs built here, measured where a GPU is.

    tlm gpu bundle --target h200 --sources ... --out BUNDLE     (here, no GPU: tlm.measure.gpu_bundle)
    tlm gpu run BUNDLE --out RESULTS [--seconds S]              (on the GPU machine: tlm.measure.cuda_runner)
    tlm gpu ingest BUNDLE RESULTS [--corpus data/corpus]        (here: tlm.measure.gpu_ingest)
    tlm gpu plan WORKLOAD --target h100 --out PLAN              (here: tlm.compiler.gpu_plan, a whole model)

On a machine without TVM, `python -m tlm.measure.cuda_runner BUNDLE --out RESULTS` is `tlm gpu run`,
and `python -m tlm.measure.cuda_plan PLAN --out RESULTS` runs a plan.
"""

from __future__ import annotations

import argparse


def _cmd_run(args: argparse.Namespace) -> int:
    from tlm.measure import cuda_runner

    argv = [args.bundle, "--out", args.out, "--seconds", str(args.seconds), "--hang-seconds", str(args.hang_seconds)]
    if args.jobs:
        argv += ["--jobs", str(args.jobs)]
    if args.compile_only:
        argv.append("--compile-only")
    return cuda_runner.main(argv)


def _cmd_ingest(args: argparse.Namespace) -> int:
    from tlm.errors import TlmError
    from tlm.measure.gpu_ingest import ingest_results

    if args.first is not None and (args.proposer is None or args.first < 1):
        raise TlmError("--first N needs --proposer and N >= 1")
    report = ingest_results(args.bundle, args.results, args.db, args.corpus, card=args.card, proposer=args.proposer,
                            first=args.first)
    print(report)
    if args.corpus is None and not report.skipped:
        print(f"no --corpus: the records are in {args.db} only, no shard written")
    return 0


def register_cli(sub) -> None:
    from tlm.measure.gpu_bundle import add_bundle_cli

    gpu = sub.add_parser("gpu", help="GPU programs: bundle here, run on a GPU machine, ingest here")
    gsub = gpu.add_subparsers(dest="gpu_command", required=True)
    gpu.set_defaults(gpu_subparsers=gsub)  # later stages add theirs (tlm.compiler.gpu_plan: `tlm gpu plan`)
    add_bundle_cli(gsub)
    p = gsub.add_parser("run", help="compile and measure a bundle on this machine's GPU")
    p.add_argument("bundle")
    p.add_argument("--out", required=True)
    p.add_argument("--seconds", type=float, default=420.0)
    p.add_argument("--jobs", type=int, default=0, help="nvcc processes (default: cores - 2)")
    p.add_argument("--hang-seconds", type=float, default=30.0)
    p.add_argument("--compile-only", action="store_true", help="compile and check resources only (no GPU)")
    p.set_defaults(func=_cmd_run)
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
    p.set_defaults(func=_cmd_ingest)
