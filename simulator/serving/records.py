"""The step log: one named record per simulated step, kept as numpy columns.

A step's *facts* (what happened: its kind, start, batch, tokens, ...) and its *cost* (what it took, split into the
breakdown's categories) are recorded by name. A fast-fidelity step's cost is a row of a CostTable (the memoised
samples at the context anchor below the step's context, and their differences to the anchor above) and a weight;
the log stores (table, row, weight) and blends anchor + weight x difference when it is read, in one vectorised
pass, so the hot path only appends three numbers besides the facts.

Storage: preallocated numpy arrays (facts, table, row, weight) grown by doubling. The serving loop appends a step to
a short pending list that moves into the arrays a block at a time (one numpy conversion per block instead of one
per step: the hot path stays at a list append). `columns()` gives one array per named field, `records()` a row
view.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable, NamedTuple

import numpy as np

from ..timing.costtable import STEP_COST, CostTable

KIND_PREFILL, KIND_DECODE, KIND_SPEC = 0, 1, 2
STEP_KIND_NAMES = {KIND_PREFILL: "prefill", KIND_DECODE: "decode", KIND_SPEC: "verify"}


class StepFacts(NamedTuple):
    """What happened in a step, as the serving loop appends it (the log's STEP_FACTS, in this order)."""

    kind: int  # KIND_PREFILL, KIND_DECODE or KIND_SPEC
    start_at: float  # microseconds of simulated time
    batch: int  # requests in the step
    tokens: int  # tokens emitted (a prefill: requests whose prompt finished)
    depth: int  # the verify tree's depth (0 without speculation)
    drafter: int  # the drafter's slot (-1: none)
    verify_tokens: int  # the verify tree's size (a prefill: prompt tokens)
    kv_tokens: int  # KV cache in use, tokens
    waiting: int  # requests waiting for admission
    context: int  # tokens cached for the batch before the step


STEP_FACTS = StepFacts._fields

# the log's columns as readers see them (times in microseconds)
STEP_FIELDS = ("kind", "start_at", "duration_us", "draft_us", "pass_us", "batch", "tokens", "depth",
               "compute", "memory", "launch", "allreduce_transfer", "allreduce_wait", "draft", "other",
               "allreduce_only", "allreduce_profile", "drafter", "verify_tokens", "kv_tokens", "waiting", "context")
BLOCK = 1024  # steps appended between two moves into the numpy arrays


@dataclass(frozen=True)
class StepRecord:
    """One step as a named record (a row of the log)."""

    kind: int
    start_at: float
    duration_us: float
    draft_us: float
    pass_us: float
    batch: int
    tokens: int
    depth: int
    compute: float
    memory: float
    launch: float
    allreduce_transfer: float
    allreduce_wait: float
    draft: float
    other: float
    allreduce_only: float
    allreduce_profile: float
    drafter: int
    verify_tokens: int
    kv_tokens: int
    waiting: int
    context: int


_INTEGER_FIELDS = frozenset(f.name for f in fields(StepRecord) if f.type == "int")


class StepColumns:
    """The step log as one numpy array per named field (float64, in STEP_FIELDS order); `table["kind"]` and
    `table.kind` are the same column. Read-only. Columns a deferred cost table has not evaluated yet (its breakdown:
    StepLog.columns) are evaluated together when one of them is first read (`deferred` returns them by name)."""

    __slots__ = (*STEP_FIELDS, "_deferred")

    def __init__(self, deferred: Callable[[], dict[str, np.ndarray]] | None = None, **columns: np.ndarray):
        unknown, missing = set(columns) - set(STEP_FIELDS), set(STEP_FIELDS) - set(columns)
        if unknown or (missing and deferred is None):
            raise TypeError(f"StepColumns: unknown fields {sorted(unknown)}, missing fields {sorted(missing)}")
        for name, value in columns.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "_deferred", deferred)

    def __getattr__(self, name: str) -> np.ndarray:
        """A field not set yet (Python asks only then): the deferred columns, evaluated all at once."""
        deferred = object.__getattribute__(self, "_deferred")
        if deferred is None or name not in STEP_FIELDS:
            raise AttributeError(name)
        object.__setattr__(self, "_deferred", None)
        for key, value in deferred().items():
            object.__setattr__(self, key, value)
        return object.__getattribute__(self, name)

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"StepColumns is read-only ({name})")

    def __reduce__(self):  # pickled with every column evaluated (a deferred evaluation does not travel)
        return _step_columns, (self.as_dict(),)

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in STEP_FIELDS:
            raise KeyError(name)
        return getattr(self, name)

    def __len__(self) -> int:
        return int(self.kind.shape[0])

    def keys(self) -> tuple[str, ...]:
        return STEP_FIELDS

    def as_dict(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in STEP_FIELDS}

    def records(self) -> list[StepRecord]:
        """The rows as named records (integers as int)."""
        values = [getattr(self, name).tolist() for name in STEP_FIELDS]
        casts = [int if name in _INTEGER_FIELDS else float for name in STEP_FIELDS]
        return [StepRecord(*(cast(v) for cast, v in zip(casts, row))) for row in zip(*values)]


def _step_columns(columns: dict[str, np.ndarray]) -> StepColumns:
    return StepColumns(**columns)


class StepLog:
    """What every step of a run did and cost (see the module docstring for the layout)."""

    def __init__(self, capacity: int = BLOCK):
        self._facts = np.zeros((capacity, len(STEP_FACTS)))
        self._table = np.zeros(capacity, dtype=np.int64)  # the cost table's serial
        self._row = np.zeros(capacity, dtype=np.int64)
        self._weight = np.zeros(capacity)
        self._tables: dict[int, CostTable] = {}
        self._size = 0
        # pending steps, flat (the hot path extends lists; one numpy conversion per block)
        self._pending_facts: list = []
        self._pending_costs: list = []  # (table, row, weight) per step, flat

    def append(self, facts: StepFacts, table: CostTable, row: int = 0, weight: float = 0.0) -> None:
        """One step: its facts (a StepFacts, or a tuple in its order), and its cost as table.anchor[row] + weight x table.delta[row]."""
        self._pending_facts += facts
        costs = self._pending_costs
        costs += (table, row, weight)
        if len(costs) >= 3 * BLOCK:
            self._flush()

    def __len__(self) -> int:
        return self._size + len(self._pending_costs) // 3

    def pending(self) -> tuple[list, list, int]:
        """The pending lists append() extends (facts, then (table, row, weight) per step), and the length of the
        second at which a loop that extends them itself calls flush()."""
        return self._pending_facts, self._pending_costs, 3 * BLOCK

    def flush(self) -> None:
        """Move the pending steps into the arrays."""
        self._flush()

    def _flush(self) -> None:
        costs = self._pending_costs
        if not costs:
            return
        count = len(costs) // 3
        tables = self._tables
        serials = []
        for table in costs[0::3]:
            serial = table.serial
            if serial not in tables:
                tables[serial] = table
            serials.append(serial)
        at = self._reserve(count)
        self._facts[at] = np.array(self._pending_facts, dtype=float).reshape(count, len(STEP_FACTS))
        self._table[at] = serials
        self._row[at] = costs[1::3]
        self._weight[at] = costs[2::3]
        self._pending_facts.clear()
        costs.clear()

    def extend(self, facts: dict[str, np.ndarray], tables: list[tuple[CostTable, int]], rows: np.ndarray,
               weights: np.ndarray) -> None:
        """Many steps at once, after the pending ones: their STEP_FACTS by name (arrays, or one value for all), the
        cost tables as (table, steps) runs in step order, and each step's row and weight."""
        self._flush()
        at = self._reserve(len(rows))
        for i, name in enumerate(STEP_FACTS):
            self._facts[at, i] = facts[name]
        for table, _ in tables:
            self._tables.setdefault(table.serial, table)
        self._table[at] = np.repeat([t.serial for t, _ in tables], [n for _, n in tables])
        self._row[at] = rows
        self._weight[at] = weights

    def _reserve(self, count: int) -> slice:
        """Room for `count` more steps (the arrays grow by doubling); returns their slice."""
        end = self._size + count
        if end > self._weight.shape[0]:
            capacity = max(end, 2 * self._weight.shape[0])
            for name in ("_facts", "_table", "_row", "_weight"):
                old = getattr(self, name)
                grown = np.zeros((capacity,) + old.shape[1:], dtype=old.dtype)
                grown[:self._size] = old[:self._size]
                setattr(self, name, grown)
        at = slice(self._size, end)
        self._size = end
        return at

    def _rows(self, n: int) -> tuple[list[CostTable], np.ndarray]:
        """The tables in serial order, and each of the first n steps' row in their rows laid end to end."""
        serials = np.array(sorted(self._tables))
        tables = [self._tables[s] for s in serials.tolist()]
        offsets = np.cumsum([0] + [t.anchor.shape[0] if t.evaluated else len(t.durations) for t in tables[:-1]])
        return tables, offsets[np.searchsorted(serials, self._table[:n])] + self._row[:n]

    def costs(self, n: int | None = None) -> np.ndarray:
        """(steps, STEP_COST) blended between the context anchors, in one vectorised pass (the first n steps)."""
        self._flush()
        n = self._size if n is None else n
        if n == 0:
            return np.zeros((0, len(STEP_COST)))
        tables, index = self._rows(n)
        anchor = np.concatenate([t.anchor for t in tables])[index]
        delta = np.concatenate([t.delta for t in tables])[index]
        return anchor + delta * self._weight[:n, None]

    def columns(self) -> StepColumns:
        """One array per named field (copies: the log may grow on). Where a deferred cost table has not been
        evaluated, the durations are blended now (the same floats as costs()' first column) and the other cost
        columns when first read."""
        self._flush()
        n = self._size
        facts = {name: self._facts[:n, i].copy() for i, name in enumerate(STEP_FACTS)}
        if n == 0 or all(t.evaluated for t in self._tables.values()):
            return StepColumns(**facts, **_cost_columns(facts["kind"], self.costs(n)))
        tables, index = self._rows(n)
        duration = np.concatenate([t.duration_column for t in tables])[index] + \
            np.concatenate([t.duration_delta_column for t in tables])[index] * self._weight[:n]
        kind = facts["kind"]
        return StepColumns(lambda: {name: column for name, column in _cost_columns(kind, self.costs(n)).items()
                                    if name != "duration_us"}, **facts, duration_us=duration)

    def records(self) -> list[StepRecord]:
        return self.columns().records()


def _cost_columns(kind: np.ndarray, cost: np.ndarray) -> dict[str, np.ndarray]:
    """The log's cost columns by name from costs()' rows (times in microseconds)."""
    columns = {name: cost[:, i] for i, name in enumerate(STEP_COST)}
    columns["duration_us"] = columns.pop("duration")
    # prefill steps have no drafting: the draft category and the draft_us column are zero there
    columns["draft_us"] = columns["draft"] = np.where(kind == KIND_PREFILL, 0.0, columns["draft_us"])
    return columns
