"""Which experts the measuring rank holds in TensorRT-LLM's moe_perf rows, counted from the collector's code, so a
row can be read at the busiest rank's load.

The collector (aiconfigurator collector/trtllm/collect_moe.py run_moe_torch) times rank 0 of a Mapping with that
moe_ep_size / moe_tp_size, which holds experts [0, E / ep), over num_tokens tokens whose router logits are
helper.balanced_logits(n, E, k): token t's k experts are floor(t x s / n) + i x s (s = ceil(E / k), i < k) below s
tokens and (t + i x s) mod E from s on, its logits the softmax of that one-hot map (k equal high values, the rest
equal low ones). Then, per lane:
- CUTLASS rows (and every lane but min-latency: RenormalizeMoeRoutingMethod, plain top-k): each token gets those k
  experts, so below s tokens rank 0 holds n x k / ep distinct experts, one token each, and from s on all its E / ep
  experts, n x k / E tokens each where ep divides k: either way the mean rank's n x k / ep routed tokens
  (`plain_topk_tokens` gives the count whose rank 0 holds the busiest rank's load).
- min-latency rows (moe_torch_flow_min_latency: min_latency_mode, the TRTLLM backend's trtllm-gen kernel, routed by
  DeepseekV3Gate(n_group 8, topk_group 4) inside the kernel, RoutingDeepSeek.cu routingMainKernel): each group of
  E / 8 contiguous experts holds exactly one of a token's high experts, so every group scores alike (its best two:
  high + low) and the kernel's top-k reduction decides ties by index, the smaller first (RoutingKernelTopK.cuh
  TopKRedType.makeCmpVal packs 65535 - index below the value): groups 0-3 are kept and inside them the token's 4 high
  experts and the 4 lowest-index others. Rank 0 of EP2 then holds every expert of every token (8 at one token, where
  the mean rank holds 4): `rank0_experts` counts it, and `min_latency_tokens` gives the row count whose rank 0 holds
  as many distinct experts as the busiest rank does.

Assumed: the gate's e_score_correction_bias, torch.empty in DeepseekV3Gate.__init__ and never loaded by the collector,
is zero; the rows read so (B200, DeepSeek's NVFP4 experts, TP1: EP2's 49.8 / 62.4 / 91.7 / 142.7 us at 1 / 2 / 4 / 8
tokens against EP1's 48.3 / 61.2 / 89.7 / 142.3, as both ranks would hold the same experts; tests/test_moe_rows.py).
"""
from __future__ import annotations

import math
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
def rank0_experts(tokens: int, experts: int, k: int, ep: int) -> int:
    """Distinct experts rank 0 ([0, E / ep)) computes in a min-latency row of `tokens` tokens."""
    routed = grouped_route(balanced_experts(tokens, experts, k), experts, k)
    return int(np.unique(routed[routed < experts // ep]).size)


def min_latency_tokens(distinct: float, experts: int, k: int, ep: int) -> float | None:
    """The row count (fractional: linear between the counts where rank 0's experts grow) at which rank 0 holds
    `distinct` distinct experts; 1 where one token's experts on rank 0 already exceed them (the one-token row: an
    upper bound); None where no row's rank 0 holds as many (from ceil(E / k) tokens on the tokens' experts repeat)."""
    below, held_below = 1, rank0_experts(1, experts, k, ep)
    if distinct <= held_below:
        return 1.0
    for n in range(2, math.ceil(experts / k) + 1):
        held = rank0_experts(n, experts, k, ep)
        if held >= distinct:
            return below + (n - below) * (distinct - held_below) / (held - held_below)
        if held > held_below:
            below, held_below = n, held
    return None


def plain_topk_tokens(tokens: float, busiest: float, busiest_routed: float, experts: int, k: int,
                      ep: int) -> float | None:
    """The plain top-k row count whose rank 0 holds the busiest rank's load, the row at `tokens` holding the mean
    rank's. Below s = ceil(E / k) rows rank 0 holds n k / ep distinct experts, one token each: tokens x busiest (the
    busiest rank's distinct experts). From s on it holds all E / ep of its experts, and, where ep divides k and E =
    k s (rank 0 holds k / ep of each residue's experts), n k / ep routed tokens: the busiest rank's excess is then
    in its tokens per expert, tokens x busiest_routed, at least s (its distinct experts, at most E / ep, read as all).
    None from s on under another EP split: rank 0's routed tokens there are not the mean rank's (not read)."""
    stride = math.ceil(experts / k)
    n = max(1.0, tokens * busiest)
    if n <= stride:
        return n
    if ep > 1 and (k % ep or experts != k * stride):
        return None
    return max(float(stride), tokens * busiest_routed)
