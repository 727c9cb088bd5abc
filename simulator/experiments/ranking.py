"""A finished sweep's points ranked by one of the planner's figures (results/planner.py RANKINGS), best first.

The figure must be one of the sweep's metrics (its dotted path, e.g. planner.goodput_tok_s_per_gpu), so the ranking
reads the results file and runs nothing; error rows and points without the figure (a topology without a price) go
last.
"""
from __future__ import annotations

import math

from ..config.errors import ConfigError
from ..results.planner import RANKINGS, rank


def check_rank_by(name: str, metrics, file: str, key: str) -> None:
    """The ranking must be known and its figure among the sweep's metrics; else one ConfigError."""
    if name not in RANKINGS:
        raise ConfigError(file, key, f"{name!r} is not a figure to rank by", ", ".join(RANKINGS))
    path = RANKINGS[name].path
    if path not in metrics:
        raise ConfigError(file, key, f"ranking by {name} reads the metric {path}, which the sweep does not keep",
                          f"add {path} to metrics")


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def ranked_rows(rows: list[dict[str, str]], name: str) -> list[dict[str, str]]:
    """The ok rows of a results file, best first by the named ranking."""
    ok = [r for r in rows if r.get("status") == "ok"]
    return rank(ok, name, lambda row, path: _number(row.get(path, "")))


def ranking_table(rows: list[dict[str, str]], name: str, axes, top: int) -> str:
    """The `top` best points: rank, each axis value and the figure."""
    ranking = RANKINGS[name]
    best = ranked_rows(rows, name)[:top]
    columns = ["#", *axes, ranking.label]
    cells = [[str(i), *(r.get(a, "") for a in axes), _shown(r.get(ranking.path, ""))] for i, r in enumerate(best, 1)]
    widths = [max(len(c), *(len(row[j]) for row in cells)) if cells else len(c) for j, c in enumerate(columns)]
    lines = [f"best {len(best)} of {len(rows)} points by {ranking.label} "
             f"({'higher' if ranking.higher_is_better else 'lower'} is better):",
             "  ".join(c.rjust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def _shown(text: str) -> str:
    value = _number(text)
    return "-" if value is None else f"{value:,.2f}"
