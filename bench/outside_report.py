"""The outside-zoo battery's results file (bench/results/outside-zoo.{md,json}): every cell ever
committed, one section per machine, newest first.

A battery's cells (and the libraries its timings need) live in `work/`, which a fresh checkout
lacks; the committed JSON is the record. `write_report` merges the cells of this host's run into
it, keyed by (hardware, model, budget), so that a battery can span sessions and machines: a cell
run again here replaces its old figures, cells from other machines stay as they were. Figures are
compared only within one machine's section (one interleaved run per model).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path


def _geomean(values: list[float]) -> float | None:
    return statistics.geometric_mean(values) if values else None


def _ms(value) -> str:
    return "-" if value is None else (f"{value:.3g}" if value < 100 else f"{value:.0f}")


def cells_cores(cells: dict) -> str:
    return ", ".join(sorted({str(c["threads"]) for c in cells.values() if c.get("threads")})) or "?"


def _ok(cell: dict | None) -> bool:
    return bool(cell) and cell["status"] == "ok" and bool(cell.get("tlm_ms")) and bool(cell.get("pytorch_ms"))


def load_cells(run: Path | None, stem: Path, hardware: str) -> dict[tuple[str, str, str], dict]:
    """The committed cells (`stem`.json) updated with this host's run folder; cells the parent
    wrote itself (a crash, a timeout) carry no hardware and get this host's. A compiled cell not yet
    timed (`--no-time`) does not replace a timed one: its timing comes with `--time-only`, and an
    experiment's run folder must not wipe the figures (a failure does replace them)."""
    cells: dict[tuple[str, str, str], dict] = {}
    old = stem.with_suffix(".json")
    if old.exists():
        for cell in json.loads(old.read_text()):
            cells[(cell.get("hardware") or "unknown", cell["model"], cell["budget"])] = cell
    for path in sorted(run.glob("*@*.json")) if run is not None and run.is_dir() else []:
        cell = json.loads(path.read_text())
        cell.setdefault("hardware", hardware)
        key = (cell["hardware"], cell["model"], cell["budget"])
        if cell["status"] == "ok" and "tlm_ms" not in cell and "tlm_ms" in cells.get(key, {}):
            continue
        cells[key] = cell
    return cells


def write_report(run: Path | None, names: list[str], stem: Path, hardware: str) -> None:
    """`stem`.json (every cell of every machine) and `stem`.md (per machine: the table, the
    failures, the targets)."""
    merged = load_cells(run, stem, hardware)
    stem.with_suffix(".json").write_text(json.dumps(list(merged.values()), indent=1))

    def newest(host: str) -> tuple[str, bool]:  # a tie on the date: this host's run first
        return max(c.get("date") or "" for (h, _, _), c in merged.items() if h == host), host == hardware

    hosts = sorted({h for h, _, _ in merged}, key=newest, reverse=True)
    lines = ["# Outside the zoo: compile, check, time (issue 48)", "",
             "Command: `python bench/outside_zoo.py` (cells in `work/outside-zoo/CPU-CORESc/`, merged into "
             "`outside-zoo.json`, which keeps every machine's cells; models in `bench/outside_models.py`). Each cell: "
             "`tlm.compile(module, inputs, budget=B)` with the shipped model, output checked against PyTorch, then "
             "tlm, PyTorch eager and ONNX Runtime timed in one interleaved run (median of 5 rounds, each the median "
             "of 3 repeats of >= 50 ms), same threads. One section per machine, newest first; compare figures only "
             "within a section.", ""]
    for hw in hosts:
        cells = {(m, b): c for (h, m, b), c in merged.items() if h == hw}
        lines += _section(hw, cells, names + sorted({m for m, _ in cells} - set(names))) + [""]
    stem.with_suffix(".md").write_text("\n".join(lines).rstrip() + "\n")


def _section(hw: str, cells: dict[tuple[str, str], dict], names: list[str]) -> list[str]:
    budgets = sorted({b for _, b in cells}, key=lambda b: (b != "0", b))
    commits = sorted({c["commit"] for c in cells.values() if c.get("commit")})
    dates = sorted({c["date"] for c in cells.values() if c.get("date")})
    lines = [f"## {hw}", "", f"Dates {', '.join(dates) or '-'}; commits {', '.join(commits) or '-'}.", "",
             "| model | family | tasks | " + " | ".join(f"TLM@{b} ms" for b in budgets)
             + " | PyTorch ms | ONNX Runtime ms | " + " | ".join(f"@{b} / PyTorch" for b in budgets) + " | status |",
             "|" + "---|" * (5 + 2 * len(budgets)) + "---|"]
    ratios: dict[str, list[float]] = {b: [] for b in budgets}
    problems, slower, doors = [], [], []
    for name in names:
        row = {b: cells.get((name, b)) for b in budgets}
        if not any(row.values()):
            continue
        first = next(c for c in row.values() if c)
        status = []
        for b, c in row.items():
            if c is None:
                status.append(f"@{b} not run")
            elif c["status"] == "ok" and not c.get("tlm_ms"):
                status.append(f"@{b} ok, not timed")
            elif c["status"] != "ok":
                status.append(f"@{b} {c['status']}")
                problems.append(f"- `{name}` @{b} **{c['status']}**: {c.get('error') or ''}"
                                + (f" (max abs diff {c.get('max_abs_diff'):.3g}, tolerance {c.get('tolerance'):.3g})"
                                   if c["status"] == "mismatch" else ""))
            if _ok(c):
                ratios[b].append(c["tlm_ms"] / c["pytorch_ms"])
        oks = [c for c in row.values() if c and c["status"] == "ok"]
        base = oks[0] if oks else first
        tlm = [_ms(c.get("tlm_ms")) if c and c["status"] == "ok" else "-" for c in row.values()]
        rel = [f"{c['tlm_ms'] / c['pytorch_ms']:.2f}x" if c and c["status"] == "ok" and c.get("tlm_ms") else "-"
               for c in row.values()]
        lines.append(f"| {name} | {first.get('family', '-')} | {base.get('tasks', '-')} | " + " | ".join(tlm)
                     + f" | {_ms(base.get('pytorch_ms'))} | {_ms(base.get('onnxruntime_ms'))} | " + " | ".join(rel)
                     + f" | {'; '.join(status) or 'ok'} |")
        zero, tuned, door = (row.get(b) for b in ("0", "10g", "onnx0"))
        if _ok(zero) and _ok(tuned) and tuned["tlm_ms"] > zero["tlm_ms"] * 1.05:
            slower.append(f"`{name}` ({zero['tlm_ms']:.3g} -> {tuned['tlm_ms']:.3g} ms)")
        if _ok(zero) and _ok(door):
            doors.append((door["tlm_ms"] / door["pytorch_ms"]) / (zero["tlm_ms"] / zero["pytorch_ms"]))
    run_names = [n for n in names if any((n, b) in cells for b in budgets)]
    loads = [c["load"] for c in cells.values() if c.get("load") is not None]
    lines += ["", "Time ratios are TLM / PyTorch eager from the same cell's interleaved run (below 1: tlm faster)."
              + (f" Host load average during the timings: {min(loads):.1f}-{max(loads):.1f}; threads "
                 f"{cells_cores(cells)} (TVM's pool, PyTorch and ONNX Runtime alike; before 2026-11-28 TVM ran one thread "
                 "on 2-core hosts: half the logical CPUs, its default)." if loads else ""), ""]
    for b in budgets:
        done = [n for n in run_names if (n, b) in cells]
        ok = sum(1 for n in done if cells[(n, b)]["status"] == "ok")
        refused = sum(1 for n in done if cells[(n, b)]["status"] == "refused")
        g = _geomean(ratios[b])
        lines.append(f"- Budget {b}: {len(done)} models run, {ok} compiled and matched, {refused} refused in one line, "
                     f"{len(done) - ok - refused} failed otherwise; geomean TLM/PyTorch over the {len(ratios[b])} "
                     f"that matched: {'-' if g is None else f'{g:.2f}x'}.")
    for b in budgets:
        vs_ort = [c["tlm_ms"] / c["onnxruntime_ms"] for (n, bb), c in cells.items()
                  if bb == b and _ok(c) and c.get("onnxruntime_ms")]
        if vs_ort:
            lines.append(f"- Budget {b}: geomean TLM/ONNX Runtime over the {len(vs_ort)} with both: "
                         f"{statistics.geometric_mean(vs_ort):.2f}x.")
    odd = sorted({n for (n, _), c in cells.items() if _ok(c) and c.get("onnxruntime_ms")
                  and c["pytorch_ms"] > 5 * max(c["onnxruntime_ms"], c["tlm_ms"])})
    if odd:
        lines.append(f"- PyTorch eager ran over 5x slower than both tlm and ONNX Runtime on {', '.join(odd)}: "
                     "small models, where eager's per-operator overhead dominates; or timings taken beside other "
                     "jobs (see the load): `--time-only --retime` on a quiet host times them again.")
    one = {n: c for (n, b), c in cells.items() if b == "0" and _ok(c) and c.get("tlm_1thread_ms")}
    if one:
        gain = {n: c["tlm_1thread_ms"] / c["tlm_ms"] for n, c in one.items()}
        lines.append(f"- Budget 0 on ONE TVM thread, the same libraries in the same rounds (how tlm ran on 2-core hosts "
                     f"before 2026-11-28): geomean TLM/PyTorch {_geomean([c['tlm_1thread_ms'] / c['pytorch_ms'] for c in one.values()]):.2f}x; "
                     f"the host's threads are {_geomean(list(gain.values())):.2f}x faster (geomean over {len(one)} models; "
                     f"least {min(gain.values()):.2f}x on {min(gain, key=gain.get)}, most {max(gain.values()):.2f}x on "
                     f"{max(gain, key=gain.get)}).")
    if "10g" in budgets:
        lines.append(f"- Slower at 10g than at 0 (by > 5%): {', '.join(slower) or 'none'}.")
    else:
        lines.append("- Budget 10g: no cell run yet on this machine.")
    if doors:
        lines.append(f"- The ONNX door against the PyTorch door at budget 0 (each against PyTorch in its own cell): "
                     f"geomean {statistics.geometric_mean(doors):.2f}x, worst {max(doors):.2f}x over {len(doors)} models.")
    lines += ["", "### Failures", ""] + (problems or ["None."])
    notes = sorted({f"- `{c['model']}`: {c['onnxruntime_note']}" for c in cells.values() if c.get("onnxruntime_note")})
    if notes:
        lines += ["", "### ONNX Runtime could not run", ""] + notes
    return lines


