"""Policies that choose the draft length each step from what they observe: SmartSpec-style goodput, its form bounded
by the engine's captured graph shapes, and transformers' assisted-generation schedule (policies.py builds them).
"""
from __future__ import annotations

from ..config.mirror import AssistantHeuristicPolicy, DynamicLengthPolicy, GoodputPolicy
from .protocols import BatchState, Decision


class Goodput:
    """Pick the draft length with the most expected tokens per second for this batch (SmartSpec's idea).

    Per-depth acceptance is estimated from what the chain walks showed (a depth is tried when the one before it
    was accepted), with a prior and fading memory; step times come from the batch view's batch-time model.
    """

    def __init__(self, config: GoodputPolicy, make_tree):
        self.config = config
        self.choices = sorted(set(config.choices))
        depth = max(self.choices)
        self.decisions = {k: (Decision(0, make_tree(k)) if k else None) for k in self.choices}
        self.trees = tuple(d.tree for d in self.decisions.values() if d is not None)
        self.trials = [0.0] * (depth + 1)
        self.accepts = [0.0] * (depth + 1)

    def acceptance(self, d: int) -> float:
        """Observed acceptance at depth d shrunk toward the prior; with prior_weight 0 and nothing yet seen at d,
        the prior itself (the estimate's limit as the weight goes to 0), so the first step has an estimate."""
        c = self.config
        weight = self.trials[d] + c.prior_weight
        if weight == 0.0:
            return c.prior_acceptance
        return (self.accepts[d] + c.prior_acceptance * c.prior_weight) / weight

    def expected_tokens(self, k: int) -> float:
        total, survive = 1.0, 1.0
        for d in range(1, k + 1):
            survive *= self.acceptance(d)
            total += survive
        return total

    def allowed(self, k: int, batch: int) -> bool:
        return True

    def decide(self, view: BatchState) -> Decision | None:
        batch, context = view.batch, view.context_tokens
        best, best_rate = None, -1.0
        for k in self.choices:
            if k and not self.allowed(k, batch):
                continue
            decision = self.decisions[k]
            rate = self.expected_tokens(k) / view.expected_step_us(decision, batch, context)
            if rate > best_rate:
                best, best_rate = decision, rate
        return best

    def observe_walk(self, depth: int, accepted: int) -> None:
        """One request's walk: depths 1..min(accepted+1, depth) were tried, 1..accepted accepted."""
        fade = 1.0 - 1.0 / self.config.memory
        for d in range(1, min(accepted + 1, depth) + 1):
            self.trials[d] = self.trials[d] * fade + 1.0
            if d <= accepted:
                self.accepts[d] = self.accepts[d] * fade + 1.0
            else:
                self.accepts[d] *= fade

    def observe(self, decision, step_us: float, accept_len: float, batch: int) -> None:
        pass


class DynamicLength(Goodput):
    """Goodput's choice among the engine's captured tiers, skipping a tier whose verify of batch x (k + 1) tokens
    exceeds the largest captured graph (max_graph_tokens); plain decode when no tier fits or none pays."""

    def __init__(self, config: DynamicLengthPolicy, make_tree):
        super().__init__(config, make_tree)
        self.max_tokens = config.max_graph_tokens

    def allowed(self, k: int, batch: int) -> bool:
        return self.max_tokens is None or batch * (k + 1) <= self.max_tokens


class AssistantHeuristic:
    """transformers' assisted generation, schedule "heuristic" (transformers 4.37.1, generation/candidate_generator.py,
    AssistedCandidateGenerator): k drafts in a chain, k = num_assistant_tokens when a request starts; after a round
    whose k drafts were all accepted k += 2, else k = max(1, k - 1) (update_candidate_strategy); a round drafts
    min(k, max_new_tokens - generated - 1) (get_candidates), plain decode where that is 0.

    One schedule for the running batch (transformers assists batch 1 only): restarted when a request is admitted,
    capped by the request furthest on, and a round counts as fully accepted when every request accepted all k.
    """

    def __init__(self, config: AssistantHeuristicPolicy, make_tree):
        self.first = config.num_assistant_tokens
        self.max_new = config.max_new_tokens
        self.make_tree = make_tree
        self.k = self.first
        self.decisions: dict[int, Decision] = {}
        # the first round's chain and the longest any round may draft (max_new_tokens - 1, at a request's first
        # token): the server reserves KV for the largest; the chains between are built when first drafted
        self.trees = (self._decision(min(self.first, self.max_new - 1)).tree, self._decision(self.max_new - 1).tree)

    def _decision(self, k: int) -> Decision:
        decision = self.decisions.get(k)
        if decision is None:
            decision = self.decisions[k] = Decision(0, self.make_tree(k))
        return decision

    def start_request(self) -> None:
        """A request starts (a generate() call builds its candidate generator anew): k back to num_assistant_tokens."""
        self.k = self.first

    def decide(self, view: BatchState) -> Decision | None:
        room = self.max_new - max(view.generated(), default=0) - 1
        k = self.k if self.k <= room else room
        return self._decision(k) if k >= 1 else None

    def observe(self, decision, step_us: float, accept_len: float, batch: int) -> None:
        if decision is None:
            return
        k = self.k
        # transformers compares the matches with k itself: a round capped below k is not fully accepted
        if decision.tree.num_drafts == k and round(accept_len * batch) == batch * (k + 1):
            self.k = k + 2
        else:
            self.k = max(1, k - 1)
