"""Speculation policies: when to speculate, with how many drafts, with which drafter."""
from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import Field, NonNegativeFloat, PositiveInt, model_validator

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
    estimator: Literal["ema", "window"] = "ema"
    ema_alpha: Fraction = Field(0.3, description="Weight of the newest speculative step in the EMA")
    window: PositiveInt = Field(8, description="Speculative steps averaged by the window estimator")
    hysteresis: NonNegativeFloat = Field(0.1, description="Relative margin: off below (1-h) x break-even, on above (1+h)")
    probe_every: PositiveInt = Field(16, description="While off, speculate once every this many plain steps")
    max_probe_every: PositiveInt = Field(64, description="Probe interval ceiling: it doubles after each unpromising probe")
    probe_alpha: Fraction = Field(0.5, description="Weight of a probe's accept length in the estimate while off")


class AdaptiveLengthPolicy(Strict):
    """Pick the draft length from a small set by the recent accept length (SGLang's adaptive speculation)."""

    kind: Literal["adaptive_length"]
    choices: list[PositiveInt] = Field(default_factory=lambda: [1, 2, 3, 5], min_length=1)
    ema_alpha: Fraction = 0.3
    spare: NonNegativeFloat = Field(1.0, description="Drafts offered beyond the recent accepted count")


class FallbackDrafter(Strict):
    """The second drafter of a multi-drafter policy (e.g. a trained head where the n-gram cache has no match)."""

    method: Literal["eagle3", "mtp", "draft_model"]
    draft_tokens: PositiveInt = 3
    verify: Literal["chain", "tree"] = "chain"
    tree: TreeShape = TreeShape()
    acceptance: Acceptance


class MultiDrafterPolicy(Strict):
    """n-gram drafts while the cache holds a long enough match for the request, the fallback drafter otherwise."""

    kind: Literal["multi_drafter"]
    min_match_tokens: PositiveInt = Field(3, description="Shortest cache match worth drafting from")
    fallback: FallbackDrafter


Policy = Annotated[Union[StaticPolicy, HybridPolicy, AdaptiveLengthPolicy, MultiDrafterPolicy],
                   Field(discriminator="kind")]
