"""Pass breakdowns booked in bulk: at layer and link fidelity a pass's duration is known when its last collective
ends, but its split into categories (timeline.breakdown) is only read when the step log is. Passes are kept with
their rank timelines and split a block at a time, with numpy reductions over the whole block instead of a dozen
small ones per pass (the same values: the same element-wise operations and the same reductions per pass)."""
from __future__ import annotations

import itertools

import numpy as np

from .costtable import STEP_COST, CostTable
from .timeline import CATEGORIES, PassPlan, stacked_breakdown

BLOCK = 256  # passes split at once; their rank timelines are dropped then (memory stays bounded)
VIEWS = ("allreduce_only", "allreduce_profile")


class PassBook:
    """Passes waiting for their breakdown, grouped by layout (segments, ranks and which collectives are
    all-reduces), and the breakdowns already computed."""

    def __init__(self):
        self._pending: dict[tuple, list] = {}
        self._waiting = 0
        self._done: dict[int, dict[str, float]] = {}
        self._slots = itertools.count()

    def add(self, plan: PassPlan, h: np.ndarray, C: np.ndarray) -> int:
        """Book a pass (h: (1, ranks, segments) host-ready times, C: (1, segments) collective ends); its slot."""
        slot = next(self._slots)
        key = (plan.num_segments, plan.ranks, plan.allreduce_mask.tobytes())
        self._pending.setdefault(key, []).append((slot, plan, h, C))
        self._waiting += 1
        if self._waiting >= BLOCK:
            self._split()
        return slot

    def categories(self, slot: int) -> dict[str, float]:
        """A booked pass's breakdown (CATEGORIES and the all-reduce views); pops it."""
        if slot not in self._done:
            self._split()
        return self._done.pop(slot)

    def _split(self) -> None:
        for passes in self._pending.values():
            plans = [p for _, p, _, _ in passes]
            out = stacked_breakdown(
                np.stack([p.gpu_us for p in plans]), np.stack([p.collective_us for p in plans]),
                plans[0].allreduce_mask, np.stack([p.compute_us for p in plans]),
                np.stack([p.memory_us for p in plans]), np.stack([p.gap_us for p in plans]),
                np.concatenate([h for _, _, h, _ in passes]), np.concatenate([C for _, _, _, C in passes]))
            columns = {name: out[name].tolist() for name in CATEGORIES + VIEWS}
            for i, (slot, _, _, _) in enumerate(passes):
                self._done[slot] = {name: values[i] for name, values in columns.items()}
        self._pending.clear()
        self._waiting = 0


class BookedCost(CostTable):
    """A step run at layer / link fidelity: its durations now, its main pass's categories from the book when the
    log is read (one row, nothing to blend)."""

    __slots__ = ("_book", "_slot", "_known", "_row")

    def __init__(self, book: PassBook, slot: int, known: dict[str, float]):  # noqa: super() would need the row
        self.serial = next(CostTable._serials)
        self._book, self._slot, self._known, self._row = book, slot, known, None
        self._fill = None  # not a deferred table: a log reads its row (records.StepLog.columns)

    @property
    def anchor(self) -> np.ndarray:
        if self._row is None:
            values = dict(self._book.categories(self._slot), **self._known)
            self._row = np.array([[values[name] for name in STEP_COST]])
        return self._row

    @property
    def delta(self) -> np.ndarray:
        return np.zeros((1, len(STEP_COST)))

    def num_rows(self) -> int:
        return 1
