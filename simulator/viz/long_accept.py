"""Accept length over very long generations (docs/reference.md's open question 5): model-free drafters run over the
corpora's text (docs/corpora.md), accept length per window against the break-even each run's own step costs set."""
from __future__ import annotations

from .style import _pyplot, _save

LONG_TOKENS = 50_000
WINDOW_TOKENS = 2048
COLORS = {"n-gram": "#4c72b0", "suffix": "#c44e52"}


def long_runs(run, quick: bool) -> dict[str, object]:
    """label -> result: SGLang's n-gram trie (pcie8_ngram_long) and suffix decoding (pcie8_suffix_long), one request
    of LONG_TOKENS on chat and on code (the code streams concatenated: none is that long)."""
    tokens = 1024 if quick else LONG_TOKENS
    out = {}
    for corpus in ("chat", "code"):
        for method, name in (("n-gram", "pcie8_ngram_long"), ("suffix", "pcie8_suffix_long")):
            out[f"{method}, {corpus}"] = run(name, workload__output_tokens=tokens, workload__corpus=corpus)
    return out


def accept_over_length(results: dict[str, object], window: int, title: str, path: str) -> str:
    """Accept length per `window` generated tokens, one line per run, its break-even dashed in the same colour."""
    from ..results.summary import accept_windows

    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    for ax, corpus in zip(axes, ("chat", "code")):
        for label, r in results.items():
            method, which = label.split(", ")
            if which != corpus:
                continue
            windows = accept_windows(r.run.accept_lengths, r.run.accept_positions, window)
            starts = [w["start"] / 1e3 for w in windows]
            ax.plot(starts, [w["mean_accept_len"] for w in windows], color=COLORS[method], label=method)
            ax.axhline(r.breakeven_accept_len, color=COLORS[method], linestyle="--", linewidth=1,
                       label=f"{method} break-even {r.breakeven_accept_len:.2f}")
        ax.set_title(corpus)
        ax.set_xlabel("generated tokens (thousands)")
        if ax.lines:
            ax.legend(fontsize=8)
    axes[0].set_ylabel(f"accept length per {window:,} tokens")
    fig.suptitle(title)
    return _save(fig, path)
