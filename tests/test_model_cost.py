"""Unit tests of the cost model (simulator/model/cost.py, simulator/model/cards.py) against hand derivations.

Every expected figure is worked out here from the model cards' published numbers (config.json, docs/sources.md),
written out as constants, never read back from the code under test: bytes per weight with group scales, weights and
KV cache per rank, distinct MoE experts, collective sizes, FLOPs and bytes of a whole pass.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import yaml

from conftest import SCENARIOS
from simulator.config.model_card import ModelCard
from simulator.model.cards import (bytes_per_param, expected_distinct_experts, kv_bytes_per_token_layer,
                                   weight_bytes_per_gpu)
from simulator.model.cost import PassShape
from simulator.model.layout import pass_layout


def card(name: str) -> ModelCard:
    with open(os.path.join(SCENARIOS, "models", name)) as handle:
        return ModelCard.model_validate(yaml.safe_load(handle))


KIMI = card("kimi_k2_5.yaml")
LLAMA8B = card("llama_3_1_8b.yaml")

# Kimi-K2.5 (moonshotai/Kimi-K2-Instruct config.json; docs/sources.md#kimi-k25)
LAYERS, DENSE_LAYERS, HIDDEN, VOCAB = 61, 1, 7168, 163840
HEADS, Q_LORA, KV_LORA, NOPE, ROPE, V_HEAD = 64, 1536, 512, 128, 64, 128
DENSE_INTER, EXPERTS, ACTIVE, SHARED, MOE_INTER = 18432, 384, 8, 1, 2048
INT4_GROUP32 = 0.5 + 2 / 32  # half a byte per weight plus a bf16 scale per 32 weights
BF16 = 2


def test_kimi_card_holds_the_published_shape():
    a, m = KIMI.attention, KIMI.moe
    assert (KIMI.num_layers, KIMI.num_dense_layers, KIMI.hidden_size, KIMI.vocab_size) == (LAYERS, DENSE_LAYERS, HIDDEN, VOCAB)
    assert (a.kind, a.num_heads, a.q_lora_rank, a.kv_lora_rank) == ("mla", HEADS, Q_LORA, KV_LORA)
    assert (a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim) == (NOPE, ROPE, V_HEAD)
    assert (KIMI.dense_intermediate_size, m.num_experts, m.experts_per_token, m.num_shared_experts,
            m.intermediate_size) == (DENSE_INTER, EXPERTS, ACTIVE, SHARED, MOE_INTER)
    assert (KIMI.weights.experts, KIMI.weights.quant_group_size, KIMI.weights.attention) == ("int4", 32, "bf16")


# --- bytes per weight ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,group,expected", [
    ("int4", 32, 0.5625),  # Kimi's experts: 16 B of values + a 2 B scale per 32 weights = 18 B / 32
    ("int4", 128, 0.515625),  # 64 + 2 B per 128
    ("int4", 0, 0.5),  # no group scales
    ("fp4", 16, 0.625),  # 8 + 2 B per 16
    ("fp8", 32, 1.0),  # 8-bit formats carry no group scales here
    ("bf16", 32, 2.0),
    ("fp32", 0, 4.0),
])
def test_bytes_per_weight_with_group_scales(dtype, group, expected):
    shaped = KIMI.model_copy(update={"weights": KIMI.weights.model_copy(update={"quant_group_size": group})})
    assert bytes_per_param(shaped, dtype) == expected


@pytest.mark.parametrize("dtype,group,scale,zero,expected", [
    ("int4", 32, "bf16", True, 0.625),  # gpt-fast / tinygemm: a bf16 scale and a bf16 zero per 32 (quantize.py): 5 bits
    ("int4", 128, "bf16", True, 0.53125),  # 64 + 4 B per 128
    ("fp4", 16, "fp8", False, 0.5625),  # NVFP4: one E4M3 scale per 16 values, 8 + 1 B per 16
    ("int8", 32, "bf16", True, 1.0),  # 8-bit formats carry no group metadata here
])
def test_bytes_per_weight_with_scale_dtype_and_zero_points(dtype, group, scale, zero, expected):
    weights = KIMI.weights.model_copy(update={"quant_group_size": group, "quant_scale_dtype": scale,
                                              "quant_zero_point": zero})
    assert bytes_per_param(KIMI.model_copy(update={"weights": weights}), dtype) == expected


# --- weights a rank reads for one token -------------------------------------------------------------------------


def kimi_weight_bytes_read_per_token(tp: int) -> dict[str, float]:
    """Hand derivation for one decoded token on one rank (every shard of TP, only the 8 experts the token routes to)."""
    replicated = HIDDEN * (Q_LORA + KV_LORA + ROPE)  # q_a and kv_a (with the rope key) projections: every rank
    sharded = (Q_LORA * HEADS * (NOPE + ROPE)  # q_b
               + KV_LORA * HEADS * (NOPE + V_HEAD)  # kv_b, absorbed as w_kc and w_vc
               + HEADS * V_HEAD * HIDDEN) / tp  # o_proj
    return {
        "attention": LAYERS * (replicated + sharded) * BF16,
        "dense_mlp": DENSE_LAYERS * 3 * HIDDEN * DENSE_INTER / tp * BF16,
        "routed_experts": (LAYERS - DENSE_LAYERS) * ACTIVE * 3 * HIDDEN * MOE_INTER / tp * INT4_GROUP32,
        "shared_expert": (LAYERS - DENSE_LAYERS) * SHARED * 3 * HIDDEN * MOE_INTER / tp * BF16,
        "router": (LAYERS - DENSE_LAYERS) * HIDDEN * EXPERTS * BF16,
        "lm_head": VOCAB / tp * HIDDEN * BF16,
    }


def kimi_activation_bytes_per_token(tp: int) -> float:
    """What the heavy kernels of a 1-token pass at empty context move besides weights (bf16 inputs and outputs, the
    token's own MLA latent, and the embedding row): small next to the weights, but part of the pass's bytes."""
    heads, latent = HEADS / tp, KV_LORA + ROPE
    attention = ((HIDDEN + Q_LORA + latent) + (Q_LORA + heads * (NOPE + ROPE)) + (heads * NOPE + KV_LORA)
                 + (heads * KV_LORA + V_HEAD) + (heads * V_HEAD + HIDDEN)) * BF16
    attention += latent * BF16 + 2 * heads * latent * BF16  # the cached latent of the token itself, q and output
    inter = DENSE_INTER / tp
    dense = ((HIDDEN + 2 * inter) + (inter + HIDDEN)) * BF16
    moe_inter = MOE_INTER / tp
    moe = ((HIDDEN + EXPERTS) + ACTIVE * (HIDDEN + 2 * moe_inter) + ACTIVE * (moe_inter + HIDDEN)
           + (HIDDEN + 2 * moe_inter) + (moe_inter + HIDDEN)) * BF16
    embedding = HIDDEN * (BF16 + BF16)  # one row read, one written
    lm_head = (HIDDEN + VOCAB / tp) * BF16
    sampling = 3 * 4 * VOCAB  # logits processing reads and writes the fp32 logits, sampling reads them (full vocab)
    return LAYERS * attention + DENSE_LAYERS * dense + (LAYERS - DENSE_LAYERS) * moe + embedding + lm_head + sampling


def pass_bytes(model: ModelCard, tp: int, shape: PassShape) -> float:
    layout = pass_layout(model, tp, shape)
    per_segment = [sum(k.bytes for k in segment.kernels) for segment in layout.segments]
    return sum(per_segment[i] for i in layout.order)


def test_kimi_reads_6_05_GB_per_token_per_gpu_at_tp8():
    weights = kimi_weight_bytes_read_per_token(8)
    # docs/sources.md: about 6 GB, of which attention about 3.2 GB and routed experts about 1.5 GB
    assert weights["attention"] == pytest.approx(3.158e9, rel=1e-3)
    assert weights["routed_experts"] == pytest.approx(1.486e9, rel=1e-3)
    assert sum(weights.values()) == pytest.approx(6.028e9, rel=1e-3)
    expected = sum(weights.values()) + kimi_activation_bytes_per_token(8)
    assert expected == pytest.approx(6.05e9, rel=1e-3)
    assert pass_bytes(KIMI, 8, PassShape(1, 1, 0)) == pytest.approx(expected, rel=1e-12)


def test_context_adds_the_mla_latent_cache_per_layer():
    """Each cached token adds (kv_lora + rope) bf16 values per layer, read once per pass on every rank."""
    extra = pass_bytes(KIMI, 8, PassShape(1, 1, 2048)) - pass_bytes(KIMI, 8, PassShape(1, 1, 0))
    assert extra == pytest.approx(2048 * LAYERS * (KV_LORA + ROPE) * BF16, rel=1e-12)


def test_kimi_weights_held_per_gpu():
    """The memory budget counts every expert shard: 384 experts a layer, not the 8 a token touches."""
    read = kimi_weight_bytes_read_per_token(8)
    all_experts = read["routed_experts"] * EXPERTS / ACTIVE
    embedding = VOCAB / 8 * HIDDEN * BF16
    held = sum(read.values()) - read["routed_experts"] + all_experts + embedding
    assert weight_bytes_per_gpu(KIMI, 8) == pytest.approx(held, rel=1e-12)
    assert held == pytest.approx(76.18e9, rel=1e-3)  # fits a 96 GB RTX PRO 6000 at 90%
    assert weight_bytes_per_gpu(KIMI, 1) == pytest.approx(594.2e9, rel=1e-3)  # one GPU would need ~600 GB


# --- distinct experts ---------------------------------------------------------------------------------------------


def test_distinct_experts_by_hand():
    """E (1 - (1 - k/E)^n): a token misses a given expert with probability 1 - k/E (k of E without replacement)."""
    assert expected_distinct_experts(384, 8, 1) == pytest.approx(8.0, rel=1e-12)
    assert expected_distinct_experts(384, 8, 4) == pytest.approx(384 * (1 - (376 / 384) ** 4), rel=1e-12)
    assert expected_distinct_experts(384, 8, 4) == pytest.approx(31.01, abs=0.01)
    assert expected_distinct_experts(384, 8, 10**6) == pytest.approx(384.0)
    # locality rho: tokens after a sequence's first are fresh draws for (1 - rho) of their choices
    assert expected_distinct_experts(384, 8, 4, locality=0.4) == pytest.approx(384 * (1 - (376 / 384) ** 2.8), rel=1e-12)
    assert expected_distinct_experts(384, 8, 4, batch=3, locality=0.4) == pytest.approx(
        384 * (1 - (376 / 384) ** 8.4), rel=1e-12)
    # Kimi's verify of 4 tokens at locality 0.4 touches ~2.75x one token's experts (Cohere measured ~2.5x)
    assert expected_distinct_experts(384, 8, 4, locality=0.4) / 8 == pytest.approx(2.75, abs=0.01)


def test_distinct_experts_formula_is_the_expectation_of_uniform_routing():
    """Monte Carlo: n tokens each routed to k distinct experts of E uniformly; the mean count of distinct experts
    agrees with the formula within 4 standard errors of the simulated mean."""
    rng = np.random.default_rng(0)
    E, k, n, trials = 64, 6, 5, 4000
    choices = np.argsort(rng.random((trials, n, E)), axis=2)[:, :, :k].reshape(trials, -1)
    touched = np.array([np.unique(row).size for row in choices])
    se = touched.std(ddof=1) / np.sqrt(trials)
    assert abs(touched.mean() - expected_distinct_experts(E, k, n)) <= 4 * se


def test_verify_reads_the_touched_experts_weights():
    """A 4-token verify reads the experts it touches: the pass's extra bytes over a 1-token decode are the additional
    distinct experts' int4 weights plus three tokens' activations (no more weights elsewhere)."""
    extra_experts = expected_distinct_experts(EXPERTS, ACTIVE, 4, locality=KIMI.moe.routing_locality) - ACTIVE
    expert_bytes = 3 * HIDDEN * MOE_INTER / 8 * INT4_GROUP32
    weights_extra = (LAYERS - DENSE_LAYERS) * extra_experts * expert_bytes
    one = pass_bytes(KIMI, 8, PassShape(1, 1, 0))
    four = pass_bytes(KIMI, 8, PassShape(4, 1, 0))
    activations = four - one - weights_extra
    assert 0 < activations < 4 * kimi_activation_bytes_per_token(8)  # linear in tokens, some of it quadratic (MLA)
    assert weights_extra == pytest.approx(2.60e9, rel=1e-2)  # the verify reads ~2.6 GB more expert weights


# --- the MTP module's weight precision ----------------------------------------------------------------------------

# DeepSeek-V3 / R1 (config.json): one MTP module of 256 routed experts (8 a token) and 1 shared expert of 7168 x 2048
DSV3 = card("deepseek_v3.yaml")
DS_HIDDEN, DS_MOE_INTER, DS_EXPERTS, DS_ACTIVE, DS_SHARED = 7168, 2048, 256, 8, 1
NVFP4 = 0.5 + 1 / 16  # half a byte per weight plus an fp8 (E4M3) scale per 16 weights


def blog1_recipe(mtp: str | None) -> ModelCard:
    """TensorRT-LLM blog 1's NVFP4 DeepSeek-R1: fp4 experts and dense FFN, bf16 attention and router, and its MTP
    layers in `mtp` (the blog: bf16; None: the target's own families)."""
    weights = DSV3.weights.model_copy(update={"experts": "fp4", "shared_experts": "fp4", "dense_mlp": "fp4",
                                              "attention": "bf16", "quant_group_size": 16, "quant_scale_dtype": "fp8",
                                              "mtp": mtp})
    return DSV3.model_copy(update={"weights": weights})


def test_mtp_module_inherits_the_targets_weights_by_default():
    from simulator.model.draft_cards import mtp_card

    target = blog1_recipe(None)
    assert mtp_card(target).weights == target.weights
    assert mtp_card(blog1_recipe("bf16")).weights.experts == "bf16"


def test_mtp_pass_reads_bf16_expert_weights_at_32_9ths_of_nvfp4():
    """One drafted token at TP8: the MTP layer's 8 routed experts and its shared expert, each split over 8 ranks,
    read at 2 bytes a weight instead of 0.5625 (32/9 as many bytes); attention, router and lm_head are bf16 in both,
    activations the same, so the pass's bytes differ by exactly the experts' weights at the two precisions."""
    from simulator.model.draft_cards import mtp_card

    per_rank = (DS_ACTIVE + DS_SHARED) * 3 * DS_HIDDEN * DS_MOE_INTER / 8  # expert weights one rank reads
    assert per_rank == 49_545_216
    fp4_bytes, bf16_bytes = per_rank * NVFP4, per_rank * BF16
    assert (fp4_bytes, bf16_bytes) == (27_869_184, 99_090_432) and bf16_bytes / fp4_bytes == 32 / 9
    shape = PassShape(1, 1, 0)
    fp4_pass = pass_bytes(mtp_card(blog1_recipe(None)), 8, shape)
    bf16_pass = pass_bytes(mtp_card(blog1_recipe("bf16")), 8, shape)
    assert bf16_pass - fp4_pass == pytest.approx(bf16_bytes - fp4_bytes, rel=1e-12)
    # the target's own pass is untouched by the MTP module's precision
    assert pass_bytes(blog1_recipe("bf16"), 8, shape) == pass_bytes(blog1_recipe(None), 8, shape)


def test_mtp_module_held_at_bf16():
    """The memory budget holds all 256 routed experts and the shared one of the MTP layer: 1.4375 bytes a weight
    more at bf16 than NVFP4 (2.03 GB more per GPU at TP8)."""
    from simulator.model.draft_cards import mtp_card

    held = (DS_EXPERTS + DS_SHARED) * 3 * DS_HIDDEN * DS_MOE_INTER / 8 * (BF16 - NVFP4)
    assert held == pytest.approx(2.0338e9, rel=1e-4)
    extra = weight_bytes_per_gpu(mtp_card(blog1_recipe("bf16")), 8) - weight_bytes_per_gpu(mtp_card(blog1_recipe(None)), 8)
    assert extra == pytest.approx(held, rel=1e-12)


def test_mtp_module_holds_no_embedding_or_lm_head_of_its_own():
    """DeepSeek-V3's MTP module shares the target's embedding and output head (DeepSeek-V3 technical report, 2.2;
    SGLang's EAGLE worker hands it the target's tensors, set_embed_and_head): the budget leaves out 129,280 x 7,168
    bf16 values of each, 1/8 of them a rank at TP8 (2 x 231,669,760 B)."""
    from simulator.model.draft_cards import mtp_card

    per_rank = 129_280 * 7_168 // 8 * BF16
    assert per_rank == 231_669_760
    mtp = mtp_card(DSV3)
    own = weight_bytes_per_gpu(mtp, 8) - weight_bytes_per_gpu(mtp, 8, own_vocab=False)
    assert own == pytest.approx(2 * per_rank, rel=1e-12)

# --- collectives ------------------------------------------------------------------------------------------------


def test_collective_sizes_and_count():
    """Two all-reduces of T x hidden bf16 activations per layer plus the embedding's: 123 for Kimi; the logits
    all-gather moves T x vocab / tp bf16 values from each rank."""
    for tokens, expected in ((1, 14336), (9, 129024)):  # decode; a tree of 8 drafts (README's figures)
        layout = pass_layout(KIMI, 8, PassShape(tokens, 1, 0, tokens > 1, tokens > 1))
        segments = [layout.segments[i] for i in layout.order]
        reductions = [s for s in segments if s.collective == "allreduce"]
        assert len(reductions) == 1 + 2 * LAYERS
        assert {s.collective_bytes for s in reductions} == {tokens * HIDDEN * BF16} == {expected}
        gathers = [s for s in segments if s.collective == "allgather"]
        assert [s.collective_bytes for s in gathers] == [tokens * VOCAB // 8 * BF16]
    assert all(s.collective is None for s in pass_layout(KIMI, 1, PassShape(1, 1, 0)).segments)  # tp 1: none


def test_fused_allreduce_norm_removes_one_launch_per_allreduce():
    plain = pass_layout(KIMI, 8, PassShape(1, 1, 0))
    fused = pass_layout(KIMI, 8, PassShape(1, 1, 0), fused_allreduce_norm=True)
    launches = lambda layout: sum(layout.segments[i].num_kernels for i in layout.order)  # noqa: E731
    assert launches(plain) - launches(fused) == 2 * LAYERS


# --- KV cache: MLA against GQA ------------------------------------------------------------------------------------


def test_kv_bytes_mla_latent_is_replicated_gqa_heads_are_sharded():
    # MLA: one latent of kv_lora + rope values per token and layer, the same on every rank
    assert kv_bytes_per_token_layer(KIMI, 1) == kv_bytes_per_token_layer(KIMI, 8) == (512 + 64) * 2 == 1152
    # GQA (Llama-3.1-8B: 8 KV heads of 128): K and V per head, sharded by heads, at least one head per rank
    assert kv_bytes_per_token_layer(LLAMA8B, 1) == 2 * 8 * 128 * 2 == 4096
    assert kv_bytes_per_token_layer(LLAMA8B, 4) == 2 * 2 * 128 * 2 == 1024
    assert kv_bytes_per_token_layer(LLAMA8B, 8) == kv_bytes_per_token_layer(LLAMA8B, 16) == 2 * 1 * 128 * 2 == 512
    # per token over all layers: Kimi's 61 x 1152 B = 70 KB, against a full multi-head cache of 64 heads x (128 + 128)
    # values: MLA stores 28x less
    full_mha = 2 * HEADS * V_HEAD * BF16
    assert full_mha / kv_bytes_per_token_layer(KIMI, 1) == pytest.approx(28.44, abs=0.01)


# --- FLOPs ------------------------------------------------------------------------------------------------------


def test_llama8b_decode_flops_are_twice_its_matmul_parameters():
    """A dense decode of one token: 2 FLOPs per weight of every GEMM, plus attention over the token itself."""
    d, heads, kv, hd, inter, layers, vocab = 4096, 32, 8, 128, 14336, 32, 128256
    per_layer = d * (heads + 2 * kv) * hd + heads * hd * d + 3 * d * inter
    attention = layers * 2 * heads * 1 * 2 * hd  # one key (itself), q.k and p.v
    expected = 2 * (layers * per_layer + vocab * d) + attention
    layout = pass_layout(LLAMA8B, 1, PassShape(1, 1, 0))
    flops = sum(sum(k.flops for k in layout.segments[i].kernels) for i in layout.order)
    assert flops == expected == 15_009_841_152
