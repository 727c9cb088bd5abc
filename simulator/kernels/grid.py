"""Multilinear interpolation on a (possibly incomplete) product grid of measured points.

Each axis is interpolated linearly in its value or in log(value) (token counts, batch and KV length: kernel time
is close to piecewise linear in log-space between their power-of-two grid points). A point outside an axis's range,
or one whose surrounding cell lacks a measured corner, is not covered (None): the caller falls back. Along a padded
axis (GEMM rows, MoE tokens) the points are fitted non-decreasing, unless another collection of the same op on the
same GPU repeats their scatter about the fit (`repeats`): then they are kept as measured. A table standing in for
another kernel (`smooth`) reads the fit alone: the held-out smallest size and the repeated scatter are its kernel's.
"""
from __future__ import annotations

import itertools
import math

import numpy as np


class Grid:
    def __init__(self, axes: list[np.ndarray], values: np.ndarray, log_axes: tuple[bool, ...]):
        self.axes = [np.asarray(a, dtype=float) for a in axes]
        self.values = values
        self.log_axes = log_axes
        self._coords = [np.log(a) if lg else a for a, lg in zip(self.axes, log_axes)]

    @classmethod
    def from_frame(cls, frame, columns: list[str], log_axes: tuple[bool, ...], value: str = "latency",
                   padded_axis: int | None = None, witnesses: tuple = (), smooth: bool = False) -> "Grid":
        """Duplicate measurements of one point are averaged. padded_axis: an axis along which a kernel's time does not
        fall as the size grows (GEMM rows, MoE tokens) but through the data's noise: each line along it is fitted by
        the closest non-decreasing sequence (`fitted`). witnesses: other collections of the same op on the same GPU
        (frames with the same columns); where this one's deviations from its fit repeat in theirs (`repeats`), the
        rows are kept as measured: the scatter is the kernel's (a kernel choice per shape), not noise. smooth: the
        table stands in for a kernel that is not the one it measured (runtime.kernel_database.stands_in): the fit with
        no size held out and no witnesses asked, as the measured kernel's own excess and choices do not carry over."""
        axes, measured = means(frame, columns, value)
        values = measured
        if padded_axis is not None:
            values = fitted(measured, padded_axis, hold=not smooth)
            if witnesses and not smooth:
                own = np.log(measured / values)
                others = [aligned(axes, *_residual(w, columns, value, padded_axis)) for w in witnesses]
                if repeats(own, others):
                    values = measured
        return cls(axes, values, log_axes)

    def __call__(self, point: tuple[float, ...]) -> float | None:
        cells = []
        for axis, coords, x, lg in zip(self.axes, self._coords, point, self.log_axes):
            if x < axis[0] * (1 - 1e-9) or x > axis[-1] * (1 + 1e-9):
                return None
            if len(axis) == 1:
                cells.append(((0, 1.0),))
                continue
            c = math.log(x) if lg else float(x)
            i = min(max(int(np.searchsorted(coords, c, side="right")) - 1, 0), len(axis) - 2)
            w = (c - coords[i]) / (coords[i + 1] - coords[i])
            w = min(max(w, 0.0), 1.0)
            cells.append(((i, 1.0 - w), (i + 1, w)))
        total = 0.0
        for corner in itertools.product(*cells):
            weight = math.prod(w for _, w in corner)
            if weight == 0.0:
                continue
            v = self.values[tuple(i for i, _ in corner)]
            if np.isnan(v):
                return None
            total += weight * v
        return total


def means(frame, columns: list[str], value: str = "latency") -> tuple[list[np.ndarray], np.ndarray]:
    """The mean of each point's measurements on the product grid of the values measured per column (NaN: a hole)."""
    by_point = frame.groupby(columns, sort=True)[value].mean()
    axes = [np.unique(by_point.index.get_level_values(i).to_numpy(dtype=float)) for i in range(len(columns))]
    values = np.full([len(a) for a in axes], np.nan)
    index = tuple(np.searchsorted(axes[i], by_point.index.get_level_values(i).to_numpy(dtype=float))
                  for i in range(len(columns)))
    values[index] = by_point.to_numpy()
    return axes, values


def fitted(measured: np.ndarray, padded_axis: int, hold: bool = True) -> np.ndarray:
    """Each line along padded_axis fitted non-decreasing (`monotone`), the smallest size left as measured where it
    is slower than the next on too many lines for noise (`held_out`): the kernel's own excess there (hold False:
    never left out, every size fitted)."""
    values = measured.copy()
    lines = np.moveaxis(values, padded_axis, 0)  # a view: the fit is written into values
    start = 1 if hold and held_out(lines) else 0
    lines[start:] = np.apply_along_axis(monotone, 0, lines[start:])
    return values


def _residual(frame, columns: list[str], value: str, padded_axis: int) -> tuple[list[np.ndarray], np.ndarray]:
    axes, measured = means(frame, columns, value)
    return axes, np.log(measured / fitted(measured, padded_axis))


def aligned(axes: list[np.ndarray], other_axes: list[np.ndarray], other: np.ndarray) -> np.ndarray:
    """`other` (a grid over other_axes) at the points of the grid over `axes`; NaN where it was not measured."""
    picks, found = [], np.ones([len(a) for a in axes], dtype=bool)
    for i, (axis, theirs) in enumerate(zip(axes, other_axes)):
        at = np.clip(np.searchsorted(theirs, axis), 0, len(theirs) - 1)
        picks.append(at)
        found &= (theirs[at] == axis).reshape([-1 if j == i else 1 for j in range(len(axes))])
    out = other[np.ix_(*picks)].astype(float)
    out[~found] = np.nan
    return out


def repeats(own: np.ndarray, others: list[np.ndarray]) -> bool:
    """Whether this collection's deviations from its fit (log residuals, `own`) repeat in other collections' (`others`,
    on the same points, NaN where not measured): the least-squares slope b of theirs on ours, pooled over the points
    both measured, above 1/2 by more than 3 standard errors. A residual r = s + e (s shared by the kernel, e the
    collection's noise) predicts another's s + e' better than the fit (0) in squared error exactly when
    var(s) > var(e), i.e. b = var(s) / (var(s) + var(e)) > 1/2. Assumed: points independent, noise alike in both."""
    x = np.concatenate([own.ravel()] * len(others)) if others else np.zeros(0)
    y = np.concatenate([o.ravel() for o in others]) if others else np.zeros(0)
    both = np.isfinite(x) & np.isfinite(y)
    x, y = x[both], y[both]
    xx = float(x @ x)
    if len(x) < 3 or xx == 0.0:
        return False
    b = float(x @ y) / xx
    se = math.sqrt(float((y - b * x) @ (y - b * x)) / (len(x) - 1) / xx)
    return b - 3 * se > 0.5


def held_out(lines: np.ndarray) -> bool:
    """Whether the smallest size (lines[0]) is measured slower than the next (lines[1]) on more lines than noise makes:
    a sign test (ties dropped), each line slower with odds 1/2 under noise, held out beyond 3 standard deviations of
    that count (by noise alone 1 slice in 740). aiconfigurator-core 0.12's GEMM slices: those with an excess lie
    beyond +8 (vLLM 0.24.0's fp8 lanes on Blackwell, 2.2-2.8x at m = 1 in CUTLASS's per-tensor one; TensorRT-LLM
    1.0.0's A100 int4 GEMV, 1.08x; vLLM 0.20.0's B60 bf16, 1.04x), the rest below +2.5 but one at +3.1 whose median
    m = 1 / m = 2 is 1.000 (held or pooled, its m = 1 times differ by its noise only). A MoE slice is one line: never
    held out."""
    if len(lines) < 2:
        return False
    both = ~np.isnan(lines[0]) & ~np.isnan(lines[1]) & (lines[0] != lines[1])
    num_lines, num_above = int(both.sum()), int((lines[0] > lines[1])[both].sum())
    return num_lines > 0 and num_above - num_lines / 2 > 3 * math.sqrt(num_lines) / 2


def monotone(line: np.ndarray) -> np.ndarray:
    """The non-decreasing sequence closest in squared error to the measured points of `line` (pool adjacent
    violators: a run that falls is replaced by its mean); holes (NaN) stay holes and are skipped."""
    out = line.copy()
    where = np.flatnonzero(~np.isnan(line))
    blocks: list[list[float]] = []  # [sum, count] per pooled run, left to right
    for x in line[where]:
        blocks.append([float(x), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    out[where] = np.repeat([total / count for total, count in blocks], [int(count) for _, count in blocks])
    return out
