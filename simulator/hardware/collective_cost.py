"""The cost of one collective at one message size, as a record: NCCL's (or the custom kernel's) choice and its time.
Its own module, importing nothing heavy, so that the results layer builds its all-reduce section from these fields
(results.collective_sections.AllreduceChoice) without loading the NCCL model."""
from __future__ import annotations

from dataclasses import asdict

from ..compiled import dataclass
from .nccl_tables import NCCL_VERSION

IMPLEMENTATION_NCCL = f"NCCL {NCCL_VERSION} cost model"
IMPLEMENTATION_CUSTOM = "engine custom all-reduce (vLLM/SGLang), not NCCL"


@dataclass(frozen=True)
class CollectiveCost:
    """What a collective costs at one size: the algorithm and protocol chosen, the time and its fixed latency (us),
    algorithm and bus bandwidth (GB/s, as nccl-tests report them), and which implementation it models."""

    algorithm: str
    protocol: str
    time_us: float
    latency_us: float
    algbw_GBps: float
    busbw_GBps: float
    implementation: str = IMPLEMENTATION_NCCL

    def as_dict(self) -> dict:
        return asdict(self)
