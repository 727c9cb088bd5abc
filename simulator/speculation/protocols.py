"""What the serving loop expects of a policy, a drafter and an acceptance model, and what a policy may ask of it.

A decision is a `Decision` (drafter index, verify tree) or None for plain decode; drafter 0 is the scenario's, 1 a
policy's fallback. Decisions compare and hash by value, so the loop can cache what a decision costs by the
decision itself; policies hand out long-lived ones.
"""
from __future__ import annotations

from typing import NamedTuple, Protocol, Sequence, runtime_checkable

from .trees import Tree


class Decision(NamedTuple):
    """Speculate with drafter `drafter` (an index into the setup's slots) and verify `tree`."""

    drafter: int
    tree: Tree


class BatchState(Protocol):
    """A read-only view of the running batch: all a policy may see of the server."""

    @property
    def batch(self) -> int:
        """Requests decoding now."""

    @property
    def context_tokens(self) -> int:
        """Tokens cached for them (prompts plus what they generated)."""

    def generated(self) -> list[int]:
        """Per decoding request, the tokens it has generated so far."""

    def match_tokens(self) -> list[int]:
        """Per decoding request, the n-gram cache match the primary drafter would find."""

    def expected_step_us(self, decision: Decision | None, batch: int, context: int) -> float:
        """The mean cost of a step (the batch-time model a load-aware policy plans with)."""


@runtime_checkable
class Policy(Protocol):
    """Each step: speculate (a Decision) or decode plainly (None); then it observes what the step did. `trees`: every
    tree its decisions may carry (a step's KV cache needs the largest). A policy may also define start_request(),
    called when a request is first admitted."""

    trees: tuple[Tree, ...]

    def decide(self, view: BatchState | None) -> Decision | None: ...

    def observe(self, decision: Decision | None, step_us: float, accept_len: float, batch: int) -> None: ...


class DraftPassLike(Protocol):
    part: str
    tokens: int
    graph: bool


@runtime_checkable
class Drafter(Protocol):
    """What one round of proposals costs: passes on the ranks, and time on the host CPU."""

    def passes(self, tree: Tree, batch: int) -> Sequence[DraftPassLike]: ...

    def host_us(self, tree: Tree, batch: int) -> float: ...


@runtime_checkable
class Acceptance(Protocol):
    """How far into a tree the target accepts, from uniforms; regime models keep a per-request state."""

    stateful: bool

    def start(self, prompt_tokens: int): ...

    def accepted(self, tree: Tree, state, uniforms) -> int: ...

    def advance(self, state, emitted: int, u: float): ...

    def step(self, tree: Tree, state, uniforms, at: int, switch_at: int, remaining: int): ...

    def match_tokens(self, state) -> int: ...

    def expected_tokens(self, tree: Tree) -> float: ...
