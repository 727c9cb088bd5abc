"""The busiest expert-parallel rank's load under a model's routing, by a seeded Monte Carlo over routed tokens.

Under expert parallelism rank r holds the contiguous experts [r E / ep, (r + 1) E / ep) (SGLang's and TensorRT-LLM's
EP placement), and the experts' kernel waits for the rank the batch loads most: its distinct experts (weights read)
and its token-expert pairs (routed tokens computed). Both are returned over the mean rank's, each maximised over the
ranks on its own (at one token they are the same count; past it the two maxima may sit on different ranks, so
together they bound the busiest rank's work from above).

What is modelled: the router of DeepSeek-V3 (inference/model.py Gate.forward, deepseek-ai/DeepSeek-V3 9b4e978;
SGLang's biased_grouped_topk, vLLM's grouped_topk and TensorRT-LLM's noaux_tc kernel compute the same): the
experts fall in `groups` groups of contiguous ids, each group is ranked by its two best scores' sum (DeepSeek-V2's
group_limited_greedy: its best score), the `chosen` best groups are kept and the token's top-k experts are taken
inside them. With one group (or every group chosen) it is plain top-k routing.

Assumption: a token's expert scores are i.i.d. (sigmoid of standard-normal logits) and tokens are independent. Every
expert then carries the same mean load (E[D_r] = E / ep (1 - (1 - k/E)^n), E[R_r] = n k / ep) and what remains is
the structure of one token's choice: its k experts lie in at most `chosen` groups, so under EP with whole groups per
rank they crowd onto fewer ranks than k experts drawn anywhere (DeepSeek-V3, EP4, one token: 3.94 of 8 on the busiest
rank against 3.51). A trained router is not i.i.d.: DeepSeek's auxiliary-loss-free bias (the gate's
e_score_correction_bias) evens the experts' loads over many tokens, which a uniform marginal already assumes, but a
single token still picks only `chosen` groups, so the concentration within a token is structural and stays; what a
real router adds (experts that fire together, popular groups in a domain) is not modelled. The i.i.d. score law moves
the figure little: the busiest EP4 rank's 3.94 is 3.92-3.95 for uniform, normal, exponential and sigmoid(N(0, 1 to
3)) scores, EP8's 3.05 is 2.99-3.07 (docs/model.md "Expert parallelism").

Error: the pool of POOL_TOKENS routed tokens and the resampled batches give a standard error of about 0.1% of the
busiest rank's load at one token and less at more tokens (tests/test_routing.py states it from the samples); a
fractional count of independent tokens (routing locality) is interpolated linearly between its integer neighbours.
"""
from __future__ import annotations

import math

import numpy as np

from ..cache import stored

POOL_TOKENS = 1 << 15  # routed tokens drawn once per router; batches of n tokens are resampled from them
SAMPLE_TOKENS = 1 << 17  # token draws per estimate of n > 1 tokens: batches = SAMPLE_TOKENS // n, within the bounds
MIN_BATCHES, MAX_BATCHES = 128, 8192
SEED = 22  # the Monte Carlo's own seed (a numerical integration, not one of a run's random streams)


def route(scores: np.ndarray, groups: int, chosen: int, k: int, group_score: str = "top2_sum") -> np.ndarray:
    """The experts each row of `scores` (tokens x experts) routes to, (tokens, k): DeepSeek-V3's Gate.forward (the
    `chosen` best of `groups` groups, ranked by their two best scores' sum or their best, then the top k inside)."""
    tokens, experts = scores.shape
    if groups > 1 and chosen < groups:
        by_group = scores.reshape(tokens, groups, experts // groups)
        if group_score == "max":
            rank_by = by_group.max(axis=-1)
        else:
            rank_by = np.partition(by_group, -2, axis=-1)[..., -2:].sum(axis=-1)
        best = np.argpartition(-rank_by, chosen - 1, axis=-1)[:, :chosen]
        kept = np.zeros((tokens, groups), dtype=bool)
        np.put_along_axis(kept, best, True, axis=1)
        scores = np.where(np.repeat(kept, experts // groups, axis=1), scores, -np.inf)
    return np.argpartition(-scores, k - 1, axis=-1)[:, :k]


@stored
def routed_pool(experts: int, k: int, groups: int, chosen: int, group_score: str) -> np.ndarray:
    """POOL_TOKENS tokens' experts, (POOL_TOKENS, k) int16, routed from i.i.d. sigmoid(N(0, 1)) scores."""
    rng = np.random.default_rng([SEED, experts, k, groups, chosen, group_score == "max"])
    pool = np.empty((POOL_TOKENS, k), dtype=np.int16)
    step = 4096  # tokens routed at a time (bounds the score array at step x experts)
    for start in range(0, POOL_TOKENS, step):
        scores = 1.0 / (1.0 + np.exp(-rng.standard_normal((step, experts))))
        pool[start:start + step] = route(scores, groups, chosen, k, group_score)
    return pool


def rank_loads(chosen_experts: np.ndarray, experts: int, ep: int) -> tuple[np.ndarray, np.ndarray]:
    """Per batch (rows of `chosen_experts`, batches x n x k expert ids): each rank's distinct experts and token-expert
    pairs, two (batches, ep) arrays."""
    batches = chosen_experts.shape[0]
    flat = chosen_experts.reshape(batches, -1).astype(np.intp)
    rows = np.arange(batches)[:, None]
    touched = np.zeros((batches, experts), dtype=bool)
    touched[rows, flat] = True
    distinct = touched.reshape(batches, ep, experts // ep).sum(axis=-1)
    pairs = np.bincount((rows * ep + flat // (experts // ep)).ravel(), minlength=batches * ep).reshape(batches, ep)
    return distinct, pairs


def busiest_rank_samples(experts: int, k: int, groups: int, chosen: int, group_score: str, ep: int,
                         tokens: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per sampled batch of `tokens` independent tokens: the busiest rank's distinct experts, the mean rank's, and the
    busiest rank's pairs (one token: every pooled token once; more: batches resampled from the pool)."""
    pool = routed_pool(experts, k, groups, chosen, group_score)
    if tokens == 1:
        batch = pool[:, None, :]
    else:
        batches = min(MAX_BATCHES, max(MIN_BATCHES, SAMPLE_TOKENS // tokens))
        rng = np.random.default_rng([SEED, experts, k, groups, chosen, group_score == "max", ep, tokens])
        batch = pool[rng.integers(POOL_TOKENS, size=(batches, tokens))]
    distinct, pairs = rank_loads(batch, experts, ep)
    return distinct.max(axis=1).astype(float), distinct.mean(axis=1), pairs.max(axis=1).astype(float)


@stored
def busiest_at(experts: int, k: int, groups: int, chosen: int, group_score: str, ep: int,
               tokens: int) -> tuple[float, float]:
    """(busiest rank's distinct experts, its token-expert pairs), each over the mean rank's (>= 1), at an integer count
    of independent tokens."""
    top, mean, pairs = busiest_rank_samples(experts, k, groups, chosen, group_score, ep, tokens)
    return float(top.mean() / mean.mean()), float(pairs.mean() / (tokens * k / ep))


def busiest_expert_rank(moe, ep: int, independent: float) -> tuple[float, float]:
    """The busiest of ep expert ranks' distinct experts and routed tokens over the mean rank's, for a batch that
    touches as many distinct experts as `independent` independently routed tokens (model.cards.independent_tokens);
    (1, 1) without expert parallelism. Between integer token counts the ratios are interpolated linearly."""
    if ep <= 1:
        return 1.0, 1.0
    args = (moe.num_experts, moe.experts_per_token, moe.num_expert_groups, moe.groups_per_token, moe.group_score, ep)
    low = max(1, math.floor(independent))
    below = busiest_at(*args, low)
    share = independent - low
    if share <= 1e-9:
        return below
    above = busiest_at(*args, low + 1)
    return tuple(a + share * (b - a) for a, b in zip(below, above))
