"""A model card: the shape of a transformer, its weight dtypes, and the kernels the serving engine launches for it."""
from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import Field, NonNegativeInt, PositiveInt, model_validator

from .base import Strict
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
    kind: Literal["mla"]
    num_heads: PositiveInt
    q_lora_rank: NonNegativeInt = Field(description="0 when queries are projected directly from the hidden state")
    kv_lora_rank: PositiveInt
    qk_nope_head_dim: PositiveInt
    qk_rope_head_dim: PositiveInt
    v_head_dim: PositiveInt


class GQAAttention(Strict):
    kind: Literal["gqa"]
    num_heads: PositiveInt
    num_kv_heads: PositiveInt
    head_dim: Dim

    @model_validator(mode="after")
    def _groups(self):
        if self.num_heads % self.num_kv_heads:
            raise ValueError("num_heads must be a multiple of num_kv_heads")
        return self


Attention = Annotated[Union[MLAAttention, GQAAttention], Field(discriminator="kind")]


class MoESpec(Strict):
    num_experts: PositiveInt
    experts_per_token: PositiveInt
    num_shared_experts: NonNegativeInt = 0
    intermediate_size: Dim
    shared_experts_overlap: bool = Field(False, description=(
        "Shared experts run on a second CUDA stream beside the router and routed experts while a CUDA graph is "
        "replayed (SGLang DeepseekV2MoE.forward_normal_dual_stream)"))
    routing_locality: float = Field(0.0, ge=0.0, lt=1.0, description=(
        "Share of a token's expert choices that repeat the previous token's of the same sequence (0: independent, "
        "uniform routing); lowers the distinct experts a multi-token verify touches"))

    @model_validator(mode="after")
    def _k(self):
        if self.experts_per_token > self.num_experts:
            raise ValueError("experts_per_token exceeds num_experts")
        return self


class WeightDtypes(Strict):
    attention: Dtype
    dense_mlp: Dtype
    experts: Dtype = "bf16"
    shared_experts: Dtype = "bf16"
    router: Dtype = "bf16"
    embedding: Dtype = "bf16"
    lm_head: Dtype = "bf16"
    quant_group_size: NonNegativeInt = Field(0, description="Weights per bf16 scale for int4/fp4 groups (0: no group scales)")


class EagerKernels(Strict):
    """Kernels the engine launches per block when running eagerly (counted from the engine's forward code)."""

    attention: SomeKernels = Field(description="Per layer, input norm through output projection, the all-reduce excluded")
    dense_mlp: SomeKernels = Field(description="Per dense layer, post-attention norm through down projection, all-reduce excluded")
    moe: Kernels = Field(0, description="Per MoE layer, post-attention norm through expert combine, all-reduce excluded")
    per_pass: Kernels = Field(description="Embedding, final norm, lm_head, logits gather and sampling")
    verify_per_pass: Kernels = Field(description="Extra per verify pass: draft organisation, tree/positions build, accept walk")
    tree_attention: Kernels = Field(0, description="Extra per layer when the verify attention takes a tree mask (e.g. cascade + merge)")
    attention_fused: Kernels = Field(0, description=(
        "Of the attention launches, those inside the measured attention op besides its main kernel (e.g. a split-KV "
        "decode's reduce stage): a measured attention time includes them"))
    moe_fused: Kernels = Field(0, description=(
        "Of the MoE launches, those inside the engine's fused-MoE call besides its two expert GEMMs (routing "
        "align/sort, activation, top-k sum, activation quantisation): a measured fused-MoE time includes them"))


class DraftHead(Strict):
    """An EAGLE-style draft head: a small decoder running on the same ranks as the target."""

    num_layers: PositiveInt = Field(1, le=MAX_LAYERS)
    num_heads: PositiveInt
    num_kv_heads: PositiveInt
    head_dim: Dim
    intermediate_size: Dim
    draft_vocab_size: Dim = Field(description="Tokens the head's lm_head scores (EAGLE-3 uses a reduced vocabulary)")

    @model_validator(mode="after")
    def _groups(self):
        if self.num_heads % self.num_kv_heads:
            raise ValueError("num_heads must be a multiple of num_kv_heads")
        return self


class ModelCard(Strict):
    name: str
    num_layers: PositiveInt = Field(le=MAX_LAYERS)
    num_dense_layers: NonNegativeInt = Field(description="Leading layers with a dense MLP; the rest use the MoE block")
    hidden_size: PositiveInt = Field(le=1 << 20)
    vocab_size: PositiveInt = Field(le=1 << 24)
    attention: Attention
    dense_intermediate_size: Dim
    moe: Optional[MoESpec] = None
    weights: WeightDtypes
    activation_dtype: Dtype = Field("bf16", description="Compute dtype of weight-only quantised GEMMs and of attention")
    kv_cache_dtype: Dtype = "bf16"
    kernels: EagerKernels
    mtp_layers: NonNegativeInt = Field(0, le=MAX_LAYERS, description="Multi-token-prediction modules shipped with the model (each one decoder layer)")
    draft_head: Optional[DraftHead] = None

    @model_validator(mode="after")
    def _layers(self):
        if self.num_dense_layers > self.num_layers:
            raise ValueError("num_dense_layers exceeds num_layers")
        if self.num_dense_layers < self.num_layers and self.moe is None:
            raise ValueError("layers past num_dense_layers need a moe block")
        return self

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.num_dense_layers if self.moe else 0
