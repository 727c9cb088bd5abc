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
    """512 B: NCCL's own table has ring LL at 15.0 us and NVLS at 25, so NCCL runs ring LL; an eager run pays the
    board's calibrated eager floor (fixed, and per each of its 14 steps) over that latency, a pass's run NCCL's 15.0
    alone, and both move 512 B on the one channel topoGetAlgoInfo launches (512 < 1 x 512 threads x 8 B x 8 ranks),
    at 45 x 0.5 GB/s bus."""
    topology = b200()
    f = topology.fabric
    transfer = 512 / (1000 * 45 * 0.5 * 8 / 14)
    cost = AllReduce(Fabric(topology), 8, "nccl", launch="eager").cost(512)
    assert (cost.algorithm, cost.protocol) == ("nccl_ring", "LL")
    floor = 6.6 + 14 * 0.6 + f.nccl_eager_base_us + 14 * f.nccl_eager_step_us
    assert cost.time_us == pytest.approx(floor + transfer, rel=1e-9)
    graph = AllReduce(Fabric(topology), 8, "nccl", launch="graph").cost(512)
    assert graph.time_us == pytest.approx(6.6 + 14 * 0.6 + transfer, rel=1e-9)


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


def test_a100_2MiB_nccl_chooses_ring_ll_by_a_hair_in_2_27_3_as_in_2_29_7():
    """8 x A100 at 2 MiB (aiconfigurator's table is NCCL 2.27.3): tuning.cc's Ampere rows, search.cc's speeds and
    SM80_NVLINK_BW are the same in v2.27.3-1 and v2.29.7-1 (baseLat, hwLat, llMaxBws 87.7, perChMaxRingLL128Bws 20,
    perChMaxTreeBws 24, LL128 on up to PATH_NVB), so both choose alike. By hand: 12 NVLinks x 20 = 240 GB/s, ring and
    tree 6 x 40 duplicated to 12 x 20. Ring LL 6.6 + 14 x 0.6 = 15.0 us + 2 MiB at min(87.7, 240 x 0.5) x 8 / 14 =
    56.85; LL128 14.0 + 14 x 1.9 = 40.6 + 2 MiB at min(240 x 0.92, 12 x 20) x 8 / 14 = 57.22; ring Simple 56.0 + 2 MiB
    at 240 x 8 / 14 = 71.3; tree Simple's latency alone 8.4 + 14 x 4.0 = 64.4; tree LL128 31.5 + 2 MiB at
    min(220.8, 12 x 24) x 7/9 x 0.5 x 0.6 (treeCorrectionFactor, log2(2 MiB / 64) = 15) = 72.2. NCCL runs ring LL."""
    from simulator.hardware import nccl

    topology = Topology.model_validate(read_yaml("topologies/nvlink8_a100.yaml"))
    ar = AllReduce(Fabric(topology), 8, "nccl", launch="eager")
    assert {k: (g.channels, g.bw_intra) for k, g in ar.graphs.items()} == {"ring": (12, 20.0), "tree": (12, 20.0)}
    n = 2 << 20
    own = {(o.algorithm, o.protocol): nccl.algo_time_us(o, n) for o in nccl.allreduce_options(8, 80, "nvlink", ar.graphs)}
    ll, ll128 = 15.0 + n / (1000 * 87.7 * 8 / 14), 40.6 + n / (1000 * 220.8 * 8 / 14)
    assert own["ring", "LL"] == pytest.approx(ll, rel=1e-6) and round(ll, 2) == 56.85
    assert own["ring", "LL128"] == pytest.approx(ll128, rel=1e-6) and round(ll128, 2) == 57.22
    assert own["ring", "Simple"] == pytest.approx(56.0 + n / (1000 * 240 * 8 / 14), rel=1e-6)
    assert own["tree", "Simple"] > 64.4
    assert own["tree", "LL128"] == pytest.approx(31.5 + n / (1000 * 220.8 * 7 / 9 * 0.5 * 0.6), rel=1e-6)
    assert min(own, key=own.get) == ("ring", "LL")
    cost = ar.cost(n)
    assert (cost.algorithm, cost.protocol) == ("nccl_ring", "LL")
