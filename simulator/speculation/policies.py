"""Speculation policies: each step, speculate (with which drafter and tree) or decode plainly; they observe steps.

A decision is a `Decision` (drafter index, tree) or None for plain decode; drafter 0 is the scenario's, 1 a policy's
fallback. Every policy hands out decisions it built once (the loop caches a decision's step cost by value) and names
their trees (`trees`: the server reserves KV cache for the largest). A policy sees the running batch only through a
read-only `BatchState` view.
"""
from __future__ import annotations

from collections import deque

from ..config.mirror import (AdaptiveLengthPolicy, AssistantHeuristicPolicy, BatchTablePolicy, BatchThresholdPolicy,
                             DynamicLengthPolicy, GoodputPolicy, HybridPolicy, MultiDrafterPolicy, StaticPolicy)
from .length_policies import AssistantHeuristic, DynamicLength, Goodput
from .protocols import BatchState, Decision, Policy
from .trees import Tree


class Static:
    """Always the configured drafter and tree (None: speculation off)."""

    fixed = True  # decide() always returns self.decision and observe() does nothing: the loop may skip both

    def __init__(self, tree: Tree | None):
        self.decision = Decision(0, tree) if tree is not None else None
        self.trees = (tree,) if tree is not None else ()

    def decide(self, view: BatchState | None) -> Decision | None:
        return self.decision

    def observe(self, decision, step_us: float, accept_len: float, batch: int) -> None:
        pass


class Hybrid:
    """Speculate while the recent accept length beats the online break-even (spec step time / plain step time).

    Hysteresis: switch off below (1-h) x break-even, back on above (1+h) x break-even. While off it probes: one
    speculative step after `interval` plain steps; an unpromising probe (accept below break-even) doubles the
    interval up to max_probe_every, a promising one resets it. It starts with one plain step, then a probe.
    """

    def __init__(self, config: HybridPolicy, tree: Tree):
        self.config = config
        self.tree = tree
        self.decision = Decision(0, tree)
        self.trees = (tree,)
        self.on = False  # first a plain step to learn its cost, then a probe
        self.accept: float | None = None
        self.recent: deque = deque(maxlen=config.window)
        self.spec_us: float | None = None
        self.plain_us: float | None = None
        self.since_probe = 0
        self.interval = config.probe_every

    def _estimate(self) -> float | None:
        if self.config.estimator == "window":
            return sum(self.recent) / len(self.recent) if self.recent else None
        return self.accept

    def breakeven(self) -> float | None:
        if self.spec_us is None or self.plain_us is None:
            return None
        return self.spec_us / self.plain_us

    def decide(self, view: BatchState | None) -> Decision | None:
        if self.on:
            return self.decision
        if self.plain_us is not None and (self.spec_us is None or self.since_probe >= self.interval):
            self.since_probe = 0
            return self.decision
        self.since_probe += 1
        return None

    def observe(self, decision, step_us: float, accept_len: float, batch: int) -> None:
        c = self.config
        a = c.ema_alpha
        if decision is None:
            self.plain_us = step_us if self.plain_us is None else (1 - a) * self.plain_us + a * step_us
        else:
            self.spec_us = step_us if self.spec_us is None else (1 - a) * self.spec_us + a * step_us
            weight = a if self.on else c.probe_alpha
            self.accept = accept_len if self.accept is None else (1 - weight) * self.accept + weight * accept_len
            self.recent.append(accept_len)
        estimate, breakeven = self._estimate(), self.breakeven()
        if estimate is None or breakeven is None:
            return
        if decision is not None and not self.on:  # a probe: back off unless it looked promising
            self.interval = c.probe_every if accept_len > breakeven else min(c.max_probe_every, 2 * self.interval)
        h = c.hysteresis
        if self.on and estimate < (1 - h) * breakeven:
            self.on = False
        elif not self.on and estimate > (1 + h) * breakeven:
            self.on = True
            self.interval = c.probe_every


class AdaptiveLength:
    """Draft length from a small set: the recent accepted drafts plus a spare, rounded up to a choice."""

    def __init__(self, config: AdaptiveLengthPolicy, make_tree):
        self.config = config
        self.choices = sorted(config.choices)
        self.decisions = {k: Decision(0, make_tree(k)) for k in self.choices}
        self.trees = tuple(d.tree for d in self.decisions.values())
        self.accept: float | None = None
        self.current = self.choices[-1]

    def decide(self, view: BatchState | None) -> Decision:
        return self.decisions[self.current]

    def observe(self, decision, step_us: float, accept_len: float, batch: int) -> None:
        if decision is None:
            return
        a = self.config.ema_alpha
        self.accept = accept_len if self.accept is None else (1 - a) * self.accept + a * accept_len
        want = (self.accept - 1.0) + self.config.spare  # drafts accepted recently, plus spare
        self.current = next((k for k in self.choices if k >= want), self.choices[-1])


class MultiDrafter:
    """n-gram drafts where the cache holds a long match for (most of) the batch, the fallback drafter elsewhere."""

    def __init__(self, config: MultiDrafterPolicy, primary_tree: Tree, fallback_tree: Tree):
        self.config = config
        self.primary = Decision(0, primary_tree)
        self.fallback = Decision(1, fallback_tree)
        self.trees = (primary_tree, fallback_tree)

    def decide(self, view: BatchState) -> Decision:
        matches = view.match_tokens()
        long = sum(1 for m in matches if m >= self.config.min_match_tokens)
        return self.primary if matches and 2 * long >= len(matches) else self.fallback

    def observe(self, decision, step_us: float, accept_len: float, batch: int) -> None:
        pass


class BatchThreshold:
    """Speculate while the running batch is small enough (vLLM's rule)."""

    def __init__(self, config: BatchThresholdPolicy, tree: Tree):
        self.max_batch = config.max_batch
        self.decision = Decision(0, tree)
        self.trees = (tree,)

    def decide(self, view: BatchState) -> Decision | None:
        return self.decision if view.batch <= self.max_batch else None

    def observe(self, decision, step_us: float, accept_len: float, batch: int) -> None:
        pass


class BatchTable:
    """Draft length looked up by batch size."""

    def __init__(self, config: BatchTablePolicy, make_tree):
        self.rows = [(row.max_batch, Decision(0, make_tree(row.draft_tokens)) if row.draft_tokens else None)
                     for row in config.table]
        self.trees = tuple(d.tree for _, d in self.rows if d is not None)

    def decide(self, view: BatchState) -> Decision | None:
        batch = view.batch
        for bound, decision in self.rows:
            if batch <= bound:
                return decision
        return self.rows[-1][1]

    def observe(self, decision, step_us: float, accept_len: float, batch: int) -> None:
        pass


def build_policy(config, tree: Tree | None, make_tree=None, fallback_tree: Tree | None = None) -> Policy:
    if tree is None:
        return Static(None)
    if isinstance(config, StaticPolicy):
        return Static(tree)
    if isinstance(config, HybridPolicy):
        return Hybrid(config, tree)
    if isinstance(config, AdaptiveLengthPolicy):
        return AdaptiveLength(config, make_tree)
    if isinstance(config, MultiDrafterPolicy):
        return MultiDrafter(config, tree, fallback_tree)
    if isinstance(config, BatchThresholdPolicy):
        return BatchThreshold(config, tree)
    if isinstance(config, BatchTablePolicy):
        return BatchTable(config, make_tree)
    if isinstance(config, DynamicLengthPolicy):  # before GoodputPolicy: it is one
        return DynamicLength(config, make_tree)
    if isinstance(config, GoodputPolicy):
        return Goodput(config, make_tree)
    if isinstance(config, AssistantHeuristicPolicy):
        return AssistantHeuristic(config, make_tree)
    raise TypeError(f"unknown policy {config!r}")
