"""The GPU runner: measures a bundle (tlm.measure.gpu_bundle) on a machine with an NVIDIA GPU.

    python -m tlm.measure.cuda_runner BUNDLE --out DIR [--seconds S] [--jobs N]

Needs Python, numpy, CuPy and nvcc (no TVM). Two things run at once:
- compilation: the bundle's CUDA C files, one `nvcc -cubin` per file, on N processes
  (tlm.measure.nvcc; ptxas's resource report refuses a program that could not launch);
- measurement, in a child process (tlm.measure.cuda_measure), task by task as their files are
  compiled: inputs drawn as the CPU measurer draws them (uniform in [-1, 1], integers zero), the
  reference program (TVM's rule-based schedule) run first and checked against the CPU's outputs
  in the bundle, then each candidate run once and checked against the reference on every element
  of every buffer (the CPU measurer's tolerance), then timed: CUDA events around its kernels, the
  L2 flushed before each repeat (a memset of twice its size), one warm-up, the median kept.
A kernel that faults takes the CUDA context with it: the child records the fault as that
candidate's error and exits, and the parent starts a new child that goes on after it; a
candidate still running after --hang-seconds is stopped the same way. Every result is a line of
DIR/results.jsonl, written as it is known, so a run stopped anywhere keeps what it measured, and
a second run with the same DIR measures only what is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tlm.errors import first_line
from tlm.measure.cuda_measure import append_line, read_lines
from tlm.measure.precompile import local_release, take_ahead, write_atomic_bytes

MAX_RESTARTS = 200
EARLY_RESTARTS = 3  # died this often before any program was timed: something is wrong, stop


# ---------------------------------------------------------------- compilation (parent)
def compile_file(src: str, cubin: str, arch: str, ahead: bool = True) -> dict[str, Any]:
    """One bundle source file -> cubin; ptxas's report per kernel (in a pool worker). With `ahead`,
    the cubin compiled here before the call (tlm.measure.precompile) when there is one: no nvcc."""
    from tlm.measure.nvcc import compile_file_report

    if ahead and (taken := take_ahead(src, cubin, arch)) is not None:
        return taken
    data, res = compile_file_report(src, arch)
    out: dict[str, Any] = {"src": src, **res}
    if data is not None:
        write_atomic_bytes(Path(cubin), data)
        out["cubin"] = cubin
    return out


def device_info() -> dict[str, Any]:
    import cupy as cp

    props = cp.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return {"name": name, "cc": f"{props['major']}.{props['minor']}", "sms": props["multiProcessorCount"],
            "l2_bytes": props["l2CacheSize"], "memory_bytes": props["totalGlobalMem"],
            "smem_per_block_optin": props.get("sharedMemPerBlockOptin"),
            "driver": cp.cuda.runtime.driverGetVersion(), "runtime": cp.cuda.runtime.runtimeGetVersion(),
            "cupy": cp.__version__}


# ---------------------------------------------------------------- the parent
def run(bundle: Path, out: Path, seconds: float, jobs: int, hang_seconds: float, log=print,
        measure: bool = True, work: Path | None = None) -> dict[str, Any]:
    """Compile and measure the bundle (measure=False: compile only, no GPU needed); the cubins
    and the hand-over files go to `work` (default OUT/work)."""
    from concurrent.futures import ProcessPoolExecutor, wait, FIRST_COMPLETED

    from tlm.measure.cuda_measure import read_manifest

    start = time.time()
    manifest = read_manifest(bundle)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(work or out / "work")
    (work / "cubin").mkdir(parents=True, exist_ok=True)
    for name in ("ready.jsonl", "STOP", "progress.json"):
        (work / name).unlink(missing_ok=True)
    info = device_info() if measure else {"name": "none (compile only)", "cc": "-", "sms": 0, "l2_bytes": 0}
    (out / "device.json").write_text(json.dumps(info, indent=1))
    card = manifest.get("card", "")
    log(f"device: {info['name']} (cc {info['cc']}, {info['sms']} SMs, L2 {info['l2_bytes'] >> 20} MiB); bundle for {card or manifest['arch']}")
    results = out / "results.jsonl"
    done = {(r["t"], r["k"]) for r in read_lines(results)}
    arch = manifest["arch"]
    # compile jobs: every file of every task with something left to measure, in manifest order
    pending: dict[str, dict[str, Any]] = {}
    jobs_list = []
    for e in manifest["tasks"]:
        if e["hash"] in pending:  # listed twice (bundles of an older tlm): measured once
            continue
        left = [c["id"] for c in e.get("candidates", []) if (e["hash"], c["id"]) not in done]
        if not left and (e["hash"], "ref") in done:
            continue
        files = list(e.get("groups", []))
        if e.get("ref"):
            files.append({"src": e["ref"]["src"], "members": ["ref"]})
        pending[e["hash"]] = {"files": {}, "left": len(files)}
        for f in files:
            cubin = str(work / "cubin" / (Path(f["src"]).name.replace(".cu.xz", ".cubin")))
            jobs_list.append((e["hash"], f["members"], str(bundle / f["src"]), cubin))

    def ready(h: str) -> None:
        p = pending[h]
        append_line(work / "ready.jsonl", {"t": h, "files": p["files"], "ref": p.get("ref")})

    compiled_s = 0.0
    took_ahead = 0

    def compiled(h: str, members: list, res: dict[str, Any]) -> None:
        """A file's compilation (here or ahead) handed to its task's members; the task ready when all are."""
        nonlocal compiled_s, took_ahead
        compiled_s += res["seconds"]
        took_ahead += bool(res.get("ahead"))
        append_line(out / "compile.jsonl", {"t": h, "src": Path(res["src"]).name, "s": res["seconds"],
                                        "err": res.get("error"), "ahead": bool(res.get("ahead"))})
        entry = {k: v for k, v in res.items() if k not in ("src", "ahead")}
        for k in members:
            if k == "ref":
                pending[h]["ref"] = entry
            else:
                pending[h]["files"][str(k)] = entry
        pending[h]["left"] -= 1
        if pending[h]["left"] == 0:
            ready(h)

    for h, p in pending.items():
        if p["left"] == 0:
            ready(h)
    to_compile = []
    for h, members, src, cubin in jobs_list:  # the files compiled ahead (tlm gpu precompile): taken, no nvcc
        if (taken := take_ahead(src, cubin, arch)) is not None:
            compiled(h, members, taken)
        else:
            to_compile.append((h, members, src, cubin))
    log(f"{len(pending)} tasks to measure, {len(jobs_list)} files: {took_ahead} compiled ahead (tlm gpu precompile; "
        f"this machine's nvcc: CUDA {local_release() or 'none'}), {len(to_compile)} to compile on {jobs} processes")
    child = None
    restarts = 0

    root = str(Path(__file__).resolve().parents[2])  # the folder that holds the tlm package
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))

    def start_child():
        if not measure:
            return None
        return subprocess.Popen([sys.executable, "-m", "tlm.measure.cuda_runner", str(bundle), "--out", str(out),
                                 "--work", str(work), "--child"], stdout=open(out / "child.log", "a"), stderr=subprocess.STDOUT, env=env)

    def supervise() -> None:
        nonlocal child, restarts
        if not measure or restarts > MAX_RESTARTS:
            return
        if child is None:
            child = start_child()
            return
        code = child.poll()
        if code == 0:
            return
        prog = work / "progress.json"
        try:  # the program in progress: the one that faulted or hung, if it comes to that
            state = json.loads(prog.read_text())
        except (OSError, ValueError):
            state = None
        hung = code is None and bool(state) and time.time() - state.get("at", time.time()) > hang_seconds
        if code is None and not hung:
            return
        if hung:
            child.kill()
            child.wait()
        if state and (state["t"], state["k"]) not in {(r["t"], r["k"]) for r in read_lines(results)}:
            why = f"hung over {hang_seconds:.0f} s" if hung else f"runner died (exit {code}): {last_line(out / 'child.log')}"
            append_line(results, {"t": state["t"], "k": state["k"], "lat": [], "err": f"fault: {why}"})
        prog.unlink(missing_ok=True)
        restarts += 1
        if restarts > MAX_RESTARTS or (restarts >= EARLY_RESTARTS and not any(r.get("lat") for r in read_lines(results))):
            log(f"the measuring process died {restarts} times ({last_line(out / 'child.log')}): measurement stopped")
            restarts = MAX_RESTARTS + 1
            child = None
            return
        child = start_child()

    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(compile_file, src, cubin, arch, False): (h, members)
                   for h, members, src, cubin in to_compile}
        remaining = set(futures)
        while remaining and time.time() - start < seconds and restarts <= MAX_RESTARTS:
            finished, remaining = wait(remaining, timeout=0.5, return_when=FIRST_COMPLETED)
            for fut in finished:
                compiled(*futures[fut], fut.result())
            supervise()
        for fut in remaining:
            fut.cancel()
        append_line(work / "ready.jsonl", {"end": True})
        while measure and time.time() - start < seconds and restarts <= MAX_RESTARTS:
            supervise()
            if child is not None and child.poll() == 0:
                break
            time.sleep(0.2)
        if child is not None and child.poll() is None:
            (work / "STOP").write_text("deadline")
            try:
                child.wait(timeout=max(hang_seconds, 30))
            except subprocess.TimeoutExpired:
                child.kill()
    lines = read_lines(results)
    ok = [r for r in lines if not r["err"] and r["k"] != "ref"]
    summary = {"device": info, "bundle": str(bundle), "card": card, "seconds": round(time.time() - start, 1),
               "programs": sum(1 for r in lines if r["k"] != "ref"), "measured_ok": len(ok),
               "wrong": sum(1 for r in lines if (r["err"] or "").startswith("WrongResult")),
               "faults": sum(1 for r in lines if (r["err"] or "").startswith("fault")),
               "references_ok": sum(1 for r in lines if r["k"] == "ref" and not r["err"]),
               "child_restarts": restarts, "compile_cpu_s": round(compiled_s, 1), "compiled_ahead": took_ahead,
               "compile_errors": sum(1 for p in pending.values() for f in list(p["files"].values()) + [p.get("ref") or {}]
                                     if "error" in f)}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    log(json.dumps(summary))
    return summary


def last_line(path: Path) -> str:
    """The last non-empty line of a log file (300 characters at most), or "" (also tlm.measure.cuda_plan)."""
    try:
        lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def runner_parser(prog: str, description: str, source: str, seconds_help: str) -> argparse.ArgumentParser:
    """The command line the GPU machine's runners share (this one and tlm.measure.cuda_plan):
    SOURCE --out DIR [--seconds S] [--jobs N] [--compile-only] [--work DIR] (and the hidden --child)."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument(source)
    p.add_argument("--out", required=True)
    p.add_argument("--seconds", type=float, default=420.0, help=seconds_help)
    p.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 2), help="nvcc processes")
    p.add_argument("--compile-only", action="store_true", help="compile and check resources only (no GPU)")
    p.add_argument("--work", default=None, help="cubins and hand-over files (default OUT/work)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    p = runner_parser("python -m tlm.measure.cuda_runner", __doc__.splitlines()[0], "bundle",
                      "stop compiling and measuring after this long")
    p.add_argument("--hang-seconds", type=float, default=30.0)
    args = p.parse_args(argv)
    bundle, out = Path(args.bundle), Path(args.out)
    if args.child:
        from tlm.measure.cuda_measure import child_main

        return child_main(bundle, Path(args.work or out / "work"), out)
    try:
        run(bundle, out, args.seconds, args.jobs, args.hang_seconds, measure=not args.compile_only,
            work=Path(args.work) if args.work else None)
    except Exception as err:  # a one-line error, the results so far kept
        print(f"error: {first_line(err)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
