"""Which experts, and how many token-expert pairs, the measuring rank computes in TensorRT-LLM's and SGLang's
moe_perf rows, counted from the collector's code, and a row read at a pass's load from them.

The collectors (aiconfigurator collector/trtllm/collect_moe.py run_moe_torch, collector/sglang) time rank 0 of a
Mapping with that moe_ep_size / moe_tp_size, which holds experts [0, E / ep), over num_tokens tokens whose router
logits are helper.balanced_logits(n, E, k): token t's k experts are floor(t x s / n) + i x s (s = ceil(E / k), i < k)
below s tokens and (t + i x s) mod E from s on, its logits the softmax of that one-hot map (k equal high values, the
rest equal low ones). Then, per lane:
- CUTLASS / Triton rows (every lane but min-latency: plain top-k): each token gets those k experts, so below s tokens
  a row holds n x k distinct experts, one token each (n x k / ep on rank 0 where ep divides k), and from s on all
  of rank 0's E / ep experts, more tokens each. n uniformly routed tokens touch fewer, E (1 - (1 - k / E)^n), with
  the same n x k pairs: a row has the pass's distinct experts at fewer tokens than the pass's.
- min-latency rows (moe_torch_flow_min_latency: min_latency_mode, the TRTLLM backend's trtllm-gen kernel, routed by
  DeepseekV3Gate(n_group 8, topk_group 4) inside the kernel, RoutingDeepSeek.cu routingMainKernel): each group of
  E / 8 contiguous experts holds exactly one of a token's high experts, so every group scores alike (its best two:
  high + low) and the kernel's top-k reduction decides ties by index, the smaller first (RoutingKernelTopK.cuh
  TopKRedType.makeCmpVal packs 65535 - index below the value): groups 0-3 are kept and inside them the token's 4 high
  experts and the 4 lowest-index others (shared by every token). Rank 0 of EP2 then holds every expert of every token.

`read_us` reads a row at a pass's load (distinct experts D, pairs P on the busiest rank) as a grouped GEMM over
per-expert tiles costs it: weights per distinct expert, and work per pair. The row at n' whose rank 0 holds D
distinct experts (linear between counts where they grow) has them, with its own pairs p(n'); the P - p(n') others cost
what a pair costs where the rows' distinct experts no longer change (from s tokens on): the secant of the rows from s
to the count whose pairs per expert are the pass's P / D (at least the next measured row), per pair counted here.

Assumed: the gate's e_score_correction_bias, torch.empty in DeepseekV3Gate.__init__ and never loaded by the collector,
is zero; the rows read so (B200, DeepSeek's NVFP4 experts, TP1: EP2's 49.8 / 62.4 / 91.7 / 142.7 us at 1 / 2 / 4 / 8
tokens against EP1's 48.3 / 61.2 / 89.7 / 142.3, as both ranks would hold the same experts; tests/test_moe_rows.py).
A pair's cost is linear in the pairs between those rows (the tiles' padding is the rows' own, at the mean load).
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from ..cache import stored

N_GROUP, TOPK_GROUP = 8, 4  # run_moe_torch's min-latency routing: "all use deepseek setting for now"


def balanced_experts(tokens: int, experts: int, k: int) -> np.ndarray:
    """(tokens, k): each token's high-logit experts under helper.balanced_logits (float32 arithmetic, truncated)."""
    stride = math.ceil(experts / k)
    t = np.arange(tokens, dtype=np.int64)[:, None]
    i = np.arange(k, dtype=np.int64)[None, :]
    if tokens >= stride:
        return (t + i * stride) % experts
    picked = (t * stride).astype(np.float32) / np.float32(tokens) + (i * stride).astype(np.float32)
    return np.fmod(picked, np.float32(experts)).astype(np.int64)


def grouped_route(high: np.ndarray, experts: int, k: int, groups: int = N_GROUP, chosen: int = TOPK_GROUP
                  ) -> np.ndarray:
    """(tokens, k): DeepSeek's grouped top-k over scores that are high at `high`'s experts and low elsewhere (zero
    bias), ties to the smaller group / expert index as the trtllm-gen routing kernel's reduction breaks them."""
    tokens = high.shape[0]
    score = np.zeros((tokens, experts))
    np.put_along_axis(score, high, 1.0, axis=1)
    by_group = score.reshape(tokens, groups, experts // groups)
    group_score = np.sort(by_group, axis=-1)[..., -2:].sum(axis=-1)
    kept_groups = np.argsort(-group_score, axis=1, kind="stable")[:, :chosen]
    kept = np.zeros((tokens, groups), dtype=bool)
    np.put_along_axis(kept, kept_groups, True, axis=1)
    masked = np.where(np.repeat(kept, experts // groups, axis=1), score, -1.0)
    return np.argsort(-masked, axis=1, kind="stable")[:, :k]


@stored
def rank0_load(tokens: int, experts: int, k: int, ep: int, grouped: bool) -> tuple[int, int]:
    """(distinct experts, token-expert pairs) rank 0 ([0, E / ep)) computes in a row of `tokens` tokens, routed by plain
    top-k or (grouped) the min-latency kernel's grouped top-k."""
    routed = balanced_experts(tokens, experts, k)
    if grouped:
        routed = grouped_route(routed, experts, k)
    mine = routed[routed < experts // ep]
    return int(np.unique(mine).size), int(mine.size)


def _pairs_at(n: float, experts: int, k: int, ep: int, grouped: bool) -> float:
    """Rank 0's pairs at a fractional count: linear between the integer counts."""
    low = max(1, math.floor(n))
    below = rank0_load(low, experts, k, ep, grouped)[1]
    if n <= low:
        return float(below)
    return below + (n - low) * (rank0_load(low + 1, experts, k, ep, grouped)[1] - below)


def matching_tokens(distinct: float, experts: int, k: int, ep: int, grouped: bool) -> float | None:
    """The row count (fractional: linear between the counts where rank 0's experts grow) at which rank 0 holds
    `distinct` distinct experts; 1 where one token's experts on rank 0 already exceed them (the one-token row: an
    upper bound); None where no row's rank 0 holds as many (from s = ceil(E / k) tokens on the experts repeat)."""
    below, held_below = 1, rank0_load(1, experts, k, ep, grouped)[0]
    if distinct <= held_below:
        return 1.0
    for n in range(2, math.ceil(experts / k) + 1):
        held = rank0_load(n, experts, k, ep, grouped)[0]
        if held >= distinct - 1e-9:
            return below + (n - below) * (distinct - held_below) / (held - held_below)
        if held > held_below:
            below, held_below = n, held
    return None


def read_us(row_us: Callable[[float], float | None], measured: Sequence[float], distinct: float, pairs: float,
            experts: int, k: int, ep: int, grouped: bool) -> float | None:
    """A pass's time from rows row_us(n) measured at counts `measured`: the row whose rank 0 holds the pass's
    `distinct` experts, plus its pairs beyond that row's at the rows' cost per pair from s tokens on (module doc).
    None where no row holds as many distinct experts or the rows do not reach the counts read."""
    s = math.ceil(experts / k)
    if not grouped:  # rank 0 holds at most its E / ep experts, and every one of them from s tokens on
        distinct = min(distinct, rank0_load(s, experts, k, ep, False)[0])
    n = matching_tokens(distinct, experts, k, ep, grouped)
    base = None if n is None else row_us(n)
    if base is None:
        return None
    extra = pairs - _pairs_at(n, experts, k, ep, grouped)
    if abs(extra) <= 1e-9:
        return base
    held, held_pairs = rank0_load(s, experts, k, ep, grouped)
    after = [m for m in measured if m > s]
    if not after:
        return None
    top = max(s * (pairs / distinct) / (held_pairs / held), min(after))
    t_s, t_top = row_us(float(s)), row_us(top)
    if t_s is None or t_top is None:
        return None
    return base + extra * (t_top - t_s) / (_pairs_at(top, experts, k, ep, grouped) - held_pairs)
