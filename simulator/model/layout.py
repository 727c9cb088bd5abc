"""One forward pass laid out per rank: the kernels of its parts (model/cost.py) grouped into segments that end in a
collective.

A pass over T query tokens (batch b, each with its cached context) on a TP group: every layer is an attention
segment and an MLP segment, each closed by an all-reduce of T x hidden activations (tensor parallelism's two
all-reduces per layer); a head segment (embedding) and a tail segment (final norm, lm_head, logits all-gather,
sampling) frame them. Heavy kernels (GEMMs, attention, experts) carry their FLOPs and bytes; the remaining
launches counted in the model card are small element-wise kernels touching only activations.
"""
from __future__ import annotations

from ..config.mirror import EagerKernels, ModelCard
from .cards import BYTES_PER_VALUE, bytes_per_param, compute_dtype
from .cost import (Kernel, PassLayout, PassShape, _attention_kernels, _dense_mlp_kernels, _gemm, _moe_kernels,
                   _sampling_kernels, _segment)

TOP1_BYTES = 2 * 4  # a rank's top-1 token id and its logit, as two fp32 (TensorRT-LLM get_local_max_and_combined)


def pass_layout(card: ModelCard, tp: int, shape: PassShape, fused_allreduce_norm: bool = False,
                split=None, eh_proj: str | None = None, *, vocab_parallel: bool = True,
                separate_gate_up: tuple = (), whole_embedding: bool = False, top1_gather: bool = False) -> PassLayout:
    """The per-rank segments of one forward pass: head, per layer attention + MLP, tail. A wider split (DP-attention,
    expert or pipeline parallelism: model.split_layout.Split) lays the pass out as split_layout does. `eh_proj`: an
    MTP module's pass (its input projection after the head, eh_proj_segment: replicated or row_parallel).
    vocab_parallel False (plain TP only): the embedding and lm_head whole on every rank, no collective after either;
    whole_embedding: the embedding alone whole on every rank, no all-reduce after it (runtime.replicated_embedding);
    top1_gather: the vocab-split logits' all-gather is each rank's top-1 token and logit, 2 fp32 a token
    (runtime.mtp_draft_gather);
    separate_gate_up: _dense_mlp_kernels'."""
    if card.num_layers == 0:  # prediction heads on the last hidden state (model.heads)
        from .heads import heads_layout
        return heads_layout(card, tp, shape)
    if split is not None and not split.is_plain:
        from .split_layout import split_pass_layout
        return split_pass_layout(card, split, shape, fused_allreduce_norm, eh_proj, separate_gate_up, whole_embedding,
                                 top1_gather)
    k: EagerKernels = card.kernels
    T = shape.query_tokens
    d = card.hidden_size
    act = BYTES_PER_VALUE[card.activation_dtype]
    ar_bytes = int(T * d * act)
    collective = "allreduce" if tp > 1 else None
    vocab_ranks = tp if vocab_parallel else 1
    fused = 1 if fused_allreduce_norm and tp > 1 else 0  # the norm after each all-reduce runs inside it
    emb = Kernel("embedding", 0.0, T * d * (act + BYTES_PER_VALUE[card.weights.embedding]), card.activation_dtype)
    split_embedding = vocab_ranks > 1 and not whole_embedding
    head = _segment([emb], 1, T, card, collective if split_embedding else None, ar_bytes if split_embedding else 0)
    attention_launches = k.attention - fused + verify_attention_launches(k, shape)
    attention = _segment(_attention_kernels(card, tp, shape), attention_launches, T, card, collective, ar_bytes)
    dense = _segment(_dense_mlp_kernels(card, tp, T, separate_gate_up), k.dense_mlp - fused, T, card, collective,
                     ar_bytes)
    moe = _segment(_moe_kernels(card, tp, shape), k.moe - fused, T, card, collective, ar_bytes) if card.moe else dense
    vocab = card.vocab_size / vocab_ranks
    lm_head = _gemm("lm_head", T, d, vocab, bytes_per_param(card, card.weights.lm_head), act,
                    compute_dtype(card, card.weights.lm_head), card.weights.lm_head)
    tail_launches = k.per_pass + (k.verify_per_pass if shape.verify else 0)
    gather = int(T * (TOP1_BYTES if top1_gather else vocab * act)) if vocab_ranks > 1 else 0
    tail = _segment([lm_head] + _sampling_kernels(card, shape), tail_launches, T, card,
                    "allgather" if vocab_ranks > 1 else None, gather)
    order = [0] + ([5] if eh_proj else [])
    for layer in range(card.num_layers):
        order += [1, 2 if layer < card.num_dense_layers else 3]
    order.append(4)
    if eh_proj:
        from .draft_cards import eh_proj_segment
    segments = (head, attention, dense, moe, tail) + ((eh_proj_segment(card, tp, T, eh_proj),) if eh_proj else ())
    return PassLayout(segments, tuple(order))


def verify_attention_launches(k: EagerKernels, shape: PassShape) -> int:
    """A layer's attention launches beyond k.attention in a verify pass: the tree mask's (tree_attention) or, for a
    chain, the explicit causal mask's (chain_verify_attention); none outside verify."""
    if shape.tree:
        return k.tree_attention
    return k.chain_verify_attention if shape.verify else 0
