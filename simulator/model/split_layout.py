"""A pass's per-rank segments under the wider splits: DP-attention, expert parallelism and pipeline stages.

What each mode moves (SGLang's layer communicator, python/sglang/srt/layers/communicator.py; vLLM's and SGLang's
pipeline stages):
- DP-attention (dp groups of a = tp / dp ranks, each serving its own requests; a group's batch is the instance's
  split evenly, the largest share taken, and the blocks after attention compute the instance's tokens): attention
  over the group's tokens split over its a ranks (an all-reduce in the group when a > 1); before the MLP or MoE
  block an all-gather of every group's tokens over the tp ranks, after it a reduce-scatter that hands each group
  its tokens back; the block itself over all tokens on all tp ranks.
- Expert parallelism (ep = tp: every rank holds experts / ep whole experts): each rank routes its share of its
  attention group's tokens (ceil(T_group / a): a reduce-scatter after attention instead of the all-reduce when
  a > 1, an all-gather after the block), dispatches them to the experts' ranks (an all-to-all), runs its experts on
  what arrives (tokens x k / ep routed tokens per rank under uniform routing) and the shared experts on its own
  tokens (whole on every rank under DeepEP, as SGLang builds them, else split over tp), and combines the outputs
  back (an all-to-all). Dense layers run as without expert parallelism.
- Expert parallelism with 1 < ep < tp (SGLang --ep-size below --tp, "EP4TP2" on 8 GPUs): rank r holds experts
  [e * E / ep, (e + 1) * E / ep) for e = r // (tp / ep), each at 1 / (tp / ep) of its width (parallel_state's
  moe_ep / moe_tp groups). SGLang has no all-to-all here (DeepEP and Mooncake set --ep-size to --tp,
  server_args._handle_a2a_moe): every rank holds every token after attention, FusedMoE masks the experts it does not
  hold (expert_map -> -1) and computes its own on the tokens routed to them, the shared experts are split over tp as
  under TP, and one all-reduce over the tp ranks sums the routed and shared outputs (DeepseekV2MoE.forward_normal),
  exactly TP's collective. What changes is the experts' kernel: the busiest expert group's distinct experts and
  routed tokens (model.routing.busiest_expert_rank), at 1 / (tp / ep) width. Under DP-attention the block sits
  between the same all-gather and reduce-scatter as without expert parallelism; with pipeline stages each stage's
  MoE layers run so, between TP's all-reduces.
- Embedding and lm_head: under DP-attention the embedding is replicated (SGLang's DeepseekV2Model builds it with
  enable_tp=not is_dp_attention_enabled()) and the lm_head stays vocabulary-parallel over the tp ranks, after an
  all-gather of every group's final hidden states (SGLang's LogitsProcessor without --enable-dp-lm-head); the
  logits are all-gathered over the tp ranks, and each group samples its own tokens. Otherwise as with TP alone.
- Pipeline stages (pp stages of tp ranks): the layers split as stage_layers says; at each stage boundary every tp
  rank sends the hidden states and the residual (2 x T x hidden) to its peer in the next stage. Decode assumption:
  a batch of b requests runs as m = min(pp, b) micro-batches in flight; in steady state each stage works on one
  micro-batch while the others are in the other stages, so a step (every request one token) takes as long as one
  micro-batch of ceil(b / m) requests takes through every stage: the pass laid out here is that micro-batch's, over
  every layer, with a send/recv at each boundary. Each stage's host launches m micro-batches x its layers' kernels
  per step, as many launches as one host running every layer once. The sampled tokens' way back to the first stage
  is not costed.

Consecutive kernels with no collective between them are one segment here (a segment's end aligns the ranks).
`fuse_allreduce_rmsnorm` applies where TP's all-reduce closes a segment: the plain TP layout, an MoE layer with
1 < ep < tp (the same all-reduce; TensorRT-LLM's DeepseekV3DecoderLayer sets PRE_MOE_FUSION and POST_MOE_FUSION from
mapping.has_tp(), whatever the expert split) and pipeline stages; not the DP-attention or ep = tp collectives.
"""
from __future__ import annotations

from dataclasses import replace

from ..compiled import dataclass
from ..config.mirror import ModelCard
from .cards import BYTES_PER_VALUE, bytes_per_param, compute_dtype
from .cost import (Kernel, PassLayout, PassShape, Segment, _attention_kernels, _dense_mlp_kernels, _expert_kernels,
                   _gemm, _router_kernel, _sampling_kernels, _segment)
from .layout import TOP1_BYTES, pass_layout, verify_attention_launches
from .draft_cards import eh_proj_segment


@dataclass(frozen=True)
class Split:
    """How one instance's pass is split: tp ranks per stage, attention_tp of them per attention group, `groups`
    attention groups with their own requests, ep expert groups (dividing tp), pp stages; whether the shared experts are
    whole on every rank (under DeepEP) or split over tp."""

    tp: int
    attention_tp: int
    groups: int = 1
    ep: int = 1
    pp: int = 1
    replicated_shared: bool = False

    @classmethod
    def of(cls, parallelism, replicated_shared: bool = False) -> "Split":
        """From config.parallelism.Parallelism (one instance of it)."""
        groups = parallelism.dp if parallelism.dp_attention else 1
        return cls(parallelism.tp, parallelism.attention_tp, groups, parallelism.ep, parallelism.pp, replicated_shared)

    @property
    def is_plain(self) -> bool:
        return (self.groups, self.ep, self.pp, self.attention_tp) == (1, 1, 1, self.tp)


def stage_layers(num_layers: int, pp: int) -> list[range]:
    """Layer indices of each pipeline stage (SGLang's get_pp_indices without SGLANG_PP_LAYER_PARTITION: equal
    shares, the last `num_layers % pp` stages one layer more)."""
    base, extra = divmod(num_layers, pp)
    sizes = [base + (1 if stage >= pp - extra else 0) for stage in range(pp)]
    starts = [sum(sizes[:stage]) for stage in range(pp)]
    return [range(start, start + size) for start, size in zip(starts, sizes)]


def share(shape: PassShape, parts: int) -> PassShape:
    """The largest of `parts` even shares of a batch: ceil(b / parts) requests with their part of the context."""
    if parts <= 1 or shape.batch <= 0:
        return shape
    batch = -(-shape.batch // parts)
    return replace(shape, batch=batch, context=round(shape.context * batch / shape.batch),
                   padding=-(-shape.padding // parts), padding_rows=-(-shape.padding_rows // parts))


def micro_batch(shape: PassShape, pp: int) -> PassShape:
    """One of min(pp, b) micro-batches in flight (the pipelining assumption above)."""
    return share(shape, min(pp, shape.batch))


class _Layout:
    """Distinct segments by name, and the pass's order of them."""

    def __init__(self, card: ModelCard):
        self.card = card
        self.segments: list[Segment] = []
        self.index: dict[str, int] = {}
        self.order: list[int] = []

    def add(self, name: str, make) -> None:
        """Append segment `name`, built by make() the first time it is seen (every layer alike costs it once)."""
        if name not in self.index:
            self.index[name] = len(self.segments)
            self.segments.append(make())
        self.order.append(self.index[name])

    def segment(self, kernels, launches, T, collective, nbytes, group="tp", tokens=0) -> Segment:
        seg = _segment(list(kernels), launches, T, self.card, collective, int(nbytes))
        return replace(seg, group=group, collective_tokens=int(tokens))

    def done(self) -> PassLayout:
        return PassLayout(tuple(self.segments), tuple(self.order))


def split_pass_layout(card: ModelCard, split: Split, shape: PassShape, fused: bool = False,
                      eh_proj: str | None = None, separate_gate_up: tuple = (),
                      whole_embedding: bool = False, top1_gather: bool = False) -> PassLayout:
    """The per-rank segments of one pass of `shape` (the whole instance's batch) under `split`; `eh_proj`: an MTP
    module's input projection after the head (draft_cards.eh_proj_segment; replicated under DP-attention, where each group
    projects its own tokens); whole_embedding: the embedding whole on every rank, no all-reduce after it; top1_gather:
    the logits' all-gather is each rank's top-1 (layout.pass_layout; TP's only: under DP-attention the logits stay)."""
    if split.pp > 1:
        return _pipeline_layout(card, split, micro_batch(shape, split.pp), fused, separate_gate_up, whole_embedding)
    k, d, a = card.kernels, card.hidden_size, split.attention_tp
    act = BYTES_PER_VALUE[card.activation_dtype]
    group = share(shape, split.groups)  # the largest group's requests: the other groups wait for it
    everyone = shape  # what the MLP and MoE blocks compute: the instance's tokens, every group's together
    Tg, T_all = group.query_tokens, everyone.query_tokens
    out = _Layout(card)
    emb = Kernel("embedding", 0.0, Tg * d * (act + BYTES_PER_VALUE[card.weights.embedding]), card.activation_dtype)
    vocab_parallel = "allreduce" if split.groups == 1 and split.tp > 1 and not whole_embedding else None
    out.add("head", lambda: out.segment([emb], 1, Tg, vocab_parallel, Tg * d * act if vocab_parallel else 0))
    if eh_proj:
        mode = eh_proj if split.groups == 1 else "replicated"
        out.add("eh_proj", lambda: eh_proj_segment(card, split.tp, Tg, mode))
    attention = _attention_kernels(card, a, group)
    attention_launches = k.attention + verify_attention_launches(k, group)
    plain = pass_layout(card, split.tp, group, fused, separate_gate_up=separate_gate_up) if split.groups == 1 else None
    for layer in range(card.num_layers):
        dense = card.moe is None or layer < card.num_dense_layers
        if not dense and split.ep > 1 and split.ep == split.tp:
            _ep_layer(out, card, split, group, everyone, attention, attention_launches)
        elif split.groups > 1:
            mlp = _dense_mlp_kernels(card, split.tp, T_all, separate_gate_up) if dense else \
                _moe_block(card, split, everyone)
            launches = k.dense_mlp if dense else k.moe
            gathered = T_all * d * act / split.tp  # each rank's share of every group's tokens
            if a > 1:
                out.add("attention_allreduce", lambda: out.segment(attention, attention_launches, Tg, "allreduce",
                                                                   Tg * d * act, "attention"))
                out.add("gather", lambda: out.segment([], 0, T_all, "allgather", gathered))
            else:
                out.add("attention_gather", lambda: out.segment(attention, attention_launches, Tg, "allgather",
                                                                gathered))
            name = "dense_scatter" if dense else "moe_scatter"
            out.add(name, lambda: out.segment(mlp, launches, T_all, "reducescatter", gathered))
        else:  # tensor parallelism's segments; an MoE layer with 1 < ep < tp keeps TP's all-reduce after its experts
            out.add("attention", lambda: plain.segments[1])
            if dense:
                out.add("dense", lambda: plain.segments[2])
            else:
                out.add("moe", lambda: replace(plain.segments[3], kernels=tuple(_moe_block(card, split, group))))
    if split.groups > 1:
        out.add("gather_final", lambda: out.segment([], 0, T_all, "allgather", T_all * d * act / split.tp))
    out.add("tail", lambda: _tail(out, card, split, group, everyone, top1_gather and split.groups == 1))
    return out.done()


def _moe_block(card: ModelCard, split: Split, shape: PassShape) -> list[Kernel]:
    """Router and experts on every token of `shape` on each tp rank: experts / ep experts at 1 / (tp / ep) width, the
    busiest expert group's load (ep > 1); the shared experts split over the tp ranks."""
    return [_router_kernel(card, shape.query_tokens)] + _expert_kernels(card, split.tp // split.ep, shape, split.ep,
                                                                         shared_tp=split.tp)


def _ep_layer(out: _Layout, card: ModelCard, split: Split, group: PassShape, everyone: PassShape, attention,
              attention_launches: int) -> None:
    """An MoE layer under expert parallelism: attention, route, dispatch, experts, combine (module docstring)."""
    k, d, a = card.kernels, card.hidden_size, split.attention_tp
    act = BYTES_PER_VALUE[card.activation_dtype]
    Tg = group.query_tokens
    mine = -(-Tg // a)  # tokens this rank routes
    router = _router_kernel(card, mine)
    if a > 1:
        out.add("attention_scatter", lambda: out.segment(attention, attention_launches, Tg, "reducescatter",
                                                         mine * d * act, "attention"))
        out.add("router", lambda: out.segment([router], 1, mine, "dispatch", mine * d * act, "ep", mine))
    else:
        out.add("attention_router", lambda: out.segment(attention + [router], attention_launches + 1, Tg, "dispatch",
                                                        mine * d * act, "ep", mine))
    experts = _expert_kernels(card, split.tp // split.ep, everyone, split.ep, shared_tokens=mine,
                              shared_tp=1 if split.replicated_shared else split.tp)
    out.add("experts", lambda: out.segment(experts, k.moe - 1, mine, "combine", mine * d * act, "ep", mine))
    if a > 1:
        out.add("gather_attention", lambda: out.segment([], 0, Tg, "allgather", mine * d * act, "attention"))


def _tail(out: _Layout, card: ModelCard, split: Split, group: PassShape, everyone: PassShape,
          top1: bool = False) -> Segment:
    """Final norm, lm_head over the tp ranks' share of the vocabulary (on every group's tokens under DP-attention),
    logits all-gather over the tp ranks (top1: each rank's top-1 token and logit), sampling of the group's tokens."""
    k, d = card.kernels, card.hidden_size
    act = BYTES_PER_VALUE[card.activation_dtype]
    T, vocab = everyone.query_tokens, card.vocab_size / split.tp
    lm_head = _gemm("lm_head", T, d, vocab, bytes_per_param(card, card.weights.lm_head), act,
                    compute_dtype(card, card.weights.lm_head), card.weights.lm_head)
    launches = k.per_pass + (k.verify_per_pass if group.verify else 0)
    return out.segment([lm_head] + _sampling_kernels(card, group), launches, group.query_tokens,
                       "allgather" if split.tp > 1 else None, T * (TOP1_BYTES if top1 else vocab * act))


def _pipeline_layout(card: ModelCard, split: Split, shape: PassShape, fused: bool,
                     separate_gate_up: tuple = (), whole_embedding: bool = False) -> PassLayout:
    """Tensor parallelism inside each stage (1 < ep < tp: its MoE block's experts as _moe_block's), and a send/recv
    of 2 x T x hidden at each stage boundary."""
    plain = pass_layout(card, split.tp, shape, fused, separate_gate_up=separate_gate_up,
                        whole_embedding=whole_embedding)
    if split.ep > 1 and card.moe is not None:
        moe = replace(plain.segments[3], kernels=tuple(_moe_block(card, split, shape)))
        plain = PassLayout(plain.segments[:3] + (moe,) + plain.segments[4:], plain.order)
    act = BYTES_PER_VALUE[card.activation_dtype]
    send = Segment((), 0, 0.0, "sendrecv", int(2 * shape.query_tokens * card.hidden_size * act), "pipeline")
    boundary = len(plain.segments)
    last_of_stage = {stage.stop - 1 for stage in stage_layers(card.num_layers, split.pp)[:-1]}
    order = [plain.order[0]]
    for layer in range(card.num_layers):
        order += plain.order[1 + 2 * layer: 3 + 2 * layer]
        if layer in last_of_stage:
            order.append(boundary)
    order.append(plain.order[-1])
    return PassLayout(plain.segments + (send,), tuple(order))
