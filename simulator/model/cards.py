"""Derived quantities of a model card: bytes per parameter, parameters per component, KV bytes per token, per GPU."""
from __future__ import annotations

from ..config.mirror import GQAAttention, MLAAttention, ModelCard

BYTES_PER_VALUE = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5, "fp4": 0.5}


def bytes_per_param(card: ModelCard, dtype: str) -> float:
    """Storage per weight, with the group metadata of 4-bit formats: a scale per group, plus a zero point in the
    scale's dtype for asymmetric formats (int4 group 32, bf16 scale: 0.5 + 2/32 bytes; gpt-fast's tinygemm int4
    group 32, bf16 scale and zero: 0.5 + 4/32, i.e. 5 bits; NVFP4, an fp8 scale per 16: 0.5 + 1/16)."""
    size = BYTES_PER_VALUE[dtype]
    w = card.weights
    if dtype in ("int4", "fp4") and w.quant_group_size:
        size += BYTES_PER_VALUE[w.quant_scale_dtype] * (2 if w.quant_zero_point else 1) / w.quant_group_size
    return size


def compute_dtype(card: ModelCard, weight_dtype: str) -> str:
    """Tensor-core dtype of a GEMM: fp8/fp4 weights run natively; int4/int8 weights are dequantised to activations."""
    return weight_dtype if weight_dtype in ("fp8", "fp4") else card.activation_dtype


def attention_params(card: ModelCard, tp: int) -> tuple[float, float]:
    """(replicated, sharded-per-rank) attention parameters of one layer."""
    att, d = card.attention, card.hidden_size
    if isinstance(att, MLAAttention):
        q_dim = att.qk_nope_head_dim + att.qk_rope_head_dim
        replicated = d * (att.q_lora_rank + att.kv_lora_rank + att.qk_rope_head_dim) if att.q_lora_rank else \
            d * (att.kv_lora_rank + att.qk_rope_head_dim)
        q_in = att.q_lora_rank or d
        sharded = (q_in * att.num_heads * q_dim
                   + att.kv_lora_rank * att.num_heads * (att.qk_nope_head_dim + att.v_head_dim)
                   + att.num_heads * att.v_head_dim * d) / tp
        return float(replicated), sharded
    assert isinstance(att, GQAAttention)
    kv_heads_rank = max(1.0, att.num_kv_heads / tp)
    q_rank = att.num_heads / tp
    sharded = d * att.head_dim * (q_rank + 2 * kv_heads_rank) + q_rank * att.head_dim * d
    return 0.0, sharded


def kv_bytes_per_token_layer(card: ModelCard, tp: int) -> float:
    """KV-cache bytes one token adds to one layer on one rank (MLA's latent cache is replicated on every rank)."""
    att = card.attention
    size = BYTES_PER_VALUE[card.kv_cache_dtype]
    if isinstance(att, MLAAttention):
        return (att.kv_lora_rank + att.qk_rope_head_dim) * size
    return 2 * max(1.0, att.num_kv_heads / tp) * att.head_dim * size


def weight_bytes_per_gpu(card: ModelCard, tp: int, own_vocab: bool = True, vocab_parallel: bool = True,
                         whole_embedding: bool = False) -> float:
    """All weights one rank holds (every expert shard), for the memory budget; with own_vocab False, without the
    embedding and lm_head (an MTP module's: it uses the target's, model.draft_cards.mtp_card); with vocab_parallel False,
    both whole on every rank (runtime.vocab_parallel); whole_embedding: the embedding alone whole."""
    if card.num_layers == 0:  # prediction heads (model.heads)
        from .heads import heads_weight_bytes
        return heads_weight_bytes(card, tp)
    d, w = card.hidden_size, card.weights
    replicated, sharded = attention_params(card, tp)
    total = card.num_layers * (replicated + sharded) * bytes_per_param(card, w.attention)
    total += card.num_dense_layers * 3 * d * card.dense_intermediate_size / tp * bytes_per_param(card, w.dense_mlp)
    if card.moe:
        m = card.moe
        per_layer = m.num_experts * 3 * d * m.intermediate_size / tp * bytes_per_param(card, w.experts)
        per_layer += m.num_shared_experts * 3 * d * m.intermediate_size / tp * bytes_per_param(card, w.shared_experts)
        per_layer += d * m.num_experts * bytes_per_param(card, w.router)
        total += card.num_moe_layers * per_layer
    if own_vocab:
        vocab_ranks = tp if vocab_parallel else 1
        total += card.vocab_size * d / (1 if whole_embedding else vocab_ranks) * bytes_per_param(card, w.embedding)
        total += card.vocab_size * d / vocab_ranks * bytes_per_param(card, w.lm_head)
    return total


def expected_distinct_experts(num_experts: int, experts_per_token: int, tokens: int, batch: int = 1,
                              locality: float = 0.0) -> float:
    """Distinct experts touched by `batch` sequences of `tokens` consecutive tokens each: E (1 - (1 - k/E)^n_eff).

    Uniform routing makes every token an independent draw (docs/sources.md); with routing locality rho, each token after
    the first in a sequence is a fresh draw only for a (1 - rho) share of its choices: n_eff = b (1 + (t - 1)(1 - rho)).
    """
    effective = independent_tokens(tokens, batch, locality)
    return num_experts * (1.0 - (1.0 - experts_per_token / num_experts) ** effective)


def independent_tokens(tokens: int, batch: int = 1, locality: float = 0.0) -> float:
    """The independently routed tokens that touch as many distinct experts as `batch` sequences of `tokens` tokens
    with routing locality rho: b (1 + (t - 1)(1 - rho))."""
    return batch * (1.0 + (tokens - 1) * (1.0 - locality))
