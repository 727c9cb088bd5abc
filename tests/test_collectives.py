"""All-reduce costs against NCCL's own cost formula, and the fabric rules that permit each algorithm."""
from __future__ import annotations

import pytest

from simulator.config.topology import Topology
from simulator.hardware.collectives import (NCCL_TREE_CORRECTION, AllReduce, NotPermitted)
from simulator.hardware.interconnect import Fabric

GPU = {"name": "test", "memory_GB": 80, "memory_bandwidth_GBps": 2000, "memory_efficiency": 0.8,
       "peak_TFLOPS": {"bf16": 500}, "compute_efficiency": 0.7, "kernel_floor_us": 1.0}
HOST = {"eager_launch_us": 10, "launch_jitter_cv": 0.0, "rank_skew_cv": 0.0, "graph_launch_us": 10,
        "graph_node_us": 0.5, "step_overhead_us": 0, "sync_us": 0}


def switch_topology(n=8, bandwidth=48.0, latency=0.0, p2p="pcie_switch") -> Topology:
    """n GPUs behind one PCIe switch (NCCL's simplest P2P case)."""
    nodes = [{"name": "cpu0", "kind": "cpu"}, {"name": "sw", "kind": "pcie_switch"}]
    nodes += [{"name": f"gpu{i}", "kind": "gpu"} for i in range(n)]
    links = [{"between": ["sw", "cpu0"], "kind": "pcie", "bandwidth_GBps": bandwidth, "latency_us": latency}]
    links += [{"between": [f"gpu{i}", "sw"], "kind": "pcie", "bandwidth_GBps": bandwidth, "latency_us": latency}
              for i in range(n)]
    return Topology.model_validate({"name": "switch", "gpu": GPU, "host": HOST,
                                    "fabric": {"nodes": nodes, "links": links, "p2p_level": p2p}})


def nvswitch_topology(n=8, bandwidth=450.0, nvls=True) -> Topology:
    nodes = [{"name": "cpu0", "kind": "cpu"}, {"name": "nvs", "kind": "nvswitch"}]
    nodes += [{"name": f"gpu{i}", "kind": "gpu"} for i in range(n)]
    links = [{"between": [f"gpu{i}", "nvs"], "kind": "nvlink", "bandwidth_GBps": bandwidth, "latency_us": 0.0}
             for i in range(n)]
    links += [{"between": [f"gpu{i}", "cpu0"], "kind": "pcie", "bandwidth_GBps": 48, "latency_us": 0.0}
              for i in range(n)]
    return Topology.model_validate({"name": "nvs", "gpu": GPU, "host": HOST,
                                    "fabric": {"nodes": nodes, "links": links, "p2p_level": "pcie_switch",
                                               "nvls": nvls}})


def nccl_ring_time(n, nbytes, proto, bw=48.0, hop=None):
    """NCCL tuning.cc for a one-node ring all-reduce, written out independently of the code under test."""
    base = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}[proto]
    hop = hop if hop is not None else {"LL": 1.0, "LL128": 2.5, "Simple": 5.7}[proto]
    bus = {"LL": min(141.0, bw / 4), "LL128": bw * 0.92, "Simple": bw}[proto]
    algbw = bus * n / (2 * (n - 1))
    return base + 2 * (n - 1) * hop + nbytes / (1000 * algbw)


@pytest.mark.parametrize("nbytes", [1024, 14336, 65536, 1 << 20, 64 << 20])
@pytest.mark.parametrize("proto", ["LL", "Simple"])
def test_ring_matches_nccl_formula(nbytes, proto):
    ar = AllReduce(Fabric(switch_topology()), 8, "nccl_ring")
    option = next(o for o in ar.nccl_options(nbytes) if o.algorithm == "nccl_ring" and o.protocol == proto)
    assert option.time_us == pytest.approx(nccl_ring_time(8, nbytes, proto), rel=1e-12)


@pytest.mark.parametrize("nbytes", [4096, 262144, 8 << 20])
def test_tree_matches_nccl_formula_with_correction(nbytes):
    ar = AllReduce(Fabric(switch_topology()), 8, "nccl_tree")
    option = next(o for o in ar.nccl_options(nbytes) if o.algorithm == "nccl_tree" and o.protocol == "Simple")
    log_size = (nbytes >> 6).bit_length() - 1
    algbw = 48 * 0.92 * 0.5 * NCCL_TREE_CORRECTION["Simple"][log_size]
    assert option.time_us == pytest.approx(8.4 + 14 * 4.0 + nbytes / (1000 * algbw), rel=1e-12)


def test_nccl_choice_is_the_cheapest_option():
    ar = AllReduce(Fabric(switch_topology()), 8, "nccl")
    for nbytes in (1024, 1 << 16, 1 << 24):
        best = min(ar.nccl_options(nbytes), key=lambda o: o.time_us)
        assert ar.cost(nbytes) == best
    assert ar.cost(1024).protocol == "LL"  # latency-bound
    assert ar.cost(1 << 26).protocol == "Simple"  # bandwidth-bound


def test_no_ll128_over_pcie():
    ar = AllReduce(Fabric(switch_topology()), 8, "nccl")
    assert all(o.protocol != "LL128" for o in ar.nccl_options(1 << 20))


def test_host_memory_hops_add_latency():
    """P2P off (PHB routes): every ring step pays the staging latency through host memory."""
    fast = AllReduce(Fabric(switch_topology()), 8, "nccl_ring").cost(14336).time_us
    data = switch_topology().model_dump()
    data["fabric"]["p2p_level"] = "nvlink"
    data["fabric"]["shm_hop_latency_us"] = 2.0
    slow = AllReduce(Fabric(Topology.model_validate(data)), 8, "nccl_ring").cost(14336)
    assert slow.time_us > fast
    # staged hops cross the switch uplink twice: the shared uplink also halves the bandwidth per hop
    assert slow.latency_us == pytest.approx(6.6 + 14 * (1.0 + 2.0))


def test_nvswitch_routes_over_nvlink_and_offers_nvls_and_one_shot():
    fabric = Fabric(nvswitch_topology())
    assert fabric.all_pairs_nvlink(8)
    ar = AllReduce(fabric, 8, "auto")
    assert ar.cost(14336).algorithm == "one_shot"
    assert ar.cost(64 << 20).algorithm == "nvls"
    assert AllReduce(fabric, 8, "nccl").cost(14336).algorithm in ("nccl_ring", "nccl_tree")


def test_nvls_needs_multicast():
    with pytest.raises(NotPermitted):
        AllReduce(Fabric(nvswitch_topology(nvls=False)), 8, "nvls")


def test_custom_allreduce_needs_p2p_and_is_off_for_many_pcie_gpus():
    with pytest.raises(NotPermitted):
        AllReduce(Fabric(switch_topology(p2p="nvlink")), 8, "one_shot")
    auto = AllReduce(Fabric(switch_topology()), 8, "auto")
    assert auto.cost(14336).algorithm.startswith("nccl")  # engines disable it on >2 PCIe-only GPUs
    two = AllReduce(Fabric(switch_topology(n=2)), 2, "auto")
    assert two.cost(14336).algorithm == "one_shot"
    forced = AllReduce(Fabric(switch_topology()), 8, "one_shot")  # a what-if the user may force
    assert forced.cost(14336).algorithm == "one_shot"


def test_cost_grows_with_size_and_latency():
    ar = AllReduce(Fabric(switch_topology()), 8, "auto")
    sizes = [1 << k for k in range(8, 28)]
    times = [ar.cost(s).time_us for s in sizes]
    assert times == sorted(times)
    slow = AllReduce(Fabric(switch_topology(latency=1.0)), 8, "auto")
    assert all(slow.cost(s).time_us > ar.cost(s).time_us for s in sizes)


def test_single_rank_is_free():
    assert AllReduce(Fabric(switch_topology()), 1, "auto").cost(1 << 20).time_us == 0.0


def test_shortest_paths_by_hand():
    """Dijkstra on a small graph: the cheaper two-hop path beats a dear direct edge; an island stays unreachable."""
    from simulator.hardware.interconnect import shortest_paths

    weight = [{1: 1.0, 2: 5.0}, {0: 1.0, 2: 1.5}, {0: 5.0, 1: 1.5}, {}]
    dist, pred = shortest_paths(weight, 0)
    assert dist == [0.0, 1.0, 2.5, float("inf")] and pred == [-1, 0, 1, -1]


def test_routes_prefer_nvlink_then_the_socket_last():
    fabric = Fabric(nvswitch_topology(4))
    gpu = fabric.gpus
    assert [fabric.names[i] for i in fabric.route(gpu[0], gpu[3])] == ["gpu0", "nvs", "gpu3"]
    assert fabric.hop(0, 3).over_nvlink and fabric.hop(0, 3).p2p
    assert [fabric.names[i] for i in fabric.route(gpu[1], fabric.index["cpu0"])] == ["gpu1", "cpu0"]
