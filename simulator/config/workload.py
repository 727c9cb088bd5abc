"""The workload: when requests arrive, how long their prompts and outputs are, and how the server batches them."""
from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from .base import Strict


class FixedLength(Strict):
    kind: Literal["fixed"]
    value: PositiveInt


class UniformLength(Strict):
    kind: Literal["uniform"]
    low: PositiveInt
    high: PositiveInt

    @model_validator(mode="after")
    def _order(self):
        if self.high < self.low:
            raise ValueError("high is below low")
        return self


class LognormalLength(Strict):
    """Lengths with a median and a log-space spread, clipped to [1, max]."""

    kind: Literal["lognormal"]
    median: PositiveFloat
    sigma: PositiveFloat
    max: PositiveInt


Length = Union[PositiveInt, Annotated[Union[FixedLength, UniformLength, LognormalLength], Field(discriminator="kind")]]


class AllAtOnce(Strict):
    kind: Literal["all_at_once"]


class FixedRate(Strict):
    kind: Literal["fixed_rate"]
    rate_per_s: PositiveFloat


class PoissonArrivals(Strict):
    kind: Literal["poisson"]
    rate_per_s: PositiveFloat


class ArrivalTrace(Strict):
    """Replayed arrivals: a CSV with arrival_s, prompt_tokens, output_tokens per request."""

    kind: Literal["trace"]
    file: str = Field(description="CSV path relative to the scenario file")


Arrival = Annotated[Union[AllAtOnce, FixedRate, PoissonArrivals, ArrivalTrace], Field(discriminator="kind")]


class LatencyTarget(Strict):
    """A request counts towards goodput when it meets both targets."""

    ttft_ms: PositiveFloat = 2000.0
    tpot_ms: PositiveFloat = 100.0


class Workload(Strict):
    requests: PositiveInt = Field(1, description="Requests to serve (a trace file sets its own)")
    arrival: Arrival = AllAtOnce(kind="all_at_once")
    prompt_tokens: Length = 1000
    output_tokens: Length = 2048
    concurrency: PositiveInt = Field(1, description="Most requests running at once (the decode batch cap)")
    max_prefill_tokens: PositiveInt = Field(8192, description="Prompt tokens per prefill step (chunked prefill)")
    kv_overflow: Literal["queue", "preempt"] = Field(
        "queue", description="queue: admit a request only when its whole KV cache fits; preempt: admit on its prompt, "
                             "evict the newest request when the cache fills (it is recomputed later)")
    target: LatencyTarget = LatencyTarget()
    seed_offset: int = Field(0, description="Varies arrivals and lengths without changing acceptance draws")
