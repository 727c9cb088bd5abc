"""Speculation policies: per step, speculate with how many drafts, or decode plainly; they observe each step."""
from __future__ import annotations


class StaticPolicy:
    """Always the configured method and draft length (0 drafts: plain decode)."""

    kind = "static"

    def __init__(self, draft_tokens: int):
        self.draft_tokens = draft_tokens

    def decide(self) -> int:
        return self.draft_tokens

    def observe(self, speculated: bool, step_us: float, tokens: float, batch: int) -> None:
        pass


def build_policy(config, speculation) -> StaticPolicy:
    depth = speculation.draft_tokens if speculation.method != "none" else 0
    return StaticPolicy(depth)
