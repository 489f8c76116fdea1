"""PyTorch on the GPU machine: the end-to-end baselines of the GPU evaluation (issue 49).

    python3 bench/gpu_pytorch.py --out OUT.json [--workloads ...] [--compile] [--repeat 50] [--rounds 5]

Per workload (zoo models, random weights from seed 0, batch 1, fp32, eval mode, no_grad):
PyTorch eager with TF32 off, eager with TF32 on (matmuls and cuDNN convolutions), and with
--compile torch.compile (default mode, TF32 off), each timed with CUDA events: 10 warm-up runs,
then `--repeat` runs, the median kept (eager off / on interleaved over `--rounds` rounds, the
median of the rounds). Needs torch, transformers and a CUDA GPU; no TVM. The
card, driver and versions are written beside the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEFAULT = ["bert_base-b1-s128", "gpt2-b1-s128", "resnet_50-b1-i224", "mobilenet_v2-b1-i224"]


def _time(fn, x, repeat: int) -> float:
    import torch

    with torch.no_grad():
        for _ in range(10):
            fn(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(x)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def _tf32(on: bool) -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def main() -> int:
    import torch

    from tlm.graph.zoo import get_workload

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--workloads", nargs="+", default=DEFAULT)
    p.add_argument("--repeat", type=int, default=50)
    p.add_argument("--rounds", type=int, default=5, help="interleaved TF32 off / on rounds")
    p.add_argument("--compile", action="store_true")
    args = p.parse_args()
    dev = torch.cuda.get_device_properties(0)
    result = {"device": dev.name, "sms": dev.multi_processor_count, "torch": torch.__version__,
              "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(), "workloads": {}}
    out = Path(args.out)
    modules = {}
    for name in args.workloads:  # eager first for every workload, then torch.compile: a time limit
        row = {}                 # that stops the compilations keeps every eager figure
        try:
            module, (x,) = get_workload(name).build(0)
            modules[name] = (module.cuda(), x.cuda())
            module, x = modules[name]
            # TF32 off and on interleaved, median of the rounds' medians: eager at batch 1 is bound
            # by the host's launches, and one pass each (off, then on) read TF32 as 1.1-1.4x slower
            off, on = [], []
            for _ in range(args.rounds):
                _tf32(False)
                off.append(_time(module, x, args.repeat))
                _tf32(True)
                on.append(_time(module, x, args.repeat))
            _tf32(False)
            row["eager_ms"], row["eager_tf32_ms"] = statistics.median(off), statistics.median(on)
            row["rounds"] = args.rounds
        except Exception as err:  # one workload's failure is its row's error
            row["error"] = f"{type(err).__name__}: {str(err).strip().splitlines()[-1][:200] if str(err).strip() else ''}"
        result["workloads"][name] = row
        out.write_text(json.dumps(result, indent=1))
        print(name, json.dumps(row), flush=True)
    for name, (module, x) in modules.items() if args.compile else ():
        row = result["workloads"][name]
        try:
            _tf32(False)
            t0 = time.perf_counter()
            compiled = torch.compile(module)
            with torch.no_grad():
                compiled(x)
            torch.cuda.synchronize()
            row["compile_s"] = round(time.perf_counter() - t0, 1)
            row["compiled_ms"] = _time(compiled, x, args.repeat)
        except Exception as err:
            row["compile_error"] = f"{type(err).__name__}: {str(err).strip().splitlines()[-1][:200] if str(err).strip() else ''}"
        out.write_text(json.dumps(result, indent=1))
        print(name, json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
