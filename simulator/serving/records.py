"""The step log: one named record per simulated step, kept as numpy columns.

A step's *facts* (what happened: its kind, start, batch, tokens, ...) and its *cost* (what it took, split into the
breakdown's categories) are recorded by name. A fast-fidelity step's cost is a row of a CostTable (the memoised
samples at the context anchor below the step's context, and their differences to the anchor above) and a weight;
the log stores (table, row, weight) and blends anchor + weight x difference when it is read, in one vectorised
pass, so the hot path only appends three numbers besides the facts.

Storage: compact per-step arrays in chunks (serving.steplog, which also gives the named columns). The serving loop
appends a step to a short pending list that moves into the arrays a block at a time (one numpy conversion per block
instead of one per step: the hot path stays at a list append).
"""
from __future__ import annotations

from dataclasses import fields
from typing import NamedTuple

from ..compiled import dataclass
from ..timing.costtable import STEP_COST, CostTable  # noqa: F401  (a step's cost; re-exported)

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


from .steplog import StepColumns, StepLog  # noqa: E402,F401  (the log's storage; re-exported)
