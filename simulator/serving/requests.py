"""Requests: when they arrive, how long their prompts are, how many tokens they generate.

Arrivals and lengths come from their own random stream (seed, workload.seed_offset), apart from the acceptance and
timing streams, so changing the workload's shape leaves the acceptance draws of a comparison alone.
"""
from __future__ import annotations

import os

import numpy as np

from ..compiled import dataclass
from ..config.mirror import ArrivalTrace, FixedLength, LognormalLength, RateArrivals, UniformLength, Workload
from ..config.rules import MAX_SPAN_S
from ..config.csv_rows import csv_rows
from ..config.errors import ConfigError
from ..config.typical import max_length, mean_length  # noqa: F401  (re-exported)


# The workload's stream in the seed sequence: any fixed key apart from the other streams' (the server spawns the
# acceptance and jitter streams from the seed alone); 7919 is arbitrary, and fixed so that runs stay reproducible.
WORKLOAD_STREAM = 7919


@dataclass(slots=True)
class Request:
    """One request's progress; times are simulated microseconds (slots: a run holds every request)."""

    request_id: int
    prompt_tokens: int
    output_tokens: int
    arrived_at: float = 0.0
    admitted_at: float | None = None
    first_token_at: float | None = None
    completed_at: float | None = None
    generated: int = 0
    prefilled: int = 0  # prompt (or, after a preemption, prompt + generated) tokens already in the KV cache
    prefill_target: int = 0  # tokens the current prefill must cache
    preemptions: int = 0
    acceptance_state: object = None  # a regime acceptance model's per-request state
    instance: int = 0  # the deployment's instance that served it (serving.router; disaggregated: the decode one)
    kv_ready: bool = False  # its KV cache arrived from a prefill instance: it decodes when admitted, without a prefill




def sample_lengths(length, n: int, rng: np.random.Generator) -> np.ndarray:
    if isinstance(length, int):
        return np.full(n, length)
    if isinstance(length, FixedLength):
        return np.full(n, length.value)
    if isinstance(length, UniformLength):
        return rng.integers(length.low, length.high + 1, n)
    values = np.rint(length.median * np.exp(length.sigma * rng.standard_normal(n)))
    return np.clip(values, 1, length.max).astype(int)


def read_arrivals(config: ArrivalTrace, base_dir: str, file: str) -> list[tuple[float, int, int]]:
    path = os.path.normpath(os.path.join(base_dir, config.file))
    if not os.path.isfile(path):
        raise ConfigError(file, "workload.arrival.file", f"arrival trace not found: {path}")
    rows = []
    allowed = f"0 <= arrival_s <= {MAX_SPAN_S:.0e}, prompt_tokens >= 1, output_tokens >= 1"
    for line, row in csv_rows(path, ("arrival_s", "prompt_tokens", "output_tokens")):
        try:
            arrival, prompt, output = float(row["arrival_s"]), int(row["prompt_tokens"]), int(row["output_tokens"])
        except (TypeError, ValueError):
            raise ConfigError(path, f"line {line}", "arrival_s must be a number and the token counts integers",
                              allowed) from None
        if not (0 <= arrival <= MAX_SPAN_S and prompt >= 1 and output >= 1):  # NaN fails too
            raise ConfigError(path, f"line {line}", f"bad row {row}", allowed)
        rows.append((arrival, prompt, output))
    if not rows:
        raise ConfigError(path, "rows", "the arrival trace has no rows", "one row per request")
    return sorted(rows)


def make_requests(workload: Workload, seed: int = 0, base_dir: str = ".", file: str = "<scenario>") -> list[Request]:
    """The workload's requests, with arrival times (microseconds) and lengths, in arrival order."""
    rng = np.random.default_rng([seed, WORKLOAD_STREAM, workload.seed_offset])
    arrival = workload.arrival
    if isinstance(arrival, ArrivalTrace):
        rows = read_arrivals(arrival, base_dir, file)
        return [Request(i, p, o, arrived_at=a * 1e6) for i, (a, p, o) in enumerate(rows)]
    n = workload.requests
    prompts = sample_lengths(workload.prompt_tokens, n, rng)
    outputs = sample_lengths(workload.output_tokens, n, rng)
    if isinstance(arrival, RateArrivals) and arrival.kind == "fixed_rate":
        times = np.arange(n) / arrival.rate_per_s
    elif isinstance(arrival, RateArrivals):  # poisson
        times = np.cumsum(rng.exponential(1.0 / arrival.rate_per_s, n)) - 0.0
        times -= times[0]
    else:
        times = np.zeros(n)
    return [Request(i, int(p), int(o), arrived_at=float(t) * 1e6) for i, (p, o, t) in enumerate(zip(prompts, outputs, times))]
