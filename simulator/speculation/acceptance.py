"""Acceptance models: how many draft tokens of a chain the target accepts, drawn from uniforms (common random numbers).

Each model maps a row of uniforms u_1..u_k (one per depth) to the accepted count: the first depth d with
u_d >= p_d stops the chain. Using the same uniforms across scenarios couples them monotonically: a higher
acceptance probability never accepts fewer tokens for the same draws. Models also give their analytic mean.
"""
from __future__ import annotations

import numpy as np

from ..config.scenario import IIDAcceptance, PositionalAcceptance


class ChainAcceptance:
    """Depth-conditional acceptance probabilities p_1, p_2, ... (p_d: depth d accepted given depth d-1 was)."""

    def __init__(self, probs: list[float], repeat_last: bool = False):
        self.probs = [float(p) for p in probs]
        self.repeat_last = repeat_last
        self._by_depth: dict[int, list[float]] = {}

    def prob(self, depth: int) -> float:
        """p at 1-based depth."""
        if depth <= len(self.probs):
            return self.probs[depth - 1]
        if self.repeat_last:
            return self.probs[-1]
        return 0.0

    def depth_probs(self, depth: int) -> list[float]:
        return [self.prob(d) for d in range(1, depth + 1)]

    def accepted(self, uniforms, depth: int) -> int:
        """Accepted drafts of a chain of `depth`, given `depth` uniforms."""
        probs = self._by_depth.get(depth)
        if probs is None:
            probs = self._by_depth[depth] = self.depth_probs(depth)
        for d in range(depth):
            if uniforms[d] >= probs[d]:
                return d
        return depth

    def expected_tokens(self, depth: int) -> float:
        """Mean tokens emitted per verify, bonus included: 1 + sum_d prod_{j<=d} p_j."""
        total, survive = 1.0, 1.0
        for p in self.depth_probs(depth):
            survive *= p
            total += survive
        return total

    def variance_tokens(self, depth: int) -> float:
        """Variance of tokens emitted per verify (for standard errors in tests)."""
        probs = self.depth_probs(depth)
        survive, pmf = 1.0, []
        for p in probs:
            pmf.append(survive * (1 - p))
            survive *= p
        pmf.append(survive)
        values = np.arange(1, depth + 2)
        mean = float(np.dot(values, pmf))
        return float(np.dot((values - mean) ** 2, pmf))


def build_acceptance(config) -> ChainAcceptance:
    if isinstance(config, IIDAcceptance):
        return ChainAcceptance([config.alpha], repeat_last=True)
    if isinstance(config, PositionalAcceptance):
        return ChainAcceptance(list(config.probs))
    raise TypeError(f"unknown acceptance model {config!r}")
