"""How CPU programs are timed and checked (`MeasureConfig`, saved with every tuning run), and the
command-line options that set it. The measurer that uses it is tlm.measure.measurer."""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from typing import Any

from tlm.errors import TlmError


@dataclass
class MeasureConfig:
    """How programs are timed; saved with every tuning run."""

    number: int = 1
    repeat: int = 5
    min_repeat_ms: int = 30
    enable_cpu_cache_flush: bool = True
    build_timeout_s: float = 30.0
    run_timeout_s: float = 30.0
    reference_timeout_s: float = 600.0  # the untuned program's build and run (naive 3-D convs: ~1 min)
    builder_workers: int | None = None  # default: the target's cores
    remeasure_top: int = 2  # the best few of a batch are timed again
    # > 1: every program of the batch is timed this many times in turn (interleaved rounds: a
    # drift of the machine between rounds hits every program alike); replaces remeasure_top
    rounds: int = 1
    # > 0: a program whose checked (untimed) run took t ms gets floor(budget / t) timed repeats
    # (at most `repeat`), and none when t >= budget (that run is its one reading; not for
    # pre-packed programs): slow programs, far from the best, cost ~budget, not 5 runs.
    timing_budget_ms: float = 0.0
    # > 0: a program whose checked run took longer than slow_factor x its task's best known
    # latency (`measure(best_s=...)`) is not timed further; that run is its one reading (it is
    # far from the best, so its exact time decides nothing). Not for pre-packed programs, whose
    # checked run includes the packing.
    slow_factor: float = 0.0
    # > 0: the same limit for a task without a best yet (and a cap on the slow-factor one): the
    # time of a program running at this many GFLOPS (at least 1 s)
    min_gflops: float = 0.0
    # TVM threads of each timed run; 0: TVM's own default (tlm.graph.target.tvm_default_threads),
    # how MetaSchedule measures and how the whole corpus was measured (1 on its 2-core hosts).
    threads: int = 0
    rtol: float = 1e-4  # relative to the largest reference magnitude
    atol: float = 1e-5
    # RPC: measure on devices registered with a TVM tracker instead of this host.
    tracker_host: str | None = None
    tracker_port: int | None = None
    tracker_key: str | None = None
    rpc_workers: int = 1
    rpc_session_timeout_s: int = 60

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def measure_config_from_args(args: argparse.Namespace) -> MeasureConfig:
    cfg = MeasureConfig(repeat=args.repeat, min_repeat_ms=args.min_repeat_ms,
                        timing_budget_ms=getattr(args, "timing_budget_ms", 0.0),
                        slow_factor=getattr(args, "slow_factor", 0.0), min_gflops=getattr(args, "min_gflops", 0.0))
    if args.rpc_tracker:
        host, _, port = args.rpc_tracker.rpartition(":")
        if not host or not port.isdigit():
            raise TlmError(f"bad --rpc-tracker {args.rpc_tracker!r}: use HOST:PORT")
        cfg.tracker_host, cfg.tracker_port, cfg.tracker_key = host, int(port), args.rpc_key
        cfg.rpc_workers = args.rpc_workers
    return cfg


def add_measure_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repeat", type=int, default=5, help="timed repeats per program (median)")
    p.add_argument("--min-repeat-ms", type=int, default=30, help="minimum duration of one repeat")
    p.add_argument("--timing-budget-ms", type=float, default=0.0,
                   help="fewer repeats for programs slower than this (0: always --repeat)")
    p.add_argument("--slow-factor", type=float, default=0.0,
                   help="no timed runs for a program whose checked run is this many times slower than "
                        "its task's best (0: time every program)")
    p.add_argument("--min-gflops", type=float, default=0.0,
                   help="likewise for a program slower than this many GFLOPS (at least 1 s; 0: no such limit)")
    p.add_argument("--rpc-tracker", default=None, help="HOST:PORT of a TVM RPC tracker to measure on")
    p.add_argument("--rpc-key", default="tlm", help="device key registered with the tracker")
    p.add_argument("--rpc-workers", type=int, default=1, help="parallel RPC sessions")
