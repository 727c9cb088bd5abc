"""Acceptance models: how far into a draft chain or token tree the target accepts, from uniforms (common numbers).

Every model turns its parameters into positional tables P[d-1][k-1]: the probability that, at an accepted node, the
rank-k child at depth d is the one accepted (children tried in rank order, each with its own conditional chance).
A verify walks the tree with one uniform per depth (trees.walk): the same uniforms give the same or a deeper walk
when acceptance rises, so compared scenarios differ by the change, not by noise. Regime models (bursty, n-gram
context, regimes.py) keep a per-request state that moves with the tokens generated; trace replay reads accept
lengths from CSV; models.py builds a model from its configuration.
"""
from __future__ import annotations

import numpy as np

from ..cache import current
from .trees import Tree, Walker, _value_of

MAX_RANKS = 16  # siblings per node the tables cover


def positional_table(probs: list[float], sibling_decay: float, depth: int, repeat_last: bool = False):
    """Marginal rank probabilities per depth: q_k = p_d decay^(k-1), P_k = q_k prod_{j<k} (1 - q_j)."""
    rows = []
    for d in range(1, depth + 1):
        if d <= len(probs):
            p = probs[d - 1]
        else:
            p = probs[-1] if repeat_last else 0.0
        row, survive = [], 1.0
        for k in range(MAX_RANKS):
            q = p * sibling_decay**k
            row.append(survive * q)
            survive *= 1.0 - q
        rows.append(tuple(row))
    return tuple(rows)


class AcceptanceModel:
    """A stationary model: the same table for every request and step."""

    stateful = False

    def __init__(self, probs: list[float], sibling_decay: float = 1.0, repeat_last: bool = False):
        self.probs, self.sibling_decay, self.repeat_last = list(probs), sibling_decay, repeat_last
        self._last: tuple = (None, None)  # the tree step() walked last and its walker (or walkers per level)

    def table(self, depth: int, state=None):
        return positional_table(self.probs, self.sibling_decay, depth, self.repeat_last)

    @property
    def value_key(self):
        """Everything step() reads besides its arguments, by value: two models with the same key walk the same
        uniforms alike (the run's store keys what it computes from the model by it, cache.keys.key_of); None where
        step() keeps state of its own."""
        return (type(self).__name__, tuple(self.probs), self.sibling_decay, self.repeat_last)

    def start(self, prompt_tokens: int):
        return None

    def start_request(self, request):
        """A request's initial state (the serving loop's entry; a model that reads text needs the request itself)."""
        return self.start(request.prompt_tokens)

    def walker(self, tree: Tree, state=None) -> Walker:
        """The tree's walker on this model's table, in the run's store by the tree and the model's value (by the
        table itself for a model without one)."""
        own = self.value_key
        if own is None:
            table = self.table(tree.depth, state)
            return current().get(("acceptance.walker_of_table", tree, _value_of(table)), lambda: Walker(tree, table))
        return current().get(("acceptance.walker", tree, own), lambda: Walker(tree, self.table(tree.depth)))

    def accepted(self, tree: Tree, state, uniforms, at: int = 0) -> int:
        """Drafts accepted in one verify, from uniforms[at:] (one per depth)."""
        return self.walker(tree, state)(uniforms, at)

    def advance(self, state, emitted: int, u: float):
        """Move a request's state on by `emitted` tokens (u: one uniform for regime switches)."""
        return state

    def step(self, tree: Tree, state, uniforms, at: int, switch_at: int, remaining: int):
        """One request's verify: (drafts accepted, tokens emitted (the bonus included, at most `remaining`), the
        state after), the walk reading uniforms[at:] and a stateful model's regime switch uniforms[switch_at].
        The serving loop's hot path: accepted, then advance, in one call (the same values). A stationary model's
        state does not move (and it reads no switch uniform)."""
        last_tree, walker = self._last
        if tree is not last_tree:  # a policy hands out long-lived trees: usually the same object
            walker = self.walker(tree, state)
            self._last = (tree, walker)
        accepted = 0 if uniforms[at] >= walker.root_limit else walker(uniforms, at)  # see Walker.root_limit
        return accepted, (accepted + 1 if accepted < remaining else remaining), state

    def match_tokens(self, state) -> int:
        """Length of the n-gram cache match the drafter would find (only regime models know it)."""
        return 0

    def expected_tokens(self, tree: Tree) -> float:
        """Tokens per verify, bonus included (the analytic mean the simulation must match)."""
        return tree.expected_tokens(self.table(tree.depth))


class TraceModel(AcceptanceModel):
    """Replays accept lengths (bonus included) row by row, cycling; capped by the verify tree's depth."""

    def __init__(self, lengths: list[int]):
        super().__init__([0.0])
        self.lengths = lengths
        self.position = 0

    def accepted(self, tree: Tree, state, uniforms, at: int = 0) -> int:
        value = self.lengths[self.position % len(self.lengths)]
        self.position += 1
        return min(value - 1, tree.depth)

    value_key = None  # its position in the trace moves with every step

    def step(self, tree: Tree, state, uniforms, at: int, switch_at: int, remaining: int):
        accepted = self.accepted(tree, state, uniforms, at)  # the next row of the trace, not a walk
        return accepted, (accepted + 1 if accepted < remaining else remaining), state

    def expected_tokens(self, tree: Tree) -> float:
        return sum(min(v - 1, tree.depth) + 1 for v in self.lengths) / len(self.lengths)


def emitted_of(taken: np.ndarray, remaining: int) -> np.ndarray:
    """Tokens each step emits (its accepted drafts and the bonus token) when `taken` are a request's accepted drafts
    from `remaining` tokens to its end: the last step emits what was left."""
    emitted = taken + 1
    if len(emitted):
        emitted[-1] = remaining - int(emitted[:-1].sum())
    return emitted
