"""PNG figures of `tlm eval` (matplotlib, Agg) from the report's CSV rows: e2e-WORKLOAD.png
(end-to-end latency per method), subgraph.png (best latency after k measurements, normalised per
task to MetaSchedule's large budget), efficiency.png (fraction of FP32 peak per task)."""

from __future__ import annotations

from pathlib import Path

from tlm.eval.tables import num


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_e2e(out: Path, rows: list[dict[str, str]]) -> list[str]:
    plt, made = _plt(), []
    for w in sorted({r["workload"] for r in rows}):
        mine = [r for r in rows if r["workload"] == w and num(r.get("e2e_ms"))]
        if not mine:
            continue
        fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(mine), 3.2))
        colors = ["tab:orange" if r["method"].startswith("tlm") else "tab:blue"
                  if r["method"].startswith("metaschedule") else "tab:gray" for r in mine]
        ax.bar([r["method"] for r in mine], [num(r["e2e_ms"]) for r in mine], color=colors)
        ax.set_ylabel("end-to-end latency (ms)")
        ax.set_title(w)
        ax.tick_params(axis="x", rotation=35, labelsize=8)
        fig.tight_layout()
        name = f"e2e-{w}.png"
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        made.append(name)
    return made


def plot_subgraph(out: Path, rows: list[dict[str, str]]) -> list[str]:
    large = {r["task"]: num(r["best_us"]) for r in rows if r["method"] == "metaschedule-large"}
    tasks = [t for t in dict.fromkeys(r["task"] for r in rows) if large.get(t)]
    if not tasks:
        return []
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    kinds = {r["task"]: r["kind"] for r in rows}
    for i, t in enumerate(tasks):
        for method, style in (("tlm", "-o"), ("metaschedule", "--x")):
            pts = sorted((int(r["k"]), num(r["best_us"]) / large[t]) for r in rows
                         if r["task"] == t and r["method"] == method and num(r["best_us"]))
            if pts:
                ax.plot(*zip(*pts), style, color=f"C{i % 10}", label=f"{kinds[t]} ({method})")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("measurements k")
    ax.set_ylabel("best latency / MetaSchedule large")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(out / "subgraph.png", dpi=110)
    plt.close(fig)
    return ["subgraph.png"]


def plot_efficiency(out: Path, rows: list[dict[str, str]]) -> list[str]:
    pts = [(num(r["flops"]), num(r["fraction_of_peak"]), r["method"]) for r in rows if num(r.get("fraction_of_peak"))]
    if not pts:
        return []
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for method, c in (("metaschedule", "tab:blue"), ("tlm", "tab:orange")):
        mine = [(f, e) for f, e, m in pts if m == method]
        if mine:
            ax.scatter(*zip(*mine), s=12, color=c, label=method)
    ax.set_xscale("log")
    ax.set_xlabel("task FLOPs")
    ax.set_ylabel("fraction of FP32 peak")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "efficiency.png", dpi=110)
    plt.close(fig)
    return ["efficiency.png"]
