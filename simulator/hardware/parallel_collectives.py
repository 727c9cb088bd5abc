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

Assumptions: all flows of a set start at once (no pipelining of chunks, no protocol efficiency below the links'
bandwidth); routing of MoE tokens is uniform (each token's k experts spread evenly over the EP ranks).
"""
from __future__ import annotations

from typing import Hashable, Sequence

from .flows import BYTES_PER_US_PER_GBPS, max_min_rates
from .interconnect import Fabric


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
