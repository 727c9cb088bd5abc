"""Kernel shapes: the arguments a kernel-cost source needs, per kernel family (all per GPU, after TP splitting).

Dtypes use the config's names (bf16, fp8, int4, fp4); sources map them to their own.
"""
from __future__ import annotations

from typing import Literal, Union

from ..compiled import dataclass

Mask = Literal["causal", "tree"]


@dataclass(frozen=True)
class Gemm:
    """Y[m, n] = X[m, k] W[k, n]: m tokens, n x k weights of `dtype` (the tensor-core dtype)."""

    m: int
    n: int
    k: int
    dtype: str
    scale_bytes: float = 0.0  # group metadata per weight beyond the dtype's own (int4 group 32, bf16 scale: 2 / 32)
    family = "gemm"


@dataclass(frozen=True)
class _Queries:
    """`batch` requests, each with q_len new query tokens over kv_len cached ones, `heads` query heads per GPU."""

    batch: int
    q_len: int
    kv_len: int
    heads: int


@dataclass(frozen=True)
class Attention(_Queries):
    """GQA attention of `batch` requests, each with q_len new query tokens over kv_len cached ones (plus its own new
    tokens under a causal or tree mask); q_len 1 is decode, a few is verify, many is prefill."""

    kv_heads: int  # KV heads per GPU
    head_dim: int
    kv_dtype: str
    mask: Mask = "causal"
    family = "attention"


@dataclass(frozen=True)
class MLAttention(_Queries):
    """Multi-head latent attention (DeepSeek / Kimi) over the latent KV cache, `heads` query heads per GPU."""

    kv_dtype: str
    mask: Mask = "causal"
    family = "mla"


@dataclass(frozen=True)
class MLABmm:
    """MLA's per-head absorbed projections: 'pre' (q_nope x W_kc) and 'post' (latent x W_vc), batched over heads."""

    which: Literal["pre", "post"]
    tokens: int
    heads: int
    dtype: str
    family = "mla_bmm"


@dataclass(frozen=True)
class MoE:
    """A fused MoE expert block (gate/up, activation, down) over `tokens` routed tokens, experts TP-split by `tp`.

    tokens: the number of independently routed tokens that would touch as many distinct experts (routing
    locality makes a verify's tokens repeat experts, so it counts fewer); share: the part of the fused block this
    kernel stands for (gate/up 2/3, down 1/3 of its weights and FLOPs).
    """

    tokens: float
    hidden: int
    inter: int  # per expert, before TP
    topk: int
    experts: int
    tp: int
    dtype: str
    share: float = 1.0
    balanced: bool = False  # tokens spread evenly over experts (a benchmark's routing), not drawn uniformly
    ep: int = 1  # expert parallelism: this rank holds experts / ep of them and gets tokens x topk / ep routed tokens
    busiest: float = 1.0  # the busiest expert rank's distinct experts over the mean rank's (>= 1)
    busiest_routed: float = 1.0  # the busiest expert rank's routed tokens (token-expert pairs) over the mean rank's
    routed_tokens: float = 0.0  # the pass's tokens, each routed to topk experts (0: `tokens`; more under locality)
    family = "moe"


def moe_rank_load(shape: MoE) -> tuple[float, float]:
    """(distinct experts, token-expert pairs) the busiest expert rank computes: `tokens` touch min(E, tokens k)
    experts (balanced) or E (1 - (1 - k / E)^tokens) (uniform), routed_tokens route routed_tokens k pairs; / ep and
    x busiest / busiest_routed for that rank."""
    e, k = shape.experts, shape.topk
    touched = min(e, shape.tokens * k) if shape.balanced else e * (1.0 - (1.0 - k / e) ** shape.tokens)
    pairs = (shape.routed_tokens or shape.tokens) * k
    return touched / shape.ep * shape.busiest, pairs / shape.ep * shape.busiest_routed


KernelShape = Union[Gemm, Attention, MLAttention, MLABmm, MoE]
FAMILIES = ("gemm", "attention", "mla", "mla_bmm", "moe", "elementwise")
