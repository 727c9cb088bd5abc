"""The fabric as a graph: routes between GPUs, their path class, peer-to-peer or host-memory transport, link sharing."""
from __future__ import annotations

import hashlib
import math
from functools import cached_property

from ..compiled import dataclass
from ..cache import current
from ..cache.keys import json_of
from ..config.mirror import Topology
from .routes import Routes, routes_of

# Path classes, nearest first, as NCCL's path types NVL < PXB < PHB < SYS < NET (the last: between machines).
PATH_CLASSES = ("nvlink", "pcie_switch", "cpu", "system", "network")


@dataclass(frozen=True)
class Hop:
    """One sender->receiver transfer of a collective step: its route's directed links and its transport."""

    src: int
    dst: int
    links: tuple[tuple[int, int], ...]  # directed (node, node) pairs
    path_class: str
    p2p: bool
    net: bool = False  # crosses machines through NICs (NCCL's NET transport), not P2P nor host-memory SHM

    @property
    def over_nvlink(self) -> bool:
        return self.path_class == "nvlink"



class Fabric:
    """Routes over the topology's node/link graph: the best path class first (NVLink, then PCIe, then the socket
    link), then the path that moves a small (1 KiB) message fastest."""

    def __init__(self, topology: Topology, gpu_names: list[str] | None = None):
        """gpu_names: the GPU of each rank, in rank order (default: the topology's GPUs in order)."""
        self.topology = topology
        fabric = topology.fabric
        self.gpu_names = list(topology.gpu_names if gpu_names is None else gpu_names)
        # the routes depend on the graph alone (not on the ranks' GPUs, nor on the host-memory hop's latency, read when
        # a step is costed): found once per store for a graph, shared by every replica and sweep point on it
        graph = json_of(fabric, frozenset({"shm_hop_latency_us"}))
        self.routing_key = (graph, tuple(self.gpu_names))  # what NCCL's graph search over these ranks reads
        self._graph = graph
        # everything the fabric's figures are computed from (cache.key_of keys stored results by it)
        self.value_key = hashlib.sha1("\0".join([json_of(topology), *self.gpu_names]).encode()).hexdigest()
        routes: Routes = current().get(("interconnect.routes", graph), lambda: routes_of(fabric))
        self._routes = routes
        self.gpus = [self.index[name] for name in self.gpu_names]
        self._p2p_rank = PATH_CLASSES.index(fabric.p2p_level)

    # the graph's nodes and links, read from its routes (stored once per graph, so a replica's fabric stored with its
    # collectives is weighed without walking them again: 128 replicas walked a 440-node graph's links each)
    names = property(lambda self: self._routes.names)
    kinds = property(lambda self: self._routes.kinds)
    index = property(lambda self: self._routes.index)
    link_of = property(lambda self: self._routes.link_of)

    def route(self, a: int, b: int) -> list[int]:
        """Node indices from a to b; empty if b is unreachable."""
        if a == b:
            return [a]
        pred = self._routes.pred[self._routes.row_of[a]]
        if pred[b] < 0:
            return []
        path = [b]
        while path[-1] != a:
            path.append(int(pred[path[-1]]))
        return path[::-1]

    def path_class(self, nodes: list[int]) -> str:
        kinds = [self.kinds[i] for i in nodes[1:-1]]
        links = [self.link_of[(u, v)].kind for u, v in zip(nodes, nodes[1:])]
        if "network" in links:
            return "network"
        if "socket" in links:
            return "system"
        if "cpu" in kinds:
            return "cpu"
        if all(kind == "nvlink" for kind in links):
            return "nvlink"
        return "pcie_switch"

    def nearest_cpu(self, gpu: int) -> int | None:
        dist = self._routes.dist[self._routes.row_of[gpu]]
        cpus = [i for i, k in enumerate(self.kinds) if k == "cpu" and math.isfinite(dist[i])]
        return min(cpus, key=lambda c: dist[c]) if cpus else None

    def hop(self, src_rank: int, dst_rank: int) -> Hop:
        """The transfer from one rank's GPU to another's: P2P along the route, or staged through host memory.
        In the run's store by the graph and the two GPUs (an all-to-all asks for every pair of every pass shape it
        costs; another replica's ranks on the same GPU pair find its route found already)."""
        a, b = self.gpus[src_rank], self.gpus[dst_rank]
        store = current()
        return store.get(("interconnect.hop", self._graph, a, b, src_rank, dst_rank), lambda: Hop(
            src_rank, dst_rank, *store.get(("interconnect.hop_route", self._graph, a, b),
                                           lambda: self._route_of(self._find_hop(src_rank, dst_rank)))))

    @staticmethod
    def _route_of(hop: Hop) -> tuple:
        """What of a hop the GPU pair alone decides (not the ranks): links, path class, p2p, net."""
        return hop.links, hop.path_class, hop.p2p, hop.net

    def _find_hop(self, src_rank: int, dst_rank: int) -> Hop:
        a, b = self.gpus[src_rank], self.gpus[dst_rank]
        nodes = self.route(a, b)
        if not nodes:
            raise ValueError(f"no route between {self.names[a]} and {self.names[b]}")
        cls = self.path_class(nodes)
        if cls == "network":
            return self._net_hop(src_rank, dst_rank, nodes)
        if PATH_CLASSES.index(cls) <= self._p2p_rank:
            return Hop(src_rank, dst_rank, tuple(zip(nodes, nodes[1:])), cls, True)
        # Host-memory (SHM) transport: up to the sender's socket, then from there down to the receiver.
        cpu = self.nearest_cpu(a)
        if cpu is None:
            raise ValueError(f"{self.names[a]} has no peer-to-peer path to {self.names[b]} and no CPU to stage through")
        up, down = self.route(a, cpu), self.route(cpu, b)
        links = tuple(zip(up, up[1:])) + tuple(zip(down, down[1:]))
        return Hop(src_rank, dst_rank, links, cls, False)

    def _net_hop(self, src_rank: int, dst_rank: int, nodes: list[int]) -> Hop:
        """Between machines: NIC to NIC over the network. With GPUDirect RDMA the NICs read and write GPU memory
        along the route; without it each side stages through its nearest socket's memory."""
        if self.topology.fabric.network.gpudirect_rdma:
            return Hop(src_rank, dst_rank, tuple(zip(nodes, nodes[1:])), "network", False, net=True)
        a, b = nodes[0], nodes[-1]
        cpu_a, cpu_b = self.nearest_cpu(a), self.nearest_cpu(b)
        if cpu_a is None or cpu_b is None:
            raise ValueError(f"{self.names[a]} -> {self.names[b]}: without GPUDirect RDMA both need a CPU to stage through")
        legs = (self.route(a, cpu_a), self.route(cpu_a, cpu_b), self.route(cpu_b, b))
        links = tuple(link for leg in legs for link in zip(leg, leg[1:]))
        return Hop(src_rank, dst_rank, links, "network", False, net=True)

    def latency_us(self, hop: Hop) -> float:
        """Latency the route adds to a step: its links, plus host-memory staging when not peer-to-peer."""
        total = sum(self.link_of[l].latency_us for l in hop.links)
        if not hop.p2p and not hop.net:
            total += self.topology.fabric.shm_hop_latency_us
        return total

    def concurrent_bandwidth_GBps(self, hops: list[Hop]) -> list[float]:
        """Per-hop bandwidth when all hops transfer at once: each directed link is shared equally by its flows."""
        flows: dict[tuple[int, int], int] = {}
        for hop in hops:
            for link in hop.links:
                flows[link] = flows.get(link, 0) + 1
        return [min(self.link_of[l].bandwidth_GBps / flows[l] for l in hop.links) for hop in hops]

    @cached_property
    def has_nvswitch(self) -> bool:
        return "nvswitch" in self.kinds

    def all_pairs_p2p(self, ranks: int) -> bool:
        return all(self.hop(i, j).p2p for i in range(ranks) for j in range(ranks) if i != j)

    def all_pairs_nvlink(self, ranks: int) -> bool:
        return all(self.hop(i, j).over_nvlink for i in range(ranks) for j in range(ranks) if i != j)
