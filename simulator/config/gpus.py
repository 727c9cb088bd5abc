"""A topology's GPU as loaded, as a what-if, and as its board runs (no pydantic: the mirror's GPUSpec, pydantic's
where the mirror declines)."""
from __future__ import annotations

from typing import Any

from .names import MEASURED_GPU_FIELDS


def gpu_of(data: Any):
    """A topology's GPU mapping as loaded, validated; None where it is not a valid GPU by itself (an override mends it)."""
    from .errors import ConfigError
    from .mirror import GPUSpec
    from .mirror_base import validate

    if not isinstance(data, dict):
        return None
    try:
        return validate(GPUSpec, data, None)
    except ConfigError:
        return None


def what_if_gpu(loaded, gpu):
    """Where `gpu` differs from the GPU as loaded (before overrides) in a MEASURED_GPU_FIELDS field: `gpu` with those
    fields as loaded (what the measured times depend on; the other fields as run, so that the order the overrides
    came in does not matter), else None."""
    if loaded is None or all(getattr(loaded, f) == getattr(gpu, f) for f in MEASURED_GPU_FIELDS):
        return None
    return gpu.model_copy(update={f: getattr(loaded, f) for f in MEASURED_GPU_FIELDS})


def board_gpu(loaded, gpu):
    """`gpu` as its board runs: where a scenario states a board's measured read bandwidth away from the loaded GPU's
    (a power-limited board) and leaves the data-sheet figure as loaded, that figure scaled by the ratio of the two
    reads (memory-bound kernels run at the board's pace)."""
    if loaded is None or gpu.read_bandwidth_GBps is None or loaded.read_bandwidth_GBps is None \
            or gpu.read_bandwidth_GBps == loaded.read_bandwidth_GBps \
            or gpu.memory_bandwidth_GBps != loaded.memory_bandwidth_GBps:
        return gpu
    scaled = loaded.memory_bandwidth_GBps * gpu.read_bandwidth_GBps / loaded.read_bandwidth_GBps
    return gpu.model_copy(update={"memory_bandwidth_GBps": scaled})
