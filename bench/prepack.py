"""Pre-packed weights, paired (issue 13): the same programs with and without weight packing.

    python bench/prepack.py [--programs 32] [--out bench/results]

For each anchor task below (BERT's Linear 768->768 and 768->3072, ResNet-50's 3x3 and 1x1 convs,
MobileNet-V2's depthwise conv, each a one-op PyTorch model on its real shape), the task is
extracted twice: weights in the model's layout, and weights layout-free (tlm.graph.passes).
Packing is a postprocessor (MetaSchedule's RewriteLayout), so both tasks have the same design
spaces: N random programs are drawn once and each is measured in both forms, in the same
batches, by the checked measurer. Per op: the median over programs of (time unpacked / time
packed), how many programs packing made faster, and best unpacked / best packed. A paired
comparison: the variance of random search (which program happens to be drawn) cancels out.
Writes OUT/prepack.{json,md}; `tlm.graph.passes.PREPACK_OPS` follows from it.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _ops():
    import torch

    def conv(cin, cout, k, groups=1):
        return torch.nn.Conv2d(cin, cout, k, padding=k // 2, groups=groups, bias=False)

    return {
        "linear 768->768 [1,128,768] (bert_base)": (torch.nn.Linear(768, 768), (1, 128, 768)),
        "linear 768->3072 [1,128,768] (bert_base)": (torch.nn.Linear(768, 3072), (1, 128, 768)),
        "conv2d 3x3 64->64 [1,64,56,56] (resnet_50)": (conv(64, 64, 3), (1, 64, 56, 56)),
        "conv2d 1x1 256->64 [1,256,56,56] (resnet_50)": (conv(256, 64, 1), (1, 256, 56, 56)),
        "depthwise 3x3 96 [1,96,56,56] (mobilenet_v2)": (conv(96, 96, 3, 96), (1, 96, 56, 56)),
    }


def _anchor(tasks):
    return max(tasks, key=lambda t: t.flops)


def run(programs: int, target, seed: int = 0) -> list[dict]:
    import torch

    from tlm.graph.extract import extract_tasks
    from tlm.graph.passes import PREPACK_OPS
    from tlm.measure.measurer import Candidate, MeasureConfig, Measurer
    from tlm.space.design import random_program, replay, task_space

    rows = []
    every = PREPACK_OPS | {"conv2d"}
    with Measurer(target, MeasureConfig(repeat=5, min_repeat_ms=30, remeasure_top=0)) as meas:
        for name, (module, shape) in _ops().items():
            torch.manual_seed(0)
            x = (torch.randn(*shape),)
            plain = _anchor(extract_tasks(module.eval(), x, target=target, prepack=False))
            packed = _anchor(extract_tasks(module.eval(), x, target=target, prepack=every))
            assert packed.mod["main"].attrs.get("layout_free_buffers"), name
            rng = random.Random(seed)
            pairs = []
            while len(pairs) < programs:
                a = random_program(plain, target, rng.randrange(2**31))
                if not a.ok:
                    continue
                b = replay(task_space(packed, target), a.space, a.decisions)
                if b.ok:
                    pairs.append((a, b))
            t0 = time.perf_counter()
            res = meas.measure([c for a, b in pairs for c in (Candidate(plain, schedule=a.sch, proposer="random"),
                                                              Candidate(packed, schedule=b.sch, proposer="random"))])
            secs = time.perf_counter() - t0
            both = [(ra.median_s, rb.median_s) for ra, rb in zip(res[0::2], res[1::2]) if ra.ok and rb.ok]
            errors = [r.error for r in res if not r.ok]
            ratios = [u / p for u, p in both]
            row = {"op": name, "task_plain": plain.name, "task_packed": packed.name, "programs": len(pairs),
                   "both_ok": len(both), "errors": errors[:5], "n_errors": len(errors),
                   "median_speedup": statistics.median(ratios) if ratios else None,
                   "faster_packed": sum(r > 1 for r in ratios),
                   "best_plain_us": min(u for u, _ in both) * 1e6 if both else None,
                   "best_packed_us": min(p for _, p in both) * 1e6 if both else None,
                   "pairs_us": [[u * 1e6, p * 1e6] for u, p in both], "seconds": secs}
            row["best_speedup"] = row["best_plain_us"] / row["best_packed_us"] if both else None
            print(f"{name}: median {row['median_speedup']:.2f}x, packed faster in {row['faster_packed']}/{len(both)}, "
                  f"best {row['best_plain_us']:.0f} -> {row['best_packed_us']:.0f} us", flush=True)
            rows.append(row)
    return rows


def write(out: Path, rows: list[dict], args, target) -> None:
    out.mkdir(parents=True, exist_ok=True)
    created = time.strftime("%Y-%m-%d %H:%M:%S")
    (out / "prepack.json").write_text(json.dumps(
        {"created": created, "target": target.config, "cpu": target.cpu, "isa": target.isa, "threads": target.cores,
         "programs": args.programs, "ops": rows}, indent=1))
    lines = [
        f"# Pre-packed weights, paired ({target.cpu}, {target.isa}, {target.cores} threads)", "",
        f"Run {created} with `python bench/prepack.py --programs {args.programs}`. The same {args.programs} "
        "random programs of each task measured with weights in the model's layout and packed by "
        "RewriteLayout (checked measurer, median of 5 repeats each, in the same batches). Speedup = time "
        "unpacked / time packed.", "",
        "| op | task | programs (both ok) | median speedup | packed faster | best unpacked us | best packed us | best speedup |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        f = (lambda v, d=2: "-" if v is None else f"{v:.{d}f}")
        lines.append(f"| {r['op']} | {r['task_plain']} | {r['programs']} ({r['both_ok']}) | {f(r['median_speedup'])}x | "
                     f"{r['faster_packed']}/{r['both_ok']} | {f(r['best_plain_us'], 0)} | {f(r['best_packed_us'], 0)} | "
                     f"{f(r['best_speedup'])}x |")
    (out / "prepack.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--programs", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args(argv)
    from tlm.graph.target import host_target

    target = host_target()
    write(Path(args.out), run(args.programs, target, args.seed), args, target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
