"""Which experts the collector's rank 0 holds in TensorRT-LLM's min-latency moe_perf rows (kernels/moe_rows.py), each
expected value counted by hand from helper.balanced_logits and DeepSeek's grouped top-k with ties to the smaller
index, and the rows read at the busiest rank's distinct experts when the engine flag selects the TRTLLM backend."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.kernels import measured, moe_rows
from simulator.kernels.shapes import MoE


def test_balanced_logits_experts_as_the_collector_writes_them():
    """Below 32 tokens token t's experts are floor(32 t / n) + 32 i; from 32 on (t + 32 i) mod 256."""
    assert moe_rows.balanced_experts(1, 256, 8).tolist() == [[32 * i for i in range(8)]]
    assert moe_rows.balanced_experts(3, 256, 8)[1].tolist() == [10 + 32 * i for i in range(8)]  # 32 / 3 = 10.67
    assert moe_rows.balanced_experts(3, 256, 8)[2].tolist() == [21 + 32 * i for i in range(8)]  # 64 / 3 = 21.33
    assert moe_rows.balanced_experts(40, 256, 8)[33].tolist() == [33, 65, 97, 129, 161, 193, 225, 1]  # 257 mod 256


def test_grouped_routing_keeps_groups_0_to_3_and_the_lowest_index_fills():
    """Every group holds one high expert, so all tie: groups 0-3, their 4 highs and the 4 lowest other indices."""
    one = moe_rows.grouped_route(moe_rows.balanced_experts(1, 256, 8), 256, 8)
    assert sorted(one[0].tolist()) == [0, 1, 2, 3, 4, 32, 64, 96]
    two = moe_rows.grouped_route(moe_rows.balanced_experts(2, 256, 8), 256, 8)
    assert sorted(two[1].tolist()) == [0, 1, 2, 3, 16, 48, 80, 112]


@pytest.mark.parametrize("ep, held", [(1, 8), (2, 8), (4, 6), (8, 5), (32, 5), (64, 4), (128, 2), (256, 1)])
def test_rank0_holds_at_one_token(ep, held):
    """Rank 0 holds [0, 256 / ep): of {0-4, 32, 64, 96} at EP4 0-4 and 32, at EP64 0-3, at EP128 0-1."""
    assert moe_rows.rank0_load(1, 256, 8, ep, True)[0] == held


def test_rank0_at_two_tokens_and_the_read_count():
    """Two tokens at EP2: highs 0, 16, 32, ..., 112 and fills 1-4 (0 is token 0's high): 12. The busiest rank's
    distinct experts map back linearly between counts; fewer than one token's 8 read the one-token row; at EP1 no row
    holds more than groups 0-3's 128 experts."""
    assert moe_rows.rank0_load(2, 256, 8, 2, True)[0] == 12
    assert moe_rows.rank0_load(3, 256, 8, 2, True)[0] == 16
    assert moe_rows.matching_tokens(5.4, 256, 8, 2, True) == 1.0
    assert moe_rows.matching_tokens(10, 256, 8, 2, True) == pytest.approx(1.5)
    assert moe_rows.matching_tokens(14, 256, 8, 2, True) == pytest.approx(2.5)
    assert moe_rows.matching_tokens(128, 256, 8, 2, True) is not None
    assert moe_rows.matching_tokens(129, 256, 8, 1, True) is None


def test_from_e_over_k_rows_rank_0_holds_all_its_experts_and_the_mean_ranks_tokens():
    """From 32 tokens token t's experts are (t + 32 i) mod 256, the 8 of residue t mod 32: rank 0 of EP4 ([0, 64))
    holds 2 of each token's (residues r and r + 32), all 64 experts, 2 tokens each at 64 tokens and 2 or 1 at 48
    (residues 0-15 twice): 96 = 48 x 8 / 4 routed tokens. Under EP16 ([0, 16), residues 0-15) rank 0 takes 32 at 48
    tokens, not the mean's 24; below 32 tokens its share is the mean's (at 6 tokens the 3 whose 32 t / 6 is below 16);
    rank0_load counts the same (distinct experts, pairs)."""
    def rank0(tokens, ep):
        held = {}
        for t in range(tokens):
            for i in range(8):
                e = (t + 32 * i) % 256 if tokens >= 32 else int((t * 32 / tokens + 32 * i) % 256)
                if e < 256 // ep:
                    held[e] = held.get(e, 0) + 1
        return held
    assert rank0(64, 4) == {e: 2 for e in range(64)}
    assert sorted(rank0(48, 4).values()) == [1] * 32 + [2] * 32 and sum(rank0(48, 4).values()) == 96
    assert len(rank0(48, 16)) == 16 and sum(rank0(48, 16).values()) == 32
    assert rank0(6, 16) == {0: 1, 5: 1, 10: 1}  # 32 t / 6 = 0, 5.3, 10.7 below 16: one token each, 6 x 8 / 16 = 3
    assert moe_rows.rank0_load(64, 256, 8, 4, False) == (64, 128)
    assert moe_rows.rank0_load(48, 256, 8, 4, False) == (64, 96)
    assert moe_rows.rank0_load(48, 256, 8, 16, False) == (16, 32)
    assert moe_rows.rank0_load(6, 256, 8, 16, False) == (3, 3)
    assert moe_rows.rank0_load(6, 256, 8, 1, False) == (48, 48)  # below 32 tokens: 8 distinct experts a token


def _rows_costing(weight_us: float, pair_us: float, distinct, pairs):
    """Rows that cost weight_us per distinct expert rank 0 holds and pair_us per pair (linear between counts)."""
    return lambda n: weight_us * distinct(n) + pair_us * pairs(n)


@pytest.mark.parametrize("ep, per_token", [(1, 8), (4, 2)])
def test_a_pass_reads_its_distinct_experts_row_and_its_further_pairs_at_the_rows_cost_per_pair(ep, per_token):
    """Plain top-k, DeepSeek's 256 experts, top-8: below 32 tokens rank 0 holds 8 n / ep experts, one token each,
    from 32 on all 256 / ep, 8 n / ep pairs. Rows costing 3 us an expert and 0.5 a pair read a pass holding D experts
    and P pairs at exactly 3 D + 0.5 P, where reading the row at P / 8 tokens would cost 3.5 P."""
    rows = _rows_costing(3.0, 0.5, lambda n: per_token * min(n, 32), lambda n: per_token * n)
    counts = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128)
    for distinct, pairs in ((100 / 8 * per_token, 300 / 8 * per_token), (20, 20), (60, 200)):
        if distinct > 32 * per_token:
            continue
        got = moe_rows.read_us(rows, counts, distinct, pairs, 256, 8, ep, False)
        assert got == pytest.approx(3.0 * distinct + 0.5 * pairs)


def test_min_latency_rows_read_at_their_own_pairs():
    """EP2 min-latency rows: rank 0 holds 8 experts / 8 pairs at 1 token, 12 / 16 at 2 (hand counts above) and, from
    32 tokens on, groups 0-3's 128 experts and every pair, 8 n. A pass of 10 experts and 20 pairs reads the 1.5-token
    row (10 experts, 12 pairs) and 8 pairs more at the rows' cost per pair from 32 tokens on: exactly 3 x 10 + 0.5 x 20;
    one of 5.4 experts the one-token row (an upper bound in experts) with its pairs' difference."""
    hand = {1.0: (8, 8), 1.5: (10, 12)}
    rows = _rows_costing(3.0, 0.5, lambda n: hand[n][0] if n in hand else 128,
                         lambda n: hand[n][1] if n in hand else 8 * n)
    counts = (1, 2, 4, 8, 16, 32, 48, 64)
    assert moe_rows.read_us(rows, counts, 10, 20, 256, 8, 2, True) == pytest.approx(3.0 * 10 + 0.5 * 20)
    assert moe_rows.read_us(rows, counts, 5.4, 6, 256, 8, 2, True) == pytest.approx(3.0 * 8 + 0.5 * 6)
    assert moe_rows.read_us(rows, counts, 129, 300, 256, 8, 1, True) is None


class _Rows:
    """A stand-in for a moe_perf slice: 3 us an expert and 0.5 a pair under balanced_logits, TP, 256 experts top-8."""
    axes = [np.array([1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 256], dtype=float)]

    def __call__(self, point):
        n = point[0]
        return 1e-3 * (3.0 * 8 * min(n, 32) + 0.5 * 8 * n)  # ms, as the tables


def test_measured_moe_reads_the_uniform_passs_distinct_experts_and_pairs(monkeypatch):
    """n uniformly routed tokens touch 256 (1 - (1 - 8 / 256)^n) experts with 8 n pairs (8 x 24 where locality makes
    24 tokens touch as many as 16 independent ones): the measured read costs exactly those, not the 16-token row's
    128 experts."""
    monkeypatch.setattr(measured, "_grid", lambda *args, **kwargs: _Rows())
    kernels = measured.MeasuredKernels("h200_sxm")
    distinct = 256 * (1 - (1 - 8 / 256) ** 16)
    assert kernels.time_us(MoE(16, 7168, 2048, 8, 256, 8, "fp8")) == pytest.approx(3.0 * distinct + 0.5 * 128)
    assert kernels.time_us(MoE(16, 7168, 2048, 8, 256, 8, "fp8", routed_tokens=24)) == pytest.approx(
        3.0 * distinct + 0.5 * 192)
    assert kernels.time_us(MoE(16, 7168, 2048, 8, 256, 8, "fp8", 1 / 3)) == pytest.approx(
        (3.0 * distinct + 0.5 * 128) / 3)


needs_tables = pytest.mark.skipif(measured.data_root() is None, reason="aiconfigurator-core is not installed")


def _rows(lane: str, ep: int, tp: int):
    frame = measured.read_table("b200_sxm", "moe", "moe_perf", "trtllm", "1.3.0rc20")
    rows = frame[(frame.moe_dtype == "nvfp4") & (frame.distribution == "balanced") & (frame.moe_ep_size == ep)
                 & (frame.moe_tp_size == tp) & (frame.hidden_size == 7168) & (frame.inter_size == 2048)
                 & (frame.topk == 8) & (frame.num_experts == 256) & (frame.kernel_source == lane)]
    return rows.groupby("num_tokens").latency.mean() * 1e3


@needs_tables
def test_the_rows_read_as_the_rule_says():
    """Where the rule puts every expert of EP1's rank on EP2's rank 0 (1-8 tokens) the min-latency rows agree within
    4%; the CUTLASS rows, whose rank 0 holds half of EP1's, do not (EP2 0.55-0.65 of EP1)."""
    one, two = _rows("moe_torch_flow_min_latency", 1, 1), _rows("moe_torch_flow_min_latency", 2, 1)
    for n in (1, 2, 4, 8):
        assert moe_rows.rank0_load(n, 256, 8, 2, True)[0] == moe_rows.rank0_load(n, 256, 8, 1, True)[0]
        assert two[n] == pytest.approx(one[n], rel=0.04)
    cut1, cut2 = _rows("moe_torch_flow_cutlass", 1, 1), _rows("moe_torch_flow_cutlass", 2, 1)
    assert all(0.5 < cut2[n] / cut1[n] < 0.7 for n in (1, 2, 4, 8))


@needs_tables
def test_the_trtllm_backend_reads_the_min_latency_rows_at_the_busiest_ranks_experts():
    """The flag selects the lane: CUTLASS (the default) the CUTLASS row at tokens x busiest, TRTLLM the min-latency
    row at the count whose rank 0 holds tokens x 8 / ep x busiest distinct experts (EP2: 1 token's 8 -> the one-token
    row, 10 -> 1.5 tokens, log-interpolated between the 1- and 2-token rows), passes with those rows' own pairs; bf16
    experts (no min-latency rows) fall back to the default lanes."""
    import math
    cutlass = measured.MeasuredKernels("b200_sxm", "trtllm", "1.3.0rc20", "CUTLASS")
    trtllm = measured.MeasuredKernels("b200_sxm", "trtllm", "1.3.0rc20", "TRTLLM")
    fast, cut = _rows("moe_torch_flow_min_latency", 2, 4), _rows("moe_torch_flow_cutlass", 2, 4)
    one = MoE(1, 7168, 2048, 8, 256, 4, "fp4", ep=2, busiest=1.35, busiest_routed=2)  # 5.4 experts, 8 pairs
    assert trtllm.time_us(one) == pytest.approx(fast[1])
    assert cutlass.time_us(MoE(1, 7168, 2048, 8, 256, 4, "fp4", ep=2)) == pytest.approx(min(cut[cut.index >= 1]))
    w = math.log(1.5) / math.log(2)
    assert trtllm.time_us(MoE(1, 7168, 2048, 8, 256, 4, "fp4", ep=2, busiest=2.5, busiest_routed=3)) == pytest.approx(
        fast[1] + w * (fast[2] - fast[1]))  # 10 experts, 12 pairs: the 1.5-token row's own
    assert trtllm.time_us(MoE(1, 7168, 2048, 8, 256, 4, "fp4", 1 / 3, ep=2, busiest=1.35, busiest_routed=2)) == \
        pytest.approx(fast[1] / 3)
    bf16 = MoE(1, 6144, 2048, 8, 256, 8, "bf16")
    assert trtllm.time_us(bf16) == cutlass.time_us(bf16)
    assert "MoE backend TRTLLM" in trtllm.label and "MoE backend" not in cutlass.label
