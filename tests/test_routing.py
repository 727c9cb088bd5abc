"""The busiest expert-parallel rank under group-limited routing (model.routing): the router against DeepSeek-V3's
Gate.forward written out per token, the Monte Carlo against exact counts (uniform routing: the multivariate
hypergeometric and an enumeration of two tokens; group-limited routing ranked by a group's best score, where the
choice depends only on the scores' order: an enumeration of every order), and the invariants (one rank: no effect;
more tokens: towards the mean rank's load). Tolerances: 4 standard errors of the samples drawn."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from simulator.config.model_card import ModelCard
from simulator.config.yaml_files import read_yaml
from simulator.model.routing import (busiest_at, busiest_expert_rank, busiest_rank_samples, rank_loads, route,
                                     routed_pool)
from conftest import scenario_path


def deepseek_v3_moe():
    return ModelCard.model_validate(read_yaml(scenario_path("models/deepseek_v3.yaml"))).moe

DSV3 = (256, 8, 8, 4, "top2_sum")  # DeepSeek-V3: experts, top-k, n_group, topk_group, noaux_tc's group score
UNIFORM = (256, 8, 1, 1, "top2_sum")


def gate_forward(scores: list[float], groups: int, chosen: int, k: int, group_score: str) -> set[int]:
    """One token through DeepSeek-V3 inference/model.py Gate.forward, written out with sorts."""
    size = len(scores) // groups
    members = [scores[g * size:(g + 1) * size] for g in range(groups)]
    if group_score == "max":
        rank_by = [max(m) for m in members]
    else:
        rank_by = [sum(sorted(m)[-2:]) for m in members]
    kept = sorted(range(groups), key=lambda g: -rank_by[g])[:chosen]
    allowed = [e for g in kept for e in range(g * size, (g + 1) * size)]
    return set(sorted(allowed, key=lambda e: -scores[e])[:k])


@pytest.mark.parametrize("groups, chosen, k, group_score", [(8, 4, 8, "top2_sum"), (8, 3, 6, "max"),
                                                            (4, 1, 3, "top2_sum"), (1, 1, 8, "top2_sum")])
def test_route_is_the_gate_token_by_token(groups, chosen, k, group_score):
    rng = np.random.default_rng(5)
    scores = rng.standard_normal((300, 64))
    routed = route(scores, groups, chosen, k, group_score)
    for row, experts in zip(scores, routed):
        assert set(experts.tolist()) == gate_forward(row.tolist(), groups, chosen, k, group_score)


def test_rank_loads_count_distinct_experts_and_pairs():
    batch = np.array([[[0, 1], [1, 5]], [[7, 6], [7, 2]]])  # 2 batches of 2 tokens, top-2 of 8 experts on 2 ranks
    distinct, pairs = rank_loads(batch, 8, 2)
    assert distinct.tolist() == [[2, 1], [1, 2]] and pairs.tolist() == [[3, 1], [1, 3]]


def exact_max(subsets: dict[tuple[int, ...], float], experts: int, ep: int, tokens: int) -> tuple[float, float]:
    """E[busiest rank's distinct experts], E[busiest rank's pairs] over `tokens` independent tokens, each routed to
    a subset with the given probability, by enumeration."""
    size = experts // ep
    distinct = pairs = 0.0
    for choice in itertools.product(subsets.items(), repeat=tokens):
        weight = math.prod(p for _, p in choice)
        picked = [e for subset, _ in choice for e in subset]
        distinct += weight * max(len({e for e in picked if e // size == r}) for r in range(ep))
        pairs += weight * max(sum(1 for e in picked if e // size == r) for r in range(ep))
    return distinct, pairs


def check_against(args: tuple, ep: int, tokens: int, exact: tuple[float, float]) -> None:
    top, _, pairs = busiest_rank_samples(*args, ep, tokens)
    for sampled, value in ((top, exact[0]), (pairs, exact[1])):
        error = sampled.std() / math.sqrt(len(sampled))
        assert abs(sampled.mean() - value) <= 4 * error + 1e-12, (sampled.mean(), value, error)


def one_token_uniform_max(experts: int, k: int, ranks: int) -> float:
    """k distinct experts drawn uniformly over `ranks` equal ranks (multivariate hypergeometric): E[max count]."""
    size = experts // ranks

    def ways_all_at_most(m: int) -> int:  # [x^k] (sum_{i<=m} C(size, i) x^i)^ranks
        poly = [1]
        for _ in range(ranks):
            poly = [sum(poly[j] * math.comb(size, n - j) for j in range(len(poly)) if 0 <= n - j <= m)
                    for n in range(len(poly) + m)]
        return poly[k] if k < len(poly) else 0

    return sum(1 - ways_all_at_most(m - 1) / math.comb(experts, k) for m in range(1, k + 1))


@pytest.mark.parametrize("ep", [2, 4, 8])
def test_uniform_one_token_is_the_hypergeometric_maximum(ep):
    exact = one_token_uniform_max(256, 8, ep)
    check_against(UNIFORM, ep, 1, (exact, exact))
    assert one_token_uniform_max(256, 8, 4) == pytest.approx(3.512, abs=1e-3)


def test_uniform_two_tokens_against_enumeration():
    subsets = {s: 1 / math.comb(8, 2) for s in itertools.combinations(range(8), 2)}
    for ep in (2, 4):
        check_against((8, 2, 1, 1, "top2_sum"), ep, 2, exact_max(subsets, 8, ep, 2))


def max_scored_subsets(experts: int, k: int, groups: int, chosen: int) -> dict[tuple[int, ...], float]:
    """Group-limited routing ranked by each group's best score: the choice depends only on the scores' order, so
    for i.i.d. continuous scores every order is equally likely; the subsets' probabilities by enumerating them."""
    counts: dict[tuple[int, ...], int] = {}
    for order in itertools.permutations(range(experts)):
        subset = tuple(sorted(gate_forward(list(order), groups, chosen, k, "max")))
        counts[subset] = counts.get(subset, 0) + 1
    total = math.factorial(experts)
    return {s: c / total for s, c in counts.items()}


def test_group_limited_against_enumerating_every_order():
    """8 experts in 4 groups of 2, the best 2 groups by their best score, top-3 inside: the busiest rank at ep 2 and
    4, one and two tokens, against the exact count."""
    subsets = max_scored_subsets(8, 3, 4, 2)
    for ep, tokens in ((2, 1), (4, 1), (2, 2), (4, 2)):
        exact = exact_max(subsets, 8, ep, tokens)
        check_against((8, 3, 4, 2, "max"), ep, tokens, exact)
    uniform = exact_max({s: 1 / 56 for s in itertools.combinations(range(8), 3)}, 8, 4, 1)
    assert exact_max(subsets, 8, 4, 1)[0] > uniform[0] + 0.1  # two groups hold the three: they crowd


def test_deepseek_v3_busiest_rank_at_one_token():
    """DeepSeek-V3's 8 experts from 4 of 8 groups: the busiest of 4 ranks (2 groups each) holds 3.93 of them against
    3.51 under uniform routing; 8 ranks (one group each): 3.03 against 2.57. Standard error <= 0.2%."""
    for ep, grouped, uniform in ((4, 3.93, 3.51), (8, 3.03, 2.57)):
        top, _, _ = busiest_rank_samples(*DSV3, ep, 1)
        assert top.mean() == pytest.approx(grouped, abs=4 * top.std() / math.sqrt(len(top)) + 0.005)
        assert top.std() / math.sqrt(len(top)) / top.mean() < 0.002
        flat, _, _ = busiest_rank_samples(*UNIFORM, ep, 1)
        assert flat.mean() == pytest.approx(uniform, abs=4 * flat.std() / math.sqrt(len(flat)) + 0.005)
        assert top.mean() > flat.mean() + 10 * math.hypot(top.std() / math.sqrt(len(top)),
                                                          flat.std() / math.sqrt(len(flat)))


def test_every_expert_carries_the_mean_load():
    """i.i.d. scores give every expert the same marginal: the mean rank's distinct experts is E / ep (1 - (1 - k/E)^n)
    (the grouping changes the spread, not the mean)."""
    for tokens in (1, 3, 12):
        _, mean, _ = busiest_rank_samples(*DSV3, 4, tokens)
        expected = 64 * (1 - (1 - 8 / 256) ** tokens)
        assert mean.mean() == pytest.approx(expected, abs=4 * mean.std() / math.sqrt(len(mean)) + 1e-9)
    pool = routed_pool(*DSV3)
    per_expert = np.bincount(pool.ravel().astype(int), minlength=256) / len(pool)
    assert per_expert.mean() == pytest.approx(8 / 256)
    assert np.abs(per_expert - 8 / 256).max() < 5 * math.sqrt(8 / 256 / len(pool))


def test_invariants():
    """ep 1: no effect; every group chosen is uniform routing; the ratios fall with the tokens towards 1 (distinct
    experts saturate: 1 once every expert is touched; pairs as 1 / sqrt(n))."""
    moe = deepseek_v3_moe()
    assert (moe.num_expert_groups, moe.groups_per_token, moe.group_score) == (8, 4, "top2_sum")
    assert busiest_expert_rank(moe, 1, 7.3) == (1.0, 1.0)
    for tokens in (1, 4):
        every = busiest_at(256, 8, 8, 8, "top2_sum", 4, tokens)
        assert every == pytest.approx(busiest_at(*UNIFORM, 4, tokens), rel=0.01)
    ratios = [busiest_at(*DSV3, 4, n) for n in (1, 2, 4, 16, 64, 512, 4096)]
    for (d1, p1), (d2, p2) in zip(ratios, ratios[1:]):
        assert d2 < d1 or d2 == 1.0
        assert p2 < p1
    assert ratios[0][0] == ratios[0][1] and ratios[0][0] > 1.9
    assert ratios[-2][0] == 1.0 and 1.0 < ratios[-1][1] < 1.03
    grouped = [busiest_at(*DSV3, 4, n)[1] for n in (16, 64, 512)]
    assert all(g > busiest_at(*UNIFORM, 4, n)[1] for g, n in zip(grouped, (16, 64, 512)))


def test_fractional_tokens_interpolate():
    moe = deepseek_v3_moe()
    low, high = busiest_at(*DSV3, 4, 2), busiest_at(*DSV3, 4, 3)
    assert busiest_expert_rank(moe, 4, 2.25) == pytest.approx(
        tuple(a + 0.25 * (b - a) for a, b in zip(low, high)), rel=1e-12)
    assert busiest_expert_rank(moe, 4, 2.0) == low
