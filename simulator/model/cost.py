"""The kernels of a forward pass's parts, per rank: FLOPs, bytes and dtype of each, and the shape a kernel-cost source
looks it up by. The records (PassShape, Kernel, Segment, PassLayout) and each part's kernels: attention (GQA and
MLA's absorbed form), the dense MLP, the MoE router with its routed and shared experts, the tail's sampling; heavy
kernels carry their FLOPs and bytes, the rest of a segment's launches are small element-wise kernels. model/layout.py
lays them out as a pass (split_layout.py under a wider split, heads.py for prediction heads).
"""
from __future__ import annotations

from dataclasses import replace

from ..compiled import dataclass
from ..config.mirror import GQAAttention, MLAAttention, ModelCard
from ..kernels.shapes import Attention, Gemm, KernelShape, MLABmm, MLAttention, MoE
from .cards import (BYTES_PER_VALUE, bytes_per_param, compute_dtype, expected_distinct_experts, independent_tokens,
                    kv_bytes_per_token_layer)
from .routing import busiest_expert_rank


@dataclass(frozen=True)
class PassShape:
    """What a pass computes: query tokens per request, requests, total cached context, and whether it is a tree."""

    tokens: int = 1
    batch: int = 1
    context: int = 0  # cached tokens summed over the batch
    tree: bool = False  # attention takes a tree mask
    verify: bool = False  # speculative bookkeeping around the pass
    padding: int = 0  # rows of requests a captured graph adds to reach its batch size: GEMM rows, no KV, no sampling
    kv_budget: int = 0  # a sparse-KV pass reads at most this many cached tokens per request (0: all of them)
    padding_rows: int = 0  # rows a captured graph adds to reach its token count (vLLM V1): as padding (lm_head too)

    def __repr__(self) -> str:
        # the random streams of a shape's samples are seeded by its repr: an unpadded shape keeps the one it had
        # before padding existed, so every earlier result stays the same
        pad = f", padding={self.padding}" if self.padding else ""
        pad += f", kv_budget={self.kv_budget}" if self.kv_budget else ""
        pad += f", padding_rows={self.padding_rows}" if self.padding_rows else ""
        return (f"PassShape(tokens={self.tokens!r}, batch={self.batch!r}, context={self.context!r}, tree={self.tree!r}, "
                f"verify={self.verify!r}{pad})")

    @property
    def query_tokens(self) -> int:
        """The rows every GEMM and collective of the pass carries (graph padding included)."""
        return self.tokens * (self.batch + self.padding) + self.padding_rows

    def at(self, context: int) -> "PassShape":
        """This shape at another context: dataclasses.replace(self, context=...), without its per-call cost (the
        fast fidelity asks per anchor lookup)."""
        return PassShape(self.tokens, self.batch, context, self.tree, self.verify, self.padding, self.kv_budget,
                         self.padding_rows)

    @property
    def attended_context(self) -> int:
        """Cached tokens the attention reads over the batch: all of them, or a sparse-KV pass's budget per request."""
        if self.kv_budget:
            return min(self.context, self.kv_budget * self.batch)
        return self.context


@dataclass(frozen=True)
class Kernel:
    name: str
    flops: float  # per rank
    bytes: float  # per rank: weights + KV + activations
    dtype: str  # tensor-core dtype
    shape: KernelShape | None = None  # what a kernel-cost source looks up (None: element-wise, roofline only)
    absorbs: int = 0  # the segment's element-wise launches a measured time of this kernel includes
    side_stream: bool = False  # may run on a second stream beside the segment's other heavy kernels (in a graph)


@dataclass(frozen=True)
class Segment:
    """Kernels launched between two collectives, and the collective that closes the segment."""

    kernels: tuple[Kernel, ...]
    small_kernels: int
    small_bytes: float  # per small kernel
    collective: str | None  # "allreduce" | "allgather" | "reducescatter" | "dispatch" | "combine" | "sendrecv" | None
    collective_bytes: int  # per rank (input size; an all-gather's or reduce-scatter's share of one rank)
    group: str = "tp"  # the ranks it runs among: "tp" (a stage's), "attention" (a DP-attention group's), "ep", "pipeline"
    collective_tokens: int = 0  # tokens each rank dispatches or combines (expert parallelism's all-to-all)

    @property
    def num_kernels(self) -> int:
        return len(self.kernels) + self.small_kernels


def _gemm(name: str, tokens: int, k: float, n: float, weight_bytes: float, act: float, dtype: str,
          weight_dtype: str | None = None, shape: KernelShape | None = None) -> Kernel:
    """tokens x k times k x n: 2 T k n FLOPs; reads the weights and the input, writes the output. Its shape is
    looked up by the weights' dtype (an int4 weight-only GEMM is not a bf16 one, though it computes in bf16)."""
    if shape is None:
        scales = weight_bytes - BYTES_PER_VALUE[weight_dtype] if weight_dtype in BYTES_PER_VALUE else 0.0
        shape = Gemm(int(tokens), max(1, round(n)), max(1, round(k)), weight_dtype or dtype, max(0.0, scales))
    return Kernel(name, 2.0 * tokens * k * n, k * n * weight_bytes + tokens * (k + n) * act, dtype, shape)


def _attention_kernels(card: ModelCard, tp: int, shape: PassShape) -> list[Kernel]:
    att, d, w = card.attention, card.hidden_size, card.weights
    T = shape.query_tokens  # the projections' rows, graph padding included
    Tq = shape.tokens * shape.batch  # the real queries: padding rows attend to (almost) nothing
    act = BYTES_PER_VALUE[card.activation_dtype]
    wb = bytes_per_param(card, w.attention)
    cd = compute_dtype(card, w.attention)
    context = shape.attended_context
    kv_read = (context + shape.batch * shape.tokens) * kv_bytes_per_token_layer(card, tp)
    # every query token attends to its request's context and, causally (or along its tree path), about half of
    # its own pass's tokens
    keys_per_query = context / max(1, shape.batch) + (shape.tokens + 1) / 2
    mask_bytes = Tq * keys_per_query if shape.tree else 0.0
    cached = context // max(1, shape.batch)
    mask = "tree" if shape.tree else "causal"
    if isinstance(att, MLAAttention):
        heads = att.num_heads / tp
        latent = att.kv_lora_rank + att.qk_rope_head_dim
        q_in = att.q_lora_rank or d
        wd = w.attention
        kernels = [_gemm("qkv_a_proj", T, d, (att.q_lora_rank + latent) if att.q_lora_rank else latent, wb, act, cd, wd)]
        q_dim = att.qk_nope_head_dim + att.qk_rope_head_dim
        if att.q_lora_rank:
            kernels.append(_gemm("q_b_proj", T, q_in, heads * q_dim, wb, act, cd, wd))
        per_gpu_heads = max(1, round(heads))
        kernels.append(_gemm("w_kc_absorb", T, heads * att.qk_nope_head_dim, att.kv_lora_rank, wb, act, cd, wd,
                             MLABmm("pre", T, per_gpu_heads, wd)))
        flops = 2.0 * Tq * heads * keys_per_query * (latent + att.kv_lora_rank)
        kernels.append(Kernel("mla_attention", flops, kv_read + mask_bytes + 2 * Tq * heads * latent * act,
                              card.activation_dtype,
                              MLAttention(shape.batch, shape.tokens, cached, per_gpu_heads, card.kv_cache_dtype, mask),
                              card.kernels.attention_fused))
        kernels.append(_gemm("w_vc_absorb", T, heads * att.kv_lora_rank, att.v_head_dim, wb, act, cd, wd,
                             MLABmm("post", T, per_gpu_heads, wd)))
        kernels.append(_gemm("o_proj", T, heads * att.v_head_dim, d, wb, act, cd, wd))
        return kernels
    assert isinstance(att, GQAAttention)
    q_heads = att.num_heads / tp
    kv_heads = max(1.0, att.num_kv_heads / tp)
    wd = w.attention
    qkv = _gemm("qkv_proj", T, d, (q_heads + 2 * kv_heads) * att.head_dim, wb, act, cd, wd)
    flops = 2.0 * Tq * q_heads * keys_per_query * 2 * att.head_dim
    core = Kernel("attention", flops, kv_read + mask_bytes + 2 * Tq * q_heads * att.head_dim * act, card.activation_dtype,
                  Attention(shape.batch, shape.tokens, cached, max(1, round(q_heads)), max(1, round(kv_heads)),
                            att.head_dim, card.kv_cache_dtype, mask), card.kernels.attention_fused)
    o_proj = _gemm("o_proj", T, q_heads * att.head_dim, d, wb, act, cd, wd)
    return [qkv, core, o_proj]


def _dense_mlp_kernels(card: ModelCard, tp: int, T: int, separate_gate_up: tuple = ()) -> list[Kernel]:
    """Gate and up projections as one GEMM of 2 x inter columns, or, for weights of a dtype in separate_gate_up (the
    engine's model code runs them as two linear layers it cannot fuse), two GEMMs of inter columns; then down."""
    d, inter = card.hidden_size, card.dense_intermediate_size / tp
    act = BYTES_PER_VALUE[card.activation_dtype]
    wb, cd = bytes_per_param(card, card.weights.dense_mlp), compute_dtype(card, card.weights.dense_mlp)
    wd = card.weights.dense_mlp
    down = _gemm("down_proj", T, inter, d, wb, act, cd, wd)
    if wd in separate_gate_up:
        return [_gemm("gate_proj", T, d, inter, wb, act, cd, wd), _gemm("up_proj", T, d, inter, wb, act, cd, wd), down]
    return [_gemm("gate_up_proj", T, d, 2 * inter, wb, act, cd, wd), down]


def _router_kernel(card: ModelCard, T: int) -> Kernel:
    w = card.weights
    return _gemm("router", T, card.hidden_size, card.moe.num_experts, bytes_per_param(card, w.router),
                 BYTES_PER_VALUE[card.activation_dtype], compute_dtype(card, w.router), w.router)


def _moe_kernels(card: ModelCard, tp: int, shape: PassShape) -> list[Kernel]:
    return [_router_kernel(card, shape.query_tokens)] + _expert_kernels(card, tp, shape)


def _expert_kernels(card: ModelCard, tp: int, shape: PassShape, ep: int = 1, shared_tokens: int | None = None,
                    shared_tp: int | None = None) -> list[Kernel]:
    """The routed experts over `shape`'s tokens, each expert split over tp ranks; with expert parallelism (ep > 1)
    this rank holds experts / ep of them and computes tokens x k / ep routed tokens (the mean rank's), scaled to the
    busiest expert rank's distinct experts and routed tokens under the card's routing (routing.busiest_expert_rank:
    the pass waits for it). The shared experts run on shared_tokens (default: all) split over shared_tp ranks
    (default: tp)."""
    m, d, w = card.moe, card.hidden_size, card.weights
    act = BYTES_PER_VALUE[card.activation_dtype]
    inter = m.intermediate_size / tp
    T = shape.query_tokens
    # the independently routed tokens that touch as many distinct experts as this pass's (routing locality)
    independent = independent_tokens(shape.tokens, shape.batch, m.routing_locality)
    busiest, busiest_routed = busiest_expert_rank(m, ep, round(independent, 3))
    touched = expected_distinct_experts(m.num_experts, m.experts_per_token, shape.tokens, shape.batch,
                                        m.routing_locality) / ep * busiest
    wb, cd = bytes_per_param(card, w.experts), compute_dtype(card, w.experts)
    routed = T * m.experts_per_token / ep * busiest_routed
    fused = lambda share: MoE(round(independent, 3), d, m.intermediate_size, m.experts_per_token,  # noqa: E731
                              m.num_experts, tp, w.experts, share, ep=ep, busiest=busiest,
                              busiest_routed=busiest_routed, routed_tokens=T)
    kernels = [Kernel("experts_gate_up", 2.0 * routed * d * 2 * inter,
                      touched * d * 2 * inter * wb + routed * (d + 2 * inter) * act, cd, fused(2 / 3),
                      card.kernels.moe_fused),
               Kernel("experts_down", 2.0 * routed * inter * d,
                      touched * inter * d * wb + routed * (inter + d) * act, cd, fused(1 / 3))]
    if m.num_shared_experts:
        s_inter = m.num_shared_experts * (m.intermediate_size / (tp if shared_tp is None else shared_tp))
        s_tokens = T if shared_tokens is None else shared_tokens
        sb, sd, sw = bytes_per_param(card, w.shared_experts), compute_dtype(card, w.shared_experts), w.shared_experts
        side = m.shared_experts_overlap
        kernels += [replace(_gemm("shared_gate_up", s_tokens, d, 2 * s_inter, sb, act, sd, sw), side_stream=side),
                    replace(_gemm("shared_down", s_tokens, s_inter, d, sb, act, sd, sw), side_stream=side)]
    return kernels


# A small element-wise kernel (norm, residual add, activation, rotary, copy) is taken to read two activation tensors
# of T x hidden and write one (a residual add reads x and the residual, writes their sum): a modelling assumption,
# not a measurement; these kernels are floor-bound at decode sizes, where it does not matter.
SMALL_KERNEL_TENSORS = 3


def _segment(kernels: list[Kernel], launches: int, T: int, card: ModelCard, collective: str | None, coll_bytes: int) -> Segment:
    small = max(0, launches - len(kernels))
    small_bytes = SMALL_KERNEL_TENSORS * T * card.hidden_size * BYTES_PER_VALUE[card.activation_dtype]
    return Segment(tuple(kernels), small, small_bytes, collective, coll_bytes)


def _sampling_kernels(card: ModelCard, shape: PassShape) -> list[Kernel]:
    """The kernels of a pass's tail that grow with its tokens (counted among per_pass / verify_per_pass launches):
    logits processing (reads and writes T x vocab fp32 logits) and argmax / sampling (reads them); a verify also
    runs the rejection / accept kernel over the target's probabilities (T x vocab fp32), and a tree verify builds
    its attention mask (one byte per query token and visible key: b n (L + n))."""
    vocab = card.vocab_size
    logits = 4.0 * shape.query_tokens * vocab  # logits processing runs in the pass, on every row
    real = 4.0 * shape.tokens * shape.batch * vocab  # sampling and acceptance read the real requests' rows only
    kernels = [Kernel("logits_processing", 0.0, 2 * logits, "fp32"), Kernel("sampling", 0.0, real, "fp32")]
    if shape.verify:
        kernels.append(Kernel("accept_rejection", 0.0, real, "fp32"))
    if shape.tree:
        cached = shape.context / max(1, shape.batch)
        kernels.append(Kernel("tree_mask", 0.0, shape.batch * shape.tokens * (cached + shape.tokens), "fp32"))
    return kernels


@dataclass(frozen=True)
class PassLayout:
    """A pass as distinct segments and their launch order (every MoE layer is the same segment, so cost it once)."""

    segments: tuple[Segment, ...]
    order: tuple[int, ...]
