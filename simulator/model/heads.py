"""Prediction heads on the target's last hidden state (Medusa, Hydra) as a model card without decoder layers.

A Medusa head is `num_layers` ResBlocks (a hidden x hidden linear + SiLU + residual) and an lm-head (hidden x vocab);
K heads read the same hidden state, so one pass runs them all: K x layers small GEMMs and K lm-heads. A Hydra head
i (1-based) also reads the embeddings of the i tokens drafted before it (Hydra's grounded heads): its first
ResBlock is a ((i + 1) hidden) x hidden linear plus a residual projection of the same size, so head i runs alone,
once the tokens before it are known. A heads card keeps the target's hidden size; `vocab_size` counts every head's
lm-head rows and `dense_intermediate_size` the summed output width of the ResBlock GEMMs (each hidden wide in, so
one GEMM of that width has their FLOPs and weight bytes). Assumptions: the lm-heads are split over the TP ranks
like the target's (logits all-gathered), the ResBlocks are replicated on every rank.
"""
from __future__ import annotations

from ..config.mirror import ModelCard
from .cards import BYTES_PER_VALUE, bytes_per_param, compute_dtype


def medusa_card(card: ModelCard, num_heads: int, num_layers: int) -> ModelCard:
    """K Medusa heads, each `num_layers` ResBlocks and an lm-head, run together on one hidden state."""
    d = card.hidden_size
    return _heads(card, f"{card.name}-medusa-{num_heads}x{num_layers}", num_heads, num_heads * num_layers * d)


def hydra_card(card: ModelCard, head: int, num_layers: int) -> ModelCard:
    """Hydra's head `head` (1-based): a first ResBlock over the hidden state and `head` token embeddings (its linear
    and its residual projection), num_layers - 1 plain ResBlocks, one lm-head."""
    d = card.hidden_size
    width = 2 * (head + 1) * d + (num_layers - 1) * d
    return _heads(card, f"{card.name}-hydra-{head}x{num_layers}", 1, width)


def _heads(card: ModelCard, name: str, num_heads: int, resblock_width: int) -> ModelCard:
    # model_copy skips validation on purpose: num_layers 0 marks a heads card (pass_layout, weight_bytes_per_gpu)
    return card.model_copy(update={"name": name, "num_layers": 0, "num_dense_layers": 0, "moe": None,
                                   "vocab_size": num_heads * card.vocab_size, "dense_intermediate_size": resblock_width,
                                   "mtp_layers": 0, "draft_head": None})


def head_cards(card: ModelCard, speculation) -> dict:
    """The cards a speculation config's heads run as, by part name: medusa, or hydra1 .. hydraK."""
    h = speculation.heads
    if speculation.method == "medusa":
        return {"medusa": medusa_card(card, h.num_heads, h.num_layers)}
    if speculation.method == "hydra":
        return {f"hydra{i}": hydra_card(card, i, h.num_layers) for i in range(1, h.num_heads + 1)}
    return {}


def is_heads_card(card: ModelCard) -> bool:
    return card.num_layers == 0


def heads_weight_bytes(card: ModelCard, tp: int) -> float:
    """A rank's share of a heads card: its lm-heads split over tp, its ResBlocks whole."""
    d, w = card.hidden_size, card.weights
    return d * (card.vocab_size / tp + card.dense_intermediate_size) * bytes_per_param(card, w.lm_head)


def heads_layout(card: ModelCard, tp: int, shape):
    """One segment: the ResBlocks' GEMM, the lm-heads' GEMM, logits processing and top-k, then the logits
    all-gather (tp > 1); its element-wise launches counted as the target's tail (kernels.per_pass)."""
    from .cost import PassLayout, _gemm, _sampling_kernels, _segment

    T = shape.query_tokens
    d, w = card.hidden_size, card.weights
    act = BYTES_PER_VALUE[card.activation_dtype]
    wb, cd = bytes_per_param(card, w.lm_head), compute_dtype(card, w.lm_head)
    resblocks = _gemm("head_resblocks", T, d, card.dense_intermediate_size, wb, act, cd, w.lm_head)
    lm_heads = _gemm("head_lm_heads", T, d, card.vocab_size / tp, wb, act, cd, w.lm_head)
    gather = int(T * card.vocab_size / tp * act) if tp > 1 else 0
    kernels = [resblocks, lm_heads] + _sampling_kernels(card, shape)
    segment = _segment(kernels, card.kernels.per_pass, T, card, "allgather" if tp > 1 else None, gather)
    return PassLayout((segment,), (0,))
