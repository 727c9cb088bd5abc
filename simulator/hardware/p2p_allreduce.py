"""The engines' custom all-reduce (vLLM / SGLang one-shot and two-shot over peer-to-peer), which is not NCCL.

What is modelled: one-shot raises a start and an end flag and reads every peer's whole buffer at once; two-shot
reduce-scatters then all-gathers, each reading a 1/n chunk from every peer, behind three flags. A flag barrier is a
round trip to the peers (twice NCCL's per-step LL latency plus the route's). Where the engine's kernel was measured
(kernels/custom_allreduce_fit.py), its fitted model times it instead. The kernel's own switch picks one-shot or
two-shot, not the faster of the two.
"""
from __future__ import annotations

from . import nccl_tables as T
from .collective_cost import IMPLEMENTATION_CUSTOM, CollectiveCost

CUSTOM_ALGORITHMS = ("one_shot", "two_shot")

# Custom (vLLM/SGLang) all-reduce: one-shot below 256 KB at 8 ranks, two-shot up to 8 MB buffers
# (vllm/distributed/device_communicators/custom_all_reduce.py; docs/sources.md).
CUSTOM_ONE_SHOT_MAX_BYTES = 256 * 1024
CUSTOM_MAX_BYTES = 8 * 1024 * 1024


def custom_one_shot_bound(ranks: int) -> int:
    """The size from which the custom all-reduce runs two-shot at this GPU count (0: never); custom_all_reduce.cuh:
    one-shot at two GPUs, below 512 KiB at three or four, below 256 KiB at up to eight."""
    return 0 if ranks <= 2 else (512 * 1024 if ranks <= 4 else CUSTOM_ONE_SHOT_MAX_BYTES)


def allreduce_bus_factor(ranks: int) -> float:
    """nccl-tests' bus bandwidth over algorithm bandwidth for an all-reduce: 2 (n - 1) / n (each byte crosses
    2 (n - 1) links of a ring of n, spread over n ranks)."""
    return 2 * (ranks - 1) / ranks if ranks else 0.0


def custom_options(ar, nbytes: int, forced: bool) -> list[CollectiveCost]:
    """The custom all-reduce of nbytes over `ar`'s ranks (a collectives.AllReduce): the algorithm the kernel's switch
    picks, or both when `forced` (a what-if past the engine's own rules); none where the engine would not run it."""
    n = ar.ranks
    if not ar._p2p_all:
        return []
    if not forced and not (ar._nvlink_all or n <= 2):
        return []  # engines disable custom all-reduce on more than two PCIe-only GPUs
    if nbytes > CUSTOM_MAX_BYTES and not forced:
        return []
    hops = [ar.fabric.hop(j, i) for i in range(n) for j in range(n) if i != j]
    cls = "nvlink" if ar._nvlink_all else "pci"
    # a flag barrier is a round trip to the peers: twice NCCL's per-step LL latency plus the route's
    flag = 2 * (T.HW_LATENCY_US[cls]["ring"][0] + max(ar.fabric.latency_us(h) for h in hops))
    flow_bw = min(ar.fabric.concurrent_bandwidth_GBps(hops))  # every rank reads every peer at once
    bus = allreduce_bus_factor(n)
    model = ar.custom_model
    if model is not None and (ar.choice not in CUSTOM_ALGORITHMS or model.algorithm(nbytes) == ar.choice):
        # the engine's kernel as measured (its own one-shot / two-shot switch): the fit of its table below the
        # bound, its rows above; the fixed part is the fit's latency, the rest moves at the bandwidth it implies
        time = model.time_us(nbytes)
        bw = nbytes / (1000.0 * (time - model.latency_us)) if time > model.latency_us else model.bandwidth_GBps
        label = model.label + (" above the one-shot bound: the table's rows" if model.measured_rows(nbytes) else "")
        return [CollectiveCost(model.algorithm(nbytes), "P2P", time, model.latency_us, bw, bw * bus, label)]
    out = []
    bound = custom_one_shot_bound(n)  # the kernel's own switch, not the faster of the two
    if forced or not bound or nbytes < bound:
        # one-shot: a start and an end flag; each rank reads every peer's whole buffer concurrently
        latency = 2 * flag + ar.kernel_floor_us
        out.append(CollectiveCost("one_shot", "P2P", latency + nbytes / (1000.0 * flow_bw), latency,
                                  flow_bw, flow_bw * bus, IMPLEMENTATION_CUSTOM))
    if not (forced or (bound and nbytes >= bound)):
        return out
    # two-shot: reduce-scatter then all-gather, each reading a 1/n chunk from every peer; three flags
    latency = 3 * flag + 2 * ar.kernel_floor_us
    algbw = flow_bw * n / 2.0
    out.append(CollectiveCost("two_shot", "P2P", latency + nbytes / (1000.0 * algbw), latency, algbw, algbw * bus,
                              IMPLEMENTATION_CUSTOM))
    return out
