"""Closed forms for speculative decoding, used as oracles by the tests and as quick estimates by the CLI.

Token counts include the bonus token: plain decode emits 1.0 per step. Step times may be in any unit, as
long as both arguments of a function use the same one.
"""
from __future__ import annotations

import math

import numpy as np

from ..speculation.optimal import optimal_tree_and_value
from ..speculation.trees import Tree


def _check_probability(p: float, name: str) -> float:
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1], got {p}.")
    return p


def chain_expected_tokens_iid(alpha: float, k: int) -> float:
    """Leviathan et al. 2023: tokens per verify of a k-draft chain, each draft accepted with alpha."""
    alpha = _check_probability(alpha, "alpha")
    if k < 0:
        raise ValueError(f"a chain needs k >= 0 drafts, got {k}.")
    if alpha == 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def _chain_pmf(probs) -> np.ndarray:
    """pmf[j]: probability that exactly j drafts are accepted (j = 0..len(probs))."""
    probs = [_check_probability(p, "a depth acceptance probability") for p in probs]
    survive, pmf = 1.0, []
    for p in probs:
        pmf.append(survive * (1.0 - p))
        survive *= p
    pmf.append(survive)
    return np.array(pmf)


def chain_expected_tokens(probs) -> float:
    """Tokens per verify of a chain with per-depth conditional acceptance probs: 1 + sum_d prod_{j<=d} p_j."""
    total, survive = 1.0, 1.0
    for p in probs:
        survive *= _check_probability(p, "a depth acceptance probability")
        total += survive
    return total


def chain_tokens_variance(probs) -> float:
    """Variance of tokens per verify of a chain with per-depth conditional acceptance probs."""
    pmf = _chain_pmf(probs)
    values = np.arange(1, len(pmf) + 1)
    mean = float(values @ pmf)
    return float(((values - mean) ** 2) @ pmf)


def chain_speedup_iid(alpha: float, k: int, cost_ratio: float) -> float:
    """Leviathan et al. 2023: E / (k c + 1), with a verify as cheap as a decode and drafts costing c each."""
    if cost_ratio < 0:
        raise ValueError(f"the draft/target cost ratio must be >= 0, got {cost_ratio}.")
    return chain_expected_tokens_iid(alpha, k) / (k * cost_ratio + 1.0)


def tree_expected_tokens(tree: Tree, P) -> float:
    """Sequoia: sum over nodes of the product of positional P along the node's path, the root counting 1."""
    return tree.expected_tokens(P)


def tree_tokens_variance(tree: Tree, P) -> float:
    """Variance of tokens per verify of a tree: the walk stops at node n with path_prob(n) * (1 - sum of
    its children's P), emitting depth(n) + 1 tokens."""
    path = np.array(tree.path_probs(P))
    continue_prob = np.zeros(tree.size)
    for node in range(1, tree.size):
        continue_prob[tree.parents[node]] += path[node]
    stop = path - continue_prob
    tokens = np.array(tree.depths) + 1.0
    mean = float(tokens @ stop)
    return float(((tokens - mean) ** 2) @ stop)


def optimal_tree(P, size: int, max_depth: int | None = None) -> tuple[Tree, float]:
    """The tree of exactly `size` nodes (root included) maximising expected tokens, and that maximum."""
    return optimal_tree_and_value(P, size, max_depth)


def breakeven_accept_len(spec_step_time: float, baseline_step_time: float) -> float:
    """Accept length at which speculating matches plain decode's tokens per unit time."""
    _check_times(spec_step_time, baseline_step_time)
    return spec_step_time / baseline_step_time


def speedup(accept_len: float, spec_step_time: float, baseline_step_time: float) -> float:
    """Tokens per unit time with speculation over plain decode (which emits one token per baseline step)."""
    _check_times(spec_step_time, baseline_step_time)
    return accept_len * baseline_step_time / spec_step_time


def _check_times(spec_step_time: float, baseline_step_time: float) -> None:
    if not (spec_step_time > 0 and baseline_step_time > 0) or math.isinf(spec_step_time + baseline_step_time):
        raise ValueError(f"step times must be positive and finite, got {spec_step_time} and {baseline_step_time}.")
