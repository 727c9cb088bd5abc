"""Regime acceptance models: a request's acceptance moves between an easy (copying) and a hard (novel) regime with the
tokens it has generated, Markov-modulated (bursty) or growing with the n-gram cache (n-gram context)."""
from __future__ import annotations

from functools import cached_property

from ..cache import current, key_of
from ..config.mirror import BurstyAcceptance, NgramContextAcceptance, Regime
from .acceptance import AcceptanceModel, positional_table
from .trees import Tree, Walker


class RegimeModel(AcceptanceModel):
    """Two regimes per request (easy/copying and hard/novel), switching per generated token.

    A request's state is (easy, seen): its regime and the tokens it has seen (prompt + generated). `typical_seen`
    (the workload's mean history) stands in for a request when a stationary figure is wanted.
    """

    stateful = True
    LEVELS = 16  # history-dependent tables are compiled at this many levels

    def __init__(self, easy: Regime, hard: Regime, typical_seen: float = 0.0):
        super().__init__(hard.probs, hard.sibling_decay)
        self.regimes = (easy, hard)
        self.typical_seen = typical_seen

    # what a subclass says about its regimes
    def enter_probability(self, seen: float) -> float:
        """Per generated token: hard -> easy."""
        raise NotImplementedError

    def leave_probability(self, seen: float) -> float:
        """Per generated token: easy -> hard."""
        raise NotImplementedError

    def level(self, easy: bool, seen: float) -> int:
        """Which compiled table a (regime, history) uses; 0 when the regime's acceptance ignores the history."""
        return 0

    def regime_probs(self, easy: bool, level: int) -> list[float]:
        return self.regimes[0 if easy else 1].probs

    def regime_table(self, easy: bool, level: int, depth: int):
        regime = self.regimes[0 if easy else 1]
        return positional_table(self.regime_probs(easy, level), regime.sibling_decay, depth, True)

    @property
    def value_key(self):
        """AcceptanceModel.value_key: a regime model reads its configuration alone (None without one)."""
        config = getattr(self, "config", None)
        return None if config is None else (type(self).__name__, config.model_dump_json())

    def step(self, tree: Tree, state, uniforms, at: int, switch_at: int, remaining: int):
        """AcceptanceModel.step on the walker of the state's regime and level, held in the row for the tree at hand
        (walker_row): the run's store is asked once per regime and level, not once per request per step."""
        easy, seen = state
        level = self.level(easy, seen)
        slot = level + self.LEVELS + 1 if easy else level
        row = self.walker_row(tree)
        walker = row[slot]
        if walker is None:
            walker = row[slot] = self.walker(tree, state)
        accepted = 0 if uniforms[at] >= walker.root_limit else walker(uniforms, at)  # see Walker.root_limit
        emitted = accepted + 1 if accepted < remaining else remaining
        return accepted, emitted, self.advance(state, emitted, uniforms[switch_at])

    def walker_row(self, tree: Tree) -> list:
        """The walkers this model holds for the tree it walks now, as AcceptanceModel.step holds one: a slot per
        regime and level (hard at 0..LEVELS, easy at LEVELS + 1 + level), each filled from the run's store when the
        run first reaches it. The model is the run's own; a new tree (a policy's long-lived trees rarely change)
        starts a new row, so the row never outlives what it was built for."""
        last_tree, row = self._last
        if tree is not last_tree:
            row = [None] * (2 * self.LEVELS + 2)
            self._last = (tree, row)
        return row

    def walker(self, tree: Tree, state) -> Walker:
        """The walker of the state's regime and level, in the run's store by the tree, the regime, the level and
        what the model's tables are made of (_tables_value)."""
        easy, seen = state
        level = self.level(easy, seen)
        return current().get(("regimes.walker", self._tables_value, tree.parents, easy, level),
                             lambda: Walker(tree, self.regime_table(easy, level, tree.depth)))

    @cached_property
    def _tables_value(self):
        """What regime_table reads besides its arguments, by value: the configuration (value_key), else the regimes."""
        own = self.value_key
        return own if own is not None else (type(self).__name__, key_of(self.regimes), self.LEVELS)

    def accepted(self, tree: Tree, state, uniforms, at: int = 0) -> int:
        return self.walker(tree, state)(uniforms, at)

    def advance(self, state, emitted: int, u: float):
        easy, seen = state
        per_token = self.leave_probability(seen) if easy else self.enter_probability(seen)
        switch = 1.0 - (1.0 - per_token) ** emitted
        if u < switch:
            easy = not easy
        return (easy, seen + emitted)

    def expected_tokens(self, tree: Tree) -> float:
        """Mean tokens per verify at the typical history: the regimes' means weighted by the share of *steps*
        spent in each. Over steps the regime is a two-state chain: a step in regime i emits a tokens (pmf from the
        tree walk) and leaves with 1 - (1 - p_i)^a, so the easy share of steps is q_hard / (q_easy + q_hard)."""
        seen = self.typical_seen
        means, leave = [], []
        for easy, per_token in ((True, self.leave_probability(seen)), (False, self.enter_probability(seen))):
            pmf = accept_pmf(tree, self.regime_table(easy, self.level(easy, seen), tree.depth))
            means.append(sum((a + 1) * p for a, p in enumerate(pmf)))
            leave.append(sum(p * (1.0 - (1.0 - per_token) ** (a + 1)) for a, p in enumerate(pmf)))
        share = leave[1] / (leave[0] + leave[1]) if leave[0] + leave[1] > 0 else 0.5
        return share * means[0] + (1 - share) * means[1]

    def typical_table(self, depth: int):
        """The two regimes' tables at the typical history, mixed by their per-token shares (to shape trees)."""
        seen = self.typical_seen
        enter, leave = self.enter_probability(seen), self.leave_probability(seen)
        share = enter / (enter + leave) if enter + leave > 0 else 0.5
        easy = self.regime_table(True, self.level(True, seen), depth)
        hard = self.regime_table(False, self.level(False, seen), depth)
        return tuple(tuple(share * a + (1 - share) * b for a, b in zip(ra, rb)) for ra, rb in zip(easy, hard))


def accept_pmf(tree: Tree, table) -> list[float]:
    """P(the walk accepts exactly d drafts), d = 0..depth: reaching depth d minus reaching depth d+1."""
    reach = [0.0] * (tree.depth + 2)
    for node, prob in enumerate(tree.path_probs(table)):
        reach[tree.depths[node]] += prob
    return [reach[d] - reach[d + 1] for d in range(tree.depth + 1)]


class BurstyModel(RegimeModel):
    """Markov-modulated: easy and hard stretches with geometric lengths (in generated tokens)."""

    def __init__(self, config: BurstyAcceptance, typical_seen: float = 0.0):
        super().__init__(config.easy, config.hard, typical_seen)
        self.config = config

    def start(self, prompt_tokens: int):
        return (self.config.start_easy, prompt_tokens)

    def enter_probability(self, seen: float) -> float:
        return 1.0 / self.config.mean_hard_tokens

    def leave_probability(self, seen: float) -> float:
        return 1.0 / self.config.mean_easy_tokens


class NgramContextModel(RegimeModel):
    """Copy stretches whose onset, and novel-text hits, grow as the history (prompt + generated) fills the cache."""

    # tokens an n-gram lookup matches inside a repeated stretch: SGLang's longest match window
    # (speculative_ngram_max_match_window_size, 12 by default; docs/sources.md)
    MATCH_IN_COPY = 12

    def __init__(self, config: NgramContextAcceptance, typical_seen: float = 0.0):
        super().__init__(config.copying, config.novel, typical_seen)
        self.config = config
        # the parameters as plain attributes: read once per request per step
        self._warmup, self._repetitiveness = config.warmup_tokens, config.repetitiveness
        self._leave, self._flat, self._levels = 1.0 / config.mean_copy_tokens, config.novel_gain == 0.0, self.LEVELS

    def start(self, prompt_tokens: int):
        return (False, prompt_tokens)

    def fill(self, seen: float) -> float:
        s3 = (seen / self._warmup) ** 3
        return s3 / (1.0 + s3)

    def enter_probability(self, seen: float) -> float:
        return self._repetitiveness * self.fill(seen)

    def leave_probability(self, seen: float) -> float:
        return self._leave

    def level(self, easy: bool, seen: float) -> int:
        if easy or self._flat:
            return 0
        s3 = (seen / self._warmup) ** 3  # fill(seen), inlined (once per request per step)
        return min(self.LEVELS, int(s3 / (1.0 + s3) * self.LEVELS + 0.5))

    def advance(self, state, emitted: int, u: float):
        """RegimeModel.advance with the switch probabilities inlined (once per request per step)."""
        easy, seen = state
        if easy:
            per_token = self._leave
        else:
            s3 = (seen / self._warmup) ** 3
            per_token = self._repetitiveness * (s3 / (1.0 + s3))
        if u < 1.0 - (1.0 - per_token) ** emitted:
            easy = not easy
        return (easy, seen + emitted)

    def step(self, tree: Tree, state, uniforms, at: int, switch_at: int, remaining: int):
        """AcceptanceModel.step with level, walker and advance inlined: the history's fill is computed once for
        the table level and the switch probability (the same floats as level() and advance())."""
        easy, seen = state
        if easy:
            level, per_token = self._levels + 1, self._leave  # the easy regime's slot in walker_row (level 0)
        else:
            s3 = (seen / self._warmup) ** 3
            fill = s3 / (1.0 + s3)
            level = 0 if self._flat else min(self._levels, int(fill * self._levels + 0.5))
            per_token = self._repetitiveness * fill
        last_tree, walkers = self._last
        if tree is not last_tree:  # walker_row, inlined
            walkers = self.walker_row(tree)
        walker = walkers[level]
        if walker is None:
            walker = walkers[level] = self.walker(tree, state)
        accepted = 0 if uniforms[at] >= walker.root_limit else walker(uniforms, at)  # see Walker.root_limit
        emitted = accepted + 1 if accepted < remaining else remaining
        if uniforms[switch_at] < 1.0 - (1.0 - per_token) ** emitted:
            easy = not easy
        return accepted, emitted, (easy, seen + emitted)

    def regime_probs(self, easy: bool, level: int) -> list[float]:
        if easy:
            return self.regimes[0].probs
        gain = 1.0 + self.config.novel_gain * level / self.LEVELS
        return [min(1.0, p * gain) for p in self.regimes[1].probs]

    def match_tokens(self, state) -> int:
        return self.MATCH_IN_COPY if state[0] else 1
