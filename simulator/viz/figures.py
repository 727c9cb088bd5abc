"""Matplotlib figures of results: PNG, or SVG when the path ends in .svg; every function returns the path it wrote.

Plain-data figures (`breakeven_map`, `grouped_bars`, `tornado`) take numbers; the others take `Result`s from
`simulator.run`. matplotlib is imported lazily, with the Agg backend, so `import simulator` stays fast and
headless machines need no display.
"""
from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from ..engine.server import KIND_DECODE, KIND_PREFILL, KIND_SPEC
from ..results.summary import BREAKDOWN

DPI = 100
CATEGORY_COLORS = {"compute": "#4c72b0", "memory": "#55a868", "launch": "#c44e52", "allreduce_transfer": "#8172b2",
                   "allreduce_wait": "#ccb974", "draft": "#64b5cd", "other": "#999999"}
CATEGORY_LABELS = {"compute": "compute", "memory": "memory", "launch": "launch (GPU waits for host)",
                   "allreduce_transfer": "all-reduce transfer", "allreduce_wait": "all-reduce wait",
                   "draft": "drafting", "other": "other (scheduler, sync)"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str) -> str:
    from ..results.files import atomic_write

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)  # API callers; the CLI checked it before
    try:
        with atomic_write(path, "wb") as handle:  # a failed write keeps the previous figure
            fig.savefig(handle, dpi=DPI, format="svg" if path.lower().endswith(".svg") else "png",
                        bbox_inches="tight")
    finally:
        _pyplot().close(fig)
    return path


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
    fig, ax = plt.subplots(figsize=(max(6.0, 0.7 * len(labels) * max(2, len(series))), 4.5))
    _grouped(ax, labels, series)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if len(series) > 1:
        ax.legend(fontsize=9)
    return _save(fig, path)


def tornado(levers: list[tuple[str, float]], baseline_value: float, current_value: float, xlabel: str, title: str,
            path: str) -> str:
    """Bars from the current value to each lever's value, the largest change on top; a line at the baseline."""
    plt = _pyplot()
    ranked = sorted(levers, key=lambda lever: abs(lever[1] - current_value))
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(ranked) + 1.8))
    for i, (name, value) in enumerate(ranked):
        color = "#55a868" if value >= current_value else "#c44e52"
        ax.barh(i, value - current_value, left=current_value, color=color, height=0.6)
        ax.text(value, i, f" {value:.3g} ", va="center", ha="left" if value >= current_value else "right", fontsize=9)
    ax.set_yticks(range(len(ranked)), [name for name, _ in ranked])
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
        results = sorted(results, key=lambda r: r.speculation["draft_tokens"])
        drafts = [r.speculation["draft_tokens"] for r in results]
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


def _kind_totals(run, mask: np.ndarray) -> dict[str, float]:
    return {k: float(run.steps[k][mask].sum()) for k in BREAKDOWN}


def breakdown_stack(result, title: str = "", path: str = "breakdown.png") -> str:
    """Stacked time by category, per step kind: ms per step (prefill, decode, verify+draft, baseline decode) and
    ms per generated token (where steps generate tokens)."""
    plt = _pyplot()
    run, base = result.run, result.baseline
    kinds = [("prefill", run, KIND_PREFILL), ("decode", run, KIND_DECODE), ("verify+draft", run, KIND_SPEC)]
    if base is not None and base is not run:
        kinds.append(("baseline decode", base, KIND_DECODE))
    rows = []
    for label, r, kind in kinds:
        mask = r.steps["kind"] == kind
        if mask.any():
            rows.append((label, _kind_totals(r, mask), int(mask.sum()), float(r.steps["tokens"][mask].sum())))
    prefill = [row for row in rows if row[0] == "prefill"]
    others = [row for row in rows if row[0] != "prefill"]
    panels = ([(prefill, False, "prefill")] if prefill else []) + [(others, False, "time per step"),
                                                                   (others, True, "time per generated token")]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels) + 1.5, 4.8),
                             gridspec_kw={"width_ratios": [0.45 if p[0] is prefill else 1.0 for p in panels]})
    for ax, (shown, per_token, name) in zip(axes, panels):
        bottom = np.zeros(len(shown))
        for category in BREAKDOWN:
            values = np.array([totals[category] / (tokens if per_token else steps) / 1e3
                               for _, totals, steps, tokens in shown])
            ax.bar(range(len(shown)), values, bottom=bottom, color=CATEGORY_COLORS[category],
                   label=CATEGORY_LABELS[category], width=0.6)
            bottom += values
        for i, total in enumerate(bottom):
            ax.text(i, total, f"{total:.2f}", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(shown)), [row[0] for row in shown])
        ax.set_ylabel("ms per generated token" if per_token else "ms per step")
        ax.set_title(name)
        ax.margins(x=0.25 if len(shown) == 1 else 0.1, y=0.08)
    axes[-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle(title or f"{result.scenario}: where the time goes")
    return _save(fig, path)


def _policy_ema(accept: np.ndarray, is_probe: np.ndarray, alpha: float, probe_alpha: float) -> np.ndarray:
    """The hybrid policy's estimate after each speculative step: weight alpha while on, probe_alpha for a probe."""
    out = np.empty_like(accept)
    acc = None
    for i, (value, probe) in enumerate(zip(accept.tolist(), is_probe.tolist())):
        weight = probe_alpha if probe else alpha
        acc = value if acc is None else (1 - weight) * acc + weight * value
        out[i] = acc
    return out


def hybrid_timeline(result, ema_alpha: float = 0.3, probe_alpha: float = 0.5, hysteresis: float | None = None,
                    window_s: float = 2.0, title: str = "", path: str = "hybrid_timeline.png") -> str:
    """The hybrid policy over time: accept length per speculative step and the policy's EMA of it (alpha while on,
    probe_alpha for a probe after plain steps) against the break-even (and its hysteresis band), the stretches spent
    speculating shaded; below, throughput over a sliding window against the baseline."""
    plt = _pyplot()
    steps = result.run.steps
    t = (steps["start_at"] + steps["duration_us"]) / 1e6
    spec = steps["kind"] == KIND_SPEC
    accept = np.where(steps["batch"] > 0, steps["tokens"] / np.maximum(steps["batch"], 1), 0.0)
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(12, 6), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    edges = np.diff(np.concatenate([[0], spec.astype(int), [0]]))
    for a, b in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)):
        start = steps["start_at"][a] / 1e6
        for axis in (ax, ax2):
            axis.axvspan(start, t[b - 1], color="#55a868", alpha=0.18, linewidth=0)
    ax.plot(t[spec], accept[spec], ".", markersize=3, color="#4c72b0", alpha=0.5, label="accept length per step")
    if spec.any():
        served = steps["kind"] != KIND_PREFILL
        previous_spec = np.concatenate([[False], spec[served][:-1]])  # the step before, among decode/verify steps
        is_probe = ~previous_spec[spec[served]]
        ax.plot(t[spec], _policy_ema(accept[spec], is_probe, ema_alpha, probe_alpha), color="#4c72b0",
                linewidth=1.3, label=f"policy's EMA (alpha {ema_alpha:g}, probes {probe_alpha:g})")
    be = result.breakeven_accept_len
    if be:
        ax.axhline(be, color="#c44e52", linestyle="--", label=f"break-even {be:.2f}")
        if hysteresis:
            ax.axhspan((1 - hysteresis) * be, (1 + hysteresis) * be, color="#c44e52", alpha=0.08,
                       label=f"hysteresis band (+-{hysteresis:.0%})")
    ax.fill_between([], [], color="#55a868", alpha=0.18, label="speculating")
    ax.set_ylabel("accept length")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    tokens = np.cumsum(steps["tokens"])
    if t.size:
        grid = np.arange(window_s, t[-1] + 1e-9, window_s / 4) if t[-1] > window_s else np.array([t[-1]])
        earlier = np.interp(grid - window_s, t, tokens, left=0.0)
        rate = (np.interp(grid, t, tokens) - earlier) / np.minimum(window_s, grid)
        ax2.plot(grid, rate, color="black", linewidth=1.2, label=f"throughput ({window_s:g} s window)")
    ax2.axhline(result.baseline_tok_s, color="#c44e52", linestyle="--", label="baseline")
    ax2.set_ylabel("tok/s")
    ax2.set_xlabel("simulated time (s)")
    ax2.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    share = result.policy.get("speculative_share")
    extra = f", speculating {share:.0%} of steps" if share is not None else ""
    fig.suptitle(title or f"{result.scenario}: hybrid policy over time{extra} ({result.speedup:.2f}x baseline)")
    return _save(fig, path)


def speedup_vs_concurrency(rows: list[dict], title: str = "", path: str = "speedup_vs_concurrency.png") -> str:
    """Speculative and plain throughput and the speedup over concurrency (rows: concurrency, throughput_tok_s,
    baseline_tok_s, speedup, breakeven_accept_len, mean_accept_len)."""
    plt = _pyplot()
    rows = sorted(rows, key=lambda r: r["concurrency"])
    c = [r["concurrency"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    left.plot(c, [r["throughput_tok_s"] for r in rows], marker="o", label="speculative")
    left.plot(c, [r["baseline_tok_s"] for r in rows], marker="s", label="plain decode")
    left.set_xscale("log", base=2)
    left.set_xlabel("concurrency (requests in the batch)")
    left.set_ylabel("throughput (tok/s)")
    left.legend()
    left.grid(alpha=0.3)
    right.plot(c, [r["speedup"] for r in rows], marker="o", color="#c0392b", label="speedup")
    right.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    right.set_xscale("log", base=2)
    right.set_xlabel("concurrency (requests in the batch)")
    right.set_ylabel("speedup over plain decode")
    twin = right.twinx()
    twin.plot(c, [r["breakeven_accept_len"] for r in rows], marker="^", color="#2c3e50", label="break-even accept")
    twin.plot(c, [r["mean_accept_len"] for r in rows], linestyle=":", color="#2c3e50", label="mean accept")
    twin.set_ylabel("accept length")
    handles = right.get_legend_handles_labels()
    more = twin.get_legend_handles_labels()
    right.legend(handles[0] + more[0], handles[1] + more[1], loc="upper right", fontsize=8)
    right.grid(alpha=0.3)
    fig.suptitle(title or "speedup under load")
    return _save(fig, path)


def run_summary(result, path: str = "run.png") -> str:
    """A compact figure of one run: throughput vs baseline, time per token by category, accept-length histogram."""
    plt = _pyplot()
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(13, 4.4), gridspec_kw={"width_ratios": [1, 1.3, 1.3]},
                                        layout="constrained")
    bars = ax1.bar(["baseline", "speculative"], [result.baseline_tok_s, result.throughput_tok_s],
                   color=["#999999", "#4c72b0"])
    ax1.bar_label(bars, fmt="%.1f", fontsize=9)
    ax1.set_ylabel("tok/s")
    ax1.set_title(f"throughput ({result.speedup:.2f}x)")
    ax1.margins(y=0.15)
    columns = [("speculative", result.breakdown_ms_per_token)]
    if result.baseline is not None and result.baseline is not result.run:
        from ..results.summary import breakdown_per_token
        columns.insert(0, ("baseline", breakdown_per_token(result.baseline)))
    bottom = np.zeros(len(columns))
    for category in BREAKDOWN:
        values = np.array([b[category] for _, b in columns])
        ax2.barh(range(len(columns)), values, left=bottom, color=CATEGORY_COLORS[category],
                 label=CATEGORY_LABELS[category])
        bottom += values
    for i, total in enumerate(bottom):
        ax2.text(total, i, f" {total:.2f}", va="center", fontsize=8)
    ax2.margins(x=0.15)
    ax2.set_yticks(range(len(columns)), [name for name, _ in columns])
    ax2.set_xlabel("ms per generated token")
    ax2.set_title("where the time goes")
    ax2.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=3)
    hist = result.accept_len_hist
    if hist:
        lengths = sorted(int(k) for k in hist)
        ax3.bar(lengths, [hist[str(k)] for k in lengths], color="#4c72b0")
        ax3.axvline(result.mean_accept_len, color="black", label=f"mean {result.mean_accept_len:.2f}")
        if result.breakeven_accept_len:
            ax3.axvline(result.breakeven_accept_len, color="#c44e52", linestyle="--",
                        label=f"break-even {result.breakeven_accept_len:.2f}")
        ax3.legend(fontsize=8)
    else:
        ax3.text(0.5, 0.5, "no speculative steps", ha="center", va="center", transform=ax3.transAxes)
    ax3.set_xlabel("accept length (tokens per step)")
    ax3.set_ylabel("steps x requests")
    ax3.set_title("accept lengths")
    fig.suptitle(f"{result.scenario} ({result.fidelity}, seed {result.seed})")
    return _save(fig, path)
