"""What a step costs: its passes (drafts, then a decode/verify/prefill pass), host-side drafting and overheads.

`FastStepCosts` draws a whole step from samples of the layer model (kept in the run's store) at the two anchor
contexts around the step's context and interpolates (one lookup per step); timing.layercosts.LayerStepCosts runs
every pass at layer or link fidelity, serving.steps.EventStepCosts on rank processes at event fidelity. Each returns
the step's cost as STEP_COST values (serving.records names them).
"""
from __future__ import annotations

import hashlib
from array import array
from functools import partial

import numpy as np

from ..cache import current, key_of
from .machine import SAMPLE_FIELDS, Machine, at_context, blend, context_anchors, context_anchors_many
from .costtable import STEP_COST, CostTable, StepCost, StepCosts
from .sampling import FAST_SAMPLES, rows_at_hand
from .stepspec import StepSpec, adds_behind_drafts, exposed_before_verify_us, exposed_behind_drafts_us

INDEX_BLOCK = 1 << 14
_new = tuple.__new__  # step() builds its StepCost without NamedTuple's keyword wrapper: half the cost (hot path)


def _cost_rows(step: StepSpec, main: np.ndarray, draft: np.ndarray, other_us: float | None = None) -> np.ndarray:
    """STEP_COST rows from the main pass's samples (rows of SAMPLE_FIELDS), the drafting per sample and the host time
    around the passes (the step's other_us unless given)."""
    other_us = step.other_us if other_us is None else other_us
    cols = {name: main[:, i] for i, name in enumerate(SAMPLE_FIELDS)}
    cols["pass_us"] = cols.pop("duration")
    cols.update(duration=cols["pass_us"] + draft + other_us, draft_us=draft,
                other=np.full(main.shape[0], other_us))
    return np.stack([cols[name] for name in STEP_COST], axis=1)


def _index_block(rng: np.random.Generator) -> array:
    """A block of the row-index stream (drawn every time: random draws are not stored), as a typed array: indexed
    as fast as a list, 8 bytes a value (a list of ints: ~36; 128 replicas held 77 MB of them)."""
    block = array("q")
    block.frombytes(rng.integers(0, 1 << 30, INDEX_BLOCK, dtype=np.int64).tobytes())
    return block


def _pair_rows(machine: Machine, seed: int, step: StepSpec, low: int, high: int) -> tuple[np.ndarray, np.ndarray]:
    """The anchor table at `low` and its differences to the one at `high` (a deferred table's fill: it holds the
    values it reads, not the run that made it)."""
    costs = FastStepCosts(machine, seed, None)
    a = costs._table(step, low)
    return a, costs._table(step, high) - a if high != low else np.zeros_like(a)


class FastStepCosts:
    """Steps drawn from per-shape samples of the layer model (fast fidelity). Every table, pair, mean and row it
    computes is in the run's store, keyed by the machine's value, the seed, the step and the anchors."""

    def __init__(self, machine: Machine, seed: int, rng: np.random.Generator, deferred: bool = False):
        """deferred: the cost tables evaluate their breakdown when it is first read (records.CostTable.deferred),
        for a run whose breakdown may not be read (a baseline, a sweep point keeping a few figures)."""
        self.machine = machine
        self.deferred = deferred
        self.seed = seed
        self._rng = rng
        self._key = (key_of(machine), seed)  # what every stored value of this cost model is computed from
        self.indices = array("q")  # the row-index stream, drawn in blocks, and the position in the block
        self.index_at = 0
        self._last: tuple = (None, -1, -1, None)  # (step, low and high anchors, their table) of the last step drawn
        self.own_gpus = machine.scenario.spec.runtime.draft_on_own_gpus  # who builds the verify's inputs (stepspec)

    def _table(self, step: StepSpec, context: int) -> np.ndarray:
        """The step's table at an anchor, shared by every run of the store (a sweep point, a baseline, a break-even
        planner), keyed by value."""
        return current().get(self._shared_key(step, context), lambda: self._build_table(step, context))

    def _shared_key(self, step: StepSpec, context: int) -> tuple:
        """The store's key of a step table: every value it is built from (the machine's, the seed, step, anchor)."""
        return ("costs.step_table", *self._key, key_of(step), context)

    def _build_table(self, step: StepSpec, context: int) -> np.ndarray:
        """The step's STEP_COST rows at an anchor context (read-only): the main pass's samples, drafts paired at
        random."""
        m = self.machine
        main = m.samples(step.main.part, step.main.shape.at(context), step.main.graph, self.seed)
        draft = self._draft_us(step, context, main.shape[0], lambda *args: m.samples(*args)[:, 0])
        table = _cost_rows(step, main, draft, self._other_us(step, context))
        table.flags.writeable = False
        return table

    def _draft_us(self, step: StepSpec, context: int, n: int, durations) -> np.ndarray:
        """Drafting per sample: host time and the draft passes (durations(part, shape, graph, seed): a pass's sample
        durations), each pass's samples paired with the main pass's at random."""
        draft = np.full(n, step.draft_host_us)
        if not step.drafts:
            return draft
        entropy = int.from_bytes(hashlib.sha1(repr(step).encode()).digest()[:8], "little")
        perm_rng = np.random.default_rng([self.seed, entropy])
        graphed = np.zeros(n)
        for d in step.drafts:
            pass_us = durations(d.part, d.shape.at(context), d.graph, self.seed)[perm_rng.permutation(n)]
            draft += pass_us
            if d.graph:
                graphed += pass_us
        if adds_behind_drafts(step):
            draft += exposed_behind_drafts_us(step, graphed, context, self.machine.gpu, self.own_gpus)
        return draft

    def _other_us(self, step: StepSpec, context: int) -> float:
        """The step's host time around its passes and, with the drafter on GPUs of its own, the verify's inputs the
        target builds before the verify (stepspec.exposed_before_verify_us)."""
        if not (self.own_gpus and step.drafts):
            return step.other_us
        return step.other_us + exposed_before_verify_us(step, context, self.machine.gpu, True)

    def _durations(self, step: StepSpec, context: int) -> list:
        """The duration column of the step's table at an anchor (the same floats), from the passes' durations alone
        unless the table is built already (a mean needs no breakdown)."""
        table = current().peek(self._shared_key(step, context))
        if table is not None:
            return table[:, 0].tolist()
        m = self.machine
        main = m.sample_durations(step.main.part, step.main.shape.at(context), step.main.graph,
                                  self.seed)
        return (main + self._draft_us(step, context, main.shape[0], m.sample_durations)
                + self._other_us(step, context)).tolist()

    def _mean_at(self, step: StepSpec, context: int) -> float:
        def mean() -> float:
            durations = self._durations(step, context)
            return sum(durations) / len(durations)
        return current().get(("costs.mean", *self._key, key_of(step), context), mean)

    def mean_step_us(self, step: StepSpec, context: int) -> float:
        """Expected duration of a step at `context` (the mean of its memoised samples, blended between anchors)."""
        return at_context(context, lambda anchor: self._mean_at(step, anchor))

    def mean_step_us_many(self, step: StepSpec, contexts) -> np.ndarray:
        """mean_step_us at each of many contexts (the same values), one anchor lookup per distinct anchor."""
        lows, highs, weight = context_anchors_many(contexts)
        anchors, _ = np.unique(np.concatenate([lows, highs]), return_counts=True)  # counts: no numpy.ma import
        means = np.array([self._mean_at(step, a) for a in anchors.tolist()])
        low, high = means[np.searchsorted(anchors, lows)], means[np.searchsorted(anchors, highs)]
        return np.where(weight == 0.0, low, blend(low, high, weight))

    def pair(self, step: StepSpec, low: int, high: int) -> CostTable:
        """The anchor table at `low` and its differences to the one at `high` (in the run's store; a deferred one
        evaluates its breakdown when first read, the same floats)."""
        store = current()
        key = ("costs.pair", *self._key, key_of(step), low, high)
        pair = store.peek(key)
        if pair is None:
            if self.deferred and not all(self._built(step, anchor) for anchor in (low, high)):
                durations = np.array(self._durations(step, low))
                deltas = np.array(self._durations(step, high)) - durations if high != low else np.zeros_like(durations)
                pair = CostTable.deferred(durations, deltas, partial(_pair_rows, self.machine, self.seed, step, low, high))
            else:
                pair = CostTable(*_pair_rows(self.machine, self.seed, step, low, high))
            store.put(key, pair)
        return pair

    def _built(self, step: StepSpec, context: int) -> bool:
        """Whether the step's whole table at an anchor is at hand (in this run or shared by value)."""
        return current().peek(self._shared_key(step, context)) is not None

    def sparse_step(self, step: StepSpec, context: int) -> StepCost:
        """step() for a step drawn rarely (a prefill: one or a few per request): the row it draws is evaluated
        alone at its anchors (Machine.sample_rows, the same floats as the whole table's row), as a one-row table,
        unless the whole tables are at hand, or every row of both anchors is (_sparse_rows); a step with draft
        passes (paired with the main pass's samples at random) takes step()."""
        low, high, weight = context_anchors(context)
        store = current()
        if step.drafts or store.peek(("costs.pair", *self._key, key_of(step), low, high)) is not None or \
                all(self._built(step, a) for a in (low, high)):
            return self.step(step, context)
        if self.index_at >= len(self.indices):
            self.next_index_block()
        i = self.indices[self.index_at] % FAST_SAMPLES  # as step() reads it from a whole table
        self.index_at += 1
        rows = self._sparse_rows(step, low, high)
        if rows is not None:
            return StepCost(rows.durations[i] + rows.duration_deltas[i] * weight, rows, i, weight)

        def row_table() -> CostTable:
            at_low = self._sparse_row(step, low, i)
            return CostTable(at_low[None], (self._sparse_row(step, high, i) - at_low)[None] if high != low else None)
        table = store.get(("costs.sparse_row", *self._key, key_of(step), low, high, i), row_table)
        return StepCost(table.durations[0] + table.duration_deltas[0] * weight, table, 0, weight)

    def _sparse_rows(self, step: StepSpec, low: int, high: int) -> CostTable | None:
        """sparse_step's rows of every sample at once, where the main pass's rows are all evaluated at both anchors
        (sampling.sample_rows evaluates them all after a shape's first few): the table whose row i is the one-row
        table of row i (the same floats: STEP_COST's columns are elementwise), stored once for every later step
        between those anchors; else None."""
        store = current()
        key = ("costs.sparse_rows", *self._key, key_of(step), low, high)
        table = store.peek(key)
        if table is not None:
            return table
        main = step.main
        every = [rows_at_hand(self.machine, main.part, main.shape.at(a), main.graph, self.seed) for a in (low, high)]
        if every[0] is None or every[1] is None:
            return None
        draft = np.full(FAST_SAMPLES, step.draft_host_us)
        at_low = _cost_rows(step, every[0], draft)
        return store.put(key, CostTable(at_low, _cost_rows(step, every[1], draft) - at_low if high != low else None))

    def _sparse_row(self, step: StepSpec, context: int, i: int) -> np.ndarray:
        """Row i of the step's table at an anchor (no draft passes), as _build_table computes it."""
        main = self.machine.sample_rows(step.main.part, step.main.shape.at(context), step.main.graph,
                                        self.seed, [i])
        return _cost_rows(step, main, np.full(1, step.draft_host_us))[0]

    def next_index_block(self) -> list[int]:
        """The next block of the row-index stream (position 0)."""
        self.indices, self.index_at = _index_block(self._rng), 0
        return self.indices

    def take_indices(self, n: int) -> np.ndarray:
        """The next n values of the row-index stream (as n calls of step() would read them)."""
        taken: list[int] = []
        while len(taken) < n:
            if self.index_at >= len(self.indices):
                self.next_index_block()
            take = min(n - len(taken), len(self.indices) - self.index_at)
            taken += self.indices[self.index_at:self.index_at + take]
            self.index_at += take
        return np.array(taken, dtype=np.int64)

    def peek_indices(self, n: int) -> np.ndarray:
        """The next n values of the row-index stream, not consumed (index_at moves on by what is used of them): the
        stream's blocks are drawn in the same order, the rest of the current one kept ahead of the next."""
        while len(self.indices) - self.index_at < n:
            self.indices, self.index_at = self.indices[self.index_at:] + _index_block(self._rng), 0
        return np.frombuffer(self.indices[self.index_at:self.index_at + n], dtype=np.int64)

    def steps(self, step: StepSpec, contexts: np.ndarray) -> StepCosts:
        """step() at each of many contexts in turn, as arrays (the same rows and floats)."""
        return self._steps(step, contexts, self.take_indices(len(contexts)))

    def steps_ahead(self, step: StepSpec, contexts: np.ndarray) -> StepCosts:
        """steps() without consuming the index stream: the caller adds to index_at the steps it takes."""
        return self._steps(step, contexts, self.peek_indices(len(contexts)))

    def _steps(self, step: StepSpec, contexts: np.ndarray, indices: np.ndarray) -> StepCosts:
        """The steps at these contexts, reading those index values (one table where they lie between two anchors)."""
        n = len(contexts)
        low, high, _ = context_anchors(int(contexts[0])) if n else (0, 0, 0.0)
        if low != high and low < int(contexts.min()) and int(contexts.max()) < high:  # strictly between two anchors
            last = self._last
            if last[0] is step and last[1] == low and last[2] == high:
                table = last[3]
            else:
                table = self.pair(step, low, high)
                self._last = (step, low, high, table)
            weights = (contexts - low) / (high - low)  # context_anchors' division (ints below 2^53: the same floats)
            rows = indices % len(table.durations)
            durations = table.duration_column[rows] + table.duration_delta_column[rows] * weights
            return StepCosts(durations, [(table, n)], rows, weights)
        lows, highs, weights = context_anchors_many(contexts)
        rows, durations, tables = np.empty(n, dtype=np.int64), np.empty(n), []
        bounds = [0, *(np.flatnonzero((lows[1:] != lows[:-1]) | (highs[1:] != highs[:-1])) + 1).tolist(), n]
        for a, b in zip(bounds[:-1], bounds[1:]):  # runs of steps between the same anchors
            table = self.pair(step, int(lows[a]), int(highs[a]))
            rows[a:b] = indices[a:b] % len(table.durations)
            durations[a:b] = table.duration_column[rows[a:b]] + table.duration_delta_column[rows[a:b]] * weights[a:b]
            tables.append((table, b - a))
        return StepCosts(durations, tables, rows, weights)

    def step(self, step: StepSpec, context: int) -> StepCost:
        """One step's cost at `context`; every STEP_COST field is table.anchor[row] + weight x table.delta[row] (hot
        path: the duration is blended now, the other fields when the log is read)."""
        low, high, weight = context_anchors(context)
        last = self._last
        if last[0] is step and last[1] == low and last[2] == high:  # the same step and anchors as the last one
            table = last[3]
        else:
            table = self.pair(step, low, high)
            self._last = (step, low, high, table)
        durations = table.durations
        if self.index_at >= len(self.indices):
            self.next_index_block()
        i = self.indices[self.index_at] % len(durations)
        self.index_at += 1
        return _new(StepCost, (durations[i] + table.duration_deltas[i] * weight, table, i, weight))
