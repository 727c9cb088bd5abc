"""The parallel modes' transfers against the formulas they implement: all-to-all, EP dispatch bytes, ring
all-gather, send/recv between stages and KV transfer, on one machine and across two."""
from __future__ import annotations

import numpy as np
import pytest
import simpy
from hypothesis import HealthCheck, given, settings

from conftest import topology_path
from simulator.config.base import validate
from simulator.config.loader import read_yaml
from simulator.config.topology import Topology
from simulator.hardware.flows import FlowNetwork
from simulator.hardware.interconnect import Fabric
from simulator.hardware.parallel_collectives import (all_to_all_us, ep_bytes_per_pair,
                                                      ep_bytes_per_pair_once_per_rank, fluid_finish_us,
                                                      kv_transfer_us, pipeline_boundary_us, ring_all_gather_us,
                                                      ring_all_reduce, send_recv_us)
from strategies import flow_sets

MB = 1 << 20


def fabric(name: str) -> Fabric:
    path = topology_path(name)
    return Fabric(validate(Topology, read_yaml(path), path))


def bandwidth(fab: Fabric, a: str, b: str) -> float:
    return fab.link_of[(fab.index[a], fab.index[b])].bandwidth_GBps


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flow_sets(max_flows=6))
def test_fluid_finish_times_equal_the_simpy_flow_network(case):
    """The closed-loop solver and the SimPy flow network are one model: same finish times."""
    capacity, flows = case
    routes = [route for route, _ in flows]
    sizes = [(i + 1) * 10e3 for i in range(len(routes))]
    env = simpy.Environment()
    network = FlowNetwork(env, capacity)
    events = [network.transfer(route, size) for route, size in zip(routes, sizes)]
    env.run()
    assert fluid_finish_us(routes, sizes, capacity) == pytest.approx([e.value.finished_at for e in events], rel=1e-9)


def test_all_to_all_over_nvswitch_is_n_minus_1_messages_through_each_gpu_link():
    """Every GPU's NVLink to the switch carries its n - 1 outgoing messages: latency + (n - 1) B / link bandwidth."""
    fab = fabric("nvlink8_h100.yaml")
    link = bandwidth(fab, "gpu0", "nvswitch")
    assert all_to_all_us(fab, range(8), MB, latency_us=5.0) == pytest.approx(5.0 + 7 * MB / (link * 1e3), rel=1e-12)


def test_all_to_all_on_the_reference_machine_is_bound_by_the_socket_link():
    """4 x 4 of the 56 messages cross each direction of the socket link: (n/2)^2 B / socket bandwidth (the GPUs'
    48 GB/s root ports carry 7 messages each, which is less limiting here)."""
    fab = fabric("pcie8_rtx_pro_6000.yaml")
    socket = bandwidth(fab, "cpu0", "cpu1")
    root = bandwidth(fab, "gpu0", "cpu0")
    assert 16 / socket > 7 / root  # the premise: the socket link, not a root port, is the bottleneck
    assert all_to_all_us(fab, range(8), MB) == pytest.approx(16 * MB / (socket * 1e3), rel=1e-12)


def test_ep16_all_to_all_across_two_h100_machines_is_bound_by_the_rails():
    """GPU j of the other machine receives its 8 cross messages through rail j (NCCL's PXN: over NVLink to the GPU
    on the destination's rail first): latency + 8 B / NIC bandwidth."""
    fab = fabric("two_node_h100.yaml")
    nic = bandwidth(fab, "n0_nic0", "rail0")
    assert all_to_all_us(fab, range(16), MB, latency_us=14.0) == pytest.approx(14.0 + 8 * MB / (nic * 1e3), rel=1e-12)


def test_ep_dispatch_bytes_are_the_expected_share_of_uniform_routing():
    """T k / ep tokens per destination rank, checked against uniform routing drawn at random (4-sigma band from the
    hypergeometric variance of how many of a token's k experts land on one rank)."""
    tokens, experts, k, ep, hidden = 4000, 256, 8, 8, 7168
    assert ep_bytes_per_pair(tokens, hidden, k, ep, 2.0) == tokens * k / ep * hidden * 2.0
    rng = np.random.default_rng(0)
    chosen = np.argsort(rng.random((tokens, experts)), axis=1)[:, :k]
    per_rank = experts // ep
    on_rank1 = int(np.sum((chosen >= per_rank) & (chosen < 2 * per_rank)))
    p = 1 / ep
    sd = np.sqrt(tokens * k * p * (1 - p) * (experts - k) / (experts - 1))
    assert abs(on_rank1 - tokens * k / ep) < 4 * sd


def test_ep_dispatch_once_per_rank_matches_uniform_routing():
    """A token reaches a rank once if any of its k experts is there: the hypergeometric miss probability, checked
    against uniform routing drawn at random (4-sigma binomial band); fewer bytes than one copy per expert."""
    tokens, experts, k, ep, hidden = 4000, 256, 8, 8, 7168
    once = ep_bytes_per_pair_once_per_rank(tokens, hidden, experts, k, ep, 1.0)
    assert once < ep_bytes_per_pair(tokens, hidden, k, ep, 1.0)
    assert ep_bytes_per_pair_once_per_rank(tokens, hidden, experts, k, 1, 1.0) == tokens * hidden  # one rank: all
    rng = np.random.default_rng(1)
    chosen = np.argsort(rng.random((tokens, experts)), axis=1)[:, :k]
    per_rank = experts // ep
    hit = int(np.sum(np.any((chosen >= per_rank) & (chosen < 2 * per_rank), axis=1)))
    p = once / (tokens * hidden)
    assert abs(hit - tokens * p) < 4 * np.sqrt(tokens * p * (1 - p))


def test_ring_all_gather_is_nccls_formula():
    """tuning.cc: base + (n - 1) hops, algorithm bandwidth = bus x n / (n - 1) over the total bytes."""
    n, total, bus = 8, 8 * MB, 100.0
    expected = 6.6 + 7 * 0.6 + total / (bus * n / (n - 1) * 1e3)
    assert ring_all_gather_us(n, total, bus, 6.6, 0.6) == pytest.approx(expected, rel=1e-12)
    assert ring_all_gather_us(1, total, bus, 6.6, 0.6) == 0.0


def test_send_recv_between_machines_runs_at_the_nic():
    h100, pcie = fabric("two_node_h100.yaml"), fabric("two_node_pcie8_rtx_pro_6000.yaml")
    assert send_recv_us(h100, 0, 8, MB, 4.0) == pytest.approx(4.0 + MB / (bandwidth(h100, "n0_nic0", "rail0") * 1e3))
    assert send_recv_us(pcie, 0, 8, MB) == pytest.approx(MB / (bandwidth(pcie, "n0_nic0", "leaf") * 1e3))


def test_pipeline_boundary_and_kv_transfer_share_the_nics():
    """Eight ranks of one machine send to eight of the other: on the rail-optimised H100 pair each has its own NIC;
    on the PCIe pair four share each socket's NIC."""
    pairs = [(i, 8 + i) for i in range(8)]
    h100, pcie = fabric("two_node_h100.yaml"), fabric("two_node_pcie8_rtx_pro_6000.yaml")
    nic_h100, nic_pcie = bandwidth(h100, "n0_nic0", "rail0"), bandwidth(pcie, "n0_nic0", "leaf")
    assert pipeline_boundary_us(h100, pairs, MB) == pytest.approx(MB / (nic_h100 * 1e3), rel=1e-12)
    assert kv_transfer_us(pcie, pairs, MB, 10.0) == pytest.approx(10.0 + 4 * MB / (nic_pcie * 1e3), rel=1e-12)


def test_two_tp4_rings_crossing_the_socket_link_are_each_slowed_by_the_fair_share():
    """Two TP4 groups on the reference machine, {0,1,4,5} and {2,3,6,7}: each ring crosses the socket link once per
    direction. Alone, a ring step runs at its bottleneck min(root port, socket); together the two rings' crossings
    split the socket link, min(root port, socket / 2). Each all-reduce's transfer time grows by that ratio (exact in
    the fluid model, so checked to rounding; the issue's acceptance bound is 2%)."""
    fab = fabric("pcie8_rtx_pro_6000.yaml")
    groups = ([0, 1, 4, 5], [2, 3, 6, 7])
    rings = [[fab.hop(g[i], g[(i + 1) % 4]) for i in range(4)] for g in groups]
    socket, root = bandwidth(fab, "cpu0", "cpu1"), bandwidth(fab, "gpu0", "cpu0")
    assert all(sum(1 for h in ring for link in h.links if link == (fab.index["cpu0"], fab.index["cpu1"])) == 1
               for ring in rings)
    nbytes = 4 * MB

    def run(active):
        env = simpy.Environment()
        network = FlowNetwork.from_fabric(env, fab)
        procs = [env.process(ring_all_reduce(env, network, rings[i], nbytes)) for i in active]
        env.run()
        return [p.value for p in procs]

    (alone,) = run([0])
    together = run([0, 1])
    assert alone == pytest.approx(6 * (nbytes / 4) / (min(root, socket) * 1e3), rel=1e-12)
    expected = alone * min(root, socket) / min(root, socket / 2)
    assert together == pytest.approx([expected, expected], rel=1e-9)
