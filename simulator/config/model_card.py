"""A model card: the shape of a transformer, its weight dtypes, and the kernels the serving engine launches for it."""

from typing import Annotated, Literal, Optional, Union

from pydantic import Field, NonNegativeInt, PositiveInt, model_validator

from . import rules
from .base import Strict
from .surface import ModelCardSurface
from .topology import Dtype

# A matrix dimension past 2^31 - 1 cannot be one GEMM or one attention kernel: cuBLAS (cublasGemmEx) and the attention
# kernels take their m, n, k and head dimensions as 32-bit ints.
MAX_MATRIX_DIM = (1 << 31) - 1
# Kernels a block launches eagerly: one host thread issues them one after another, each at ~5 us (cudaLaunchKernel,
# FACTS.md) and never under ~1 us, so 2^20 a block would spend over a second of host time per block per pass, past
# any engine's forward (the shipped cards count tens).
MAX_KERNELS_PER_BLOCK = 1 << 20
# Decoder layers of one model (the target's num_layers bound): MTP modules and draft heads are layers of the same kind.
MAX_LAYERS = 1024
Dim = Annotated[int, Field(gt=0, le=MAX_MATRIX_DIM)]
Kernels = Annotated[int, Field(ge=0, le=MAX_KERNELS_PER_BLOCK)]
SomeKernels = Annotated[int, Field(gt=0, le=MAX_KERNELS_PER_BLOCK)]


class MLAAttention(Strict):
    """Multi-head latent attention (DeepSeek-V3, Kimi-K2): a compressed KV cache."""

    kind: Literal["mla"]
    num_heads: PositiveInt = Field(description="Query heads")
    q_lora_rank: NonNegativeInt = Field(description="0 when queries are projected directly from the hidden state")
    kv_lora_rank: PositiveInt = Field(description="Width of the compressed KV latent (the cached part)")
    qk_nope_head_dim: PositiveInt = Field(description="Per-head query/key width without rotary embedding")
    qk_rope_head_dim: PositiveInt = Field(description="Per-head query/key width with rotary embedding (cached once per token)")
    v_head_dim: PositiveInt = Field(description="Per-head value width")


class GQAHeads(Strict):
    """Query heads in groups that share key/value heads (the attention of Llama and of EAGLE draft heads)."""

    num_heads: PositiveInt = Field(description="Query heads")
    num_kv_heads: PositiveInt = Field(description="Key/value heads (cached)")
    head_dim: Dim = Field(description="Width of a head")

    _groups = model_validator(mode="after")(rules.gqa_groups)


class GQAAttention(GQAHeads):
    """Grouped-query attention (Llama): num_kv_heads shared by groups of query heads."""

    kind: Literal["gqa"]


Attention = Annotated[Union[MLAAttention, GQAAttention], Field(discriminator="kind")]


class MoESpec(Strict):
    """The mixture-of-experts block of the MoE layers."""

    num_experts: PositiveInt = Field(description="Routed experts per MoE layer")
    experts_per_token: PositiveInt = Field(description="Routed experts each token uses (top-k)")
    num_shared_experts: NonNegativeInt = Field(0, description="Experts every token uses")
    intermediate_size: Dim = Field(description="Hidden width of one expert's MLP")
    shared_experts_overlap: bool = Field(False, description=(
        "Shared experts run on a second CUDA stream beside the router and routed experts while a CUDA graph is "
        "replayed (SGLang DeepseekV2MoE.forward_normal_dual_stream)"))
    routing_locality: float = Field(0.0, ge=0.0, lt=1.0, description=(
        "Share of a token's expert choices that repeat the previous token's of the same sequence (0: independent, "
        "uniform routing); lowers the distinct experts a multi-token verify touches"))
    num_expert_groups: PositiveInt = Field(1, description=(
        "Groups of contiguous expert ids the router ranks first (config.json n_group; 1: no group limit)"))
    groups_per_token: PositiveInt = Field(1, description=(
        "Groups a token's experts are chosen from (config.json topk_group): the best groups by group_score, then "
        "the top-k experts inside them (DeepSeek-V3 inference/model.py Gate.forward)"))
    group_score: Literal["top2_sum", "max"] = Field("top2_sum", description=(
        "How a group is ranked: the sum of its two best scores (DeepSeek-V3's noaux_tc, with the correction "
        "bias) or its best score (DeepSeek-V2's group_limited_greedy)"))

    _k = model_validator(mode="after")(rules.moe_top_k)


class WeightDtypes(Strict):
    """Stored dtype of each weight family; int4/fp4 weights carry per-group metadata (a scale, optionally a zero
    point) that is streamed with them."""

    attention: Dtype = Field(description="Attention projections")
    dense_mlp: Dtype = Field(description="MLP of the dense layers")
    experts: Dtype = Field("bf16", description="Routed experts")
    shared_experts: Dtype = Field("bf16", description="Shared experts")
    router: Dtype = Field("bf16", description="The router (gate)")
    embedding: Dtype = Field("bf16", description="Token embedding")
    lm_head: Dtype = Field("bf16", description="Output projection to the vocabulary")
    quant_group_size: NonNegativeInt = Field(
        0, description="Weights per group scale for int4/fp4 groups (0: no group scales)")
    quant_scale_dtype: Literal["bf16", "fp16", "fp8"] = Field("bf16", description=(
        "Dtype of each group's scale (bf16: compressed-tensors, gpt-fast; fp8: NVFP4's E4M3 block scales)"))
    quant_zero_point: bool = Field(False, description=(
        "Each group also stores a zero point in the scale's dtype (asymmetric, e.g. gpt-fast / tinygemm's bf16 "
        "scales_and_zeros); false: symmetric, scales only"))
    mtp: Optional[Dtype] = Field(None, description=(
        "Stored dtype of every weight of the MTP modules' layers (attention, MLP, experts, router; embedding and "
        "lm_head are the target's, shared); none: each family as the target's (TensorRT-LLM blog 1 runs NVFP4 "
        "DeepSeek-R1 with bf16 MTP layers)"))

    _zero_point = model_validator(mode="after")(rules.weights_zero_point)


class EagerKernels(Strict):
    """Kernels the engine launches per block when running eagerly (counted from the engine's forward code)."""

    attention: SomeKernels = Field(description="Per layer, input norm through output projection, the all-reduce excluded")
    dense_mlp: SomeKernels = Field(description="Per dense layer, post-attention norm through down projection, all-reduce excluded")
    moe: Kernels = Field(0, description="Per MoE layer, post-attention norm through expert combine, all-reduce excluded")
    per_pass: Kernels = Field(description="Embedding, final norm, lm_head, logits gather and sampling")
    verify_per_pass: Kernels = Field(description="Extra per verify pass: draft organisation, tree/positions build, accept walk")
    tree_attention: Kernels = Field(0, description="Extra per layer when the verify attention takes a tree mask (e.g. cascade + merge)")
    chain_verify_attention: Kernels = Field(0, description=(
        "Extra per layer when a verify pass of a chain (no tree mask) takes an explicit causal mask"))
    attention_fused: Kernels = Field(0, description=(
        "Of the attention launches, those inside the measured attention op besides its main kernel (e.g. a split-KV "
        "decode's reduce stage): a measured attention time includes them"))
    moe_fused: Kernels = Field(0, description=(
        "Of the MoE launches, those inside the engine's fused-MoE call besides its two expert GEMMs (routing "
        "align/sort, activation, top-k sum, activation quantisation): a measured fused-MoE time includes them"))


class DraftHead(GQAHeads):
    """An EAGLE-style draft head: a small decoder running on the same ranks as the target."""

    num_layers: PositiveInt = Field(1, le=MAX_LAYERS, description="Decoder layers of the head")
    intermediate_size: Dim = Field(description="Hidden width of its MLP")
    draft_vocab_size: Dim = Field(description="Tokens the head's lm_head scores (EAGLE-3 uses a reduced vocabulary)")


class ModelCard(ModelCardSurface, Strict):
    name: str = Field(description="The model's name, for reports")
    num_layers: PositiveInt = Field(le=MAX_LAYERS, description="Decoder layers")
    num_dense_layers: NonNegativeInt = Field(description="Leading layers with a dense MLP; the rest use the MoE block")
    hidden_size: PositiveInt = Field(le=1 << 20, description="Width of the residual stream")
    vocab_size: PositiveInt = Field(le=1 << 24, description="Tokens in the vocabulary")
    attention: Attention = Field(description="The attention block: mla or gqa")
    dense_intermediate_size: Dim = Field(description="Hidden width of a dense layer's MLP")
    moe: Optional[MoESpec] = Field(None, description="The MoE block (none for a dense model)")
    weights: WeightDtypes = Field(description="Stored dtype per weight family")
    activation_dtype: Dtype = Field("bf16", description="Compute dtype of weight-only quantised GEMMs and of attention")
    kv_cache_dtype: Dtype = Field("bf16", description="Dtype of the KV cache")
    kernels: EagerKernels = Field(description="Kernel launches per block when run eagerly")
    mtp_layers: NonNegativeInt = Field(0, le=MAX_LAYERS, description="Multi-token-prediction modules shipped with the model (each one decoder layer)")
    draft_head: Optional[DraftHead] = Field(None, description="An EAGLE-style draft head shipped with the model")
    architecture: Optional[str] = Field(None, description=(
        "config.json architectures[0], the model class an engine's registry builds for it (an engine profile keys "
        "model-specific code on it: replicated_embedding); none: not stated"))

    _layers = model_validator(mode="after")(rules.card_layers)
