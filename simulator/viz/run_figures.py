"""Figures of one run's step log: the time breakdown by step kind, the hybrid policy over time, a run summary.
Each takes a `Result` from `simulator.run` and returns the path it wrote."""
from __future__ import annotations

import numpy as np

from ..serving.records import KIND_DECODE, KIND_PREFILL, KIND_SPEC
from ..results.summary import BREAKDOWN
from .style import CATEGORY_COLORS, CATEGORY_LABELS, _pyplot, _save


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
    return _save(fig, path, result.provenance)


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
    return _save(fig, path, result.provenance)


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
    return _save(fig, path, result.provenance)
