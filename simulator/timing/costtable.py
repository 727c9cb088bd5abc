"""What a step cost, as the cost models return it: the STEP_COST values, the CostTable of rows a step's cost is
drawn from (the fast fidelity's memoised samples at two context anchors, or one measured row at layer, link and
event fidelity), and the named records a cost model hands the serving loop: StepCost for one step, StepCosts for
many (the step log, serving.records, stores a step's cost as its table, row and weight)."""
from __future__ import annotations

import itertools
from typing import Any, NamedTuple

import numpy as np

# what it cost: the step's duration, its main pass, drafting, then the main pass's categories, other, and the
# all-reduce views (in the order the cost models return them)
STEP_COST = ("duration", "pass_us", "draft_us", "compute", "memory", "launch", "allreduce_transfer",
             "allreduce_wait", "other", "allreduce_only", "allreduce_profile")


class CostTable:
    """The STEP_COST rows a step's cost is drawn from: rows at the lower context anchor, and their differences to
    the upper anchor's (zero for a cost measured directly). A step records (table, row, weight): its cost is
    anchor[row] + weight x delta[row].

    A deferred table knows its durations (the hot path's column) and evaluates the other fields when they are first
    read (`fill`): a run whose breakdown nobody reads (a baseline in a sweep) never evaluates it."""

    __slots__ = ("serial", "_anchor", "_delta", "_fill", "durations", "duration_deltas", "duration_column",
                 "duration_delta_column")
    _serials = itertools.count()

    def __init__(self, anchor: np.ndarray, delta: np.ndarray | None = None):
        self.serial = next(CostTable._serials)  # how a log refers to the table (a value, not the object's address)
        self._fill = None
        self._anchor = np.asarray(anchor, dtype=float).reshape(-1, len(STEP_COST))
        self._delta = np.zeros_like(self._anchor) if delta is None else np.asarray(delta, dtype=float)
        self._durations(self._anchor[:, 0], self._delta[:, 0])

    def _durations(self, column: np.ndarray, delta_column: np.ndarray) -> None:
        self.duration_column, self.duration_delta_column = column, delta_column
        self.durations = column.tolist()  # the hot path blends the duration at once, the rest on read
        self.duration_deltas = delta_column.tolist()

    @classmethod
    def deferred(cls, durations: np.ndarray, duration_deltas: np.ndarray, fill) -> "CostTable":
        """A table with the given duration column and its differences (the same floats as the whole table's first
        column), whose anchor and delta rows fill() returns when first read."""
        table = cls.__new__(cls)
        table.serial = next(CostTable._serials)
        table._anchor = table._delta = None
        table._fill = fill
        table._durations(np.asarray(durations, dtype=float), np.asarray(duration_deltas, dtype=float))
        return table

    @property
    def evaluated(self) -> bool:
        return self._fill is None

    @property
    def anchor(self) -> np.ndarray:
        if self._fill is not None:
            self._evaluate()
        return self._anchor

    @property
    def delta(self) -> np.ndarray:
        if self._fill is not None:
            self._evaluate()
        return self._delta

    def _evaluate(self) -> None:
        anchor, delta = self._fill()
        self._anchor = np.asarray(anchor, dtype=float).reshape(-1, len(STEP_COST))
        self._delta = np.asarray(delta, dtype=float)
        self._fill = None

    def num_rows(self) -> int:
        """Rows the table holds (known without evaluating a deferred table)."""
        return len(self.durations)

    @classmethod
    def measured(cls, row) -> "CostTable":
        """One step's cost as run (layer / link fidelity): a single row, no blending."""
        return cls(np.asarray(row, dtype=float)[None, :])


class StepCost(NamedTuple):
    """One step's cost (FastStepCosts.step, LayerStepCosts.step, EventStepCosts.step): its duration, and where the log
    finds every STEP_COST field: table.anchor[row] + weight x table.delta[row] (a BookedCost at layer, link and
    event fidelity: the breakdown is booked when the log is read)."""

    duration_us: float
    table: Any  # CostTable | timing.passbook.BookedCost
    row: int
    weight: float


class StepCosts(NamedTuple):
    """Many steps' costs at once (FastStepCosts.steps), StepCost's fields as arrays in step order: the durations, the
    cost tables as (table, number of steps) runs, each step's row and weight."""

    durations_us: np.ndarray
    tables: list  # [(CostTable, steps)]
    rows: np.ndarray
    weights: np.ndarray
