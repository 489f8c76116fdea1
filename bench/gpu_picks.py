"""Zero-measurement picks on held-out GPU tasks, measured in one call (issue 49: TLM@0 >= 1.5x dlight).

    python bench/gpu_picks.py BUNDLE RUN --proposals P [P ...] [--out bench/results/gpu-picks]

BUNDLE holds, per held-out task, one program of each picker (its candidates' proposer names them;
`tlm gpu-heldout candidates --cm-top 1 --label NAME` and `tlm gpu-heldout donors` made them here), and
RUN is the GPU call that measured it (bench/gpu_device.sh), dlight's program (every bundle's
reference) in the same call. Pickers: `tlm-cm` (the shipped cost model's pick of the shipped GPU
TLM's 32 samples: what `tlm compile --budget 0` applies), `donor` (a GPU donor the cost model put
first, tlm.search.donors: the pick `tlm-cm+donor` where there is one), and other models' picks
(`tlm-ft604-cm`, say). A picker with no correct program of a task is charged dlight's there (said).
P: the `tlm gpu-heldout propose` folders whose tasks.json give each workload's calls per task.
Summed: calls x latency per workload (an estimate of its kernel time) and each task once.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tlm.eval.gpu_heldout_report import measured  # noqa: E402
from tlm.measure.cuda_measure import read_manifest  # noqa: E402

# a picker that falls back to another where it proposed nothing: donors only where one came first
FALLBACK = {"tlm-cm+donor": ("donor", "tlm-cm")}
TARGET = 1.5  # issue 49: TLM@0 >= 1.5x dlight (the paper: 2.25x Roller at equal compile time)


def report(bundle: str | Path, run: str | Path, proposals: list[str | Path]) -> dict:
    manifest = read_manifest(bundle)
    props, ref = measured(bundle, run, manifest)
    calls: dict[str, dict[str, float]] = {}
    for p in proposals:
        calls.update(json.loads((Path(p) / "tasks.json").read_text())["calls"])
    names = {e["hash"]: e["name"] for e in manifest["tasks"]}
    pickers = sorted({k for v in props.values() for k in v})
    cols = pickers + [c for c, (a, b) in FALLBACK.items() if a in pickers and b in pickers]
    rows, charged = [], {}
    for h, dl in ref.items():
        row = {"dlight": dl}
        for c in cols:
            first, *rest = FALLBACK.get(c, (c,))
            lat = props.get(h, {}).get(first) or (props.get(h, {}).get(rest[0]) if rest else None)
            got = min((x for x in lat or [] if x is not None), default=None)
            if got is None:
                charged[c] = charged.get(c, 0) + (0 if c == "donor" else 1)
            row[c] = got if got is not None else (None if c == "donor" else dl)
        rows.append({"task": h, "name": names.get(h, h), "s": row})
    out_cols = ["dlight"] + [c for c in cols if c != "donor"]
    summed = {}
    for w, per in calls.items():
        mine = [r for r in rows if r["task"] in per]
        if mine:
            summed[w] = {c: sum(per[r["task"]] * r["s"][c] for r in mine) * 1e3 for c in out_cols}
            summed[w]["tasks"] = len(mine)
    summed["all tasks (each once)"] = {c: sum(r["s"][c] for r in rows) * 1e3 for c in out_cols}
    summed["all tasks (each once)"]["tasks"] = len(rows)
    return {"bundle": str(bundle), "run": str(run), "columns": out_cols, "summed_ms": summed, "tasks": rows,
            "charged_dlight": {c: n for c, n in charged.items() if n}}


def markdown(rep: dict, command: str, device: str) -> str:
    cols = rep["columns"]
    lines = [f"# Zero-measurement picks on held-out GPU tasks: {device}", "", f"Made by `{command}`.", "",
             "Summed kernel time in ms (calls x each task's median; an estimate, not a whole-model run); a picker "
             "without a correct program of a task is charged dlight's there: "
             + (", ".join(f"{c} {n}" for c, n in rep["charged_dlight"].items()) or "none") + ".", "",
             "| | tasks | " + " | ".join(cols) + " | " + " | ".join(f"dlight / {c}" for c in cols[1:]) + " |",
             "|---|---:|" + "---:|" * (2 * len(cols) - 1)]
    for w, s in rep["summed_ms"].items():
        lines.append(f"| {w} | {s['tasks']} | " + " | ".join(f"{s[c]:.3f}" for c in cols) + " | "
                     + " | ".join(f"{s['dlight'] / s[c]:.3f}" for c in cols[1:]) + " |")
    every = rep["summed_ms"]["all tasks (each once)"]
    lines += ["", f"Issue 49's TLM@0 target, summed over the {every['tasks']} tasks (each once): dlight / picker >= "
              f"{TARGET}x:", ""]
    ratios = {c: round(every["dlight"] / every[c], 3) for c in cols[1:]}  # judged as printed
    lines += [f"- {c}: {r:.3f}x ({'met' if r >= TARGET else 'missed'})" for c, r in ratios.items()]
    lines += ["", "Per task (us):", "", "| task | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for r in rep["tasks"]:
        lines.append(f"| {r['name']} | " + " | ".join(f"{r['s'][c] * 1e6:.1f}" for c in cols) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bundle")
    ap.add_argument("run")
    ap.add_argument("--proposals", nargs="+", required=True)
    ap.add_argument("--out", default="bench/results/gpu-picks")
    args = ap.parse_args()
    rep = report(args.bundle, args.run, args.proposals)
    summary = Path(args.run) / f"{Path(args.bundle).name}-summary.json"
    dev = json.loads(summary.read_text()).get("device", {}).get("name", "?") if summary.exists() else "?"
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(rep, indent=1))
    text = markdown(rep, "python bench/gpu_picks.py " + " ".join(sys.argv[1:]), dev)
    out.with_suffix(".md").write_text(text)
    print(text.split("Per task")[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
