"""Measurer throughput (issue 15: the collection's measurements per second), across checkouts.

    python bench/measure_rate.py [--checkouts DIR ...] [--sources resnet_50 bert_base mobilenet_v2]
                                 [--tasks 16] [--programs 8] [--rounds 2] [--out bench/results]

The same random programs (drawn once, `--programs` per task, for `--tasks` tasks spread over the
task kinds of `--sources`) are measured by each checkout's measurer, task by task as the
collector does (one `measure` call per task, with the collector's settings: timing budget,
slow factor, GFLOPS floor), in rounds that alternate the checkouts' order (A B, B A, ...), each
run in its own process with that checkout first on the path. Pools start before the clock (on a
tiny task). Per checkout: programs per second (median over rounds), and how many programs were
correct, so a faster measurer that checks less shows. To compare with an older revision:

    git worktree add /tmp/tlm-old REV && python bench/measure_rate.py --checkouts /tmp/tlm-old .

Writes OUT/measure_rate.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, os.environ.get("TLM_BENCH_CHECKOUT", str(ROOT)))  # a worker runs its checkout's tlm


def spread_over_kinds(tasks, n: int, rng: random.Random) -> list:
    """Up to n of `tasks`, round robin over their kinds (sorted by name), each kind's tasks in an
    order `rng` shuffles (from their order by hash): the benches' task sample."""
    by_kind: dict[str, list] = {}
    for t in sorted(tasks, key=lambda t: t.hash):
        by_kind.setdefault(t.kind, []).append(t)
    for group in by_kind.values():
        rng.shuffle(group)
    picked: list = []
    while len(picked) < n and any(by_kind.values()):
        for kind in sorted(by_kind):
            if by_kind[kind] and len(picked) < n:
                picked.append(by_kind[kind].pop())
    return picked


def _programs(sources: list[str], n_tasks: int, per_task: int, seed: int) -> list[dict]:
    """[{task: Task JSON with its module, traces: [trace JSON]}]: n_tasks tasks, round robin over
    kinds (seeded), each with per_task random programs."""
    from tlm.graph.extract import tasks_for_source
    from tlm.graph.target import host_target
    from tlm.space.design import plain_json, random_program

    target = host_target()
    tasks = {t.hash: t for src in sources for t in tasks_for_source(src, target).tasks}
    rng = random.Random(seed)
    picked = spread_over_kinds(tasks.values(), n_tasks, rng)  # then the programs' seeds, from the same stream
    out = []
    for task in picked:
        traces = []
        for s in range(per_task * 4):
            prog = random_program(task, target, rng.randrange(2**31))
            if prog.ok:
                traces.append(plain_json(prog.sch.trace.as_json()))
            if len(traces) == per_task:
                break
        out.append({"task": task.to_json(with_mod=True), "traces": traces})
    return out


def _worker(programs_file: str, result_file: str, overrides: str) -> None:
    """Measure every program of `programs_file` with this checkout's measurer; write the rate."""
    from dataclasses import replace

    from tlm.graph.target import host_target
    from tlm.graph.tasks import Task, matmul_task
    from tlm.measure.config import MeasureConfig
    from tlm.measure.measurer import Candidate, Measurer

    with open(programs_file) as f:
        work = json.load(f)
    cfg = MeasureConfig(timing_budget_ms=400.0, slow_factor=3.0, min_gflops=1.0)  # the collector's
    cfg = replace(cfg, **json.loads(overrides))
    target = host_target()
    with Measurer(target, cfg) as m:
        warm = matmul_task(16)
        from tvm.s_tir import Schedule

        m.measure([Candidate(warm, schedule=Schedule(warm.mod), proposer="warm-up")])
        best: dict[str, float] = {}
        n = ok = 0
        medians: list[float | None] = []
        t0 = time.perf_counter()
        for item in work:
            task = Task.from_json(item["task"])
            cands = [Candidate(task, trace=tr, proposer="bench") for tr in item["traces"]]
            res = m.measure(cands, best_s=dict(best))
            n += len(res)
            ok += sum(r.ok for r in res)
            medians += [r.median_s if r.ok else None for r in res]
            good = [r.median_s for r in res if r.ok]
            if good:
                best[task.hash] = min(good + [best.get(task.hash, float("inf"))])
        wall = time.perf_counter() - t0
    with open(result_file, "w") as f:
        import tlm

        json.dump({"programs": n, "ok": ok, "seconds": wall, "medians_s": medians, "tlm": tlm.__file__}, f)


def _spread(a: list, b: list) -> float | None:
    """Median over programs timed in both of |log(a / b)|: how far two measurements of the same
    programs disagree (0.05: typically 5%)."""
    import math

    d = [abs(math.log(x / y)) for x, y in zip(a, b) if x and y]
    return statistics.median(d) if d else None


def _per_program_median(runs: list[dict]) -> list:
    cols = zip(*(r["medians_s"] for r in runs))
    return [statistics.median(v) if all(v) else None for v in cols]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkouts", nargs="+", default=["."])
    p.add_argument("--sources", nargs="+", default=["resnet_50", "bert_base", "mobilenet_v2"])
    p.add_argument("--tasks", type=int, default=16)
    p.add_argument("--programs", type=int, default=8)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    p.add_argument("--worker", nargs=3, metavar=("PROGRAMS", "RESULT", "OVERRIDES"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        _worker(*args.worker)
        return 0
    # A checkout may carry MeasureConfig overrides: DIR@min_repeat_ms=10,repeat=3 (protocol trials).
    checkouts, overrides = [], {}
    for spec in args.checkouts:
        path, _, opts = spec.partition("@")
        if not (Path(path) / "tlm" / "measure" / "measurer.py").is_file():
            print(f"error: {path} is not a tlm checkout", file=sys.stderr)
            return 2
        try:
            over = {k: int(float(v)) if float(v).is_integer() else float(v)
                    for k, v in (o.split("=", 1) for o in opts.split(",") if o)}
        except ValueError:
            print(f"error: bad overrides in {spec!r}: use DIR@field=number,...", file=sys.stderr)
            return 2
        from dataclasses import fields

        from tlm.measure.config import MeasureConfig

        unknown = set(over) - {f.name for f in fields(MeasureConfig)}
        if unknown:
            print(f"error: MeasureConfig has no field {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        name = str(Path(path).resolve()) + (f"@{opts}" if opts else "")
        checkouts.append(name)
        overrides[name] = (str(Path(path).resolve()), over)
    work = _programs(args.sources, args.tasks, args.programs, args.seed)
    tmp = tempfile.mkdtemp(prefix="tlm-rate-")
    programs_file = os.path.join(tmp, "programs.json")
    with open(programs_file, "w") as f:
        json.dump(work, f)
    runs: dict[str, list[dict]] = {c: [] for c in checkouts}
    for r in range(args.rounds):
        order = checkouts if r % 2 == 0 else checkouts[::-1]
        for c in order:
            result_file = os.path.join(tmp, f"result-{r}-{checkouts.index(c)}.json")
            path, over = overrides[c]
            env = dict(os.environ, PYTHONPATH=path, TLM_BENCH_CHECKOUT=path)
            subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", programs_file, result_file,
                            json.dumps(over)], cwd=path, env=env, check=True)
            with open(result_file) as f:
                res = json.load(f)
            res["rate"] = res["programs"] / res["seconds"]
            runs[c].append(res)
            print(f"round {r} {c}: {res['programs']} programs ({res['ok']} correct) in {res['seconds']:.1f} s: "
                  f"{res['rate']:.3f}/s", flush=True)
    command = "python bench/measure_rate.py " + " ".join(sys.argv[1:] if argv is None else argv)
    from tlm.graph.target import host_target

    summary = {
        "command": command, "host": host_target().key,
        "tasks": [{"name": w["task"]["name"], "kind": w["task"].get("kind"), "programs": len(w["traces"])} for w in work],
        "checkouts": {c: {"rate_median": statistics.median(x["rate"] for x in runs[c]), "runs": runs[c],
                          "revision": _revision(overrides[c][0])} for c in checkouts},
    }
    for c in checkouts:  # repeatability: round 1 against round 0 of the same checkout
        rs = runs[c]
        summary["checkouts"][c]["spread_between_rounds"] = _spread(rs[0]["medians_s"], rs[1]["medians_s"]) \
            if len(rs) > 1 else None
    if len(checkouts) > 1:
        summary["spread_vs_first"] = {c: _spread(_per_program_median(runs[checkouts[0]]), _per_program_median(runs[c]))
                                      for c in checkouts[1:]}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "measure_rate.json").write_text(json.dumps(summary, indent=1))
    lines = ["# Measurer throughput", "", f"`{command}` on `{summary['host']}`: "
             f"{len(work)} tasks ({', '.join(args.sources)}), {sum(len(w['traces']) for w in work)} random programs, "
             f"{args.rounds} interleaved rounds.", "",
             "| checkout | revision | programs/s (median) | per round | correct | rounds disagree by |",
             "|---|---|---|---|---|---|"]
    for c, s in summary["checkouts"].items():
        per = ", ".join(f"{x['rate']:.3f}" for x in s["runs"])
        spread = f"{s['spread_between_rounds']:.1%}" if s["spread_between_rounds"] is not None else "-"
        lines.append(f"| {c} | {s['revision']} | {s['rate_median']:.3f} | {per} | {s['runs'][0]['ok']} | {spread} |")
    for c, v in summary.get("spread_vs_first", {}).items():
        lines.append(f"\nPrograms' medians (over rounds), {c} vs {checkouts[0]}: they disagree by "
                     f"{v:.1%} (median over programs of |log ratio|)." if v is not None else "")
    (out / "measure_rate.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def _revision(checkout: str) -> str:
    try:
        rev = subprocess.run(["git", "-C", checkout, "describe", "--always", "--dirty"], capture_output=True,
                             text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        rev = "?"
    return rev


if __name__ == "__main__":
    sys.exit(main())
