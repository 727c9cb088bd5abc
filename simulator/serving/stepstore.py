"""The step log's stored steps (serving/steplog.py appends them): one array per stored field, the run's cost tables
the row indices point into, and how a named column is read from them.

A step keeps its facts in the narrowest integer type that holds them (kind and drafter one byte, counts and token
totals four; its start time as a float64) and its cost as one row index into the run's cost tables (four bytes) and
its context weight (float64): 52 bytes a step (STEP_BYTES). The STEP_COST columns (duration, breakdown, all-reduce
views: 88 bytes a step as float64) are never stored: each is blended when read, anchor[row] + weight x delta[row],
the same floats as blending whole rows, and handed to the reader without being kept. Several stores read as one (a
deployment's instances, a log's chunks) are not copied: a column of the whole is its parts' columns laid end to end
when read (JoinedStore), each part's written into its place.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..timing.costtable import STEP_COST, CostTable
from .records import KIND_PREFILL

# each fact's storage type: the narrowest that holds it (a step's requests, tokens, and the context and KV tokens
# summed over its batch fit 32 bits: an instance's KV cache holds far fewer than 2^31 tokens; _store checks)
FACT_TYPES = {"kind": np.int8, "start_at": np.float64, "batch": np.int32, "tokens": np.int32, "depth": np.int16,
              "drafter": np.int8, "verify_tokens": np.int32, "kv_tokens": np.int32, "waiting": np.int32,
              "context": np.int32}
_WIDE = ("kv_tokens", "context")  # the totals _store checks against the 32-bit range
STORED = {**FACT_TYPES, "row": np.int32, "weight": np.float64}  # row: into the run's cost tables laid end to end
STEP_BYTES = sum(np.dtype(t).itemsize for t in STORED.values())  # 52
READ_BLOCK = 1 << 16  # steps blended at a time: a read's temporaries a block's, not the log's
_COST_INDEX = {name: i for i, name in enumerate(STEP_COST)}
_COST_FIELD = {"duration_us": "duration", **{n: n for n in STEP_COST if n != "duration"}, "draft": "draft_us"}


class StepStore:
    """A snapshot of a log: one array per stored field (read-only) and the cost tables its rows index."""

    def __init__(self, fields: dict[str, np.ndarray], tables: list[CostTable]):
        for array in fields.values():
            array.flags.writeable = False
        self.fields, self.tables = fields, tables
        # the tables laid end to end, built when first read and shared with the parts (views) of this store:
        # "matrices" every table's anchor and delta rows (evaluated), "durations" their duration columns alone
        self._ends: dict[str, tuple] = {}

    def __len__(self) -> int:
        return int(self.fields["kind"].shape[0])

    def cost(self, name: str, out: np.ndarray | None = None) -> np.ndarray:
        """A STEP_COST column (a field name of STEP_FIELDS' cost part), blended between the context anchors (into
        `out` where given: a float64 array of the store's length)."""
        rows, weight = self.fields["row"], self.fields["weight"]
        if len(rows) == 0:
            return np.zeros(0) if out is None else out
        j = _COST_INDEX[_COST_FIELD[name]]
        ends = self._ends
        if j == 0 and not all(t.evaluated for t in self.tables):
            if "durations" not in ends:
                ends["durations"] = (np.concatenate([t.duration_column for t in self.tables]),
                                     np.concatenate([t.duration_delta_column for t in self.tables]))
            anchor, delta = ends["durations"]
        else:
            if "matrices" not in ends:
                ends["matrices"] = (np.concatenate([t.anchor for t in self.tables]),
                                    np.concatenate([t.delta for t in self.tables]))
            anchor, delta = ends["matrices"][0][:, j], ends["matrices"][1][:, j]
        column = np.empty(len(rows)) if out is None else out
        for lo in range(0, len(rows), READ_BLOCK):  # anchor + delta x weight, in place (the same floats: IEEE
            at, block = slice(lo, lo + READ_BLOCK), rows[lo:lo + READ_BLOCK]  # addition commutes)
            np.take(delta, block, out=column[at])
            column[at] *= weight[at]
            column[at] += anchor[block]
        if name in ("draft", "draft_us"):  # prefill steps have no drafting
            column[self.fields["kind"] == KIND_PREFILL] = 0.0
        return column

    def column_at(self, name: str, mask: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """A named column (a STEP_FIELDS name) at the steps where mask holds: column[mask], the same values, a
        cost blended at those steps alone (into `out` where given: as long as the mask's steps, of the column's
        type)."""
        if name in FACT_TYPES:
            return self.fields[name][mask] if out is None else np.compress(mask, self.fields[name], out=out)
        if mask.all():
            return self.cost(name, out=out)
        if out is None:
            out = np.empty(int(np.count_nonzero(mask)))
        at = 0
        for lo in range(0, len(mask), READ_BLOCK):  # the masked steps of a block of steps at a time
            keep = mask[lo:lo + READ_BLOCK]
            n = int(np.count_nonzero(keep))
            if n:
                sub = StepStore({field: self.fields[field][lo:lo + READ_BLOCK][keep]
                                 for field in ("row", "weight", "kind")}, self.tables)
                sub._ends = self._ends  # the tables laid end to end, shared
                sub.cost(name, out=out[at:at + n])
                at += n
        return out

    @classmethod
    def joined(cls, stores: list["StepStore"]) -> tuple["StepStore", list["StepStore"]]:
        """Several logs read as one (their steps in turn) without a copy of them: the whole and its parts (the
        stores given)."""
        return JoinedStore(stores), list(stores)


class _JoinedFields(Mapping):
    """The fields of several stores as one store's: each concatenated when read (read-only), not kept."""

    def __init__(self, stores: list[StepStore]):
        self._stores = stores

    def __getitem__(self, name: str) -> np.ndarray:
        if name == "row":  # rows index each part's own tables: a joined row index would mean nothing
            raise KeyError("row: a joined log's rows index its parts' tables (read its cost columns)")
        parts = [store.fields[name] for store in self._stores]
        out = np.concatenate(parts) if parts else np.zeros(0, dtype=STORED[name])
        out.flags.writeable = False
        return out

    def __iter__(self):
        return (name for name in STORED if name != "row")

    def __len__(self) -> int:
        return len(STORED) - 1


class JoinedStore(StepStore):
    """Several stores as one, in turn, holding no copy of their steps (a deployment's instance logs: the join
    would double them at the run's peak). A fact or cost column is its parts' columns concatenated when read, the
    same values as one store of all the steps (a cost is blended per step from its own part's tables)."""

    def __init__(self, stores: list[StepStore]):
        self.stores = [part for store in stores for part in (store.stores if isinstance(store, JoinedStore)
                                                             else [store])]  # one level: a column joined once
        self.fields, self.tables = _JoinedFields(stores), [t for store in stores for t in store.tables]
        self._ends = {}

    def __len__(self) -> int:
        return sum(len(store) for store in self.stores)

    def cost(self, name: str, out: np.ndarray | None = None) -> np.ndarray:
        """Each part blended into its place in one array (no part's column and the whole held together)."""
        out = np.empty(len(self)) if out is None else out
        at = 0
        for store in self.stores:
            store.cost(name, out=out[at:at + len(store)])
            at += len(store)
        return out

    def column_at(self, name: str, mask: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Each part's steps where the mask holds written into their place in one array."""
        bounds = np.cumsum([0] + [len(store) for store in self.stores]).tolist()
        counts = [int(np.count_nonzero(mask[a:b])) for a, b in zip(bounds[:-1], bounds[1:])]
        if out is None:
            out = np.empty(sum(counts), dtype=FACT_TYPES.get(name, np.float64))
        at = 0
        for store, a, b, n in zip(self.stores, bounds[:-1], bounds[1:], counts):
            if n:
                store.column_at(name, mask[a:b], out=out[at:at + n])
            at += n
        return out
