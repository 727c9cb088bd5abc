"""Speculation settings: the drafter, the verify shape (chain or token tree) and the acceptance model."""

from typing import Annotated, Literal, Optional, Union

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, field_validator, model_validator

from . import rules
from .base import Strict
from .methods import DynamicTreeConfig, HeadsConfig, LookaheadConfig, SparseKVConfig

Probability = Annotated[float, Field(ge=0.0, le=1.0)]


class IIDAcceptance(Strict):
    """Every draft token accepted with the same probability, whatever its depth or rank."""

    kind: Literal["iid"]
    alpha: Probability = Field(description="Acceptance probability of every draft token")


class PositionalAcceptance(Strict):
    """probs[d-1]: a depth-d draft accepted given its parent was; siblings tried in rank order, each with
    probability probs[d-1] * sibling_decay^(rank-1)."""

    kind: Literal["positional"]
    probs: list[Probability] = Field(min_length=1, description="probs[d-1]: a depth-d draft accepted given its parent was")
    sibling_decay: Probability = Field(1.0, description="Factor per sibling rank on a tree (1: every sibling alike)")
    repeat_last: bool = Field(False, description="Depths beyond the list reuse its last probability (else 0)")


class Regime(Strict):
    """Acceptance inside one regime of a regime-switching model."""

    probs: list[Probability] = Field(min_length=1, description="Per-depth acceptance in this regime (the last repeats)")
    sibling_decay: Probability = Field(1.0, description="Factor per sibling rank on a tree (1: every sibling alike)")


class BurstyAcceptance(Strict):
    """A Markov-modulated regime model: stretches of easy (repetitive) text and of novel text, per request."""

    kind: Literal["bursty"]
    easy: Regime = Field(description="Acceptance inside easy (repetitive) stretches")
    hard: Regime = Field(description="Acceptance inside hard (novel) stretches")
    mean_easy_tokens: float = Field(ge=1.0, description="Mean length of an easy stretch, in generated tokens")
    mean_hard_tokens: float = Field(ge=1.0, description="Mean length of a hard stretch, in generated tokens")
    start_easy: bool = Field(False, description="Each request starts in an easy stretch")


class NgramContextAcceptance(Strict):
    """An n-gram cache's hit chance grows with the tokens already seen: while the text repeats something in the
    cache (a copying stretch) the continuation is accepted with `copying` probabilities, otherwise with `novel` ones.
    With fill h = s^3 / (1 + s^3), s = seen / warmup_tokens (near 0 while the history is short, a plateau once it
    is long), a copying stretch starts per generated token with probability repetitiveness * h and lasts
    mean_copy_tokens on average (geometric), and novel text is accepted (1 + novel_gain * h) times as often (the
    cache holds more partial matches)."""

    kind: Literal["ngram_context"]
    repetitiveness: Probability = Field(description="Chance per token, in a long history, that the text starts to repeat")
    warmup_tokens: float = Field(ge=1.0, description="History length over which the cache fills (e-folding, tokens)")
    mean_copy_tokens: float = Field(ge=1.0, description="Mean length of a repeated stretch, in generated tokens")
    novel_gain: NonNegativeFloat = Field(0.0, description="Relative rise of novel-text acceptance once the cache is full")
    copying: Regime = Field(description="Acceptance while the text repeats something in the cache")
    novel: Regime = Field(description="Acceptance in novel text")


class TraceAcceptance(Strict):
    """Replay per-step accept lengths (bonus token included) from a CSV, e.g. exported from a serving engine's log."""

    kind: Literal["trace"]
    file: str = Field(description="CSV path, relative to the scenario file")
    column: str = Field("accept_len", description="Column holding the accept length of each step")


Acceptance = Annotated[Union[IIDAcceptance, PositionalAcceptance, BurstyAcceptance, NgramContextAcceptance,
                             TraceAcceptance], Field(discriminator="kind")]


class TreeShape(Strict):
    """The verify tree. Size counts the root: `draft_tokens` drafts make a tree of draft_tokens + 1 nodes."""

    kind: Literal["chain", "topk", "k_ary", "parents", "optimal"] = Field("optimal", description="chain, topk (k per depth), k_ary, parents (explicit) or optimal (Sequoia's program for the acceptance)")
    k: PositiveInt = Field(2, le=64, description="topk: nodes kept per depth; k_ary: children per node")
    depth: Optional[PositiveInt] = Field(None, le=255, description="topk / k_ary depth; optimal: maximum depth")
    parents: Optional[list[int]] = Field(None, max_length=256, description="parents: the explicit tree (root -1)")


class NgramDrafter(Strict):
    """Prompt lookup / n-gram cache proposals, computed on the host CPU (SGLang's C++ trie + Python tensor prep).
    With no acceptance model the proposals are computed over the workload's corpus (speculation/ngramtrie.py,
    lookup.py): SGLang's trie (its defaults: speculative_ngram_* server arguments) or vLLM's prompt lookup
    (prompt_lookup_min/max)."""

    host_us_per_step: NonNegativeFloat = Field(400.0, description="Lookup and tensor preparation per step")
    host_us_per_request: NonNegativeFloat = Field(150.0, description="Per request in the batch (mask building)")
    host_us_per_node: NonNegativeFloat = Field(0.05, description="Per trie node a request's insert, match and "
                                               "expansion visit (a hash-map probe; *estimate*)")
    algorithm: Literal["sglang_trie", "prompt_lookup"] = Field("sglang_trie", description="sglang_trie (SGLang NGRAM) or prompt_lookup (vLLM ngram)")
    branch_length: int = Field(18, ge=2, le=64, description="SGLang: tokens a trie path holds (speculative_ngram_branch_length)")
    min_match_window: PositiveInt = Field(1, description="SGLang: shortest suffix matched (speculative_ngram_min_match_window_size)")
    max_match_window: PositiveInt = Field(12, description="SGLang: longest suffix matched (speculative_ngram_max_match_window_size)")
    min_bfs_breadth: PositiveInt = Field(1, description="SGLang: children expanded under the longest match (speculative_ngram_min_bfs_breadth)")
    max_bfs_breadth: PositiveInt = Field(10, description="SGLang: children expanded under the shortest match (speculative_ngram_max_bfs_breadth)")
    prompt_lookup_min: PositiveInt = Field(2, description="vLLM: shortest n-gram matched (specsim's default; vLLM asks for it)")
    prompt_lookup_max: PositiveInt = Field(5, description="vLLM: longest n-gram matched (specsim's default; vLLM asks for it)")

    _windows = model_validator(mode="after")(rules.ngram_windows)


class SuffixDrafter(Strict):
    """SuffixDecoding (Arctic Inference; vLLM method suffix) over the workload's corpus: suffix trees of the request's
    prompt + output and of the requests' outputs, on the host CPU. Defaults: vLLM's suffix_decoding_* options."""

    max_tree_depth: int = Field(24, ge=2, le=256, description="Longest match + speculation a tree holds (suffix_decoding_max_tree_depth)")
    max_spec_factor: PositiveFloat = Field(1.0, description="Drafts per matched token (suffix_decoding_max_spec_factor)")
    max_spec_offset: float = Field(0.0, description="Drafts added to factor x match (Arctic's max_spec_offset)")
    min_token_prob: Probability = Field(0.1, description="Stop drafting below this estimated probability (suffix_decoding_min_token_prob)")
    cache_requests: bool = Field(True, description="Keep the requests' outputs, completed and running, in a shared tree (suffix_decoding_max_cached_requests > 0)")
    host_us_per_step: NonNegativeFloat = Field(100.0, description="Python-side preparation per step (*estimate*)")
    host_us_per_request: NonNegativeFloat = Field(20.0, description="Per request in the batch (*estimate*)")
    host_us_per_node: NonNegativeFloat = Field(0.05, description="Per tree node a request's update and match visit (*estimate*)")


class DraftModel(Strict):
    """A separate, smaller model drafting on the same ranks (its own TP passes)."""

    model: str = Field(description="Model card YAML or Hugging Face config.json of the draft model, relative to the scenario file")


class Speculation(Strict):
    """The drafter, the verify shape (chain or token tree) and the acceptance model."""

    method: Literal["none", "eagle3", "mtp", "draft_model", "ngram", "suffix", "medusa", "hydra", "lookahead",
                    "eagle2", "sparse_self"] = Field("none", description="The drafter: none (plain decode), eagle3, "
                                                     "mtp, draft_model, ngram, suffix, medusa, hydra, lookahead, eagle2 "
                                                     "(EAGLE head, dynamic tree) or sparse_self (sparse-KV self-draft)")
    draft_tokens: PositiveInt = Field(3, le=255, description="Draft tokens verified per step (tree: nodes besides the root)")
    verify: Literal["chain", "tree"] = Field("chain", description="Verify the drafts as a chain or as a token tree")
    tree: TreeShape = Field(TreeShape(), description="The verify tree's shape (verify: tree)")
    acceptance: Optional[Acceptance] = Field(None, description="How many drafts survive verification: iid, positional, bursty, ngram_context or trace, or {library: name} (a published acceptance, scenarios/acceptance/library.yaml); omitted for ngram / suffix: computed by the drafter over workload.corpus")
    ngram: NgramDrafter = Field(NgramDrafter(), description="The n-gram drafter: its algorithm and host costs")
    suffix: SuffixDrafter = Field(SuffixDrafter(), description="The suffix drafter (method: suffix)")
    draft_model: Optional[DraftModel] = Field(None, description="The draft model (method: draft_model)")
    heads: HeadsConfig = Field(HeadsConfig(), description="Medusa / Hydra heads (method: medusa or hydra)")
    lookahead: LookaheadConfig = Field(LookaheadConfig(), description="Lookahead decoding (method: lookahead)")
    dynamic_tree: DynamicTreeConfig = Field(DynamicTreeConfig(), description="EAGLE-2's dynamic tree (method: eagle2)")
    sparse_kv: SparseKVConfig = Field(SparseKVConfig(), description="The sparse-KV self-draft (method: sparse_self)")

    @field_validator("acceptance", mode="before")
    @classmethod
    def _library(cls, value):
        from .acceptance_library import resolve

        return resolve(value)

    _consistent = model_validator(mode="after")(rules.speculation_consistent)
