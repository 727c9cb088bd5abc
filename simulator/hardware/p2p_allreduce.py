"""The engines' custom all-reduce (vLLM / SGLang one-shot and two-shot over peer-to-peer), which is not NCCL.

What is modelled: one-shot raises a start and an end flag and reads every peer's whole buffer at once; two-shot
reduce-scatters then all-gathers, each reading a 1/n chunk from every peer, behind three flags. A flag barrier is a
round trip to the peers (twice NCCL's per-step LL latency plus the route's). Where the engine's kernel was measured
(kernels/custom_allreduce_fit.py), its fitted model times it instead. Whether the engine runs it and which of the two
its kernel runs (its own switch, not the faster of the two) are the engine profile's custom_allreduce rule, read
from the run's runtime.custom_allreduce: nothing about an engine is written here.
"""
from __future__ import annotations

from . import nccl_tables as T
from .collective_cost import IMPLEMENTATION_CUSTOM, CollectiveCost

CUSTOM_ALGORITHMS = ("one_shot", "two_shot")


def allreduce_bus_factor(ranks: int) -> float:
    """nccl-tests' bus bandwidth over algorithm bandwidth for an all-reduce: 2 (n - 1) / n (each byte crosses
    2 (n - 1) links of a ring of n, spread over n ranks)."""
    return 2 * (ranks - 1) / ranks if ranks else 0.0


def custom_options(ar, nbytes: int, forced: bool) -> list[CollectiveCost]:
    """The custom all-reduce of nbytes over `ar`'s ranks (a collectives.AllReduce): the algorithm the engine's kernel
    picks (ar.custom_rule: the engine profile's custom_allreduce), or both when `forced` (a what-if past the engine's
    own rules); none where the engine would not run it (no rule, or the rule says NCCL)."""
    n, rule = ar.ranks, ar.custom_rule
    if not ar._p2p_all:
        return []
    if not forced and (rule is None or not rule.runs(n, nbytes, ar._nvlink_all)):
        return []
    hops = [ar.fabric.hop(j, i) for i in range(n) for j in range(n) if i != j]
    cls = "nvlink" if ar._nvlink_all else "pci"
    # a flag barrier is a round trip to the peers: twice NCCL's per-step LL latency plus the route's
    flag = 2 * (T.HW_LATENCY_US[cls]["ring"][0] + max(ar.fabric.latency_us(h) for h in hops))
    flow_bw = min(ar.fabric.concurrent_bandwidth_GBps(hops))  # every rank reads every peer at once
    bus = allreduce_bus_factor(n)
    picked = rule.algorithm(n, nbytes) if rule is not None else None  # the kernel's own switch
    model = ar.custom_model
    if model is not None and picked is not None and (ar.choice not in CUSTOM_ALGORITHMS or ar.choice == picked) \
            and model.covers(nbytes, picked):
        # the engine's kernel as measured: the fit of the table's one-shot rows, its rows where the table's kernel
        # ran the algorithm this engine's switch picks; the fixed part is the fit's latency, the rest moves at the
        # bandwidth it implies
        time = model.time_us(nbytes, picked)
        bw = nbytes / (1000.0 * (time - model.latency_us)) if time > model.latency_us else model.bandwidth_GBps
        return [CollectiveCost(picked, "P2P", time, model.latency_us, bw, bw * bus, model.label + model.how(nbytes, picked))]
    out = []
    if forced or picked == "one_shot":
        # one-shot: a start and an end flag; each rank reads every peer's whole buffer concurrently
        latency = 2 * flag + ar.kernel_floor_us
        out.append(CollectiveCost("one_shot", "P2P", latency + nbytes / (1000.0 * flow_bw), latency,
                                  flow_bw, flow_bw * bus, IMPLEMENTATION_CUSTOM))
    if not (forced or picked == "two_shot"):
        return out
    # two-shot: reduce-scatter then all-gather, each reading a 1/n chunk from every peer; three flags
    latency = 3 * flag + 2 * ar.kernel_floor_us
    algbw = flow_bw * n / 2.0
    out.append(CollectiveCost("two_shot", "P2P", latency + nbytes / (1000.0 * algbw), latency, algbw, algbw * bus,
                              IMPLEMENTATION_CUSTOM))
    return out
