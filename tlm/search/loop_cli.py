"""`tlm loop`: the command line of the iterative optimization (tlm.search.loop)."""

from __future__ import annotations

import argparse
import json
import sys

from tlm.search.loop import LoopConfig, run_loop


def _cmd_loop(args: argparse.Namespace) -> int:
    from tlm.measure.config import measure_config_from_args

    cfg = LoopConfig(
        base=args.base, work=args.work, sources=list(args.sources), kb=args.kb, kp=args.kp, rounds=args.rounds,
        max_tasks=args.max_tasks, patience_measurements=args.patience_measurements, ft_steps=args.ft_steps,
        ft_lr=args.ft_lr, ft_batch_size=args.ft_batch_size, ft_loss=args.ft_loss, pipeline=args.pipeline,
        temperature=args.temperature, top_k=args.top_k, seed=args.seed, target=args.target, device=args.device,
        per_task_demos=args.per_task_demos, schedule=args.schedule, measure=measure_config_from_args(args))
    res = run_loop(cfg, progress=args.progress)
    if args.json:
        json.dump(res, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        norm = f"{res['normalized']:.4f}" if res["normalized"] is not None else "n/a"
        print(f"{res['rounds']} rounds, {res['measurements']} measurements ({res['measured_now']} now) over "
              f"{res['tasks']} tasks; normalized total latency {norm}; stopped: {res['stopped']}; "
              f"model {res['model']}")
    return 0


def register_cli(sub) -> None:
    from tlm.measure.config import add_measure_args

    p = sub.add_parser("loop", help="iterative optimization: generate, measure, fine-tune (paper Alg. 1)")
    p.add_argument("--base", required=True, help="the pretrained model directory (TLM-base)")
    p.add_argument("--work", required=True, help="work directory (re-running the same command resumes)")
    p.add_argument("--sources", nargs="+", default=["pretrain-set"],
                   help="workloads whose training tasks are optimized (held-out test tasks are removed)")
    p.add_argument("--kb", type=int, default=4, help="task batches (one per round, cyclically)")
    p.add_argument("--kp", type=int, default=8, help="programs per task and round")
    p.add_argument("--rounds", type=int, default=0, help="stop after N rounds (0: only the convergence rule)")
    p.add_argument("--max-tasks", type=int, default=0, help="cap on the tasks (spread across kinds; 0: all)")
    p.add_argument("--patience-measurements", type=int, default=0,
                   help="stop when these many measurements gained < 1%% (0: kp x tasks)")
    p.add_argument("--ft-steps", type=int, default=0, help="fine-tuning steps (0: 3 epochs of demonstrations)")
    p.add_argument("--ft-lr", type=float, default=0.0, help="0: a tenth of the base preset's")
    p.add_argument("--ft-batch-size", type=int, default=16)
    p.add_argument("--ft-loss", default="sentence", choices=["decisions", "sentence"])
    p.add_argument("--per-task-demos", type=int, default=1, help="demonstrations per task")
    p.add_argument("--no-pipeline", dest="pipeline", action="store_false",
                   help="wait for each fine-tuning instead of measuring meanwhile")
    p.add_argument("--schedule", default="cycle", choices=["cycle", "gain"],
                   help="cycle: batch r mod k_b (the paper's); gain: after one cycle, the tasks expected to gain most")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", default=None, help="'host' (default), or a TVM target as JSON")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="for generation and fine-tuning")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    add_measure_args(p)
    p.set_defaults(func=_cmd_loop)
