"""The anchor contexts a pass is planned at, and the one rule that blends between them (timing.machine builds the
plans). A plan's cost grows with the cached context piecewise (each kernel's roofline time is the largest of terms
affine in the context), so plans are built on a doubling grid of contexts (0, 256, 512, 1024, ...) and a quantity at
any context is interpolated linearly between its values at the anchors around it: exact where no kernel changes
bound between two anchors. `at_context` is that rule, used by every caller.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from .passplan import blend


def context_anchors(context: int) -> tuple[int, int, float]:
    """The grid contexts below and above `context` (0, 256, 512, 1024, ... doubling) and the weight of the upper."""
    if context <= 0:
        return 0, 0, 0.0
    if context < 256:
        return 0, 256, context / 256.0
    low = 256 << int(math.log2(context / 256.0) + 1e-12)
    if context == low:
        return low, low, 0.0
    high = 2 * low
    return low, high, (context - low) / (high - low)


def context_anchors_many(contexts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """context_anchors of every context at once (the same values): arrays of low and high anchors and weights."""
    c = np.maximum(np.asarray(contexts, dtype=np.int64), 0)
    grid = [0, 256]
    while c.size and grid[-1] <= int(c.max()):
        grid.append(2 * grid[-1])
    low = np.asarray(grid)[np.searchsorted(grid, c, side="right") - 1]
    exact = c == low  # an anchor itself (or a context <= 0): weight 0
    high = np.where(exact, low, np.where(low == 0, 256, 2 * low))
    weight = np.where(exact, 0.0, (c - low) / np.where(exact, 1, high - low))  # ints below 2^53: the same division
    return low, high, weight


def at_context(context: int, value_at: Callable[[int], Any]):
    """A quantity at `context`, from its values at the anchor contexts around it (value_at(anchor)), blended."""
    low, high, weight = context_anchors(context)
    a = value_at(low)
    if weight == 0.0:
        return a
    return blend(a, value_at(high), weight)
