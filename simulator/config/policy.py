"""Speculation policies: when to speculate, with how many drafts, with which drafter."""

from typing import Annotated, Literal, Optional, Union

from pydantic import Field, NonNegativeFloat, PositiveInt, model_validator

from . import rules
from .base import Strict
from .speculation import Acceptance, TreeShape

Fraction = Annotated[float, Field(gt=0.0, le=1.0)]


class StaticPolicy(Strict):
    """Always the configured drafter and draft length."""

    kind: Literal["static"]


class HybridPolicy(Strict):
    """Speculate while the recent accept length beats the break-even computed online from observed step times;
    hysteresis keeps it from flapping; while off it probes now and then to notice when acceptance recovers."""

    kind: Literal["hybrid"]
    estimator: Literal["ema", "window"] = Field("ema", description="ema: exponential moving average; window: mean of the last `window` speculative steps")
    ema_alpha: Fraction = Field(0.3, description="Weight of the newest speculative step in the EMA")
    window: PositiveInt = Field(8, description="Speculative steps averaged by the window estimator")
    hysteresis: NonNegativeFloat = Field(0.1, description="Relative margin: off below (1-h) x break-even, on above (1+h)")
    probe_every: PositiveInt = Field(16, description="While off, speculate once every this many plain steps")
    max_probe_every: PositiveInt = Field(64, description="Probe interval ceiling: it doubles after each unpromising probe")
    probe_alpha: Fraction = Field(0.5, description="Weight of a probe's accept length in the estimate while off")


class AdaptiveLengthPolicy(Strict):
    """Pick the draft length from a small set by the recent accept length (SGLang's adaptive speculation)."""

    kind: Literal["adaptive_length"]
    choices: list[Annotated[int, Field(ge=1, le=255)]] = Field(default_factory=lambda: [1, 2, 3, 5], min_length=1,
                                                              description="Draft lengths to choose from")
    ema_alpha: Fraction = Field(0.3, description="Weight of the newest step in the accept-length EMA")
    spare: NonNegativeFloat = Field(1.0, description="Drafts offered beyond the recent accepted count")


class FallbackDrafter(Strict):
    """The second drafter of a multi-drafter policy (e.g. a trained head where the n-gram cache has no match)."""

    method: Literal["eagle3", "mtp", "draft_model"] = Field(description="The fallback drafter")
    draft_tokens: PositiveInt = Field(3, le=255, description="Its draft tokens per step")
    verify: Literal["chain", "tree"] = Field("chain", description="Its verify shape: chain or tree")
    tree: TreeShape = Field(TreeShape(), description="Its tree shape (verify: tree)")
    acceptance: Acceptance = Field(description="Its acceptance model")


class MultiDrafterPolicy(Strict):
    """n-gram drafts while the cache holds a long enough match for the request, the fallback drafter otherwise."""

    kind: Literal["multi_drafter"]
    min_match_tokens: PositiveInt = Field(3, description="Shortest cache match worth drafting from")
    fallback: FallbackDrafter


class BatchThresholdPolicy(Strict):
    """Speculate only while the running batch is at most max_batch (vLLM's speculative_disable_by_batch_size)."""

    kind: Literal["batch_threshold"]
    max_batch: PositiveInt = Field(description="Largest running batch that still speculates")


class BatchRow(Strict):
    """One row of a batch table: the draft length up to a batch size."""

    max_batch: PositiveInt = Field(description="Largest running batch this row covers")
    draft_tokens: int = Field(ge=0, le=255, description="0: plain decode at these batch sizes")


class BatchTablePolicy(Strict):
    """Draft length by batch size: the first row whose max_batch covers the running batch."""

    kind: Literal["batch_table"]
    table: list[BatchRow] = Field(min_length=1, description="Rows sorted by max_batch")

    _sorted = model_validator(mode="after")(rules.table_sorted)


class GoodputPolicy(Strict):
    """Per step, the draft length with the most expected accepted tokens per second (SmartSpec's idea): expected
    tokens from the acceptance observed so far, step time from the batch-time model, for every choice incl. 0."""

    kind: Literal["goodput"]
    choices: list[Annotated[int, Field(ge=0, le=255)]] = Field(default_factory=lambda: [0, 1, 2, 3], min_length=1,
                                                              description="Draft lengths to choose from (0: plain decode)")
    prior_acceptance: Annotated[float, Field(ge=0.0, le=1.0)] = Field(0.6, description="Per-depth acceptance "
                                                                                         "assumed before any is seen")
    prior_weight: NonNegativeFloat = Field(4.0, description="Pseudo-observations the prior is worth")
    memory: PositiveInt = Field(256, description="Observations per depth after which old ones fade")

    _choices = model_validator(mode="after")(rules.choices_non_negative)


class DynamicLengthPolicy(GoodputPolicy):
    """Draft length per step from the batch and the recent acceptance (vLLM's dynamic speculation, SGLang's adaptive
    speculative decoding, SmartSpec), bounded by the graph shapes the engine captured: choices are the tiers it
    pre-built graphs for; with max_graph_tokens, a tier whose verify (batch x (k + 1) tokens) exceeds the largest
    captured shape is not taken (it would fall out of the graph), plain decode when none fits."""

    kind: Literal["dynamic_length"]
    max_graph_tokens: Optional[PositiveInt] = Field(None, description="Largest captured speculative graph, in tokens a "
                                                    "pass (vLLM: the largest cudagraph capture size); none: no bound")


class AssistantHeuristicPolicy(Strict):
    """transformers' assisted generation, num_assistant_tokens_schedule "heuristic" (transformers 4.37.1,
    generation/candidate_generator.py, AssistedCandidateGenerator): a chain of num_assistant_tokens drafts at each
    request's start (each generate() call builds its generator anew), +2 after a round whose drafts were all
    accepted, -1 otherwise, at least 1 (update_candidate_strategy); a round drafts at most max_new_tokens - generated
    - 1 (get_candidates). Chain verify only."""

    kind: Literal["assistant_heuristic"]
    num_assistant_tokens: PositiveInt = Field(5, le=255, description="Drafts in a request's first round "
                                              "(transformers' GenerationConfig default: 5)")
    max_new_tokens: int = Field(ge=2, description="The generate() call's max_new_tokens: a round drafts at most "
                                        "max_new_tokens - generated - 1, so the longest draft is max_new_tokens - 1 "
                                        "(the KV cache is reserved for it); past it, plain decode")


Policy = Annotated[Union[StaticPolicy, HybridPolicy, AdaptiveLengthPolicy, MultiDrafterPolicy, BatchThresholdPolicy,
                         BatchTablePolicy, GoodputPolicy, DynamicLengthPolicy, AssistantHeuristicPolicy],
                   Field(discriminator="kind")]
