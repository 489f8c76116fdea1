"""The `tlm` command line. Every failure becomes one line on stderr and a non-zero exit."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

from tlm.errors import TlmError, interrupted, show_tlm_warnings, sigint_flagged

# Stage modules that add their own sub-commands through `register_cli(subparsers)`.
_STAGE_CLIS = ("tlm.space.sampling", "tlm.model.pretrain", "tlm.model.generate", "tlm.search.tune", "tlm.compiler.job",
               "tlm.model.finetune", "tlm.search.loop_cli", "tlm.search.collect", "tlm.search.costmodel_data",
               "tlm.measure.gpu_cli", "tlm.compiler.gpu_plan", "tlm.eval.run", "tlm.eval.gpu_heldout")


def _print_json(data) -> None:
    json.dump(data, sys.stdout, indent=2)
    sys.stdout.write("\n")


def _console():
    from rich.console import Console

    # Piped output keeps whole names (rich would squeeze columns to 80 characters).
    return Console(width=None if sys.stdout.isatty() else 200)


def _cmd_target(args: argparse.Namespace) -> int:
    from tlm.graph.target import resolve_target

    info = resolve_target(args.target)
    if args.json:
        _print_json(info.to_json())
    else:
        print(json.dumps(info.config))
        print(f"cpu {info.cpu}, {info.cores} cores, {info.isa} ({info.vector_bits}-bit vectors)")
        from tlm.space.language import hardware_tokens

        print("prompt words: " + " ".join(hardware_tokens(info)))  # what a model sees of the target
    return 0


def _cmd_workloads(args: argparse.Namespace) -> int:
    from tlm.graph.zoo import list_workloads

    items = list_workloads(args.split)
    if args.json:
        _print_json([w.to_json() for w in items])
        return 0
    from rich.table import Table

    table = Table(title=f"workloads ({args.split or 'all'}): {len(items)}")
    for col in ("name", "family", "split", "input shape", "description"):
        table.add_column(col)
    for w in items:
        table.add_row(w.name, w.family, w.split, str(list(w.shape)), w.description)
    _console().print(table)
    return 0


def _cmd_tasks(args: argparse.Namespace) -> int:
    from tlm.graph.extract import tasks_for_source

    result = tasks_for_source(args.source, target=args.target, refresh=args.refresh)
    if args.json:
        _print_json(result.to_json())
        return 0
    from rich.table import Table

    total = sum(t.weight * t.flops for t in result.tasks)
    table = Table(title=f"{result.source}: {len(result.tasks)} tasks, {total / 1e9:.2f} GFLOP")
    for col in ("#", "name", "kind", "hash", "weight", "MFLOP"):
        table.add_column(col, justify="right" if col in ("#", "weight", "MFLOP") else "left")
    for i, t in enumerate(result.tasks):
        table.add_row(str(i), t.name, t.kind, t.hash, str(t.weight), f"{t.flops / 1e6:.1f}")
    _console().print(table)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tlm", description=__doc__)
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("target", help="the TVM target for this host (or a named one)")
    p.add_argument("--target", default=None, help="'host' (default), a GPU name, a TVM tag or JSON")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_target)

    p = sub.add_parser("workloads", help="list the workload zoo")
    p.add_argument("--split", choices=("train", "test"), default=None)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_workloads)

    p = sub.add_parser("tasks", help="import a model and list its tuning tasks")
    p.add_argument("source", help="a zoo workload name or a path to an .onnx file")
    p.add_argument("--target", default=None, help="'host' (default), a GPU name, a TVM tag or JSON")
    p.add_argument("--json", action="store_true")
    p.add_argument("--refresh", action="store_true", help="ignore the on-disk task cache")
    p.set_defaults(func=_cmd_tasks)

    for name in _STAGE_CLIS:
        importlib.import_module(name).register_cli(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    show_tlm_warnings()  # other libraries' warnings hidden; tlm's fallbacks said in one line each
    args = build_parser().parse_args(argv)
    debug = args.debug or os.environ.get("TLM_DEBUG") == "1"
    with sigint_flagged():  # the handlers below run inside: `interrupted` still tells
        try:
            return int(args.func(args) or 0)
        except TlmError as err:
            if debug:
                raise
            print(f"tlm: error: {err}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("tlm: interrupted", file=sys.stderr)
            return 130
        except Exception as err:  # last line of defence: never a raw traceback for the user
            if interrupted():  # a Ctrl-C that TVM wrapped in its own error
                print("tlm: interrupted", file=sys.stderr)
                return 130
            if debug:
                raise
            line = str(err).strip().splitlines()
            msg = line[-1] if line else ""
            print(f"tlm: error: {type(err).__name__}: {msg} (run with --debug for details)", file=sys.stderr)
            return 1


if __name__ == "__main__":
    sys.exit(main())
