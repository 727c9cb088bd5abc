"""Percentiles of a run's latencies: numpy's default (linear, Hyndman & Fan's 7th method), the same floats as
np.percentile, without its per-call overhead (~50 us a call; a result asks for a dozen, mostly of a few values)."""
from __future__ import annotations

import math

import numpy as np


def percentiles(values, qs) -> list[float]:
    """np.percentile(values, qs).tolist() for a non-empty 1-D sample and percentiles qs in [0, 100]: the sorted
    sample's values at (n - 1) q / 100, interpolated as numpy's _lerp does (from the lower neighbour below a
    fraction of 0.5, from the upper one from 0.5 on); NaN wherever the sample holds a NaN."""
    ordered = np.sort(np.asarray(values, dtype=float).ravel())
    n = len(ordered)
    last = float(ordered[-1])
    if math.isnan(last):  # NaNs sort last
        return [math.nan] * len(qs)
    out = []
    for q in qs:
        virtual = (n - 1) * (q / 100)
        if virtual >= n - 1:
            out.append(last + (last - last) * 0.0)  # numpy interpolates even there
            continue
        below = math.floor(virtual)
        gamma = virtual - below
        a, b = float(ordered[below]), float(ordered[below + 1])
        diff = b - a
        out.append(b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma)
    return out
