"""What the parallel modes move, as pure cost functions: all-to-all (expert parallelism's dispatch and combine),
all-gather and reduce-scatter (around DP-attention), send/recv between pipeline stages, KV transfer between prefill
and decode instances.

What is modelled: a set of transfers that start together is a set of fluid flows on the fabric's routes, sharing
every link max-min fairly and re-rated as each one ends (hardware/flows.py's allocation, solved here in closed
loop without SimPy); the set takes a latency, then until its last byte lands. NCCL runs an all-to-all without an
algorithm of its own, as one group of n - 1 sends and n - 1 receives per rank (ncclGroupStart, ncclSend/ncclRecv to
every peer, ncclGroupEnd), which is what `all_to_all_us` costs. Ring all-gather and reduce-scatter follow NCCL's
tuning model (src/graph/tuning.cc): n - 1 steps, algorithm bandwidth = bus bandwidth x n / (n - 1), over the total
bytes. The latencies are inputs: the caller takes them from NCCL's tables for the path class it crosses.

All-reduce between machines follows NCCL's tuning model for nNodes > 1 (v2.29.7-1 tuning.cc, tables in
nccl_tables.py): ring and tree latencies with the network's per-step figures and net overhead, bus bandwidths from
a channel graph of one channel per NIC at NCCL's inter-node search speeds, the ring Simple plateau.

Assumptions: all flows of a set start at once (no pipelining of chunks, no protocol efficiency below the links'
bandwidth); routing of MoE tokens is uniform (each token's k experts spread evenly over the EP ranks).
"""
from __future__ import annotations

from typing import Hashable, Sequence

from ..compiled import dataclass
from . import nccl_tables as T
from .flows import BYTES_PER_US_PER_GBPS
from .maxmin import max_min_rates
from .interconnect import Fabric
from .nccl import Option, algo_time_us


def fluid_finish_us(routes: Sequence[Sequence[Hashable]], nbytes: Sequence[float],
                    capacity_GBps: dict) -> list[float]:
    """When each of a set of flows started together at 0 has moved its bytes (us), max-min sharing re-rated at
    every completion. Flows of zero bytes finish at 0."""
    remaining = [float(b) for b in nbytes]
    finish = [0.0] * len(routes)
    active = [i for i, b in enumerate(remaining) if b > 0]
    now = 0.0
    while active:
        rates = max_min_rates([routes[i] for i in active], capacity_GBps)
        left = [remaining[i] / (rate * BYTES_PER_US_PER_GBPS) for i, rate in zip(active, rates)]
        step = min(left)
        now += step
        still = []
        for i, rate, t in zip(active, rates, left):
            if t <= step * (1 + 1e-12):
                finish[i] = now
            else:
                remaining[i] -= rate * BYTES_PER_US_PER_GBPS * step
                still.append(i)
        active = still
    return finish


def concurrent_us(fabric: Fabric, transfers: Sequence[tuple[int, int, float]], latency_us: float = 0.0) -> float:
    """(source rank, destination rank, bytes) transfers started together: latency + when the last one lands."""
    moving = [(s, d, b) for s, d, b in transfers if s != d and b > 0]
    if not moving:
        return 0.0
    capacity = {pair: link.bandwidth_GBps for pair, link in fabric.link_of.items()}
    routes = [fabric.hop(s, d).links for s, d, _ in moving]
    return latency_us + max(fluid_finish_us(routes, [b for _, _, b in moving], capacity))


def all_to_all_us(fabric: Fabric, ranks: Sequence[int], bytes_per_pair: float, latency_us: float = 0.0) -> float:
    """NCCL's all-to-all: every rank sends bytes_per_pair to each other rank, all at once."""
    return concurrent_us(fabric, [(s, d, bytes_per_pair) for s in ranks for d in ranks if s != d], latency_us)


def ep_bytes_per_pair(tokens_per_rank: int, hidden_size: int, experts_per_token: int, ep: int,
                      bytes_per_value: float) -> float:
    """Expected bytes one EP rank sends another in a dispatch (or gets back in a combine) when every token goes to
    each of its k experts once, the experts spread evenly over ep ranks (uniform routing): T k / ep tokens."""
    return tokens_per_rank * experts_per_token / ep * hidden_size * bytes_per_value


def ep_bytes_per_pair_once_per_rank(tokens_per_rank: int, hidden_size: int, num_experts: int,
                                    experts_per_token: int, ep: int, bytes_per_value: float) -> float:
    """Expected bytes to one other EP rank when a token goes to a rank once however many of its k experts the rank
    holds (DeepEP's normal dispatch: get_dispatch_layout's is_token_in_rank): T (1 - C(E - E/ep, k) / C(E, k))
    tokens, the chance that at least one of k distinct experts drawn uniformly lands among the rank's E/ep."""
    local = num_experts // ep
    miss = 1.0
    for i in range(experts_per_token):  # C(E - local, k) / C(E, k) as a product
        miss *= (num_experts - local - i) / (num_experts - i)
    return tokens_per_rank * (1.0 - miss) * hidden_size * bytes_per_value


def ring_all_gather_us(num_ranks: int, total_bytes: float, bus_GBps: float, base_latency_us: float,
                       step_latency_us: float) -> float:
    """NCCL's ring all-gather (or reduce-scatter) of total_bytes (all ranks' parts together): base + (n - 1) step
    latencies, then total / (bus x n / (n - 1)) (tuning.cc: nsteps = n - 1, algorithm bw = bus bw x n / nsteps)."""
    if num_ranks <= 1:
        return 0.0
    steps = num_ranks - 1
    algorithm_GBps = bus_GBps * num_ranks / steps
    return base_latency_us + steps * step_latency_us + total_bytes / (algorithm_GBps * BYTES_PER_US_PER_GBPS)


def send_recv_us(fabric: Fabric, src: int, dst: int, nbytes: float, latency_us: float = 0.0) -> float:
    """One rank's activations to the next pipeline stage's rank: latency + bytes over the route's bottleneck."""
    return concurrent_us(fabric, [(src, dst, nbytes)], latency_us)


def pipeline_boundary_us(fabric: Fabric, pairs: Sequence[tuple[int, int]], nbytes: float,
                         latency_us: float = 0.0) -> float:
    """Every tp rank of a stage sends its copy of the activations to its peer in the next stage at once."""
    return concurrent_us(fabric, [(s, d, nbytes) for s, d in pairs], latency_us)


def kv_transfer_us(fabric: Fabric, pairs: Sequence[tuple[int, int]], kv_bytes_per_rank: float,
                   latency_us: float = 0.0) -> float:
    """A request's KV cache from a prefill instance to a decode instance: each prefill rank sends its shard to the
    decode rank that will hold it, all at once (disaggregated serving, as SGLang's and vLLM's KV connectors do)."""
    return concurrent_us(fabric, [(s, d, kv_bytes_per_rank) for s, d in pairs], latency_us)


def ring_all_reduce(env, network, hops: Sequence, nbytes: float, step_latency_us: float = 0.0):
    """A ring all-reduce's transfers as a SimPy process on a shared flow network: 2 (n - 1) steps, each a step
    latency and then every rank's nbytes / n chunk to its ring successor at once (the step ends with its slowest
    flow). Alone on its links it takes 2 (n - 1) (latency + nbytes / n / bottleneck), NCCL's ring with the links'
    bandwidth; other traffic on the links slows exactly the steps it overlaps."""
    n = len(hops)
    for _ in range(2 * (n - 1)):
        if step_latency_us > 0:
            yield env.timeout(step_latency_us)
        yield env.all_of([network.transfer(hop.links, nbytes / n) for hop in hops])
    return env.now


# --- NCCL's all-reduce between machines (src/graph/tuning.cc, v2.29.7-1, nNodes > 1) ----------------------------

# src/graph/search.cc: the speeds (GB/s per channel) the channel search tries when there is a network
SPEED_ARRAY_INTER = {
    "legacy": (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12),
    "sm90": (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12),
    "sm100": (96.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24,
              0.12),
}
# getNetOverhead (tuning.cc): us per network step of a ring, x86 Intel 1.0, AMD 2.0 (x3 for Simple)
NET_OVERHEAD_US = {"intel": 1.0, "amd": 2.0}


@dataclass(frozen=True)
class NetworkRing:
    """The ring and tree graphs NCCL builds across machines: one channel per NIC of a machine, each at the fastest
    search speed the NIC carries (NCCL's search, simplified: every channel crosses one NIC pair), then doubled
    as ncclTopoDupChannels does."""

    channels: int
    bw_GBps: float


def network_graph(nics_per_machine: int, nic_GBps: float, sm_version: int) -> NetworkRing:
    key = "sm100" if sm_version >= 100 else "sm90" if sm_version >= 90 else "legacy"
    speed = next((s for s in SPEED_ARRAY_INTER[key] if s <= nic_GBps + 1e-9), SPEED_ARRAY_INTER[key][-1])
    channels = nics_per_machine
    if speed >= T.DUP_MIN_BW and not (sm_version > 80 and speed < T.DUP_SM80_MIN_BW and channels > 4):
        channels, speed = min(2 * channels, T.MAX_CHANNELS), speed / 2
    return NetworkRing(channels, speed)


def multinode_allreduce_options(ranks: int, machines: int, sm_version: int, intra_hw: str, graph: NetworkRing,
                                cpu_vendor: str = "intel", ll128: bool = True,
                                extra_step_latency_us: float = 0.0) -> list[Option]:
    """ncclTopoTuneModel for AllReduce over `machines` nodes of ranks / machines GPUs each, ring and tree (NVLS
    tree and CollNet, which need NVLink SHARP or SHARP switches, are left out). extra_step_latency_us: what a step
    inside a machine adds beyond NCCL's figure (host-memory staging), as in the one-machine model."""
    a = T.arch(sm_version)
    col = 1 if machines <= 2 else 2
    ll_max = T.LL_MAX_BW["ampere" if cpu_vendor == "amd" else "volta"][col]  # rows 0/1 are CPU vendors across nodes
    nsteps, ppn = 2 * (ranks - 1), ranks // machines
    inter_steps = 2 * (machines - 1)
    bus0 = graph.channels * graph.bw_GBps
    out = []
    for k, proto in enumerate(T.PROTOCOLS):
        if proto == "LL128" and not ll128:
            continue
        inter_ring = T.HW_LATENCY_US["net"]["tree" if ppn == 1 else "ring"][k]
        inter_tree = T.HW_LATENCY_US["net"]["tree"][k]
        overhead = NET_OVERHEAD_US[cpu_vendor] * (3 if proto == "Simple" else 1)
        intra = max(T.HW_LATENCY_US[intra_hw]["ring"][k] + extra_step_latency_us, overhead)
        ring_lat = T.BASE_LATENCY_US["ring"][k] + (nsteps - inter_steps) * intra + inter_steps * inter_ring
        bus = {"LL": min(ll_max, bus0 * T.LL_EFFICIENCY),
               "LL128": min(bus0 * T.LL128_EFFICIENCY, graph.channels * T.PER_CHANNEL_MAX_RING_LL128_BW[a][col]),
               "Simple": bus0}[proto]
        out.append(Option("ring", proto, ring_lat, bus * ranks / nsteps, bus))
        tree = min(bus0 * T.TREE_ALLREDUCE_EFFICIENCY, graph.channels * T.PER_CHANNEL_MAX_TREE_BW[a][col])
        tree = {"LL": min(tree / T.TREE_LL_DIVISOR, ll_max),
                "LL128": min(tree * 120.0 / 128.0, graph.channels * T.PER_CHANNEL_MAX_TREE_LL128_BW[a][col]),
                "Simple": tree}[proto]
        tree_step = T.HW_LATENCY_US[intra_hw]["tree"][k] + extra_step_latency_us
        log_machines = machines.bit_length() - 1  # log2i: floor(log2(nNodes))
        tree_lat = T.BASE_LATENCY_US["tree"][k] + 2 * ((ppn - 1) * tree_step + log_machines * inter_tree)
        out.append(Option("tree", proto, tree_lat, tree * 0.5, tree))
    return out


def multinode_time_us(option: Option, nbytes: int, ranks: int, runtime_channels: int, sm_version: int) -> float:
    """ncclTopoGetAlgoTime across machines: the tree correction, and ring Simple's latency plateau (x1.4 from SM80,
    x1.9 below) once nbytes / (runtime channels x ranks) reaches 64 B."""
    latency = option.latency_us
    if option.algorithm == "ring" and option.protocol == "Simple" and nbytes // (runtime_channels * ranks) >= 64:
        latency *= 1.4 if sm_version >= 80 else 1.9
    return algo_time_us(Option(option.algorithm, option.protocol, latency, option.algbw_GBps, option.busbw_GBps),
                        nbytes)


@dataclass(frozen=True)
class MultiNodeSetup:
    """What NCCL's model needs of ranks spread over machines: machine count, the network ring graph, the path class
    inside a machine and the latency its routes add to a step."""

    machines: int
    graph: NetworkRing
    intra_hw: str
    extra_step_latency_us: float
    sm_version: int


def multinode_setup(fabric: Fabric, ranks: int) -> MultiNodeSetup:
    """The topology's first `ranks` GPUs, spread evenly over machines: the NIC count is one machine's, their
    bandwidth the network links' slowest; steps inside a machine use its path class (NVLink or PCIe) and add what
    its routes add (host-memory staging)."""
    topology = fabric.topology
    machine_of, gpus = topology.machine_of, fabric.gpu_names[:ranks]
    machines = sorted({machine_of[g] for g in gpus})
    per_machine = ranks // len(machines)
    if any(sum(1 for g in gpus if machine_of[g] == m) != per_machine for m in machines):
        raise ValueError(f"{ranks} ranks are not spread evenly over the machines {', '.join(machines)}")
    nics = sum(1 for n in topology.fabric.nodes if n.kind == "nic" and n.machine == machines[0])
    nic_GBps = min(link.bandwidth_GBps for link in topology.fabric.links if link.kind == "network")
    sm = topology.gpu.sm_version
    nvlink = fabric.all_pairs_nvlink(per_machine)
    extra = max((fabric.latency_us(fabric.hop(i, i + 1)) for i in range(per_machine - 1)), default=0.0)
    return MultiNodeSetup(len(machines), network_graph(nics, nic_GBps, sm), "nvlink" if nvlink else "pci", extra, sm)


def multinode_allreduce_timed(fabric: Fabric, ranks: int, nbytes: int, cpu_vendor: str = "intel",
                              own: bool = False) -> list[tuple]:
    """Every (option, time_us) of an all-reduce of nbytes over the first `ranks` GPUs, as it runs (the routes' extra
    step latency included) or, own=True, as NCCL's own table times it (what NCCL chooses by)."""
    m = multinode_setup(fabric, ranks)
    extra = 0.0 if own else m.extra_step_latency_us
    options = multinode_allreduce_options(ranks, m.machines, m.sm_version, m.intra_hw, m.graph, cpu_vendor,
                                          ll128=m.intra_hw == "nvlink", extra_step_latency_us=extra)
    return [(o, multinode_time_us(o, nbytes, ranks, 2 * m.graph.channels, m.sm_version)) for o in options]


def allreduce_between_machines(fabric: Fabric, ranks: int, nbytes: int, cpu_vendor: str = "intel") -> tuple:
    """NCCL's choice for an all-reduce over the topology's first `ranks` GPUs, spread evenly over machines: the
    (option, time_us as it runs) its own table times fastest (multinode_setup says what is taken from the topology).
    cpu_vendor picks NCCL's LL bandwidth row and network overhead (the topologies do not name the CPU)."""
    return nccl_pick(multinode_allreduce_timed(fabric, ranks, nbytes, cpu_vendor, own=True),
                     multinode_allreduce_timed(fabric, ranks, nbytes, cpu_vendor))


def nccl_pick(own: list[tuple], runs: list[tuple]) -> tuple:
    """The run (option, time_us) of the entry NCCL's own table (own, in the same order) times fastest."""
    return runs[min(range(len(own)), key=lambda k: own[k][1])]
