"""A deployment: the engine instances a scenario's split makes (config/parallelism.py: dp replicas without
dp_attention) and the router in front of them.

Every instance runs its own serving loop, batching (`workload.concurrency` is each instance's batch cap, as each
SGLang data-parallel worker has its own scheduler) and speculation policy on its own GPUs; the workload's requests
arrive at the router, which sends each to one instance when it arrives. The routers are those of SGLang's
data-parallel controller (python/sglang/srt/managers/data_parallel_controller.py: round_robin and shortest_queue).
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import Strict

ROUTERS = ("round_robin", "least_loaded")


class Deployment(Strict):
    """How requests reach the instances of a deployment (one instance: the router changes nothing)."""

    router: Literal[ROUTERS] = Field(  # type: ignore[valid-type]
        "round_robin", description="round_robin: instance i gets requests i, i + n, ... in arrival order; "
        "least_loaded: the instance with the fewest requests waiting, prefilling or decoding when the request "
        "arrives, the lowest index on a tie (SGLang's shortest_queue)")
