"""A tensor-parallel group that spans machines: its all-reduce and all-gather per NCCL's model between machines.

What is modelled: NCCL v2.29.7-1's tuning model with nNodes > 1 (parallel_collectives.multinode_allreduce_options for
the all-reduce; the ring all-gather here, from the same tuning.cc lines: nsteps = n - 1 of which nNodes - 1 cross
the network, bus bandwidth x n / nsteps). The engines' custom all-reduce works inside one machine only, and NVLS
across machines needs SHARP switches: neither is offered. `make_allreduce` picks this class or the one-machine
AllReduce by whether the ranks' ring crosses the network.
"""
from __future__ import annotations

from ..cache import stored
from . import nccl_tables as T
from .collectives import AllReduce, CollectiveCost, NotPermitted, StepPlan, NCCL_NAME
from .interconnect import Fabric
from .nccl import Option, algo_time_us, chosen


def spans_machines(fabric: Fabric, ranks: int) -> bool:
    """Whether the ring over the fabric's first `ranks` GPUs crosses the network."""
    return ranks > 1 and any(fabric.hop(i, (i + 1) % ranks).net for i in range(ranks))


def make_allreduce(fabric: Fabric, ranks: int, choice: str = "auto", kernel_floor_us: float = 0.0,
                   custom_model=None, custom_rule=None):
    """The all-reduce of the first `ranks` GPUs: between machines if their ring crosses the network (where no
    custom all-reduce runs)."""
    if spans_machines(fabric, ranks):
        return MultiNodeAllReduce(fabric, ranks, choice)
    return AllReduce(fabric, ranks, choice, kernel_floor_us, custom_model, custom_rule=custom_rule)


def multinode_allgather_options(fabric: Fabric, ranks: int, cpu_vendor: str = "intel",
                                own: bool = False) -> list[Option]:
    """NCCL's ring all-gather over machines (tuning.cc, nNodes > 1): base + (nsteps - nInter) x max(intra step, net
    overhead) + nInter x the network step, nsteps = n - 1 and nInter = nNodes - 1; bus bandwidth as the all-reduce
    ring's (one channel per NIC, LL capped by llMaxBw, LL128 by its per-channel maximum). own=True: NCCL's own
    figures (no route extra), what it chooses by."""
    from .parallel_collectives import NET_OVERHEAD_US, multinode_setup

    m = multinode_setup(fabric, ranks)
    a = T.arch(m.sm_version)
    col = 1 if m.machines <= 2 else 2
    ll_max = T.LL_MAX_BW["ampere" if cpu_vendor == "amd" else "volta"][col]
    nsteps, inter = ranks - 1, m.machines - 1
    ppn = ranks // m.machines
    bus0 = m.graph.channels * m.graph.bw_GBps
    out = []
    for k, proto in enumerate(T.PROTOCOLS):
        if proto == "LL128" and m.intra_hw != "nvlink":
            continue
        overhead = NET_OVERHEAD_US[cpu_vendor] * (3 if proto == "Simple" else 1)
        intra = max(T.HW_LATENCY_US[m.intra_hw]["ring"][k] + (0.0 if own else m.extra_step_latency_us), overhead)
        net = T.HW_LATENCY_US["net"]["tree" if ppn == 1 else "ring"][k]
        latency = T.BASE_LATENCY_US["ring"][k] + (nsteps - inter) * intra + inter * net
        bus = {"LL": min(ll_max, bus0 * T.LL_EFFICIENCY),
               "LL128": min(bus0 * T.LL128_EFFICIENCY, m.graph.channels * T.PER_CHANNEL_MAX_RING_LL128_BW[a][col]),
               "Simple": bus0}[proto]
        out.append(Option("ring", proto, latency, bus * ranks / nsteps, bus))
    return out


class MultiNodeAllReduce:
    """All-reduce (and the logits' all-gather) of the first `ranks` GPUs spread over machines, as NCCL runs it."""

    def __init__(self, fabric: Fabric, ranks: int, choice: str = "auto"):
        if choice not in ("auto", "nccl", "nccl_ring", "nccl_tree"):
            raise NotPermitted(f"allreduce {choice!r} works inside one machine; the {ranks} ranks span machines, "
                               "where NCCL's ring and tree run")
        self.fabric = fabric
        self.ranks = ranks
        self.choice = choice
        self.value_key = (fabric.value_key, ranks, choice)  # what its costs are computed from (the run's store)
        from .parallel_collectives import multinode_setup  # here: a one-machine run needs none of it

        multinode_setup(fabric, ranks)  # raises ValueError when the ranks are not spread evenly

    @stored
    def cost(self, nbytes: int) -> CollectiveCost:
        from .parallel_collectives import multinode_allreduce_timed, nccl_pick

        own, runs = (multinode_allreduce_timed(self.fabric, self.ranks, nbytes, own=flag) for flag in (True, False))
        if self.choice in NCCL_NAME.values():
            own, runs = ([(o, t) for o, t in x if NCCL_NAME[o.algorithm] == self.choice] for x in (own, runs))
        option, time = nccl_pick(own, runs)  # NCCL chooses by its own table, then runs that choice
        return CollectiveCost(NCCL_NAME[option.algorithm], option.protocol, time, option.latency_us,
                              option.algbw_GBps, option.busbw_GBps)

    @stored
    def step_plan(self, nbytes: int) -> StepPlan:
        """The chosen all-reduce as steps over the ring's hops (link fidelity); the same total time on free links."""
        c, n = self.cost(nbytes), self.ranks
        hops = tuple(self.fabric.hop(i, (i + 1) % n) for i in range(n))
        steps = 2 * (n - 1)
        base = T.BASE_LATENCY_US["tree" if c.algorithm == "nccl_tree" else "ring"][T.PROTOCOLS.index(c.protocol)]
        transfer = max(0.0, c.time_us - c.latency_us)
        bandwidth = min(self.fabric.concurrent_bandwidth_GBps(list(hops)))
        return StepPlan(base, steps, hops, (c.latency_us - base) / steps, transfer / steps, bandwidth)

    @stored
    def allgather_us(self, nbytes_per_rank: int) -> float:
        """NCCL's ring all-gather of nbytes from each rank across the machines: the protocol its own table times
        fastest (own=True: no route extra), run at what it costs."""
        total = nbytes_per_rank * self.ranks
        own, runs = (multinode_allgather_options(self.fabric, self.ranks, own=flag) for flag in (True, False))
        return algo_time_us(chosen(own, runs, total), total)
