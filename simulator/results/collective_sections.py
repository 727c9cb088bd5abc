"""A Result's collective sections: what a plain decode pass moves under a wider split, and the all-reduce a layer
runs at the decode's and the verify's message size, its fields those of the hardware layer's cost record."""
from __future__ import annotations

from dataclasses import MISSING, fields

from ..hardware.collective_cost import CollectiveCost
from .sections import Section


class CollectiveKind(Section):
    """One kind of collective in a plain decode pass: how many close its segments, their time per pass and each."""

    count: int
    ms_per_pass: float
    us_each: float


class CollectiveFigures(Section):
    """What a plain decode pass moves under a wider split, at the workload's batch: per collective kind (empty for one
    plain TP group: the all-reduce lines say it all)."""

    batch: int | None = None
    kinds: dict[str, CollectiveKind] | None = None

    _optional = ("batch", "kinds")


def _at_a_size(name: str, cost: type, doc: str) -> type:
    """A section of `bytes` then the fields of the cost record `cost` (their types and defaults): one list of fields,
    written once in the hardware layer, so the section cannot drift from what the collective model returns."""
    annotations = {"bytes": "int", **{f.name: f.type for f in fields(cost)}}
    defaults = {f.name: f.default for f in fields(cost) if f.default is not MISSING}
    namespace = {"__annotations__": annotations, **defaults, "__doc__": doc, "__module__": __name__}
    return type(name, (Section,), namespace)


AllreduceChoice = _at_a_size("AllreduceChoice", CollectiveCost, """The all-reduce a layer runs at one pass's message
    size: its bytes, then NCCL's (or the custom kernel's) choice and cost there: hardware.collective_cost.CollectiveCost's
    fields (algorithm, protocol, time_us, latency_us, algbw_GBps, busbw_GBps, implementation).""")


class AllreduceChoices(Section):
    """The all-reduce at a plain decode's message size, and at the verify's where the run speculates."""

    decode: AllreduceChoice
    verify: AllreduceChoice | None = None

    _optional = ("verify",)
