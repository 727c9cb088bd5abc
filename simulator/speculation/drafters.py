"""Drafters: what a proposal of k draft tokens costs, as passes on the ranks and host time.

EAGLE-3 / MTP heads run on the target's own ranks (same TP group, their own kernels and all-reduces). A chain of k
drafts costs k head passes a round: the first draft comes from the previous round's extend pass, k-1 single-token
passes propose the rest, and one extend pass over the k+1 verified positions (padded in the captured graph)
refreshes the head's state for the next round (SGLang's EAGLEWorker: draft -> verify ->
forward_draft_extend_after_decode).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..model.cost import PassShape


@dataclass(frozen=True)
class DraftPass:
    part: str  # which card runs it: draft_head | mtp
    shape: PassShape
    graph: bool


class HeadDrafter:
    """A draft head (EAGLE-3) or MTP module sharing the target's ranks."""

    def __init__(self, part: str, graph: bool):
        self.part = part
        self.graph = graph

    def passes(self, depth: int, batch: int) -> tuple[DraftPass, ...]:
        """The head's passes for one round (shapes without context: the step applies it)."""
        step = [DraftPass(self.part, PassShape(1, batch), self.graph) for _ in range(depth - 1)]
        extend = DraftPass(self.part, PassShape(depth + 1, batch), self.graph)
        return tuple(step + [extend])

    def host_us(self, depth: int, batch: int) -> float:
        return 0.0


def build_drafter(method: str, runtime) -> HeadDrafter | None:
    if method == "none":
        return None
    if method == "eagle3":
        return HeadDrafter("draft_head", runtime.cuda_graph_draft)
    if method == "mtp":
        return HeadDrafter("mtp", runtime.cuda_graph_draft)
    raise NotImplementedError(f"speculation.method={method} is not modelled yet")
