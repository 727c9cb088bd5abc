"""The draft's own model cards: an EAGLE-style head and an MTP module as cards of the target's kind, and an MTP
module's input projection (eh_proj): its segment in a draft pass and the bytes it holds on one rank."""
from __future__ import annotations

from ..config.mirror import DraftHead, GQAAttention, ModelCard
from .cards import BYTES_PER_VALUE, compute_dtype
from .cost import Segment, _gemm, _segment


# an MTP module's launches before its decoder layer besides eh_proj: enorm, hnorm and the concatenation
# (SGLang DeepseekModelNextN.forward, vLLM DeepSeekMultiTokenPredictorLayer.forward, TensorRT-LLM DeepseekV3MTP.forward)
EH_PROJ_SMALL_KERNELS = 3


def eh_proj_segment(card: ModelCard, tp: int, T: int, mode: str) -> Segment:
    """An MTP module's input projection, every draft pass: the normalised token embedding and hidden state
    concatenated (T x 2 hidden) times eh_proj (2 hidden x hidden, bf16: an unquantised linear layer in every engine
    read). Replicated, each rank reads all of it and no collective follows; row_parallel (TensorRT-LLM from PR #5689),
    each rank reads 1 / tp of its rows on its slice of the input and an all-reduce of T x hidden sums them."""
    d, act = card.hidden_size, BYTES_PER_VALUE[card.activation_dtype]
    split = _eh_proj_ranks(tp, mode)
    wd = card.activation_dtype
    kernel = _gemm("eh_proj", T, 2 * d / split, d, BYTES_PER_VALUE[wd], act, compute_dtype(card, wd), wd)
    collective = "allreduce" if split > 1 else None
    return _segment([kernel], 1 + EH_PROJ_SMALL_KERNELS, T, card, collective, int(T * d * act))


def _eh_proj_ranks(tp: int, mode: str) -> int:
    """The ranks eh_proj's rows are split over: the tp ranks where row_parallel, else one (replicated)."""
    return tp if mode == "row_parallel" and tp > 1 else 1


def eh_proj_bytes(card: ModelCard, tp: int, mode: str | None) -> float:
    """Bytes one rank holds of an MTP card's eh_proj weights (one 2 hidden x hidden matrix per module); 0 without."""
    if mode is None:
        return 0.0
    weights = card.num_layers * 2 * card.hidden_size ** 2 * BYTES_PER_VALUE[card.activation_dtype]
    return weights / _eh_proj_ranks(tp, mode)


def draft_head_card(card: ModelCard) -> ModelCard:
    """An EAGLE-style head as a one-layer dense model card sharing the target's hidden size."""
    head: DraftHead = card.draft_head
    attention = GQAAttention(kind="gqa", num_heads=head.num_heads, num_kv_heads=head.num_kv_heads, head_dim=head.head_dim)
    weights = card.weights.model_copy(update={"attention": "bf16", "dense_mlp": "bf16", "lm_head": "bf16"})
    return card.model_copy(update={
        "name": f"{card.name}-draft-head", "num_layers": head.num_layers, "num_dense_layers": head.num_layers,
        "vocab_size": head.draft_vocab_size, "attention": attention, "dense_intermediate_size": head.intermediate_size,
        "moe": None, "weights": weights, "mtp_layers": 0, "draft_head": None,
    })


# the weight families of a decoder layer (embedding and lm_head are the model's, which an MTP module shares)
LAYER_WEIGHTS = ("attention", "dense_mlp", "experts", "shared_experts", "router")


def mtp_card(card: ModelCard) -> ModelCard:
    """A multi-token-prediction module: one decoder layer of the target's own kind, sharing its embedding and lm_head
    (the memory budget holds them once: SGLang's EAGLE worker hands the draft the target's tensors, set_embed_and_head,
    and the checkpoint's own copies are never loaded, deepseek_nextn.py); its layer weights in `weights.mtp`'s dtype
    where the card states one (else each family as the target's)."""
    dense = card.num_dense_layers >= card.num_layers
    update = {"name": f"{card.name}-mtp", "num_layers": card.mtp_layers,
              "num_dense_layers": card.mtp_layers if dense else 0, "draft_head": None, "mtp_layers": 0}
    if card.weights.mtp is not None:
        update["weights"] = card.weights.model_copy(update=dict.fromkeys(LAYER_WEIGHTS, card.weights.mtp))
    return card.model_copy(update=update)
