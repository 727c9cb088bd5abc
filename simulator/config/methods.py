"""Settings of the speculation methods whose cost follows from their own structure: Medusa / Hydra heads,
lookahead decoding, EAGLE-2's dynamic tree and self-speculation with a sparse-KV draft (speculation/methods.py)."""

from pydantic import Field, NonNegativeFloat, PositiveInt, model_validator

from . import rules
from .base import Strict


class HeadsConfig(Strict):
    """Medusa (method medusa: K heads on the last hidden state, run together) or Hydra (method hydra: head i also
    reads the i tokens drafted before it, so the heads run one after another, over the tree's nodes a depth)."""

    num_heads: PositiveInt = Field(4, le=16, description="Heads (medusa_num_heads / hydra_num_heads): the verify tree's depth at most")
    num_layers: PositiveInt = Field(1, le=8, description="ResBlocks per head (medusa_num_layers / hydra_num_layers)")


class LookaheadConfig(Strict):
    """Lookahead decoding (Fu et al. 2024, LADE): each step one pass carries the lookahead branch (a Jacobi window of
    W positions by N - 1 levels, whose outputs fill the n-gram pool) and the verification branch (G candidate
    n-grams of N - 1 tokens from the pool): W (N - 1) + G (N - 1) tokens beside the current one. The G candidates
    are the verify tree (G chains of N - 1 from the root); the pool lookup runs on the host."""

    window: PositiveInt = Field(7, le=64, description="W: lookahead window (LADE WINDOW_SIZE)")
    ngram: int = Field(5, ge=2, le=16, description="N: n-gram size (LADE LEVEL)")
    guesses: PositiveInt = Field(7, le=64, description="G: candidate n-grams verified a step (LADE GUESS_SET_SIZE)")
    host_us_per_step: NonNegativeFloat = Field(100.0, description="Pool update and candidate lookup per step (*estimate*)")
    host_us_per_request: NonNegativeFloat = Field(20.0, description="Per request in the batch (*estimate*)")


class DynamicTreeConfig(Strict):
    """EAGLE-2's dynamic draft tree as SGLang runs it (EAGLEWorker): num_steps draft passes, each expanding the
    eagle_topk nodes of highest path confidence by their top-k children; then the num_draft_tokens - 1 candidates of
    highest path confidence (root excluded) are verified. Confidence is the acceptance model's (the draft taken as
    calibrated, EAGLE-2's premise)."""

    eagle_topk: PositiveInt = Field(4, le=16, description="--speculative-eagle-topk (SGLang's default 4)")
    num_steps: PositiveInt = Field(5, le=16, description="--speculative-num-steps (SGLang's default 5)")
    num_draft_tokens: int = Field(8, ge=2, le=256, description="--speculative-num-draft-tokens, the root included "
                                  "(SGLang's default 8); speculation.draft_tokens must be one less")

    _candidates = model_validator(mode="after")(rules.dynamic_tree_candidates)


class SparseKVConfig(Strict):
    """Self-speculation with a sparse-KV draft (MagicDec / TriForce): the target drafts itself reading only
    kv_budget_tokens of each request's KV cache (StreamingLLM: sink + recent window; TriForce: retrieved chunks), so
    a draft pass reads the weights and a bounded KV; the verify reads the whole cache once for every draft."""

    kv_budget_tokens: PositiveInt = Field(512, description="Cached tokens a draft pass reads per request (MagicDec: 512 "
                                          "for its StreamingLLM draft)")
