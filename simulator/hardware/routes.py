"""Shortest routes over a fabric's graph, found once per graph: every replica and every sweep point on the same
graph reads the same distances and predecessors (they depend on the nodes and links alone, not on which GPUs a
replica runs on). The routes are a binary-heap Dijkstra's that pops equal distances by node index and keeps the
first path found, so they are deterministic. A machine's few dozen nodes run that Dijkstra in Python (faster than
importing scipy); a cluster's run scipy's sparse-graph Dijkstra for the distances, the predecessors then chosen as
the heap's would be, independent of the order scipy's Fibonacci heap pops ties in."""
from __future__ import annotations

import heapq

import numpy as np

from ..compiled import dataclass

# Route preference by link kind, as NCCL ranks paths by type (NVL before PCI before SYS) before bandwidth: a route
# never trades an NVLink path for a PCIe one because of a link's latency or bandwidth.
# A network link weighs more than any path inside a machine, so only routes between machines cross the network.
LINK_CLASS_WEIGHT = {"nvlink": 0.0, "pcie": 1e3, "socket": 1e6, "network": 1e9}
_SOURCES_PER_CHUNK = 256  # predecessor rows chosen at once (bounds the temporary arrays to ~sources x links)
# sources x links up to which the Python heap is used: importing scipy.sparse.csgraph costs ~0.4 s of CPU, as much as
# ~200,000 of the heap's relaxations (~2 us each, measured on this project's machine)
HEAP_UP_TO = 50_000


@dataclass
class Routes:
    """A graph's routes from every GPU and CPU node (the only nodes a route starts at): distances and predecessors
    by source row (read-only: a GPU pair's hop is found from them in the run's store, interconnect.Fabric.hop)."""

    names: list[str]
    kinds: list[str]
    index: dict[str, int]
    link_of: dict[tuple[int, int], object]  # directed (node, node) -> its link (the lightest of parallel ones)
    row_of: dict[int, int]  # source node -> row of dist / pred
    dist: np.ndarray  # (sources, nodes); inf where unreachable
    pred: np.ndarray  # (sources, nodes); -1 at the source and where unreachable


def routes_of(fabric) -> Routes:
    """The routes of a fabric's graph. Weight of a link: its class, then the time to move 1 KiB across it (routes of
    equal class prefer faster links)."""
    names = [n.name for n in fabric.nodes]
    kinds = [n.kind for n in fabric.nodes]
    index = {name: i for i, name in enumerate(names)}
    link_of: dict[tuple[int, int], object] = {}
    weight: dict[tuple[int, int], float] = {}  # (low, high) node -> the lightest link's weight
    for link in fabric.links:
        a, b = index[link.between[0]], index[link.between[1]]
        w = LINK_CLASS_WEIGHT[link.kind] + link.latency_us + 1.024 / link.bandwidth_GBps
        pair = (min(a, b), max(a, b))
        if pair not in weight or w < weight[pair]:
            weight[pair] = w
            link_of[(a, b)] = link_of[(b, a)] = link
    sources = [i for i, kind in enumerate(kinds) if kind in ("gpu", "cpu")]
    dist, pred = shortest_paths(len(names), weight, sources)
    return Routes(names, kinds, index, link_of, {s: r for r, s in enumerate(sources)}, dist, pred)


def shortest_paths(num_nodes: int, weight: dict[tuple[int, int], float], sources: list[int]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Distances and predecessors from each of `sources` over an undirected graph with positive edge weights.
    A node's predecessor is, among its neighbours u on a shortest path (dist[u] + w == dist[v], the same float sum a
    Dijkstra forms), the one with the smallest (dist[u], u): the first a binary-heap Dijkstra relaxes v from when it
    pops ties by node index and changes a predecessor only on a strictly shorter distance."""
    if len(sources) * len(weight) <= HEAP_UP_TO:
        return heap_paths(num_nodes, weight, sources)
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import dijkstra

    pairs = np.array(list(weight), dtype=np.int64).reshape(-1, 2)
    w = np.fromiter(weight.values(), dtype=np.float64, count=len(weight))
    graph = csr_matrix((w, (pairs[:, 0], pairs[:, 1])), shape=(num_nodes, num_nodes))
    dist = np.atleast_2d(dijkstra(graph, directed=False, indices=sources))
    # the directed edges u -> v, grouped by v and by u within a group (np.lexsort: last key first)
    u = np.concatenate([pairs[:, 0], pairs[:, 1]])
    v = np.concatenate([pairs[:, 1], pairs[:, 0]])
    ew = np.concatenate([w, w])
    order = np.lexsort((u, v))
    u, v, ew = u[order], v[order], ew[order]
    starts = np.flatnonzero(np.r_[True, v[1:] != v[:-1]]) if len(v) else np.zeros(0, dtype=np.int64)
    pred = np.full(dist.shape, -1, dtype=np.int64)
    for lo in range(0, len(sources), _SOURCES_PER_CHUNK):
        d = dist[lo:lo + _SOURCES_PER_CHUNK]
        du = d[:, u]
        on_path = np.isfinite(du) & (du + ew == d[:, v])
        key = np.where(on_path, du, np.inf)
        best = np.minimum.reduceat(key, starts, axis=1) if len(v) else key
        group = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(v)]))
        first = np.where(on_path & (key == best[:, group]), np.arange(len(v)), len(v))  # lowest u: sorted so
        chosen = np.minimum.reduceat(first, starts, axis=1) if len(v) else first
        found = chosen < len(v)
        rows, cols = np.nonzero(found)
        pred[lo + rows, v[starts[cols]]] = u[chosen[rows, cols]]
    return dist, pred


def heap_paths(num_nodes: int, weight: dict[tuple[int, int], float], sources: list[int]
               ) -> tuple[np.ndarray, np.ndarray]:
    """shortest_paths by a binary-heap Dijkstra from each source (equal distances popped by node index, a predecessor
    changed only on a strictly shorter distance). Its distances are scipy's floats: with positive weights a node's
    distance is the least of its neighbours' distance + weight, whatever order ties are popped in."""
    adjacency: list[list[tuple[int, float]]] = [[] for _ in range(num_nodes)]
    for (a, b), w in weight.items():
        adjacency[a].append((b, w))
        adjacency[b].append((a, w))
    dist = np.full((len(sources), num_nodes), np.inf)
    pred = np.full((len(sources), num_nodes), -1, dtype=np.int64)
    inf = float("inf")
    for row, source in enumerate(sources):
        d, p, done = [inf] * num_nodes, [-1] * num_nodes, [False] * num_nodes
        d[source] = 0.0
        heap = [(0.0, source)]
        while heap:
            du, u = heapq.heappop(heap)
            if done[u]:
                continue
            done[u] = True
            for v, w in adjacency[u]:
                dv = du + w
                if dv < d[v] and not done[v]:
                    d[v], p[v] = dv, u
                    heapq.heappush(heap, (dv, v))
        dist[row], pred[row] = d, p
    return dist, pred
