"""A deployment: the engine instances a scenario's split makes (config/parallelism.py: dp replicas without
dp_attention) and the router in front of them.

Every instance runs its own serving loop, batching (`workload.max_running_requests` is each instance's batch cap, as each
SGLang data-parallel worker has its own scheduler) and speculation policy on its own GPUs; the workload's requests
arrive at the router, which sends each to one instance when it arrives. The routers are those of SGLang's
data-parallel controller (python/sglang/srt/managers/data_parallel_controller.py: round_robin and shortest_queue).
With `prefill_instances`, the first instances form a prefill pool and the others a decode pool, as SGLang's and
vLLM's prefill/decode disaggregation (DistServe, Zhong et al. 2024) run them.
"""

from typing import Literal

from pydantic import Field, NonNegativeInt

from .base import Strict

from .names import ROUTERS


class Deployment(Strict):
    """How requests reach the instances of a deployment (one instance: the router changes nothing)."""

    router: Literal[ROUTERS] = Field(  # type: ignore[valid-type]
        "round_robin", description="round_robin: instance i gets requests i, i + n, ... in arrival order; "
        "least_loaded: the instance with the fewest requests waiting, prefilling or decoding when the request "
        "arrives, the lowest index on a tie (SGLang's shortest_queue)")
    prefill_instances: NonNegativeInt = Field(
        0, description="Prefill/decode disaggregation: instances 0 .. k-1 only prefill; when a request's prompt is "
        "prefilled (its first token out), its KV cache moves over the fabric to a decode instance (chosen by the "
        "router among the others), which decodes it. 0: every instance prefills and decodes its own requests")
