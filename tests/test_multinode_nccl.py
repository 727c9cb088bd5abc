"""NCCL's all-reduce between machines (v2.29.7-1, src/graph/tuning.cc with nNodes > 1) against its formulas, the
latencies and bandwidths of 2 x 8 H100 with 8 x 400G NICs per machine written out by hand from tuning.cc."""
from __future__ import annotations

import pytest

from conftest import topology_path
from simulator.config.base import validate
from simulator.config.loader import read_yaml
from simulator.config.topology import Topology
from simulator.hardware.interconnect import Fabric
from simulator.hardware.parallel_collectives import (NetworkRing, allreduce_between_machines,
                                                      multinode_allreduce_options, multinode_time_us, network_graph)


def fabric(name: str) -> Fabric:
    path = topology_path(name)
    return Fabric(validate(Topology, read_yaml(path), path))


def test_network_graph_one_channel_per_nic_at_a_search_speed():
    """search.cc's inter speeds: 48 for a 400G NIC (sm90), 24 for 200G (sm100 array); ncclTopoDupChannels doubles
    channels at >= 25 GB/s except on sm > 80 below 50 GB/s with more than 4 channels."""
    assert network_graph(8, 48.0, 90) == NetworkRing(8, 48.0)  # 48 < 50 and 8 > 4: no duplication
    assert network_graph(4, 48.0, 90) == NetworkRing(8, 24.0)  # 4 channels: duplicated, speed halved
    assert network_graph(2, 24.0, 120) == NetworkRing(2, 24.0)  # below 25: kept
    assert network_graph(8, 50.0, 90) == NetworkRing(8, 48.0)  # NCCL's 400G NIC figure: the top inter speed


# (algorithm, protocol): (latency us, algorithm bandwidth GB/s) for 16 ranks on 2 machines, 8 channels x 48 GB/s,
# NVLink inside a machine, Intel CPUs. busBw = 384. Ring: nsteps 30, 2 of them network steps; tree: 2 x (7 intra +
# log2(2) network). llMaxBw (Intel row, N2) 39.0; perChMax ring LL128 36.7, tree 41.4, tree LL128 36.7 (Hopper, N2).
EXPECTED_H100_2X8 = {
    ("ring", "LL"): (6.6 + 28 * 1.0 + 2 * 2.7, 39.0 * 16 / 30),  # intra step max(0.6, net overhead 1.0)
    ("ring", "LL128"): (14.0 + 28 * 1.9 + 2 * 4.0, 8 * 36.7 * 16 / 30),
    ("ring", "Simple"): (8.4 + 28 * 3.4 + 2 * 14.0, 384.0 * 16 / 30),  # max(3.4, 3 x 1.0)
    ("tree", "LL"): (6.8 + 2 * (7 * 0.6 + 5.0), 39.0 * 0.5),
    ("tree", "LL128"): (14.0 + 2 * (7 * 1.25 + 8.5), 8 * 36.7 * 0.5),
    ("tree", "Simple"): (8.4 + 2 * (7 * 4.0 + 14.0), min(384 * 0.92, 8 * 41.4) * 0.5),
}


def test_two_h100_machines_latencies_and_bandwidths_are_tuning_cc():
    options = multinode_allreduce_options(16, 2, 90, "nvlink", NetworkRing(8, 48.0))
    got = {(o.algorithm, o.protocol): (o.latency_us, o.algbw_GBps) for o in options}
    assert set(got) == set(EXPECTED_H100_2X8)
    for key, (latency, algbw) in EXPECTED_H100_2X8.items():
        assert got[key] == pytest.approx((latency, algbw), rel=1e-12), key


def test_ring_simple_plateau_and_tree_correction():
    options = {(o.algorithm, o.protocol): o for o in multinode_allreduce_options(16, 2, 90, "nvlink",
                                                                                   NetworkRing(8, 48.0))}
    ring = options[("ring", "Simple")]
    big = 1 << 20  # 1 MiB / (16 runtime channels x 16 ranks) = 4096 B >= 64: latency x 1.4 (SM >= 80)
    assert multinode_time_us(ring, big, 16, 16, 90) == pytest.approx(ring.latency_us * 1.4 + big / (1e3 * ring.algbw_GBps))
    small = 4096  # 16 B per channel and rank: no plateau
    assert multinode_time_us(ring, small, 16, 16, 90) == pytest.approx(ring.latency_us + small / (1e3 * ring.algbw_GBps))
    tree = options[("tree", "LL")]
    nbytes = 14336  # log2(14336 >> 6) = 7: LL correction 0.7
    assert multinode_time_us(tree, nbytes, 16, 16, 90) == pytest.approx(tree.latency_us + nbytes / (1e3 * tree.algbw_GBps * 0.7))


def test_amd_hosts_and_more_machines_change_the_rows_nccl_reads():
    amd = {(o.algorithm, o.protocol): o for o in multinode_allreduce_options(16, 2, 90, "nvlink", NetworkRing(8, 48.0),
                                                                               cpu_vendor="amd")}
    assert amd[("ring", "LL")].busbw_GBps == 22.5  # llMaxBws row 1 (AMD), N2
    assert amd[("ring", "LL")].latency_us == pytest.approx(6.6 + 28 * 2.0 + 2 * 2.7)  # AMD net overhead 2.0 us
    four = {(o.algorithm, o.protocol): o for o in multinode_allreduce_options(32, 4, 90, "nvlink", NetworkRing(8, 48.0))}
    assert four[("tree", "LL")].latency_us == pytest.approx(6.8 + 2 * (7 * 0.6 + 2 * 5.0))  # log2i(4) = 2
    assert four[("ring", "LL")].busbw_GBps == 20.4  # N4 column


def test_decode_all_reduce_across_two_h100_machines_is_tree_ll():
    option, time_us = allreduce_between_machines(fabric("two_node_h100.yaml"), 16, 14336)
    assert (option.algorithm, option.protocol) == ("tree", "LL")
    assert time_us == pytest.approx(25.2 + 14336 / (1e3 * 19.5 * 0.7))


def test_the_pcie_pair_pays_host_memory_staging_inside_each_machine():
    fab = fabric("two_node_pcie8_rtx_pro_6000.yaml")
    option, time_us = allreduce_between_machines(fab, 16, 14336)
    shm = fab.topology.fabric.shm_hop_latency_us
    assert option.protocol == "LL" and option.latency_us > 6.6 + 2 * 7 * shm
    with pytest.raises(ValueError, match="not spread evenly"):
        allreduce_between_machines(fab, 12, 14336)
