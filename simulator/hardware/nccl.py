"""NCCL's own cost model for one node (v2.29.7-1): the channel search, then ncclTopoTuneModel and ncclTopoGetAlgoTime.

What is modelled, and how:
- The channel search (src/graph/search.cc ncclTopoCompute) as a count: a pattern's channel at speed s costs s on
  every directed link it uses, so at most floor(bottleneck / s) channels fit; pass 1 walks NCCL's speed array
  down from the fastest speed the fabric allows and keeps the largest channels x speed (ties keep the earlier),
  stopping once it reaches the GPU's total bandwidth or the next speed falls to 0.49 of the best; then
  ncclTopoDupChannels and pass 2 (raise the speed at the same channel count). NCCL searches concrete GPU orders;
  here every channel takes the same route set, which is exact on a switch fabric and on host-memory rings.
- The bandwidth and latency of each (algorithm, protocol), and the time of an operation, line for line from
  src/graph/tuning.cc (tables in nccl_tables.py). One node only: the network rows are not used.
"""
from __future__ import annotations

import math

from ..compiled import dataclass
from . import nccl_tables as T


@dataclass(frozen=True)
class Graph:
    """What NCCL's search yields for one pattern: channels and the bandwidth of each (GB/s)."""

    channels: int
    bw_intra: float
    bw_inter: float

    @property
    def total_GBps(self) -> float:
        return self.channels * self.bw_intra


def _fits(bottleneck_GBps: float, speed: float) -> int:
    return int(math.floor(bottleneck_GBps / speed + 1e-9))


def search_channels(bottleneck_GBps: float, max_bw_GBps: float, total_bw_GBps: float, ngpus: int,
                    sm_version: int, ring: bool, min_channels: int = 1,
                    max_channels: int = T.MAX_CHANNELS) -> Graph:
    """ncclTopoCompute for a ring (ring=True) or a tree: bottleneck = the bandwidth of the most loaded directed link
    per channel; max_bw = the fastest GPU-to-GPU path; total_bw = a GPU's own link bandwidth (NVLink sum or PCIe)."""
    speeds = T.speed_array(sm_version)
    total = total_bw_GBps if ring or ngpus <= 1 else total_bw_GBps * ngpus / (ngpus - 1)
    i = 0
    while (speeds[i] > max_bw_GBps or speeds[i] * min_channels > total) and i < len(speeds) - 1:
        i += 1
    best = Graph(0, 0.0, 0.0)
    while True:
        n = min(max_channels, _fits(bottleneck_GBps, speeds[i]))
        if n >= min_channels and n * speeds[i] > best.total_GBps:
            best = Graph(n, speeds[i], speeds[i])
        if best.channels and best.total_GBps >= total_bw_GBps:
            break
        if i < len(speeds) - 1 and (best.channels == 0 or speeds[i + 1] / best.bw_inter > T.SPEED_STEP_RATIO):
            i += 1
        else:
            break
    if best.channels == 0:  # "Could not find a path ... falling back to simple order": one channel at 0.1 GB/s
        return Graph(1, 0.1, 0.1)
    # ncclTopoDupChannels
    bw = best.bw_intra
    if bw >= T.DUP_MIN_BW and not (sm_version > 80 and bw < T.DUP_SM80_MIN_BW and best.channels > 4):
        dup = min(2 * best.channels, max_channels)
        factor = -(-dup // best.channels)
        best = Graph(dup, bw / factor, bw / factor)
    # pass 2: raise the speed at the same channel count while it still fits (trees: bwIntra below 2 x bwInter)
    faster = [s for s in speeds if s > best.bw_intra]
    for s in reversed(faster):
        if (not ring and best.bw_intra >= 2 * best.bw_inter) or _fits(bottleneck_GBps, s) < best.channels:
            break
        best = Graph(best.channels, s, s if ring else best.bw_inter)
    return best


def search_nvls(gpu_nvlink_GBps: float, ngpus: int, sm_version: int) -> Graph:
    """The NVLS graph on one node: one channel per GPU (each GPU heads one), a channel costs its head GPU's link
    twice its speed and every other GPU's link once, so (ngpus + 1) x bwIntra must fit on a GPU's NVLink; pass 2
    raises bwInter alone while it is below twice bwIntra."""
    speeds = T.speed_array(sm_version)
    channels = min(T.MAX_NVLS_ARITY, ngpus)
    fitting = [s for s in speeds if s * (channels + 1) <= gpu_nvlink_GBps + 1e-9]
    if not fitting:
        return Graph(0, 0.0, 0.0)
    intra = fitting[0]
    inter = intra
    for s in reversed([s for s in speeds if s > intra]):
        if inter >= 2 * intra:
            break
        inter = s
    return Graph(channels, intra, inter)


@dataclass(frozen=True)
class Option:
    """One (algorithm, protocol) as NCCL's tuner sees it: latency (us) and algorithm bandwidth (GB/s)."""

    algorithm: str
    protocol: str
    latency_us: float
    algbw_GBps: float
    busbw_GBps: float


def allreduce_options(ranks: int, sm_version: int, hw: str, graphs: dict[str, Graph],
                      extra_step_latency_us: float = 0.0, eager_us: tuple[float, float] = (0.0, 0.0)) -> list[Option]:
    """ncclTopoTuneModel for AllReduce on one node. hw: 'nvlink' or 'pci' (the ring graph's path type);
    extra_step_latency_us: what this fabric's route adds to each step beyond NCCL's per-hop figure (host-memory
    staging, slower links), an extension of NCCL's model and zero where NCCL's assumptions hold; eager_us: an eager
    launch's floor beyond NCCL's ring LL latency, fixed and per step (calibrated, fabric.nccl_eager_*): no option's
    latency is below it."""
    a = T.arch(sm_version)
    nsteps = 2 * (ranks - 1)
    out = []
    ring, tree, nvls = graphs.get("ring"), graphs.get("tree"), graphs.get("nvls")
    ll128 = hw == "nvlink"  # LL128 is on by default only when typeIntra <= PATH_NVB
    for algo, graph in (("ring", ring), ("tree", tree)):
        if graph is None:
            continue
        for k, proto in enumerate(T.PROTOCOLS):
            if proto == "LL128" and not ll128:
                continue
            algbw = allreduce_algbw(algo, proto, ranks, a, graph.channels, graph.bw_intra)
            step = T.HW_LATENCY_US[hw][algo][k] + extra_step_latency_us
            latency = T.BASE_LATENCY_US[algo][k] + nsteps * step  # ring: nsteps; tree: 2 (n - 1) on one node
            latency = max(latency, eager_floor_us(hw, nsteps, extra_step_latency_us, eager_us))
            out.append(Option(algo, proto, latency, algbw, algbw * nsteps / ranks))
    if nvls is not None and nvls.channels >= 2:
        intra = nvls.bw_intra * T.NVLS_EFFICIENCY[a] * (nvls.channels - 1) / nvls.channels * 2.0  # two ops pipelined
        bus = nvls.channels * min(intra, nvls.bw_inter)
        algbw = bus * ranks / nsteps
        latency = max(T.HW_LATENCY_US["nvlink"]["nvls"][2], eager_floor_us(hw, nsteps, extra_step_latency_us, eager_us))
        out.append(Option("nvls", "Simple", latency, algbw, bus))
    return out


def allreduce_algbw(algo: str, proto: str, ranks: int, arch: str, channels: int, bw_intra: float) -> float:
    """ncclTopoTuneModel's algorithm bandwidth of a ring or tree all-reduce on one node over `channels` channels of
    bw_intra each (the graph's count, or fewer: launched_channels)."""
    nsteps = 2 * (ranks - 1)
    bus = channels * bw_intra
    if algo == "ring":
        if proto == "LL":
            bus = min(T.LL_MAX_BW[arch][0], bus * T.LL_EFFICIENCY)
        elif proto == "LL128":
            bus = min(bus * T.LL128_EFFICIENCY, channels * T.PER_CHANNEL_MAX_RING_LL128_BW[arch][0])
        return bus * ranks / nsteps
    bus = min(bus * T.TREE_ALLREDUCE_EFFICIENCY, channels * T.PER_CHANNEL_MAX_TREE_BW[arch][0])
    if proto == "LL":
        bus = min(bus / T.TREE_LL_DIVISOR, T.LL_MAX_BW[arch][0])
    elif proto == "LL128":
        bus = min(bus * T.TREE_LL128_ONE_NODE, channels * T.PER_CHANNEL_MAX_TREE_LL128_BW[arch][0])
    return bus * 0.5


def launched_channels(nbytes: int, algo: str, proto: str, ranks: int, ring: Graph, tree: Graph) -> tuple[int, int]:
    """(channels, threads a channel) a ring or tree operation of nbytes launches, src/enqueue.cc topoGetAlgoInfo: from
    comm->nChannels (twice the ring/tree graphs' channels, connect.cc ncclTopoPostset) and the protocol's maxThreads,
    channels drop one by one, then threads halve, while nbytes < channels x threads x the thread threshold."""
    nc = min(T.COMM_MAX_CHANNELS, 2 * min(ring.channels, tree.channels))
    nt = T.MAX_THREADS[proto]
    if algo == "ring" and proto == "Simple" and ring.bw_intra * ring.channels <= T.PCI_BW:
        nt = T.SIMPLE_PCI_THREADS
    threshold = T.THREAD_THRESHOLD[proto] * (ranks if algo == "ring" and proto == "LL" else 1)
    while nbytes < nc * nt * threshold and nc >= 2:
        nc -= 1
    while nbytes < nc * nt * threshold and nt % 128 == 0:
        nt //= 2
    return nc, nt


def launched_option(option: Option, nbytes: int, ranks: int, sm_version: int, graphs: dict[str, Graph]) -> Option:
    """The option NCCL chose, as the channels it launches run it: channels 0 .. nc-1 are graph channels 0 .. nc-1 (the
    duplicates come after them), each at the bandwidth the search gave it, so below the graph's count the tuning
    model's bandwidth is taken over min(nc, graph channels) channels (an extension: NCCL's time uses all of them).
    NVLS keeps comm->nvlsChannels at every size (topoGetAlgoInfo), so it is unchanged."""
    if option.algorithm not in ("ring", "tree") or "ring" not in graphs or "tree" not in graphs:
        return option
    graph = graphs[option.algorithm]
    nc, _ = launched_channels(nbytes, option.algorithm, option.protocol, ranks, graphs["ring"], graphs["tree"])
    if nc >= graph.channels:
        return option
    algbw = allreduce_algbw(option.algorithm, option.protocol, ranks, T.arch(sm_version), nc, graph.bw_intra)
    return Option(option.algorithm, option.protocol, option.latency_us, algbw, option.busbw_GBps * algbw / option.algbw_GBps)


def eager_floor_us(hw: str, nsteps: int, extra_step_latency_us: float, eager_us: tuple[float, float]) -> float:
    """The least time an eagerly launched collective of nsteps ring steps takes: NCCL's ring LL latency plus the
    fabric's calibrated eager extras (fixed, per step); 0 when the fabric has none (NCCL's figures alone)."""
    if not any(eager_us):
        return 0.0
    ring_ll = T.BASE_LATENCY_US["ring"][0] + nsteps * (T.HW_LATENCY_US[hw]["ring"][0] + extra_step_latency_us)
    return ring_ll + eager_us[0] + nsteps * eager_us[1]


def algo_time_us(option: Option, nbytes: int) -> float:
    """ncclTopoGetAlgoTime for one operation (numPipeOps = 1): tree all-reduce bandwidth times the correction."""
    bw = option.algbw_GBps
    log_size = (nbytes >> 6).bit_length() - 1  # log2i(nBytes >> 6); -1 below 64 B
    if option.algorithm == "tree" and 0 <= log_size < T.TREE_CORRECTION_COLUMNS_USED:
        bw *= T.TREE_CORRECTION[option.protocol][log_size]
    return option.latency_us + nbytes / (1000.0 * bw)


def chosen(own: list[Option], runs: list[Option], nbytes: int) -> Option:
    """The option as it runs (`runs`) of the one NCCL's own table (`own`, the same options in the same order, timed
    without the simulator's extras) times fastest for nbytes: NCCL chooses by its figures, then pays what it costs."""
    return runs[min(range(len(own)), key=lambda k: algo_time_us(own[k], nbytes))]


def allgather_options(ranks: int, sm_version: int, hw: str, ring: Graph,
                      extra_step_latency_us: float = 0.0, eager_us: tuple[float, float] = (0.0, 0.0)) -> list[Option]:
    """Ring AllGather (PAT is off with several GPUs per node; NVLS all-gather is not modelled): n - 1 steps."""
    a = T.arch(sm_version)
    nsteps = ranks - 1
    out = []
    for k, proto in enumerate(T.PROTOCOLS):
        if proto == "LL128" and hw != "nvlink":
            continue
        bus = ring.channels * ring.bw_intra
        if proto == "LL":
            bus = min(T.LL_MAX_BW[a][0], bus * T.LL_EFFICIENCY)
        elif proto == "LL128":
            bus = min(bus * T.LL128_EFFICIENCY, ring.channels * T.PER_CHANNEL_MAX_RING_LL128_BW[a][0])
        latency = T.BASE_LATENCY_US["ring"][k] + nsteps * (T.HW_LATENCY_US[hw]["ring"][k] + extra_step_latency_us)
        latency = max(latency, eager_floor_us(hw, nsteps, extra_step_latency_us, eager_us))
        out.append(Option("ring", proto, latency, bus * ranks / nsteps, bus))
    return out
