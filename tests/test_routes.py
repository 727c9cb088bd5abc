"""Routes over a fabric's graph (hardware/routes.py): scipy's Dijkstra with its ties broken as a binary-heap
Dijkstra breaks them, or that heap in Python on a small graph, found once per graph however many replicas and GPUs
read them."""
from __future__ import annotations

import heapq
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.config.loader import read_yaml
from simulator.config.topology import Topology
from simulator.cache import Store, held
from simulator.hardware import routes
from simulator.hardware.interconnect import Fabric


def heap_dijkstra(weight: list[dict[int, float]], source: int) -> tuple[list[float], list[int]]:
    """The reference: a binary heap that pops equal distances by node index; a predecessor changes only on a strictly
    shorter distance (the routing specsim had before scipy, whose routes the goldens were made with)."""
    dist, pred, done = [math.inf] * len(weight), [-1] * len(weight), [False] * len(weight)
    dist[source] = 0.0
    heap = [(0.0, source)]
    while heap:
        d, node = heapq.heappop(heap)
        if done[node]:
            continue
        done[node] = True
        for neighbour, w in weight[node].items():
            if not done[neighbour] and d + w < dist[neighbour]:
                dist[neighbour], pred[neighbour] = d + w, node
                heapq.heappush(heap, (d + w, neighbour))
    return dist, pred


def check_against_reference(num_nodes: int, weight: dict[tuple[int, int], float]) -> None:
    adjacency: list[dict[int, float]] = [{} for _ in range(num_nodes)]
    for (a, b), w in weight.items():
        adjacency[a][b] = adjacency[b][a] = w
    sources = list(range(num_nodes))
    want = [heap_dijkstra(adjacency, s) for s in sources]
    for heap_up_to in (0, 10 ** 9):  # scipy's distances, then the heap in Python
        dist, pred = scipy_or_heap(heap_up_to, num_nodes, weight, sources)
        for s in sources:
            assert dist[s].tolist() == want[s][0] and pred[s].tolist() == want[s][1], (s, heap_up_to)


def scipy_or_heap(heap_up_to: int, *args):
    kept = routes.HEAP_UP_TO
    routes.HEAP_UP_TO = heap_up_to
    try:
        return routes.shortest_paths(*args)
    finally:
        routes.HEAP_UP_TO = kept


def test_by_hand():
    """The cheaper two-hop path beats a dear direct edge; an island stays unreachable."""
    dist, pred = routes.shortest_paths(4, {(0, 1): 1.0, (0, 2): 5.0, (1, 2): 1.5}, [0])
    assert dist[0].tolist() == [0.0, 1.0, 2.5, math.inf] and pred[0].tolist() == [-1, 0, 1, -1]


def test_ties_keep_the_lowest_node():
    """A square 0-1-3, 0-2-3 of equal weights: node 3 is reached through 1, the lower of its two equal routes."""
    dist, pred = routes.shortest_paths(4, {(0, 1): 1.0, (0, 2): 1.0, (1, 3): 1.0, (2, 3): 1.0}, [0, 3])
    assert pred[0].tolist() == [-1, 0, 0, 1] and pred[1].tolist() == [1, 3, 3, -1]


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 12).flatmap(lambda n: st.tuples(st.just(n), st.dictionaries(
    st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda p: p[0] < p[1]),
    st.sampled_from([0.5, 1.0, 1.5, 2.0, 1e3 + 0.25]), max_size=30))))
def test_random_graphs_with_ties_route_as_the_heap_dijkstra(graph):
    """Few distinct weights make ties common: every distance and predecessor is the reference's."""
    check_against_reference(*graph)


@pytest.mark.parametrize("name", ["pcie8_rtx_pro_6000", "nvlink8_h100", "two_node_h100", "two_node_pcie8_rtx_pro_6000",
                                  "nvlink8_b200"])
def test_shipped_topologies_route_as_the_heap_dijkstra(name):
    topology = Topology.model_validate(read_yaml(f"topologies/{name}.yaml"))
    fabric = topology.fabric
    index = {n.name: i for i, n in enumerate(fabric.nodes)}
    weight: dict[tuple[int, int], float] = {}
    for link in fabric.links:
        a, b = sorted((index[link.between[0]], index[link.between[1]]))
        w = routes.LINK_CLASS_WEIGHT[link.kind] + link.latency_us + 1.024 / link.bandwidth_GBps
        weight[(a, b)] = min(w, weight.get((a, b), math.inf))
    check_against_reference(len(fabric.nodes), weight)


def test_routes_found_once_per_graph(monkeypatch):
    """Replicas on other GPUs of the same graph share its routes: one shortest-path computation per graph."""
    calls = []
    real = routes.shortest_paths
    monkeypatch.setattr(routes, "shortest_paths", lambda *a: calls.append(1) or real(*a))
    topology = Topology.model_validate(read_yaml("topologies/two_node_h100.yaml"))
    gpus = topology.gpu_names
    with held(Store()):  # a cold store: the run's (or a sweep worker's)
        fabrics = [Fabric(topology, gpus[i:i + 2]) for i in range(0, len(gpus), 2)]
        assert all(f.hop(0, 1).over_nvlink for f in fabrics) and len(calls) == 1
        across = Fabric(topology, [gpus[0], gpus[8]]).hop(0, 1)
        assert across.net and [fabrics[0].names[i] for i, _ in across.links][:3] == ["n0_gpu0", "n0_pcie0", "n0_nic0"]
        assert len(calls) == 1
        Fabric(topology.model_copy(update={"fabric": topology.fabric.model_copy(update={"nvls": False})}))
        assert len(calls) == 2


def test_one_gpu_replicas_share_their_costs_and_keep_their_own_gpus():
    """A one-GPU instance crosses no link: every such replica has the same cost key (plans and samples shared);
    instances of several GPUs are keyed by their own GPUs. Each keeps its own fabric view (its GPU names)."""
    from conftest import scenario_path
    from simulator.serving.deployment import instance_machines
    from simulator.api.run import resolve

    one = instance_machines(resolve(scenario_path("pcie8_tp4_dp2.yaml"), {"parallelism.tp": 1, "model": "llama_3_1_8b",
                                                                          "parallelism.dp": 4}))
    assert len({m.key for m in one}) == 1
    assert [m.fabric.gpu_names for m in one] == [["gpu0"], ["gpu1"], ["gpu2"], ["gpu3"]]
    four = instance_machines(resolve(scenario_path("pcie8_tp4_dp2.yaml"), {}))
    assert len({m.key for m in four}) == 2


def test_a_generated_clusters_run_finds_its_routes_once_for_its_128_replicas(monkeypatch):
    """Issue 27: scenarios/large/cluster16_h100_llama8b_dp128.yaml, 128 TP1 replicas on a generated cluster of 16
    machines (a 440-node graph), run whole (its start checks, 128 machines, the run and its figures) from a cold
    store: one shortest-path computation, every replica's fabric reading the same routes (recomputed per replica,
    or per machine built, the count would be 128 or more)."""
    from conftest import scenario_path
    from simulator.api.run import resolve, run
    from simulator.serving.deployment import instance_machines

    calls = []
    real = routes.shortest_paths
    monkeypatch.setattr(routes, "shortest_paths", lambda *a: calls.append(1) or real(*a))
    scenario = resolve(scenario_path("large/cluster16_h100_llama8b_dp128.yaml"),
                       {"workload.requests": 128, "workload.output_tokens": 2})
    with held(Store()):
        result = run(scenario)
        assert len(calls) == 1 and result.tokens == 256
        machines = instance_machines(scenario)
        assert len(calls) == 1 and len(machines) == 128 and len(machines[0].fabric.names) == 440
        assert len({m.fabric.gpu_names[0] for m in machines}) == 128
        assert all(m.fabric._routes is machines[0].fabric._routes for m in machines)
        gpus = scenario.topology.gpu_names
        across = Fabric(scenario.topology, [gpus[0], gpus[-1]]).hop(0, 1)  # machine 0 to machine 15
        assert across.net and len(calls) == 1
