"""The step log: steps appended by the serving loop, stored compactly (serving/stepstore.py: 52 bytes a step, each
cost a row index into the run's cost tables, blended when read), and the named columns read from it.

Chunks are appended, each as large as the log so far up to CHUNK steps; reading the log joins them into one array
per field, one field at a time; a log detached at the run's end keeps its chunks, read as one (JoinedStore). A log
given a sink (`--steps-log`) hands each block of steps to it as the run goes, as named columns.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..timing.costtable import STEP_COST, CostTable
from .records import BLOCK, STEP_FACTS, STEP_FIELDS, StepRecord, _INTEGER_FIELDS
from .stepstore import _WIDE, FACT_TYPES, STEP_BYTES, STORED, JoinedStore, StepStore  # noqa: F401 (re-exported)

_FACT_INDEX = {name: i for i, name in enumerate(STEP_FACTS)}
CHUNK = 1 << 18  # steps a chunk holds: each field's array large enough to be mapped apart (freed to the system, its
# untouched tail never resident)


class StepColumns:
    """The step log as named columns (STEP_FIELDS; times in microseconds); `table["kind"]` and `table.kind` are
    the same column. Read-only. Facts are the stored arrays (integers in their storage types); cost columns are
    blended on each read and not kept (a reader keeps what it needs)."""

    __slots__ = ("_store",)

    def __init__(self, store: StepStore):
        object.__setattr__(self, "_store", store)

    @classmethod
    def of(cls, **columns: np.ndarray) -> "StepColumns":
        """Columns given by name (every field of STEP_FIELDS): stored as one table of measured rows."""
        missing, unknown = set(STEP_FIELDS) - set(columns), set(columns) - set(STEP_FIELDS)
        if missing or unknown:
            raise TypeError(f"StepColumns: unknown fields {sorted(unknown)}, missing fields {sorted(missing)}")
        n = len(columns["kind"])
        costs = {name: columns[name] for name in STEP_COST if name != "duration"}
        costs["duration"] = columns["duration_us"]
        table = CostTable(np.stack([np.asarray(costs[name], dtype=float) for name in STEP_COST], axis=1))
        fields = {name: np.asarray(columns[name]).astype(FACT_TYPES[name]) for name in STEP_FACTS}
        fields.update(row=np.arange(n, dtype=np.int32), weight=np.zeros(n))
        return cls(StepStore(fields, [table]))

    def __getattr__(self, name: str) -> np.ndarray:
        store = object.__getattribute__(self, "_store")
        if name in FACT_TYPES:
            return store.fields[name]
        if name in STEP_FIELDS:
            return store.cost(name)
        raise AttributeError(name)

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"StepColumns is read-only ({name})")

    def at(self, name: str, mask: np.ndarray) -> np.ndarray:
        """`table[name][mask]`, the same values, without the whole column (a joined log reads it part by part)."""
        if name not in STEP_FIELDS:
            raise KeyError(name)
        return self._store.column_at(name, np.asarray(mask, dtype=bool))

    def __reduce__(self):  # pickled with every column evaluated
        return _step_columns, (self.as_dict(),)

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in STEP_FIELDS:
            raise KeyError(name)
        return getattr(self, name)

    def __len__(self) -> int:
        return len(self._store)

    def keys(self) -> tuple[str, ...]:
        return STEP_FIELDS

    def as_dict(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in STEP_FIELDS}

    def records(self) -> list[StepRecord]:
        """The rows as named records (integers as int)."""
        values = [getattr(self, name).tolist() for name in STEP_FIELDS]
        casts = [int if name in _INTEGER_FIELDS else float for name in STEP_FIELDS]
        return [StepRecord(*(cast(v) for cast, v in zip(casts, row))) for row in zip(*values)]

    @classmethod
    def joined(cls, parts: list["StepColumns"]) -> tuple["StepColumns", list["StepColumns"]]:
        """Several runs' columns as one (in turn: each column its parts' concatenated when read) and each run's
        own columns (no copy of the steps is held)."""
        store, stores = StepStore.joined([part._store for part in parts])
        return cls(store), [cls(part) for part in stores]


def _step_columns(columns: dict[str, np.ndarray]) -> StepColumns:
    return StepColumns.of(**columns)


class StepLog:
    """What every step of a run did and cost (records.py names the fields): appended by the serving loop, stored
    compactly (module docstring)."""

    def __init__(self, sink: Callable[[StepColumns], None] | None = None):
        """sink: given each block of steps as columns as soon as it is stored (a steps log written as it goes)."""
        self.sink = sink
        self._chunks: list[dict[str, np.ndarray]] = []
        self._used = 0  # steps in the last chunk
        self._size = 0
        self._tables: list[CostTable] = []
        self._offsets: dict[int, int] = {}  # table serial -> its first row in the tables laid end to end
        self._rows = 0
        # pending steps, flat (the hot path extends lists; one numpy conversion per block)
        self._pending_facts: list = []
        self._pending_costs: list = []  # (table, row, weight) per step, flat
        # pending steps given as arrays (add_run), and the listed steps before them, in step order: their STEP_FACTS
        # as rows of floats (as the lists' are converted), rows (their tables' offsets added) and weights
        self._buffer: tuple | None = None
        self._buffered = 0

    def append(self, facts: tuple, table: CostTable, row: int = 0, weight: float = 0.0) -> None:
        """One step: its STEP_FACTS values, and its cost as table.anchor[row] + weight x table.delta[row]."""
        self._pending_facts += facts
        costs = self._pending_costs
        costs += (table, row, weight)
        if len(costs) >= 3 * (BLOCK - self._buffered):
            self._flush()

    def add_run(self, facts: dict, tables: list[tuple[CostTable, int]], rows: np.ndarray, weights: np.ndarray) -> None:
        """Steps given as arrays after the pending ones (a run of plain decode steps): their STEP_FACTS by name (an
        array, or one value for all), the cost tables as (table, steps) runs in step order, each step's row and
        weight. Written into the pending buffer after the listed steps (the same values as appended one by one)."""
        self._buffer_listed()
        steps = len(rows)
        at, (buffer, buffer_rows, buffer_weights) = self._buffered, self._room(steps)
        block = buffer[at:at + steps]
        for name, value in facts.items():
            block[:, _FACT_INDEX[name]] = value
        offsets = [self._offset(table) for table, _ in tables]
        row = buffer_rows[at:at + steps]
        row[...] = rows
        if len(offsets) == 1:
            row += offsets[0]
        else:
            row += np.repeat(np.array(offsets, dtype=np.int64), [n for _, n in tables])
        buffer_weights[at:at + steps] = weights
        self._buffered += steps
        if self._buffered >= BLOCK:
            self._flush()

    def __len__(self) -> int:
        return self._size + len(self._pending_costs) // 3 + self._buffered

    def _room(self, steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The pending buffer (facts, rows, weights), with room for `steps` more."""
        need = self._buffered + steps
        if self._buffer is None or len(self._buffer[1]) < need:
            size = max(2 * BLOCK, 2 * need)
            kept = self._buffer
            self._buffer = (np.empty((size, len(STEP_FACTS))), np.empty(size, dtype=np.int64), np.empty(size))
            if kept is not None:
                for new, old in zip(self._buffer, kept):
                    new[:self._buffered] = old[:self._buffered]
        return self._buffer

    def _buffer_listed(self) -> None:
        """Move the listed pending steps into the buffer (their tables' offsets taken in step order)."""
        costs = self._pending_costs
        if not costs:
            return
        count = len(costs) // 3
        at, (buffer, buffer_rows, buffer_weights) = self._buffered, self._room(count)
        buffer[at:at + count] = np.array(self._pending_facts, dtype=float).reshape(count, len(STEP_FACTS))
        offset = self._offset
        buffer_rows[at:at + count] = [offset(table) + row for table, row in zip(costs[0::3], costs[1::3])]
        buffer_weights[at:at + count] = costs[2::3]
        self._pending_facts.clear()
        costs.clear()
        self._buffered += count

    def pending(self) -> tuple[list, list, int]:
        """The pending lists append() extends (facts, then (table, row, weight) per step), and the length of the
        second at which a loop that extends them itself calls flush()."""
        return self._pending_facts, self._pending_costs, 3 * BLOCK

    def flush(self) -> None:
        """Move the pending steps into the arrays."""
        self._flush()

    def _offset(self, table: CostTable) -> int:
        offset = self._offsets.get(table.serial)
        if offset is None:
            offset = self._offsets[table.serial] = self._rows
            self._tables.append(table)
            self._rows += table.num_rows()
        return offset

    def _flush(self) -> None:
        costs = self._pending_costs
        if self._buffered:
            self._buffer_listed()
            count, self._buffered = self._buffered, 0
            facts, rows, weights = self._buffer
            values = {name: facts[:count, i] for i, name in enumerate(STEP_FACTS)}
            values.update(row=rows[:count], weight=weights[:count])
            return self._store(values, count)
        if not costs:
            return
        count = len(costs) // 3
        offset = self._offset
        facts = np.array(self._pending_facts, dtype=float).reshape(count, len(STEP_FACTS))
        values = {name: facts[:, i] for i, name in enumerate(STEP_FACTS)}
        values["row"] = [offset(table) + row for table, row in zip(costs[0::3], costs[1::3])]
        values["weight"] = costs[2::3]
        self._pending_facts.clear()
        costs.clear()
        self._store(values, count)

    def extend(self, facts: dict[str, np.ndarray], tables: list[tuple[CostTable, int]], rows: np.ndarray,
               weights: np.ndarray) -> None:
        """Many steps at once, after the pending ones: their STEP_FACTS by name (arrays, or one value for all), the
        cost tables as (table, steps) runs in step order, and each step's row and weight."""
        self._flush()
        offsets = [self._offset(t) for t, _ in tables]
        values = dict(facts, row=np.repeat(offsets, [n for _, n in tables]) + np.asarray(rows), weight=weights)
        self._store(values, len(rows))

    def _store(self, values: dict, count: int) -> None:
        """Write `count` steps (each field an array of count, or one value) into the chunks."""
        for name in _WIDE:
            if count and np.max(values[name]) >= 2 ** 31:
                raise OverflowError(f"step log: {name} above 2^31 tokens in one step")
        at = self._size
        done = 0
        while done < count:
            if not self._chunks or self._used == len(self._chunks[-1]["kind"]):
                size = min(CHUNK, max(BLOCK, self._size))  # as large as the log so far: a short log stays small
                self._chunks.append({name: np.empty(size, dtype=t) for name, t in STORED.items()})
                self._used = 0
            chunk = self._chunks[-1]
            take = min(count - done, len(chunk["kind"]) - self._used)
            for name, value in values.items():
                chunk[name][self._used:self._used + take] = value[done:done + take] if np.ndim(value) else value
            self._used += take
            done += take
        self._size += count
        if self.sink is not None:
            self.sink(StepColumns(self._snapshot(at)))

    def _snapshot(self, start: int = 0) -> StepStore:
        """The steps from `start` on as a store of views (a whole log's chunks are joined into one first)."""
        self._flush()
        if not self._chunks:
            return StepStore({name: np.zeros(0, dtype=t) for name, t in STORED.items()}, list(self._tables))
        if len(self._chunks) > 1 and start == 0:
            self._join()
        ends = np.cumsum([0] + [len(c["kind"]) for c in self._chunks[:-1]] + [self._used]).tolist()
        fields = {}
        for name in STORED:
            parts = [c[name][max(start, a) - a:b - a] for c, a, b in zip(self._chunks, ends[:-1], ends[1:])
                     if b > start]
            fields[name] = parts[0].view() if len(parts) == 1 else np.concatenate(parts)
        return StepStore(fields, list(self._tables))

    def _join(self) -> None:
        """The chunks as one (field by field, each freed once copied): a later read takes views of it."""
        used = self._used
        joined = {}
        for name in STORED:
            parts = [c.pop(name) for c in self._chunks]
            parts[-1] = parts[-1][:used]
            joined[name] = np.concatenate(parts)
        self._chunks, self._used = [joined], self._size

    def columns(self) -> StepColumns:
        """One column per named field over the steps so far (the log may grow on: later steps are not in it)."""
        return StepColumns(self._snapshot())

    def detach(self) -> StepColumns:
        """The columns of every step, the log forgetting them (its arrays are then the columns' alone). Its chunks
        are not joined (no copy at the run's end): several are read as one (JoinedStore), sharing one copy of the
        tables laid end to end."""
        self._flush()
        if len(self._chunks) <= 1:
            columns = self.columns()
        else:
            tables, ends, parts = list(self._tables), {}, []
            for i, chunk in enumerate(self._chunks):
                used = self._used if i == len(self._chunks) - 1 else len(chunk["kind"])
                part = StepStore({name: chunk[name][:used] for name in STORED}, tables)
                part._ends = ends
                parts.append(part)
            columns = StepColumns(JoinedStore(parts))
        self._chunks, self._used, self._size = [], 0, 0
        return columns

    def records(self) -> list[StepRecord]:
        return self.columns().records()
