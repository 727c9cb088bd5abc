"""The read-only view of the running batch that a speculation policy decides from (speculation.protocols.BatchState).

A policy sees the batch size, the tokens cached for it, the tokens each request has generated, what the n-gram cache
would match for each request, and the batch-time model (the mean cost of a step); it cannot change the server.
"""
from __future__ import annotations

from .records import KIND_DECODE, KIND_SPEC


class BatchView:
    """What a policy may read of a server, computed from the server's state when asked."""

    __slots__ = ("_server",)

    def __init__(self, server):
        self._server = server

    @property
    def batch(self) -> int:
        return len(self._server.admission.active)

    @property
    def context_tokens(self) -> int:
        return sum(r.prompt_tokens + r.generated for r in self._server.admission.active)

    def generated(self) -> list[int]:
        return [r.generated for r in self._server.admission.active]

    def match_tokens(self) -> list[int]:
        server = self._server
        model = server.slots[0].acceptance if server.slots else None
        return [model.match_tokens(r.acceptance_state) for r in server.admission.active] if model else []

    def expected_step_us(self, decision, batch: int, context: int) -> float:
        server = self._server
        kind = KIND_SPEC if decision else KIND_DECODE
        return server.costs.mean_step_us(server.step_spec(kind, decision, batch), context)
