"""The workload: when requests arrive, how long their prompts and outputs are, and how the server batches them."""

from typing import Annotated, Literal, Optional, Union

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from . import rules
from .base import Strict
from .surface import WorkloadSurface


MAX_SPAN_S = rules.MAX_SPAN_S


class FixedLength(Strict):
    """Every request the same length."""

    kind: Literal["fixed"]
    value: PositiveInt = Field(description="The length (tokens)")


class UniformLength(Strict):
    """Lengths uniform over [low, high]."""

    kind: Literal["uniform"]
    low: PositiveInt = Field(description="Shortest length (tokens)")
    high: PositiveInt = Field(description="Longest length (tokens)")

    _order = model_validator(mode="after")(rules.uniform_order)


class LognormalLength(Strict):
    """Lengths with a median and a log-space spread, clipped to [1, max]."""

    kind: Literal["lognormal"]
    median: PositiveFloat = Field(description="Median length (tokens)")
    sigma: float = Field(gt=0, le=10.0, description="log-space spread; measured request lengths have 0.5-2, and above "
                         "10 the distribution is a point mass at 1 and one at max")
    max: PositiveInt = Field(description="Longest length kept (tokens)")


Length = Union[PositiveInt, Annotated[Union[FixedLength, UniformLength, LognormalLength], Field(discriminator="kind")]]


class AllAtOnce(Strict):
    """Every request arrives at time 0."""

    kind: Literal["all_at_once"]


class RateArrivals(Strict):
    """Requests arrive at rate_per_s: evenly spaced (fixed_rate) or as a Poisson process with exponential gaps
    (poisson)."""

    kind: Literal["fixed_rate", "poisson"]
    rate_per_s: PositiveFloat = Field(description="Requests per second (the mean, for poisson)")


class ArrivalTrace(Strict):
    """Replayed arrivals: a CSV with arrival_s, prompt_tokens, output_tokens per request."""

    kind: Literal["trace"]
    file: str = Field(description="CSV path relative to the scenario file")


Arrival = Annotated[Union[AllAtOnce, RateArrivals, ArrivalTrace], Field(discriminator="kind")]


class LatencyTarget(Strict):
    """A request counts towards goodput when it meets both targets; the run meets the target when the `percentile`-th
    percentile of TTFT and of TPOT over its requests are within them (e.g. p90 TTFT <= 2 s and p90 TPOT <= 100 ms)."""

    ttft_ms: PositiveFloat = Field(2000.0, description="Longest time to the first token that meets the target")
    tpot_ms: PositiveFloat = Field(100.0, description="Longest mean time per output token after the first that meets the target")
    percentile: float = Field(90.0, gt=0, le=100, description=(
        "Percentile of requests whose TTFT and TPOT must be within the targets for the run to meet them (50-99.9 "
        "typical; 100: every request)"))


OLD_NAMES, renamed_concurrency = rules.OLD_NAMES, rules.renamed_concurrency  # (read from here by loader)


class Workload(WorkloadSurface, Strict):
    """The requests to serve: arrivals, prompt and output lengths, batching and the latency target."""

    requests: PositiveInt = Field(1, description="Requests to serve (a trace file sets its own)")
    arrival: Arrival = Field(AllAtOnce(kind="all_at_once"), description="When requests arrive: all_at_once, fixed_rate, poisson or trace")
    prompt_tokens: Length = Field(1000, description="Prompt length: tokens, or a distribution (fixed, uniform, lognormal)")
    output_tokens: Length = Field(2048, description="Generated tokens per request: a number or a distribution (fixed, uniform, lognormal)")
    max_running_requests: PositiveInt = Field(1, description=(
        "The engine's cap on requests running at once in each instance, the decode batch cap (SGLang "
        "--max-running-requests, vLLM --max-num-seqs); the old key `concurrency` still loads as this one"))
    max_concurrency: Optional[PositiveInt] = Field(None, description=(
        "The benchmark client's cap on requests in flight (vllm bench serve / sglang.bench_serving "
        "--max-concurrency): a request is sent when it has arrived and fewer are outstanding, and its TTFT and "
        "E2E latency count from then (docs/metrics.md); none: each request is sent when it arrives"))
    turns: PositiveInt = Field(1, le=64, description=(
        "Turns of a conversation: request i is turn i % turns of conversation i // turns, and each later turn is "
        "sent when the one before it completes; with max_concurrency C, C conversations run at once, each keeping "
        "its client through its turns (a benchmark thread running a conversation's turns in order, as SGLang's "
        "benchmark/mtbench run_batch(num_threads=C) does). Every turn has the workload's lengths. Needs arrival "
        "all_at_once and one instance"))
    stop_strings: NonNegativeInt = Field(0, le=64, description=(
        "Stop strings each request carries (SGLang's frontend adds its chat template's end-of-turn string): the "
        "engine then decodes the output's tail to text at each finish check (engine profile speculative_host.<code>.stop_check_us)"))
    max_prefill_tokens: PositiveInt = Field(8192, description="Prompt tokens per prefill step (chunked prefill)")
    kv_overflow: Literal["queue", "preempt"] = Field(
        "queue", description="queue: admit a request only when its whole KV cache fits; preempt: admit on its prompt, "
                             "evict the newest request when the cache fills (it is recomputed later)")
    target: LatencyTarget = Field(LatencyTarget(), description="Latency target for goodput")
    seed_offset: int = Field(0, ge=0, description="Varies arrivals and lengths without changing acceptance draws")
    corpus: Optional[Literal["chat", "code"]] = Field(None, description="Text the requests stand for (chat: ShareGPT, "
                                                      "code: HumanEval + code chats): request i's prompt and output are "
                                                      "the tokens of stream corpus_stream + i; a model-free drafter runs on them")
    corpus_stream: int = Field(0, ge=0, description="The corpus stream the first request reads (later ones follow)")

    @model_validator(mode="before")
    @classmethod
    def _old_name(cls, data):
        return rules.workload_old_names(data)  # the mirror's Workload runs the same (config/mirror_gen.py)

    _span = model_validator(mode="after")(rules.workload_span)
