"""All-reduce costs: NCCL's ring/tree/NVLS x LL/LL128/Simple model over the fabric's routes, and custom P2P all-reduce.

Cost = latency + bytes / algorithm bandwidth, as NCCL's tuner predicts it (src/graph/tuning.cc), with the per-step
latency and the link bandwidths taken from this topology's routes instead of NCCL's fixed tables where they differ.
"""
from __future__ import annotations

from dataclasses import dataclass, asdict
from functools import wraps

from .interconnect import Fabric


def _memo(maxsize: int):
    """Memoise a method by its arguments in a dict on the instance (it dies with the instance, unlike lru_cache on
    a method, which keeps every instance alive across runs), emptied when it reaches maxsize."""
    def wrap(method):
        attr = f"_memo_{method.__name__}"

        @wraps(method)
        def cached(self, *args):
            cache = self.__dict__.setdefault(attr, {})
            hit = cache.get(args)
            if hit is None:
                if len(cache) >= maxsize:
                    cache.clear()
                hit = cache[args] = method(self, *args)
            return hit
        return cached
    return wrap

# --- NCCL's tuning constants (NVIDIA/nccl src/graph/tuning.cc, v2.19-v2.21: baseLat, hwLat, llMaxBws) ---------
# Base latency per (algorithm, protocol), us.
NCCL_BASE_LATENCY_US = {
    ("ring", "LL"): 6.6, ("ring", "LL128"): 14.0, ("ring", "Simple"): 8.4,
    ("tree", "LL"): 6.8, ("tree", "LL128"): 14.0, ("tree", "Simple"): 8.4,
    ("nvls", "Simple"): 0.0,
}
# Per-step ("hop") latency per link class, us: hwLat[NVLINK|PCI][algorithm][protocol].
NCCL_HOP_LATENCY_US = {
    "nvlink": {("ring", "LL"): 0.6, ("ring", "LL128"): 1.9, ("ring", "Simple"): 3.4,
               ("tree", "LL"): 0.6, ("tree", "LL128"): 1.25, ("tree", "Simple"): 4.0,
               ("nvls", "Simple"): 23.0},
    "pcie": {("ring", "LL"): 1.0, ("ring", "LL128"): 2.5, ("ring", "Simple"): 5.7,
             ("tree", "LL"): 1.0, ("tree", "LL128"): 1.9, ("tree", "Simple"): 4.0},
}
# LL protocol bandwidth ceiling on one node (llMaxBws, Hopper row), GB/s.
NCCL_LL_MAX_BW_GBPS = 141.0
# Tree bandwidth corrections for medium sizes (treeCorrectionFactor), indexed by log2(bytes/64), 64 B .. 128 MB.
NCCL_TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .5, .6, .6, .7, .7, .8, .9, .9, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .5, .5, .6, .6, .7, .8, .9),
}
# Custom (vLLM/SGLang) all-reduce: one-shot below 256 KB at 8 ranks, two-shot up to 8 MB buffers
# (vllm/distributed/device_communicators/custom_all_reduce.py; docs/sources.md).
CUSTOM_ONE_SHOT_MAX_BYTES = 256 * 1024
CUSTOM_MAX_BYTES = 8 * 1024 * 1024

NCCL_ALGORITHMS = ("nccl_ring", "nccl_tree", "nvls")
CUSTOM_ALGORITHMS = ("one_shot", "two_shot")


@dataclass(frozen=True)
class StepPlan:
    """A collective as steps over links: base latency, then `steps` steps, each a latency plus a transfer that
    takes `transfer_us` at `bandwidth_GBps` (the hops' shared bottleneck when only this collective runs)."""

    base_us: float
    steps: int
    hops: tuple
    step_latency_us: float
    transfer_us: float
    bandwidth_GBps: float


@dataclass(frozen=True)
class CollectiveCost:
    algorithm: str
    protocol: str
    time_us: float
    latency_us: float
    algbw_GBps: float
    busbw_GBps: float

    def as_dict(self) -> dict:
        return asdict(self)


class NotPermitted(ValueError):
    """The requested algorithm cannot run on this fabric (e.g. custom all-reduce without peer-to-peer)."""


class AllReduce:
    """All-reduce among the first `ranks` GPUs of a fabric; `choice` is runtime.allreduce."""

    def __init__(self, fabric: Fabric, ranks: int, choice: str = "auto", kernel_floor_us: float = 0.0):
        self.fabric = fabric
        self.ranks = ranks
        self.choice = choice
        self.kernel_floor_us = kernel_floor_us
        if any(fabric.hop(i, (i + 1) % ranks).net for i in range(ranks)) if ranks > 1 else False:
            raise NotPermitted(f"the {ranks} ranks span machines, and NCCL's model between machines is not in this "
                               "version yet: take at most one machine's GPUs")
        self._p2p_all = ranks > 1 and fabric.all_pairs_p2p(ranks)
        self._nvlink_all = ranks > 1 and fabric.all_pairs_nvlink(ranks)
        self._tables = self._nccl_tables() if ranks > 1 else {}
        if choice in CUSTOM_ALGORITHMS and ranks > 1 and not self._p2p_all:
            raise NotPermitted(f"{choice} needs peer-to-peer between all {ranks} ranks, "
                               f"but fabric.p2p_level={fabric.topology.fabric.p2p_level} routes some pairs through host memory")
        if choice == "nvls" and not self._nvls_ok():
            raise NotPermitted("nvls needs an NVSwitch with multicast (fabric.nvls: true) joining all ranks by NVLink")

    # -- NCCL ------------------------------------------------------------------------------------------------
    def _nvls_ok(self) -> bool:
        return self._nvlink_all and self.fabric.has_nvswitch and self.fabric.topology.fabric.nvls

    def _step(self, hops) -> tuple[str, float, float]:
        """Link class of the slowest hop, the route latency it adds, and the ring's shared-bandwidth bottleneck."""
        cls = "nvlink" if all(h.over_nvlink for h in hops) else "pcie"
        extra = max(self.fabric.latency_us(h) for h in hops)
        bandwidth = min(self.fabric.concurrent_bandwidth_GBps(hops))
        return cls, extra, bandwidth

    def _nccl_tables(self) -> dict:
        n = self.ranks
        ring_hops = [self.fabric.hop(i, (i + 1) % n) for i in range(n)]
        # NCCL's one-node tree is a chain; reduce (up) and broadcast (down) share each link, which NCCL's 0.5
        # bus-to-algorithm ratio accounts for, so the chain's bandwidth is taken one direction at a time
        chain_hops = [self.fabric.hop(i, i + 1) for i in range(n - 1)]
        tables = {}
        steps = 2 * (n - 1)
        for algo, hops in (("ring", ring_hops), ("tree", chain_hops)):
            cls, extra, bw = self._step(hops)
            for proto in ("LL", "LL128", "Simple"):
                if proto == "LL128" and cls != "nvlink":
                    continue  # LL128 is enabled only over NVLink (tuning.cc: typeIntra <= PATH_NVB)
                hop_lat = NCCL_HOP_LATENCY_US[cls][(algo, proto)] + extra
                latency = NCCL_BASE_LATENCY_US[(algo, proto)] + steps * hop_lat
                if algo == "ring":
                    bus = {"LL": min(NCCL_LL_MAX_BW_GBPS, bw / 4.0), "LL128": bw * 0.92, "Simple": bw}[proto]
                    ratio = n / steps
                else:
                    bus = bw * 0.92
                    bus = {"LL": min(bus / 3.8, NCCL_LL_MAX_BW_GBPS), "LL128": bus * 7.0 / 9.0, "Simple": bus}[proto]
                    ratio = 0.5
                tables[(algo, proto)] = (latency, bus * ratio, bus * ratio * steps / n)
        if self._nvls_ok():
            bw = min(self.fabric.concurrent_bandwidth_GBps([self.fabric.hop(i, (i + 1) % n) for i in range(n)]))
            algbw = bw * 5.0 / 6.0
            tables[("nvls", "Simple")] = (NCCL_HOP_LATENCY_US["nvlink"][("nvls", "Simple")], algbw, algbw * 2 * (n - 1) / n)
        return tables

    def nccl_options(self, nbytes: int) -> list[CollectiveCost]:
        out = []
        log_size = max(0, int(nbytes >> 6).bit_length() - 1)
        for (algo, proto), (latency, algbw, busbw) in self._tables.items():
            bw = algbw
            if algo == "tree" and log_size < len(NCCL_TREE_CORRECTION[proto]):
                bw *= NCCL_TREE_CORRECTION[proto][log_size]
            name = "nvls" if algo == "nvls" else f"nccl_{algo}"
            out.append(CollectiveCost(name, proto, latency + nbytes / (1000.0 * bw), latency, bw, busbw))
        return out

    # -- custom all-reduce (vLLM / SGLang) --------------------------------------------------------------------
    def custom_options(self, nbytes: int, forced: bool) -> list[CollectiveCost]:
        n = self.ranks
        if not self._p2p_all:
            return []
        if not forced and not (self._nvlink_all or n <= 2):
            return []  # engines disable custom all-reduce on more than two PCIe-only GPUs
        if nbytes > CUSTOM_MAX_BYTES and not forced:
            return []
        hops = [self.fabric.hop(j, i) for i in range(n) for j in range(n) if i != j]
        cls = "nvlink" if self._nvlink_all else "pcie"
        # a flag barrier is a round trip to the peers: twice NCCL's per-step LL latency plus the route's
        flag = 2 * (NCCL_HOP_LATENCY_US[cls][("ring", "LL")] + max(self.fabric.latency_us(h) for h in hops))
        flow_bw = min(self.fabric.concurrent_bandwidth_GBps(hops))  # every rank reads every peer at once
        bus = 2 * (n - 1) / n
        out = []
        if forced or nbytes <= CUSTOM_ONE_SHOT_MAX_BYTES:
            # one-shot: a start and an end flag; each rank reads every peer's whole buffer concurrently
            latency = 2 * flag + self.kernel_floor_us
            out.append(CollectiveCost("one_shot", "P2P", latency + nbytes / (1000.0 * flow_bw), latency,
                                      flow_bw, flow_bw * bus))
        # two-shot: reduce-scatter then all-gather, each reading a 1/n chunk from every peer; three flags
        latency = 3 * flag + 2 * self.kernel_floor_us
        algbw = flow_bw * n / 2.0
        out.append(CollectiveCost("two_shot", "P2P", latency + nbytes / (1000.0 * algbw), latency, algbw, algbw * bus))
        return out

    @_memo(4096)
    def step_plan(self, nbytes: int) -> StepPlan:
        """The chosen all-reduce of nbytes decomposed into its steps (the same total time when links are free)."""
        c = self.cost(nbytes)
        n = self.ranks
        if n <= 1:
            return StepPlan(0.0, 0, (), 0.0, 0.0, float("inf"))
        if c.algorithm in ("nccl_ring", "nccl_tree"):
            algo = "ring" if c.algorithm == "nccl_ring" else "tree"
            hops = [self.fabric.hop(i, (i + 1) % n) for i in range(n)] if algo == "ring" else \
                [self.fabric.hop(i, i + 1) for i in range(n - 1)]
            steps, base = 2 * (n - 1), NCCL_BASE_LATENCY_US[(algo, c.protocol)]
        elif c.algorithm == "nvls":
            hops, steps, base = [self.fabric.hop(i, (i + 1) % n) for i in range(n)], 1, 0.0
        else:  # one-shot reads every peer at once; two-shot does it twice with 1/n chunks
            hops = [self.fabric.hop(j, i) for i in range(n) for j in range(n) if i != j]
            steps, base = (1 if c.algorithm == "one_shot" else 2), 0.0
        transfer = nbytes / (1000.0 * c.algbw_GBps) if c.algbw_GBps > 0 else 0.0
        bandwidth = min(self.fabric.concurrent_bandwidth_GBps(hops))
        return StepPlan(base, steps, tuple(hops), (c.latency_us - base) / steps, transfer / steps, bandwidth)

    @_memo(1024)
    def allgather_us(self, nbytes_per_rank: int) -> float:
        """NCCL ring all-gather of nbytes from each rank: n-1 steps, cheapest protocol (tuning.cc's model)."""
        n = self.ranks
        if n <= 1:
            return 0.0
        cls, extra, bw = self._step([self.fabric.hop(i, (i + 1) % n) for i in range(n)])
        total = nbytes_per_rank * n
        best = float("inf")
        for proto in ("LL", "LL128", "Simple"):
            if proto == "LL128" and cls != "nvlink":
                continue
            latency = NCCL_BASE_LATENCY_US[("ring", proto)] + (n - 1) * (NCCL_HOP_LATENCY_US[cls][("ring", proto)] + extra)
            bus = {"LL": min(NCCL_LL_MAX_BW_GBPS, bw / 3.0), "LL128": bw * 0.92, "Simple": bw}[proto]
            best = min(best, latency + total / (1000.0 * bus * n / (n - 1)))
        return best

    # -- choice ---------------------------------------------------------------------------------------------
    @_memo(4096)
    def cost(self, nbytes: int) -> CollectiveCost:
        """The all-reduce of nbytes as this runtime would run it."""
        if self.ranks <= 1:
            return CollectiveCost("none", "-", 0.0, 0.0, 0.0, 0.0)  # one rank: nothing to reduce
        choice = self.choice
        if choice == "auto":
            options = self.nccl_options(nbytes) + self.custom_options(nbytes, forced=False)
        elif choice == "nccl":
            options = self.nccl_options(nbytes)
        elif choice in CUSTOM_ALGORITHMS:
            options = [o for o in self.custom_options(nbytes, forced=True) if o.algorithm == choice]
        else:
            options = [o for o in self.nccl_options(nbytes) if o.algorithm == choice]
        if not options:
            raise NotPermitted(f"allreduce {choice!r} is not available on this fabric")
        return min(options, key=lambda o: o.time_us)
