"""All-reduce costs: NCCL's ring / tree / NVLS x LL / LL128 / Simple model over the fabric's routes, and the engines'
custom P2P all-reduce, each labelled with what it is.

NCCL: the channel search over this fabric, then NCCL v2.29.7-1's tuning model (nccl.py, tables in nccl_tables.py).
Two extensions: a step whose route adds latency beyond NCCL's per-hop figure (host-memory staging when peer-to-peer
is off, a socket crossing) pays it on every step; and an eagerly launched collective (launch="eager", as nccl-tests
runs them) takes at least the fabric's calibrated eager floor (fabric.nccl_eager_*, beyond NCCL's ring LL latency).
A third: a ring whose bottleneck link has a burst (burst_bytes, a token bucket full at each collective's start) moves
that link's first burst_bytes per direction, protocol overhead included, at burst_GBps and only the rest at its
bandwidth; trees and NVLS keep the sustained rate.
NCCL chooses from its own table (ncclTopoTuneModel's figures, which know none of these extensions); its choice then
runs at what it costs with them. A pass's collectives keep NCCL's figures: their host launch and rank skew are the
host model's. Custom all-reduce (vLLM / SGLang one-shot and two-shot) is not NCCL: p2p_allreduce.py costs it (a
flag round trip per phase plus the reads every rank makes from every peer).
"""
from __future__ import annotations


from ..compiled import dataclass
from ..cache import current, key_of, stored
from . import nccl
from . import nccl_tables as T
from .collective_cost import IMPLEMENTATION_CUSTOM, IMPLEMENTATION_NCCL, CollectiveCost  # noqa: F401 (re-exported)
from . import p2p_allreduce
from .interconnect import Fabric
from .p2p_allreduce import CUSTOM_ALGORITHMS, allreduce_bus_factor  # noqa: F401 (re-exported)


NCCL_ALGORITHMS = ("nccl_ring", "nccl_tree", "nvls")
NCCL_NAME = {"ring": "nccl_ring", "tree": "nccl_tree", "nvls": "nvls"}


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


class NotPermitted(ValueError):
    """The requested algorithm cannot run on this fabric (e.g. custom all-reduce without peer-to-peer)."""


class AllReduce:
    """All-reduce among the first `ranks` GPUs of a fabric; `choice` is runtime.allreduce."""

    def __init__(self, fabric: Fabric, ranks: int, choice: str = "auto", kernel_floor_us: float = 0.0,
                 custom_model=None, launch: str = "graph", custom_rule=None):
        """custom_rule: when the engine runs its custom all-reduce and which algorithm its kernel picks (the engine
        profile's custom_allreduce, as runtime.custom_allreduce holds it; None: NCCL unless one_shot / two_shot is
        forced). custom_model: the engine's kernel as fitted to its measured table (an object with time_us(nbytes,
        algorithm), covers(nbytes, algorithm), how(nbytes, algorithm) and a label; kernels/custom_allreduce_fit.py),
        which then times it instead of the physical flags-and-reads model."""
        self.fabric = fabric
        self.ranks = ranks
        self.choice = choice
        self.kernel_floor_us = kernel_floor_us
        self.custom_model = custom_model
        self.custom_rule = custom_rule
        self.launch = launch  # "eager": an nccl-tests-style launch, which takes at least the fabric's eager floor
        # what its costs are computed from, by value: the run's store keys cost(), step_plan(), allgather_us() by it
        rule = custom_rule.model_dump_json() if custom_rule is not None else None
        self.value_key = (fabric.value_key, ranks, choice, kernel_floor_us, key_of(custom_model), launch, rule)
        if any(fabric.hop(i, (i + 1) % ranks).net for i in range(ranks)) if ranks > 1 else False:
            raise NotPermitted(f"the {ranks} ranks span machines, and NCCL's model between machines is not in this "
                               "version yet: take at most one machine's GPUs")
        self._p2p_all = ranks > 1 and fabric.all_pairs_p2p(ranks)
        self._nvlink_all = ranks > 1 and fabric.all_pairs_nvlink(ranks)
        self._graphs: dict[str, nccl.Graph] = {}
        self._own: dict[tuple[str, str], nccl.Option] = {}
        self._tables = self._nccl_tables() if ranks > 1 else []
        if choice in CUSTOM_ALGORITHMS and ranks > 1 and not self._p2p_all:
            raise NotPermitted(f"{choice} needs peer-to-peer between all {ranks} ranks, "
                               f"but fabric.p2p_level={fabric.topology.fabric.p2p_level} routes some pairs through host memory")
        if choice == "nvls" and not self._nvls_ok():
            raise NotPermitted("nvls needs an NVSwitch with multicast (fabric.nvls: true) joining all ranks by NVLink")
        if choice == "nvls" and ranks > 1 and not any(o.algorithm == "nvls" for o in self._tables):
            raise NotPermitted(f"nvls: NCCL's search finds no NVLS channel here (a GPU's NVLink is too slow for "
                               f"{ranks} ranks, or sm_version is below 90)")

    # -- NCCL ------------------------------------------------------------------------------------------------
    def _nvls_ok(self) -> bool:
        return self._nvlink_all and self.fabric.has_nvswitch and self.fabric.topology.fabric.nvls

    def _ring_hops(self):
        n = self.ranks
        return [self.fabric.hop(i, (i + 1) % n) for i in range(n)]

    def _gpu_link_GBps(self) -> tuple[float, float]:
        """NCCL's totalBw (a GPU's NVLink sum or its PCIe link, the larger) and the smallest GPU's NVLink sum."""
        names = set(self.fabric.gpu_names[:self.ranks])
        nvlink: dict[str, float] = {g: 0.0 for g in names}
        pcie: dict[str, float] = {g: 0.0 for g in names}
        for link in self.fabric.topology.fabric.links:
            for end in link.between:
                if end in names:
                    if link.kind == "nvlink":
                        nvlink[end] += link.bandwidth_GBps
                    else:
                        pcie[end] = max(pcie[end], link.bandwidth_GBps)
        return max(max(nvlink[g], pcie[g]) for g in names), min(nvlink.values())

    @property
    def graphs(self) -> dict[str, nccl.Graph]:
        return self._graphs

    def _nccl_graphs(self) -> dict[str, nccl.Graph]:
        """What NCCL's search would find on this fabric: ring and tree channels, and the NVLS graph; searched once
        per process for a fabric's graph (its routes' key: every field but the host-memory hop's latency, which
        the search does not read), ranks and GPU generation."""
        key = (self.fabric.routing_key, self.ranks, self.fabric.topology.gpu.sm_version)
        return dict(current().get(("collectives.nccl_graphs", *key), self._search_graphs))

    def _search_graphs(self) -> dict[str, nccl.Graph]:
        n, sm = self.ranks, self.fabric.topology.gpu.sm_version
        fabric = self.fabric
        total, nvlink_sum = self._gpu_link_GBps()
        pairs = [fabric.hop(i, j) for i in range(n) for j in range(n) if i != j]
        max_bw = max(min(fabric.link_of[l].bandwidth_GBps for l in h.links) for h in pairs)
        ring_bottleneck = min(fabric.concurrent_bandwidth_GBps(self._ring_hops()))
        ring = nccl.search_channels(ring_bottleneck, max_bw, total, n, sm, ring=True)
        # one node: NCCL's tree is a chain; its search charges each channel on the forward path only
        chain = [fabric.hop(i, i + 1) for i in range(n - 1)]
        tree_bottleneck = min(fabric.concurrent_bandwidth_GBps(chain))
        tree = nccl.search_channels(tree_bottleneck, max_bw, total, n, sm, ring=False,
                                    min_channels=ring.channels, max_channels=ring.channels)
        graphs = {"ring": ring, "tree": tree}
        if self._nvls_ok() and sm >= 90:
            graphs["nvls"] = nccl.search_nvls(nvlink_sum, n, sm)
        return graphs

    def _route(self) -> tuple[str, float]:
        """NCCL's hardware class of the ring (nvlink or pci) and the latency its route adds to every step."""
        hops = self._ring_hops()
        hw = "nvlink" if all(h.over_nvlink for h in hops) else "pci"
        return hw, max(self.fabric.latency_us(h) for h in hops)

    def _nccl_tables(self) -> list[nccl.Option]:
        self._graphs = self._nccl_graphs()
        hw, extra = self._route()
        sm = self.fabric.topology.gpu.sm_version
        # what NCCL chooses by: ncclTopoTuneModel's own figures (no route extra, no eager floor)
        own = nccl.allreduce_options(self.ranks, sm, hw, self._graphs)
        self._own = {(NCCL_NAME[o.algorithm], o.protocol): o for o in own}
        return nccl.allreduce_options(self.ranks, sm, hw, self._graphs, extra, self._ll_extra())

    def _ll_extra(self) -> tuple[float, float]:
        """An eager launch's calibrated floor beyond NCCL's ring LL latency, (fixed, per step) us; none in a pass."""
        f = self.fabric.topology.fabric
        return (f.nccl_eager_base_us, f.nccl_eager_step_us) if self.launch == "eager" else (0.0, 0.0)

    def _ring_burst(self) -> tuple[float, int, float, float] | None:
        """The ring's bottleneck link when it has a burst: (burst bytes, ring flows on it in one direction, its
        bandwidth, its burst rate); None otherwise (no such link, or another link binds)."""
        if self.ranks <= 1:
            return None
        hops = self._ring_hops()
        flows: dict[tuple[int, int], int] = {}
        for hop in hops:
            for link in hop.links:
                flows[link] = flows.get(link, 0) + 1
        bottleneck = min(self.fabric.concurrent_bandwidth_GBps(hops))
        for directed, k in flows.items():
            link = self.fabric.link_of[directed]
            if link.burst_bytes > 0 and abs(link.bandwidth_GBps / k - bottleneck) <= 1e-9 * bottleneck:
                return link.burst_bytes, k, link.bandwidth_GBps, link.burst_GBps
        return None

    def burst_saving_us(self, option: nccl.Option, nbytes: int, nsteps: int, burst) -> float:
        """What the ring's bottleneck link's burst (_ring_burst) saves an operation of nbytes (the whole buffer) in
        nsteps ring steps: each flow moves nbytes / ranks a step, over the protocol's wire efficiency (LL: half its
        bytes are flags), so the link carries wire = k x nsteps x nbytes / ranks / efficiency in the option's
        bandwidth time (at most its bandwidth: NCCL's channel speeds are discrete); its first burst bytes pass at the
        burst rate instead of that rate."""
        if burst is None or option.algorithm != "ring" or nbytes <= 0:
            return 0.0
        burst_bytes, k, _, burst_GBps = burst
        efficiency = {"LL": T.LL_EFFICIENCY, "LL128": T.LL128_EFFICIENCY}.get(option.protocol, 1.0)
        wire = k * nsteps * nbytes / self.ranks / efficiency
        sustained_GBps = wire / (1000.0 * (nccl.algo_time_us(option, nbytes) - option.latency_us))
        return max(0.0, min(wire, burst_bytes) * (1.0 / sustained_GBps - 1.0 / burst_GBps) / 1000.0)

    def _timed(self, option: nccl.Option, nbytes: int, burst) -> CollectiveCost:
        time = nccl.algo_time_us(option, nbytes) - self.burst_saving_us(option, nbytes, 2 * (self.ranks - 1), burst)
        algbw = nbytes / (1000.0 * (time - option.latency_us)) if nbytes else option.algbw_GBps
        return CollectiveCost(NCCL_NAME[option.algorithm], option.protocol, time, option.latency_us,
                              algbw, algbw * 2 * (self.ranks - 1) / self.ranks)

    def nccl_options(self, nbytes: int) -> list[CollectiveCost]:
        """NCCL's cost table for nbytes (ncclTopoGetAlgoTime over every algorithm and protocol): what it chooses by."""
        burst = self._ring_burst()
        return [self._timed(option, nbytes, burst) for option in self._tables]

    def nccl_choice(self, table: list[CollectiveCost], nbytes: int) -> CollectiveCost:
        """NCCL's pick among `table` (this size's options, as they run): the entry its own table times fastest
        (ncclTopoGetAlgoTime over ncclTopoTuneModel's figures alone: no route extra, eager floor or burst)."""
        return min(table, key=lambda c: nccl.algo_time_us(self._own[(c.algorithm, c.protocol)], nbytes))

    def nccl_launched(self, chosen: CollectiveCost, nbytes: int) -> CollectiveCost:
        """The option NCCL chose from its table, timed over the channels topoGetAlgoInfo launches for nbytes
        (nccl.launched_option): a ring or tree of a small message runs on fewer channels than its table assumed."""
        option = next(o for o in self._tables
                      if NCCL_NAME[o.algorithm] == chosen.algorithm and o.protocol == chosen.protocol)
        run = nccl.launched_option(option, nbytes, self.ranks, self.fabric.topology.gpu.sm_version, self._graphs)
        return chosen if run is option else self._timed(run, nbytes, self._ring_burst())

    # -- custom all-reduce (vLLM / SGLang): p2p_allreduce.py ----------------------------------------------------
    def custom_options(self, nbytes: int, forced: bool) -> list[CollectiveCost]:
        """The engine's custom all-reduce of nbytes as it would run here (p2p_allreduce.custom_options)."""
        return p2p_allreduce.custom_options(self, nbytes, forced)

    @stored
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
            steps, base = 2 * (n - 1), T.BASE_LATENCY_US[algo][T.PROTOCOLS.index(c.protocol)]
        elif c.algorithm == "nvls":
            hops, steps, base = [self.fabric.hop(i, (i + 1) % n) for i in range(n)], 1, 0.0
        else:  # one-shot reads every peer at once; two-shot does it twice with 1/n chunks
            hops = [self.fabric.hop(j, i) for i in range(n) for j in range(n) if i != j]
            steps, base = (1 if c.algorithm == "one_shot" else 2), 0.0
        transfer = nbytes / (1000.0 * c.algbw_GBps) if c.algbw_GBps > 0 else 0.0
        bandwidth = min(self.fabric.concurrent_bandwidth_GBps(hops))
        return StepPlan(base, steps, tuple(hops), (c.latency_us - base) / steps, transfer / steps, bandwidth)

    @stored
    def allgather_us(self, nbytes_per_rank: int) -> float:
        """NCCL ring all-gather of nbytes from each rank: n-1 steps, the protocol NCCL's own table times fastest
        (tuning.cc's model), run at what it costs with this fabric's extras."""
        n = self.ranks
        if n <= 1:
            return 0.0
        hw, extra = self._route()
        sm, ring, nbytes = self.fabric.topology.gpu.sm_version, self._graphs["ring"], nbytes_per_rank * n
        own = nccl.allgather_options(n, sm, hw, ring)
        runs = nccl.allgather_options(n, sm, hw, ring, extra, self._ll_extra())
        o = nccl.chosen(own, runs, nbytes)
        return nccl.algo_time_us(o, nbytes) - self.burst_saving_us(o, nbytes, n - 1, self._ring_burst())

    # -- choice ---------------------------------------------------------------------------------------------
    @stored
    def cost(self, nbytes: int) -> CollectiveCost:
        """The all-reduce of nbytes as this runtime would run it."""
        if self.ranks <= 1:
            return CollectiveCost("none", "-", 0.0, 0.0, 0.0, 0.0)  # one rank: nothing to reduce
        choice = self.choice
        if choice in CUSTOM_ALGORITHMS:
            options = [o for o in self.custom_options(nbytes, forced=True) if o.algorithm == choice]
        else:
            # auto: the engine tries its own kernel first (should_custom_ar), NCCL only where its rule says no
            options = self.custom_options(nbytes, forced=False) if choice == "auto" else []
            if not options:
                # NCCL chooses by its own table, then launches that choice on the channels the size needs
                table = [o for o in self.nccl_options(nbytes) if choice in ("auto", "nccl") or o.algorithm == choice]
                options = [self.nccl_launched(self.nccl_choice(table, nbytes), nbytes)] if table else []
        if not options:
            raise NotPermitted(f"allreduce {choice!r} is not available on this fabric")
        return min(options, key=lambda o: o.time_us)
