"""Requests: when they arrive, how long their prompts are, how many tokens they generate."""
from __future__ import annotations

from dataclasses import dataclass

from .config.scenario import Workload


@dataclass
class Request:
    """One request's progress; times are simulated microseconds."""

    request_id: int
    prompt_tokens: int
    output_tokens: int
    arrived_at: float = 0.0
    admitted_at: float | None = None
    first_token_at: float | None = None
    completed_at: float | None = None
    generated: int = 0
    acceptance_state: object = None  # a regime acceptance model's per-request state

    @property
    def context(self) -> int:
        return self.prompt_tokens + self.generated

    @property
    def remaining(self) -> int:
        return self.output_tokens - self.generated

    @property
    def is_done(self) -> bool:
        return self.generated >= self.output_tokens


def make_requests(workload: Workload) -> list[Request]:
    """All requests of a closed workload, arriving at time zero."""
    return [Request(i, workload.prompt_tokens, workload.output_tokens) for i in range(workload.requests)]
