"""NCCL v2.29.7-1 on one 8 x B200 node (SM100), written out by hand from src/graph/search.cc and tuning.cc, and the
rule that NCCL chooses from its own table: the fabric's calibrated extras (a route's step latency, an eager floor)
are what the chosen run costs, never what NCCL chooses by."""
from __future__ import annotations

import pytest

from simulator.config.loader import read_yaml
from simulator.config.topology import Topology
from simulator.hardware.collectives import AllReduce
from simulator.hardware.interconnect import Fabric

# search.cc on 18 NVLinks x 40.1 GB/s (topo.h SM100_NVLINK_BW) = 721.8 GB/s a GPU, sm100SpeedArrayIntra
# {90, 80, 70, ...}: ring 8 x 90 (720 < 721.8: the walk goes on, nothing beats 720 before 0.49 x 90), duplicated to
# 16 x 45 (ncclTopoDupChannels: 90 >= 50), pass 2 stops (721.8 / 50 = 14 < 16 channels). NVLS: a channel costs
# its head twice, every GPU link carries (8 + 1) x bwIntra <= 721.8, so 80; pass 2 raises bwInter alone while it is
# below 2 x bwIntra, up to the array's top, 90.
RING, NVLS = (16, 45.0), (8, 80.0, 90.0)
# tuning.cc, Blackwell, one node: (latency us, bus bandwidth GB/s)
B200_8GPU = {
    ("nccl_ring", "LL"): (6.6 + 14 * 0.6, min(2 * 141.0, 720 * 0.5)),                    # 15.0, 282
    ("nccl_ring", "LL128"): (14.0 + 14 * 1.9, min(720 * 0.92, 16 * 40.0)),               # 40.6, 640
    ("nccl_ring", "Simple"): (8.4 + 14 * 3.4, 720.0),                                    # 56.0, 720
    ("nvls", "Simple"): (25.0, 8 * min(80 * 0.74 * 7 / 8 * 2, 90)),                      # 25.0, 720 (bwInter binds)
}


def b200(**fabric) -> Topology:
    data = read_yaml("topologies/nvlink8_b200.yaml")
    data["fabric"].update(fabric)
    return Topology.model_validate(data)


def with_link_latency(topology: Topology, latency_us: float) -> Topology:
    data = topology.model_dump()
    for link in data["fabric"]["links"]:
        if link["kind"] == "nvlink":
            link["latency_us"] = latency_us
    return Topology.model_validate(data)


def test_b200_graphs_as_nccl_search_finds_them():
    graphs = AllReduce(Fabric(with_link_latency(b200(), 0.0)), 8, "nccl").graphs
    assert (graphs["ring"].channels, graphs["ring"].bw_intra) == RING
    assert (graphs["nvls"].channels, graphs["nvls"].bw_intra, graphs["nvls"].bw_inter) == NVLS


@pytest.mark.parametrize("key", sorted(B200_8GPU))
def test_b200_table_matches_nccl_2_29_7(key):
    """Without the board's calibrated link latency the table is NCCL's own, line for line."""
    ar = AllReduce(Fabric(with_link_latency(b200(), 0.0)), 8, "nccl")
    latency, bus = B200_8GPU[key]
    nbytes = 1 << 30
    option = next(o for o in ar.nccl_options(nbytes) if (o.algorithm, o.protocol) == key)
    assert option.latency_us == pytest.approx(latency, rel=1e-6)
    assert option.time_us == pytest.approx(latency + nbytes / (1000 * bus * 8 / 14), rel=1e-6)


def test_b200_4GiB_busbw_is_nccl_model_nvls():
    """NCCL's model at 4 GiB runs NVLS at 720 GB/s bus bandwidth (the search's bwInter ceiling binds, not
    nvlsEfficiency's 828.8): 25 us + 4 GiB at 720 x 8 / 14, bus bandwidth 718.3 GB/s in nccl-tests' 2 (n - 1) / n."""
    nbytes = 4 << 30
    cost = AllReduce(Fabric(b200()), 8, "nccl", launch="eager").cost(nbytes)
    assert (cost.algorithm, cost.protocol) == ("nvls", "Simple")
    expected_us = 25.0 + nbytes / (1000 * 720 * 8 / 14)
    assert cost.time_us == pytest.approx(expected_us, rel=1e-6)
    assert nbytes / (1000 * cost.time_us) * 2 * 7 / 8 == pytest.approx(718.3, abs=0.05)


def test_b200_small_all_reduce_runs_ring_ll_as_nccl_chooses():
    """512 B: NCCL's own table has ring LL at 15.0 us and NVLS at 25, so NCCL runs ring LL; the run pays the board's
    calibrated NVLink 5 latency on each of its 14 steps (two links of latency_us a step) and moves 512 B on the one
    channel topoGetAlgoInfo launches (512 < 1 x 512 threads x 8 B x 8 ranks), at 45 x 0.5 GB/s bus."""
    topology = b200()
    link = next(l.latency_us for l in topology.fabric.links if l.kind == "nvlink")
    cost = AllReduce(Fabric(topology), 8, "nccl", launch="eager").cost(512)
    assert (cost.algorithm, cost.protocol) == ("nccl_ring", "LL")
    assert cost.time_us == pytest.approx(6.6 + 14 * (0.6 + 2 * link) + 512 / (1000 * 45 * 0.5 * 8 / 14), rel=1e-9)


def test_b200_switches_to_nvls_where_nccl_table_does():
    """NCCL's table: ring LL 15.0 + n / (282 x 8 / 14), NVLS 25.0 + n / (720 x 8 / 14): ring LL up to 2.66 MB, NVLS
    from there (LL128 and Simple never cheapest at 8 GPUs), whatever the board's link latency."""
    crossing = 10.0 * 1000 / (1 / (282 * 8 / 14) - 1 / (720 * 8 / 14))  # bytes where the two lines meet
    assert 2.6e6 < crossing < 2.7e6
    ar = AllReduce(Fabric(b200()), 8, "nccl", launch="eager")
    assert ar.cost(2 << 20).algorithm == "nccl_ring" and ar.cost(2 << 20).protocol == "LL"
    assert ar.cost(3 << 20).algorithm == "nvls"


@pytest.mark.parametrize("name", ["nvlink8_b200", "nvlink8_a100", "pcie8_l40s", "pcie8_rtx_pro_6000"])
def test_the_choice_does_not_depend_on_the_calibrated_extras(name):
    """Every size, every shipped board with extras: what runs is what the board without its link latencies and eager
    floor runs (NCCL's table knows neither); the run itself costs at least as much with them."""
    topology = Topology.model_validate(read_yaml(f"topologies/{name}.yaml"))
    data = topology.model_dump()
    data["fabric"]["nccl_eager_base_us"] = data["fabric"]["nccl_eager_step_us"] = 0.0
    for link in data["fabric"]["links"]:
        link["latency_us"] = 0.0
    plain = Topology.model_validate(data)
    ranks = min(8, len(Fabric(topology).gpu_names))
    full = AllReduce(Fabric(topology), ranks, "nccl", launch="eager")
    bare = AllReduce(Fabric(plain), ranks, "nccl", launch="eager")
    for k in range(9, 30, 2):
        a, b = full.cost(1 << k), bare.cost(1 << k)
        assert (a.algorithm, a.protocol) == (b.algorithm, b.protocol), 1 << k
        assert a.time_us >= b.time_us - 1e-9


def test_between_machines_nccl_chooses_without_the_host_staging():
    """Two 8-GPU PCIe machines, P2P off inside each: the host-memory staging a step pays (the route's extra) is not in
    NCCL's table, so the protocol NCCL runs is the one its own figures (extra 0) time fastest, and the run pays the
    extra on its steps inside a machine."""
    from simulator.hardware.multinode import MultiNodeAllReduce
    from simulator.hardware.parallel_collectives import multinode_allreduce_timed, multinode_setup

    fabric = Fabric(Topology.model_validate(read_yaml("topologies/two_node_pcie8_rtx_pro_6000.yaml")))
    extra = multinode_setup(fabric, 16).extra_step_latency_us
    assert extra > 0
    ar = MultiNodeAllReduce(fabric, 16)
    for k in range(9, 30, 2):
        own = multinode_allreduce_timed(fabric, 16, 1 << k, own=True)
        best, _ = min(own, key=lambda pair: pair[1])
        cost = ar.cost(1 << k)
        assert (cost.algorithm, cost.protocol) == ({"ring": "nccl_ring", "tree": "nccl_tree"}[best.algorithm],
                                                   best.protocol)
        assert cost.latency_us >= best.latency_us - 1e-9
    assert ar.cost(512).latency_us > min(multinode_allreduce_timed(fabric, 16, 512, own=True),
                                         key=lambda pair: pair[1])[0].latency_us  # the staging is paid
