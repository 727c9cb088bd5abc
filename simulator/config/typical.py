"""The typical values of a workload: the mean of a length setting, and the context a typical step sees.

One definition, used by every part that needs "the typical context" (trees shaped for it, break-even tables, the
report's what-if, the regime acceptance models' typical history).
"""
from __future__ import annotations

import numpy as np

from .mirror import FixedLength, LognormalLength, UniformLength, Workload

def mean_length(length) -> float:
    """The mean of a length setting (an int or a distribution)."""
    if isinstance(length, int):
        return float(length)
    if isinstance(length, FixedLength):
        return float(length.value)
    if isinstance(length, UniformLength):
        return (length.low + length.high) / 2
    if isinstance(length, LognormalLength):
        return float(min(length.max, length.median * np.exp(length.sigma**2 / 2)))
    raise TypeError(f"unknown length {length!r}")


def max_length(length) -> int:
    if isinstance(length, int):
        return length
    if isinstance(length, FixedLength):
        return length.value
    if isinstance(length, UniformLength):
        return length.high
    return length.max



def typical_context(workload: Workload) -> int:
    """Tokens a typical decode step has in its context: the mean prompt plus half the mean output."""
    return int(mean_length(workload.prompt_tokens) + mean_length(workload.output_tokens) / 2)
