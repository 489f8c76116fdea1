"""The report of `tlm eval`: OUT/summary.md (the paper's tables) and the PNGs (tlm.eval.plots).

Reads OUT/{config.json, peak.json, subgraph.csv, heldout.csv, e2e.csv, cost.csv, efficiency.csv,
generator.csv, corpus.csv} (written by tlm.eval.tables); any of them may be missing (a partial run), its
section then says so.
"""

from __future__ import annotations

import json
from pathlib import Path

from tlm.eval.corpus import corpus_lines, e2e_target_lines
from tlm.eval.tables import fmt, num, read_csv, table


def subgraph_speedups(rows: list[dict[str, str]]) -> list[dict[str, object]]:
    """Per k: summed best latency of MetaSchedule after k (and at its large budget) over TLM
    after k, over the tasks where both have a correct program."""
    by = {(r["task"], r["method"], int(r["k"])): num(r["best_us"]) for r in rows}
    tasks = sorted({r["task"] for r in rows})
    large = {r["task"]: num(r["best_us"]) for r in rows if r["method"] == "metaschedule-large"}
    ks = sorted({int(r["k"]) for r in rows if r["method"] == "tlm"})
    out = []
    for k in ks:
        both = [t for t in tasks if by.get((t, "tlm", k)) and by.get((t, "metaschedule", k))]
        vs_large = [t for t in tasks if by.get((t, "tlm", k)) and large.get(t)]
        tlm_sum = sum(by[(t, "tlm", k)] for t in both)
        out.append({
            "k": k, "tasks": len(both),
            "speedup_vs_ms_k": sum(by[(t, "metaschedule", k)] for t in both) / tlm_sum if tlm_sum else None,
            "speedup_vs_ms_large": (sum(large[t] for t in vs_large) / sum(by[(t, "tlm", k)] for t in vs_large)
                                    if vs_large else None),
        })
    return out


def speedup_matrix(rows: list[dict[str, str]]) -> tuple[list[str], list[tuple[str, list[float | None]]], int]:
    """The paper's Table 3 layout: entry = sum over tasks of column best / row best, rows TLM@k and
    MS@large, columns MS@k, MS@large and TLM@max k; only tasks with a latency in every cell."""
    by = {(r["task"], r["method"], int(r["k"])): num(r["best_us"]) for r in rows}
    ks = sorted({int(r["k"]) for r in rows if r["method"] == "tlm"})
    lk = next((int(r["k"]) for r in rows if r["method"] == "metaschedule-large"), None)
    if not ks or lk is None:
        return [], [], 0
    cells = ([("TLM", "tlm", k) for k in ks] + [("MetaSchedule", "metaschedule-large", lk)],
             [("MetaSchedule", "metaschedule", k) for k in ks if k < lk]
             + [("MetaSchedule", "metaschedule-large", lk), ("TLM", "tlm", ks[-1])])
    tasks = [t for t in dict.fromkeys(r["task"] for r in rows)
             if all(by.get((t, m, k)) for _, m, k in cells[0] + cells[1])]

    def total(m, k):
        return sum(by[(t, m, k)] for t in tasks)

    header = [f"{n}@{k}" for n, _, k in cells[1]]
    body = [(f"{n}@{k}", [total(cm, ck) / total(m, k) if tasks else None for _, cm, ck in cells[1]])
            for n, m, k in cells[0]]
    return header, body, len(tasks)


def headline(e2e: list[dict[str, str]], cost: list[dict[str, str]]) -> list[str]:
    """The README's table: per workload, MetaSchedule's budget against TLM's largest, measured
    end to end in the same interleaved run, with measurements and tuning wall time."""
    by = {(r["workload"], r["method"]): r for r in e2e}
    body = []
    for w in dict.fromkeys(r["workload"] for r in cost):
        mine = [r for r in cost if r["workload"] == w]
        ms = next((r for r in mine if r["method"] == "metaschedule"), None)
        tl = [r for r in mine if r["method"] == "tlm"]
        if not ms or not tl or not num(ms["e2e_ms"]) or not num(tl[-1]["e2e_ms"]):
            continue
        tl = tl[-1]
        ref = {m: num((by.get((w, m)) or {}).get("e2e_ms")) for m in ("pytorch", "onnxruntime")}
        body.append([w, f"{num(ms['e2e_ms']):.2f} ({ms['measurements']}, {fmt(num(ms['tune_wall_s']) / 60, 1)} min)",
                     f"{num(tl['e2e_ms']):.2f} ({tl['measurements']}, {fmt(num(tl['tune_wall_s']) / 60, 1)} min)",
                     f"{num(ms['e2e_ms']) / num(tl['e2e_ms']):.2f}x", fmt(ref["pytorch"]), fmt(ref["onnxruntime"])])
    if not body:
        return []
    ms_b = next(r["budget"] for r in cost if r["method"] == "metaschedule")
    tl_b = [r["budget"] for r in cost if r["method"] == "tlm"][-1]
    return table(["workload", f"MetaSchedule {ms_b}: ms (measurements, tuning)",
                  f"TLM {tl_b}: ms (measurements, tuning)", "TLM speedup", "PyTorch ms", "ONNX Runtime ms"], body)


def _subgraph_section(sub: list[dict[str, str]]) -> list[str]:
    """Section 1: the representative task of every type, tuned by TLM and MetaSchedule."""
    lines = ["## 1. Subgraph benchmark", ""]
    if sub:
        ks = sorted({int(r["k"]) for r in sub if r["method"] == "tlm"})
        large = next((r["k"] for r in sub if r["method"] == "metaschedule-large"), "?")
        header = ["type", "task", "workload"] + [f"TLM@{k}" for k in ks] + [f"MS@{k}" for k in ks] + [
            f"MS@{large} (whole budget)", "TLM k to reach MS large"]
        by = {(r["task"], r["method"], int(r["k"])): r for r in sub}
        body = []
        for t in dict.fromkeys(r["task"] for r in sub):
            r0 = next(r for r in sub if r["task"] == t)
            lg = next((r for r in sub if r["task"] == t and r["method"] == "metaschedule-large"), {})
            body.append([r0["kind"], t, r0["workload"]]
                        + [fmt((by.get((t, "tlm", k)) or {}).get("best_us"), 1) for k in ks]
                        + [fmt((by.get((t, "metaschedule", k)) or {}).get("best_us"), 1) for k in ks]
                        + [fmt(lg.get("best_us"), 1), lg.get("tlm_k_to_reach") or f">{max(ks)}"])
        lines += ["Best latency (us) after k measurements, one representative task per type.", ""]
        lines += table(header, body) + ["", "Overall speedup of TLM (summed best latencies):", ""]
        lines += table(["k", "tasks", "MS@k / TLM@k", f"MS@{large} / TLM@k"],
                       [[s["k"], s["tasks"], fmt(s["speedup_vs_ms_k"]), fmt(s["speedup_vs_ms_large"])]
                        for s in subgraph_speedups(sub)])
        header, body, n = speedup_matrix(sub)
        if body:
            lines += ["", f"The paper's Table 3 layout ({n} tasks with a program in every cell): the summed best "
                      "latency of the column's method over the row's; above 1, the row's method is faster.", ""]
            lines += table(["row / column"] + header, [[name] + [fmt(v) for v in vals] for name, vals in body])
    else:
        lines += ["(no subgraph results yet)"]
    return lines


def _e2e_sections(e2e: list[dict[str, str]], cost: list[dict[str, str]], eff: list[dict[str, str]]) -> list[str]:
    """Sections 2-4: end-to-end latency, compilation cost, efficiency of compute-bound tasks."""
    lines = ["", "## 2. End-to-end latency (ms, measured)", ""]
    if e2e:
        methods = list(dict.fromkeys(r["method"] for r in e2e))
        by = {(r["workload"], r["method"]): r for r in e2e}
        body = []
        for w in dict.fromkeys(r["workload"] for r in e2e):
            body.append([w] + [fmt((by.get((w, m)) or {}).get("e2e_ms")) + (
                " (!)" if (by.get((w, m)) or {}).get("matches") == "False" else "") for m in methods])
        lines += table(["workload"] + methods, body)
        if any("(!)" in c for r in body for c in r):
            lines += ["", "(!) the compiled model's output did not match PyTorch."]
        else:
            lines += ["", "Every compiled model's output matched PyTorch's on the same inputs."]
        lines += e2e_target_lines(e2e)
    else:
        lines += ["(no end-to-end results yet)"]

    lines += ["", "## 3. Compilation cost", ""]
    if cost:
        lines += table(["workload", "method", "budget", "measurements", "tuning wall s", "e2e ms", "reaches MS large"],
                       [[r["workload"], r["method"], r["budget"], r["measurements"] or "-", fmt(r["tune_wall_s"], 0),
                         fmt(r["e2e_ms"]), "first" if r.get("first_to_reach") == "True" else
                         ("yes" if r["reaches_ms_large"] == "True" else "")] for r in cost])
        for w in dict.fromkeys(r["workload"] for r in cost):
            hit = next((r for r in cost if r["workload"] == w and r.get("first_to_reach") == "True"), None)
            ms = next((r for r in cost if r["workload"] == w and r["method"] == "metaschedule"), {})
            lines.append("")
            lines.append(f"- {w}: " + (f"TLM reaches MetaSchedule's {ms.get('budget')} latency at {hit['budget']} "
                                       f"({hit['measurements']} vs {ms.get('measurements')} measurements)" if hit
                                       else "TLM does not reach MetaSchedule's large-budget latency in this run"))
    else:
        lines += ["(no cost results yet)"]

    lines += ["", "## 4. Efficiency of compute-bound tasks", ""]
    if eff:
        body = []
        for w in dict.fromkeys(r["workload"] for r in eff):
            for m in ("metaschedule", "tlm"):
                mine = [r for r in eff if r["workload"] == w and r["method"] == m]
                if mine:
                    fl = sum(num(r["flops"]) * num(r["weight"]) for r in mine)
                    s = sum(num(r["best_us"]) * num(r["weight"]) for r in mine) / 1e6
                    gf = fl / s / 1e9
                    best = max(num(r["gflops"]) for r in mine)
                    pk = num(mine[0].get("peak_gflops"))
                    body.append([w, m, len(mine), f"{gf:.1f}", f"{best:.1f}",
                                 f"{100 * gf / pk:.0f}%" if pk else "-"])
        lines += table(["workload", "method", "tasks", "weighted GFLOPS", "best task GFLOPS", "of peak"], body)
    else:
        lines += ["(no efficiency results yet)"]
    return lines


def write_report(out_dir: str) -> str:
    """Write OUT/summary.md and the PNGs; returns the summary's path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((out / "config.json").read_text()) if (out / "config.json").is_file() else {}
    peak = json.loads((out / "peak.json").read_text()) if (out / "peak.json").is_file() else None
    sub, e2e = read_csv(out / "subgraph.csv"), read_csv(out / "e2e.csv")
    cost, eff, gen = read_csv(out / "cost.csv"), read_csv(out / "efficiency.csv"), read_csv(out / "generator.csv")
    lines = [f"# tlm evaluation ({cfg.get('suite', '?')} suite)", ""]
    if cfg.get("hardware"):
        lines += [f"Hardware: `{cfg['hardware']}` (every figure below was measured on it).", ""]
    if cfg and cfg.get("e2e", True):
        lines += [f"Workloads: {', '.join(cfg.get('workloads', []))}. MetaSchedule budget {cfg.get('ms_budget')}; "
                  f"TLM budgets {', '.join(map(str, cfg.get('tlm_budgets', [])))}; end-to-end: median of "
                  f"{cfg.get('rounds')} interleaved rounds.", ""]
    elif cfg:
        lines += [f"Held-out subgraph benchmark only: {cfg.get('heldout_tasks')} tasks of "
                  f"{', '.join(cfg.get('workloads', []))}; TLM@{cfg.get('heldout_tlm_ks')}, random at the same k > 0, "
                  f"MetaSchedule@{cfg.get('heldout_ms_ks')}.", ""]
    if cfg.get("e2e_model") and cfg.get("e2e", True):
        lines += [f"End-to-end TLM: the shipped fine-tuned model and cost model of digest `{cfg['e2e_model']}` "
                  "(`tlm.eval.heldout.model_tag`); results of earlier models, if any, are under `retired/`.", ""]
    if peak:
        lines += [f"Machine FP32 peak (torch.mm {peak['n']}^3, {peak['threads']} threads): "
                  f"{peak['gflops']:.1f} GFLOPS ({peak.get('cpu', '')}).", ""]

    if head := headline(e2e, cost):
        lines += ["## Headline: end-to-end latency, measured in one interleaved run per workload", ""] + head + [""]
    full = cfg.get("e2e", True)  # the held-out benchmark alone has no end-to-end sections
    if full:
        lines += _subgraph_section(sub)
    if heldout := read_csv(out / "heldout.csv"):
        from tlm.eval.heldout import report_lines

        which = (f"the model `{cfg['heldout_generator']}` (--heldout-generator) with the shipped cost model"
                 if cfg.get("heldout_generator") else "the shipped fine-tuned model and cost model")
        model = (f"TLM is {which} of digest `{cfg['heldout_model']}` "
                 "(`tlm.eval.heldout.model_tag`: the weights', then `cm` and the cost model's, then `a` and "
                 "the trees of the tuner's online cost model update, if on). "
                 if cfg.get("heldout_model") else "")
        lines += ([""] if full else []) + ["## 1b. Held-out subgraph benchmark", ""] + (
            [model, ""] if model else []) + report_lines(heldout)
    if full:
        lines += _e2e_sections(e2e, cost, eff)
    lines += ["", "## 5. Generator cost", ""]
    if gen:
        lines += table(["task", "type", "mode", "valid", "model passes", "passes/program", "ms/program"],
                       [[r["task"], r["kind"], r["mode"], r["valid"], r["model_passes"],
                         fmt(r["passes_per_program"], 1), fmt(r["ms_per_program"], 1)] for r in gen])
    else:
        lines += ["(no generator results yet)"]
    if cfg.get("corpus"):
        lines += corpus_lines(read_csv(out / "corpus.csv"), out)

    from tlm.eval.plots import plot_e2e, plot_efficiency, plot_subgraph

    figs = plot_e2e(out, e2e) + plot_subgraph(out, sub) + plot_efficiency(out, eff)
    if figs:
        lines += ["", "## Figures", ""] + [f"![{f}]({f})" for f in figs]
    path = out / "summary.md"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


if __name__ == "__main__":
    import sys

    print(write_report(sys.argv[1] if len(sys.argv) > 1 else "results"))
