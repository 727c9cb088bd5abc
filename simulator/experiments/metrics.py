"""A sweep's metrics checked before its first point: each dotted path must name a figure a result holds.

The base scenario is run once on a tiny workload (one request of a few tokens) and each metric is looked up in its
Result.to_dict(); a path that stops at a section this configuration leaves empty (null, e.g. verify statistics of a
run that never speculates) is accepted, since other points may fill it. A misspelled metric is a one-line
ConfigError naming the closest figure, before any point runs.
"""
from __future__ import annotations

import difflib
from typing import Any

from ..config import Scenario
from ..config.errors import ConfigError

# appended to every sweep row: which specsim, seed, fidelity and kernel source produced it (the overrides are the
# row's axis columns and the sweep file's `set`)
PROVENANCE_COLUMNS = ("provenance.specsim_version", "provenance.seed", "provenance.fidelity",
                      "provenance.kernel_source")
PROBE = {"workload.requests": 1, "workload.output_tokens": 8, "workload.prompt_tokens": 16,
         "workload.arrival": {"kind": "all_at_once"}}


def _paths(data: Any, prefix: str = "") -> list[str]:
    if not isinstance(data, dict):
        return [prefix.rstrip(".")]
    out = [prefix.rstrip(".")] if prefix else []
    for key, value in data.items():
        out += _paths(value, f"{prefix}{key}.")
    return out


def _known(data: Any, path: str) -> bool:
    for key in path.split("."):
        if data is None:
            return True  # a section this configuration leaves empty; another point may fill it
        if not isinstance(data, dict) or key not in data:
            return False
        data = data[key]
    return True


def check_metrics(base: Scenario, metrics, file: str) -> None:
    """Raise a ConfigError for the first metric that names no figure of a result."""
    from ..api.run import run

    probe = run(base.with_overrides(PROBE), baseline=True).to_dict()
    for metric in metrics:
        if not _known(probe, metric):
            close = difflib.get_close_matches(metric, _paths(probe), n=1, cutoff=0.6)
            raise ConfigError(file, "metrics", f"{metric!r} names no figure of a result"
                              + (f"; did you mean {close[0]!r}?" if close else ""),
                              "dotted paths into a run's JSON, e.g. throughput_tok_s, step_ms.verify.mean")
