"""Matplotlib figures of results: PNG, or SVG when the path ends in .svg; every function returns the path it wrote.

Plain-data figures (`breakeven_map`, `grouped_bars`, `tornado`) take numbers; the others take `Result`s from
`simulator.run`. matplotlib is imported lazily, with the Agg backend, so `import simulator` stays fast and
headless machines need no display.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


from .style import CATEGORY_COLORS, CATEGORY_LABELS, DPI, _pyplot, _save  # noqa: F401  (re-exported)


# -- plain-data figures (their signatures are used by the breakeven / compare / plan commands) ----------------------
def breakeven_map(accept_lens, verify_ms, throughput, baseline_tok_s: float, point=None, title: str = "",
                  path: str = "breakeven_map.png") -> str:
    """Speculative throughput over (accept length, verify cost), the baseline's contour drawn, the scenario marked.

    throughput[i, j] is at verify_ms[i], accept_lens[j] (the transpose is accepted too); point = (accept, verify_ms).
    """
    plt = _pyplot()
    x, y = np.asarray(accept_lens, float), np.asarray(verify_ms, float)
    z = np.asarray(throughput, float)
    if z.shape != (y.size, x.size) and z.shape == (x.size, y.size):
        z = z.T
    fig, ax = plt.subplots(figsize=(7, 5))
    filled = ax.contourf(x, y, z, levels=14, cmap="viridis")
    fig.colorbar(filled, ax=ax, label="speculative throughput (tok/s)")
    if np.nanmin(z) < baseline_tok_s < np.nanmax(z):
        line = ax.contour(x, y, z, levels=[baseline_tok_s], colors="white", linewidths=2.0)
        ax.clabel(line, fmt={baseline_tok_s: f"baseline {baseline_tok_s:.0f} tok/s"}, fontsize=9)
    ax.text(0.02, 0.97, "right of (below) the white line speculation pays", transform=ax.transAxes, va="top",
            fontsize=8, color="white")
    if point is not None:
        ax.plot([point[0]], [point[1]], marker="*", markersize=16, color="#ff5050", markeredgecolor="black")
        ax.annotate(f"this scenario\n({point[0]:.2f}, {point[1]:.1f} ms)", (point[0], point[1]),
                    textcoords="offset points", xytext=(8, 8), color="white", fontsize=9)
    ax.set_xlabel("mean accept length (tokens per step)")
    ax.set_ylabel("verify pass (ms)")
    ax.set_title(title or "break-even map")
    return _save(fig, path)


def _grouped(ax, labels: Sequence[str], series: dict[str, list[float]], fmt: str = "%.3g") -> None:
    n = max(len(series), 1)
    width = 0.8 / n
    xs = np.arange(len(labels))
    for i, (name, values) in enumerate(series.items()):
        bars = ax.bar(xs + (i - (n - 1) / 2) * width, values, width, label=name, color=f"C{i}")
        ax.bar_label(bars, fmt=fmt, fontsize=8, padding=2)
    ax.set_xticks(xs, labels)
    ax.margins(y=0.12)


def grouped_bars(labels: Sequence[str], series: dict[str, list[float]], ylabel: str, title: str, path: str) -> str:
    """Bars in groups: one group per label, one bar per series, each bar labelled with its value."""
    plt = _pyplot()
    import textwrap

    fig, ax = plt.subplots(figsize=(max(6.0, 0.7 * len(labels) * max(2, len(series))), 4.5))
    _grouped(ax, [textwrap.fill(label, 18) for label in labels], series)
    if any(len(label) > 12 for label in labels):  # long labels would run into each other
        ax.tick_params(axis="x", labelrotation=25)
        for text in ax.get_xticklabels():
            text.set_horizontalalignment("right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if len(series) > 1:
        ax.legend(fontsize=9)
    return _save(fig, path)


def tornado(levers: list[tuple], baseline_value: float, current_value: float, xlabel: str, title: str,
            path: str) -> str:
    """Bars from the current value to each lever's value, the largest change on top; a line at the baseline.

    A lever is (name, value) or (name, value, pays): with `pays` (speculation beats plain decode on the changed
    machine) a bar is green when it pays and red when not, whatever its direction; without, green means higher."""
    plt = _pyplot()
    ranked = sorted(levers, key=lambda lever: abs(lever[1] - current_value))
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(ranked) + 1.8))
    for i, (name, value, *pays) in enumerate(ranked):
        good = pays[0] if pays else value >= current_value
        color = "#55a868" if good else "#c44e52"
        ax.barh(i, value - current_value, left=current_value, color=color, height=0.6)
        ax.text(value, i, f" {value:.3g} ", va="center", ha="left" if value >= current_value else "right", fontsize=9)
    ax.set_yticks(range(len(ranked)), [lever[0] for lever in ranked])
    ax.axvline(current_value, color="black", linewidth=1.2, label=f"this scenario {current_value:.3g}")
    ax.axvline(baseline_value, color="#c44e52", linestyle="--", linewidth=1.2, label=f"baseline {baseline_value:.3g}")
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.legend(fontsize=9, loc="lower right")
    ax.margins(x=0.15)
    return _save(fig, path)


# -- figures of runs -------------------------------------------------------------------------------------------
def throughput_vs_accept(series: dict[str, list], title: str = "", path: str = "throughput_vs_accept.png") -> str:
    """Throughput against mean accept length, one line per series of Results (e.g. a sweep over acceptance);
    each series' no-speculation baseline (horizontal) and break-even accept length (vertical) dashed."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 5))
    xs = [r.mean_accept_len for results in series.values() for r in results]
    labelled: set[int] = set()
    right = max(xs) + 0.4 if xs else 4.0
    for i, (name, results) in enumerate(series.items()):
        color = f"C{i}"
        results = sorted(results, key=lambda r: r.mean_accept_len)
        ax.plot([r.mean_accept_len for r in results], [r.throughput_tok_s for r in results], "o-", color=color,
                label=name)
        baseline = float(np.mean([r.baseline_tok_s for r in results]))
        ax.axhline(baseline, color=color, linestyle=":", linewidth=1)
        if round(baseline) not in labelled:  # one label per machine's baseline
            labelled.add(round(baseline))
            ax.text(0.01, baseline, f"baseline {baseline:.0f} tok/s", color=color, fontsize=8, va="bottom",
                    transform=ax.get_yaxis_transform())
        breakevens = [r.breakeven_accept_len for r in results if r.breakeven_accept_len]
        if breakevens:
            be = float(np.mean(breakevens))
            y = 0.98 - 0.05 * i  # stagger the labels: break-evens may coincide
            if be <= right:
                ax.axvline(be, color=color, linestyle="--", linewidth=1)
                ax.text(be, y, f" {be:.2f}", color=color, fontsize=8, va="top", transform=ax.get_xaxis_transform())
            else:  # off the chart: say where
                ax.text(right, y, f"break-even {be:.2f} \u2192 ", color=color, fontsize=8, va="top", ha="right",
                        transform=ax.get_xaxis_transform())
    if xs:
        ax.set_xlim(min(min(xs), 1.0) - 0.1, right)
    ax.plot([], [], "k:", label="baseline (speculation off)")
    ax.plot([], [], "k--", label="break-even accept length")
    ax.set_xlabel("mean accept length (tokens per step)")
    ax.set_ylabel("throughput (tok/s)")
    ax.set_title(title or "throughput vs accept length")
    ax.legend(fontsize=8)
    return _save(fig, path)


def pcie_vs_nvlink(pcie: dict[str, object], nvlink: dict[str, object], title: str = "",
                   path: str = "pcie_vs_nvlink.png") -> str:
    """The same methods on PCIe and NVLink (dicts label -> Result): throughput against each machine's own
    no-speculation baseline (dashed), and the speedup over it."""
    plt = _pyplot()
    labels = list(pcie)
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    _grouped(ax, labels, {"PCIe": [pcie[k].throughput_tok_s for k in labels],
                          "NVLink": [nvlink[k].throughput_tok_s for k in labels]}, "%.0f")
    for i, results in enumerate((pcie, nvlink)):
        baseline = float(np.mean([r.baseline_tok_s for r in results.values()]))
        ax.axhline(baseline, color=f"C{i}", linestyle="--", linewidth=1.2)
        ax.text(0.01, baseline, f"baseline {baseline:.0f}", color=f"C{i}", fontsize=8, va="bottom",
                transform=ax.get_yaxis_transform())
    ax.set_ylabel("throughput (tok/s)")
    ax.legend(fontsize=9, loc="upper left")
    ax.set_title("throughput (dashed: plain decode)")
    _grouped(ax2, labels, {"PCIe": [pcie[k].speedup for k in labels],
                           "NVLink": [nvlink[k].speedup for k in labels]}, "%.2f")
    ax2.axhline(1.0, color="black", linewidth=1)
    ax2.set_ylabel("speedup over plain decode (x)")
    ax2.set_title("speedup (above 1: speculation pays)")
    fig.suptitle(title or "PCIe vs NVLink")
    return _save(fig, path)


def chain_vs_tree(chain: list, tree: list, title: str = "", path: str = "chain_vs_tree.png") -> str:
    """Throughput and accept length against draft tokens per step for chains and trees (lists of Results)."""
    plt = _pyplot()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
    for name, results, marker, color in (("chain", chain, "o", "C0"), ("tree", tree, "s", "C1")):
        results = sorted(results, key=lambda r: r.speculation.draft_tokens)
        drafts = [r.speculation.draft_tokens for r in results]
        ax.plot(drafts, [r.throughput_tok_s for r in results], marker + "-", color=color, label=name)
        ax2.plot(drafts, [r.mean_accept_len for r in results], marker + "-", color=color, label=name)
        ax2.plot(drafts, [r.breakeven_accept_len or np.nan for r in results], marker + ":", color=color,
                 alpha=0.5, label=f"{name} break-even")
    every = chain + tree
    if every:
        ax.axhline(float(np.mean([r.baseline_tok_s for r in every])), color="black", linestyle="--",
                   label="baseline")
    ax.set_xlabel("draft tokens per step")
    ax.set_ylabel("throughput (tok/s)")
    ax2.set_xlabel("draft tokens per step")
    ax2.set_ylabel("mean accept length")
    ax.legend(fontsize=9)
    ax2.legend(fontsize=8)
    fig.suptitle(title or "chain vs tree")
    return _save(fig, path)


def speedup_vs_concurrency(rows: list[dict], title: str = "", path: str = "speedup_vs_concurrency.png") -> str:
    """Speculative and plain throughput, the speedup, and the accept lengths (mean and break-even) over concurrency,
    one panel each so no line shares an axis it does not belong on (rows: concurrency, throughput_tok_s,
    baseline_tok_s, speedup, breakeven_accept_len, mean_accept_len)."""
    plt = _pyplot()
    rows = sorted(rows, key=lambda r: r["concurrency"])
    c = [r["concurrency"] for r in rows]
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(14, 4.2), layout="constrained")
    left.plot(c, [r["throughput_tok_s"] for r in rows], marker="o", label="speculative")
    left.plot(c, [r["baseline_tok_s"] for r in rows], marker="s", label="plain decode")
    left.set_ylabel("throughput (tok/s)")
    middle.plot(c, [r["speedup"] for r in rows], marker="o", color="#c0392b", label="speedup")
    middle.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="1.0: no gain")
    middle.set_ylabel("speedup over plain decode")
    right.plot(c, [r["breakeven_accept_len"] for r in rows], marker="^", color="#2c3e50", label="break-even")
    right.plot(c, [r["mean_accept_len"] for r in rows], marker="o", linestyle=":", color="#16a085", label="mean")
    right.set_ylabel("accept length (tokens per step)")
    for ax in (left, middle, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency (requests in the batch)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    fig.suptitle(title or "speedup under load")
    return _save(fig, path)


# figures of one run (breakdown, hybrid timeline, summary) live in run_figures; re-exported here
from .run_figures import breakdown_stack, hybrid_timeline, run_summary  # noqa: E402,F401
