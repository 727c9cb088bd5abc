"""Which kernel of a segment can be the last to finish, as lines in the launch time of one kernel: rank r arrives at
the segment's collective no earlier than max_i (i x one + S_i), i a kernel's launch position and S_i the work from it
on (timeline.py). These helpers build those lines and drop the ones that cannot be the largest."""
from __future__ import annotations

from itertools import accumulate

import numpy as np


def kernel_lines(segments) -> tuple[np.ndarray, np.ndarray]:
    """For segments given as (heavy kernel works in launch order, small kernel work, number of small kernels, the
    small ones launched after the heavy ones): each kernel i that can be the last to finish, as its launch position
    i and the work S_i from it on. Along the run of equal small kernels the value i x one + S_i is linear in i, so
    only the run's first and last kernel can be the maximum: the run costs two lines, however long (exact)."""
    rows = []
    for works, small_us, small_count in segments:
        tail = small_us * small_count
        # the running sum from the last kernel back, as np.cumsum adds (in order), plus the small kernels' tail
        suffix = [s + tail for s in accumulate(float(w) for w in reversed(works))][::-1]
        positions = list(range(1, len(works) + 1))
        if small_count:
            positions += [len(works) + 1, len(works) + small_count]
            suffix += [tail, small_us]
        rows.append((positions, suffix))
    width = max(1, max(len(p) for p, _ in rows))
    positions, suffixes = np.zeros((len(rows), width)), np.zeros((len(rows), width))
    for k, (p, w) in enumerate(rows):
        positions[k, :len(p)], suffixes[k, :len(w)] = p, w
    return positions, suffixes


LINE_MARGIN = 1e-9  # a line is dropped only where another exceeds it by this relative margin (rounding is ~1e-16)
PRUNE_ROWS = 64  # (sample, rank) rows from which pruning pays for itself (one pass of 8 ranks does not)


def binding_lines(one: np.ndarray, positions: np.ndarray, suffixes: np.ndarray,
                  bounds: tuple | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The lines (position, suffix) per segment that can be the largest at the launch times `one` (..., K) that
    occur: the same maximum, with fewer columns to evaluate.

    A line is dropped where another exceeds it by LINE_MARGIN (relative) at both ends of the segment's range of
    `one`. The difference of two lines is linear in `one`, so the other line exceeds it over the whole range, by
    far more than the rounding of either (all terms are non-negative, so there is no cancellation): the dropped
    line's value is never the largest float, and the maximum over the kept lines is the same float. Segments keep
    different numbers of lines; shorter rows repeat a kept line (a repeated value does not change a maximum).
    """
    if positions.shape[1] < 2 or one.size < PRUNE_ROWS * one.shape[-1]:
        return positions, suffixes
    if bounds is None:
        flat = one.reshape(-1, one.shape[-1])
        bounds = flat.min(axis=0), flat.max(axis=0)
    lo, hi = bounds
    if not (np.isfinite(hi).all() and lo.min() >= 0.0 and positions.min() >= 0.0 and suffixes.min() >= 0.0):
        return positions, suffixes  # the argument needs finite, non-negative terms
    at_lo = lo[:, None] * positions + suffixes  # (K, M) every line at both ends
    at_hi = hi[:, None] * positions + suffixes
    beats = ((at_lo[:, :, None] > at_lo[:, None, :] * (1.0 + LINE_MARGIN))
             & (at_hi[:, :, None] > at_hi[:, None, :] * (1.0 + LINE_MARGIN)))  # [k, i, j]: line i beats line j
    keep = ~beats.any(axis=1)
    count = keep.sum(axis=1)
    width = int(count.max())
    if width == positions.shape[1]:
        return positions, suffixes
    order = np.argsort(~keep, axis=1, kind="stable")[:, :width]  # kept lines first
    index = np.where(np.arange(width)[None, :] < count[:, None], order, order[:, :1])
    return np.take_along_axis(positions, index, axis=1), np.take_along_axis(suffixes, index, axis=1)
