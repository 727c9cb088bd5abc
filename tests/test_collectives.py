"""All-reduce costs against NCCL's own cost formula, and the fabric rules that permit each algorithm."""
from __future__ import annotations

import pytest

from simulator.config.topology import Topology
from simulator.hardware.collectives import AllReduce, NotPermitted
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


# NCCL v2.29.7-1 on one 8 x H100 SXM node, written out by hand from src/graph/tuning.cc and the channel search of
# src/graph/search.cc (ring and tree 12 channels x 30 GB/s, NVLS 8 channels x 40 / 60 GB/s; nvlsEfficiency 0.85):
# (algorithm, protocol) -> (latency us, algorithm bandwidth GB/s)
NCCL_2_29_7_H100_8GPU = {
    ("nccl_ring", "LL"): (6.6 + 14 * 0.6, min(141.0, 360 * 0.5) * 8 / 14),               # 15.0, 80.57
    ("nccl_ring", "LL128"): (14.0 + 14 * 1.9, min(360 * 0.92, 12 * 36.7) * 8 / 14),      # 40.6, 189.26
    ("nccl_ring", "Simple"): (8.4 + 14 * 3.4, 360 * 8 / 14),                              # 56.0, 205.71
    ("nccl_tree", "LL"): (6.8 + 14 * 0.6, min(360 * 0.92, 12 * 38.7) / 3.8 / 2),          # 15.2, 43.58
    ("nccl_tree", "LL128"): (14.0 + 14 * 1.25, min(331.2 * 7 / 9, 12 * 36.7) / 2),        # 31.5, 128.8
    ("nccl_tree", "Simple"): (8.4 + 14 * 4.0, min(360 * 0.92, 12 * 38.7) / 2),            # 64.4, 165.6
    ("nvls", "Simple"): (25.0, 8 * min(40 * 0.85 * 7 / 8 * 2, 60) * 8 / 14),              # 25.0, 272.0
}
# treeCorrectionFactor (tuning.cc v2.29.7-1), the Simple row, by log2(bytes / 64)
TREE_SIMPLE_CORRECTION = (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9)


def h100_node() -> Topology:
    """8 x H100 on an NVSwitch, links as NCCL's topology code sees them: 18 NVLinks x 20.6 GB/s (topo.h)."""
    return nvswitch_topology(bandwidth=18 * 20.6)


@pytest.mark.parametrize("key", sorted(NCCL_2_29_7_H100_8GPU))
def test_h100_node_matches_nccl_2_29_7(key):
    ar = AllReduce(Fabric(h100_node()), 8, "nccl")
    latency, algbw = NCCL_2_29_7_H100_8GPU[key]
    nbytes = 1 << 30  # above the tree correction's last column: the bandwidth is NCCL's own
    option = next(o for o in ar.nccl_options(nbytes) if (o.algorithm, o.protocol) == key)
    assert option.latency_us == pytest.approx(latency, rel=1e-6)
    assert option.time_us == pytest.approx(latency + nbytes / (1000 * algbw), rel=1e-6)


def test_h100_node_channels_as_nccl_search_finds_them():
    graphs = AllReduce(Fabric(h100_node()), 8, "nccl").graphs
    assert (graphs["ring"].channels, graphs["ring"].bw_intra) == (12, 30.0)
    assert (graphs["tree"].channels, graphs["tree"].bw_intra) == (12, 30.0)
    assert (graphs["nvls"].channels, graphs["nvls"].bw_intra, graphs["nvls"].bw_inter) == (8, 40.0, 60.0)


@pytest.mark.parametrize("nbytes", [4096, 262144, 8 << 20])
def test_tree_bandwidth_takes_the_correction_factor(nbytes):
    ar = AllReduce(Fabric(h100_node()), 8, "nccl")
    option = next(o for o in ar.nccl_options(nbytes) if (o.algorithm, o.protocol) == ("nccl_tree", "Simple"))
    latency, algbw = NCCL_2_29_7_H100_8GPU[("nccl_tree", "Simple")]
    corrected = algbw * TREE_SIMPLE_CORRECTION[(nbytes >> 6).bit_length() - 1]
    assert option.time_us == pytest.approx(latency + nbytes / (1000 * corrected), rel=1e-6)


def busbw_at(topology_file: str, nbytes: int, algorithm: str = "nccl") -> float:
    from simulator.config.loader import read_yaml

    topology = Topology.model_validate(read_yaml(topology_file))
    cost = AllReduce(Fabric(topology), 8, algorithm).cost(nbytes)
    return nbytes / (1000 * cost.time_us) * 2 * 7 / 8


def test_shipped_h100_board_at_1GiB_is_within_10pct_of_nccl_tests():
    """nccl-tests all_reduce_perf on 8 x H100 SXM, 1 GiB and above: "you should reach a peak busBw of ~480GB/s"
    (NCCL maintainer, NVIDIA/nccl-tests issue #212, 2024-05-06; NVLS, the default); NCCL_ALGO=RING gives busbw
    365-370 GB/s at 2-4 GB (NVIDIA/nccl issue #1455, NGC PyTorch container, 2024-09)."""
    assert busbw_at("topologies/nvlink8_h100.yaml", 1 << 30) == pytest.approx(480, rel=0.10)
    assert busbw_at("topologies/nvlink8_h100.yaml", 1 << 30, "nccl_ring") == pytest.approx(367.5, rel=0.10)


def test_shipped_h200_board_is_within_10pct_of_nccl_tests():
    """8 x H200, all_reduce_perf -b 64k -e 4G: peak busbw 475 GB/s (NVIDIA/nccl-tests issue #272, NCCL 2.20.3)."""
    assert busbw_at("topologies/nvlink8_h200.yaml", 4 << 30) == pytest.approx(475, rel=0.10)


def test_shipped_links_are_what_nccl_assumes():
    """NCCL's topology code (v2.29.7-1 src/graph/topo.h, topo.cc): 18 NVLinks x 20.6 GB/s on SM90, x 40.1 on SM100;
    PCIe Gen5 x16 = 16 x 240 / 80 = 48 GB/s."""
    from simulator.config.loader import read_yaml
    from simulator.hardware.nccl_tables import nvlink_bw_per_link, pcie_bw

    assert nvlink_bw_per_link(90) == 20.6 and nvlink_bw_per_link(100) == 40.1 and nvlink_bw_per_link(86) == 12.0
    assert pcie_bw(5) == 48.0 and pcie_bw(4) == 24.0
    for name, per_link in (("nvlink8_h100", 20.6), ("nvlink8_h200", 20.6), ("nvlink8_b200", 40.1)):
        links = read_yaml(f"topologies/{name}.yaml")["fabric"]["links"]
        assert all(l["bandwidth_GBps"] == pytest.approx(18 * per_link) for l in links if l["kind"] == "nvlink")
        assert {l["bandwidth_GBps"] for l in links if l["kind"] == "pcie"} == {48}


def test_pcie_switch_search_and_ring_formula():
    """8 GPUs behind one 48 GB/s PCIe switch, SM90 speeds: the search walks 40 (one channel), 30, 24 (two channels,
    48 = the GPU's whole link: optimal); 24 < 25 so the channels are not duplicated."""
    ar = AllReduce(Fabric(switch_topology()), 8, "nccl_ring")
    assert (ar.graphs["ring"].channels, ar.graphs["ring"].bw_intra) == (2, 24.0)
    option = next(o for o in ar.nccl_options(14336) if (o.algorithm, o.protocol) == ("nccl_ring", "LL"))
    # PCI per-hop latency (hwLat[PCI][Ring][LL] = 1.0), LL at half the bus bandwidth
    assert option.time_us == pytest.approx(6.6 + 14 * 1.0 + 14336 / (1000 * 48 * 0.5 * 8 / 14), rel=1e-9)


def test_nccl_choice_is_the_cheapest_option():
    """NCCL picks the cheapest entry of its own table; what it then runs is that entry over the channels it launches."""
    ar = AllReduce(Fabric(switch_topology()), 8, "nccl")
    for nbytes in (1024, 1 << 16, 1 << 24):
        best = min(ar.nccl_options(nbytes), key=lambda o: o.time_us)
        assert (ar.cost(nbytes).algorithm, ar.cost(nbytes).protocol) == (best.algorithm, best.protocol)
        assert ar.cost(nbytes) == ar.nccl_launched(best, nbytes)
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
    assert slow.implementation.startswith("NCCL 2.29.7-1")


def rule_of(engine: str, version: str):
    """An engine release's custom all-reduce rule, as its profile states it (engines/<engine>/<version>.yaml)."""
    from simulator.config.engine_profile import load_profile

    return load_profile(engine, version)[0].custom_allreduce.value


def test_nvswitch_routes_over_nvlink_and_offers_nvls_and_one_shot():
    fabric = Fabric(nvswitch_topology())
    assert fabric.all_pairs_nvlink(8)
    ar = AllReduce(fabric, 8, "auto", custom_rule=rule_of("sglang", "0.5.9"))
    assert ar.cost(14336).algorithm == "one_shot"
    assert "not NCCL" in ar.cost(14336).implementation
    assert ar.cost(64 << 20).algorithm == "nvls"
    assert AllReduce(fabric, 8, "nccl").cost(14336).algorithm in ("nccl_ring", "nccl_tree")
    assert AllReduce(fabric, 8, "auto").cost(14336).algorithm in ("nccl_ring", "nccl_tree")  # no rule: NCCL


def test_nvls_needs_multicast():
    with pytest.raises(NotPermitted):
        AllReduce(Fabric(nvswitch_topology(nvls=False)), 8, "nvls")


def test_custom_allreduce_needs_p2p_and_is_off_for_many_pcie_gpus():
    with pytest.raises(NotPermitted):
        AllReduce(Fabric(switch_topology(p2p="nvlink")), 8, "one_shot")
    rule = rule_of("vllm", "0.8.4")  # pcie_max_gpus 2: should_custom_ar's world_size == 2 or fully_connected
    auto = AllReduce(Fabric(switch_topology()), 8, "auto", custom_rule=rule)
    assert auto.cost(14336).algorithm.startswith("nccl")  # engines disable it on >2 PCIe-only GPUs
    two = AllReduce(Fabric(switch_topology(n=2)), 2, "auto", custom_rule=rule)
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


def test_routes_prefer_nvlink_then_the_socket_last():
    fabric = Fabric(nvswitch_topology(4))
    gpu = fabric.gpus
    assert [fabric.names[i] for i in fabric.route(gpu[0], gpu[3])] == ["gpu0", "nvs", "gpu3"]
    assert fabric.hop(0, 3).over_nvlink and fabric.hop(0, 3).p2p
    assert [fabric.names[i] for i in fabric.route(gpu[1], fabric.index["cpu0"])] == ["gpu1", "cpu0"]


# --- NVLink step latency beyond NCCL's per-hop figure, calibrated on 2 and 4 GPUs (analysis/nvlink_latency.py) ------
@pytest.mark.parametrize("system, topology", [("h100_sxm", "topologies/nvlink8_h100.yaml")])
def test_nvlink_link_latency_is_the_fit_to_the_2_and_4_gpu_rows(system, topology):
    """The shipped per-link latency is the least-squares fit to aiconfigurator's 2- and 4-GPU small all-reduces (never
    to the 8-GPU rows, which are validation cases); Hopper needs none. (B200's extras take the eager floor's form,
    test_b200_calibration_rows_take_a_fixed_part_and_a_part_a_step.)"""
    pytest.importorskip("pyarrow")
    from simulator.analysis import nvlink_latency
    from simulator.config.loader import read_yaml
    from simulator.kernels.measured import data_root

    if data_root() is None:
        pytest.skip("aiconfigurator-core not installed")
    rows = nvlink_latency.measured_rows(system)
    assert {g for g, _, _ in rows} == {2, 4} and max(b for _, b, _ in rows) == 65536
    best, _ = nvlink_latency.fit(system, topology)
    shipped = {l["latency_us"] for l in read_yaml(topology)["fabric"]["links"] if l["kind"] == "nvlink"}
    assert shipped == {best}


# --- a PCIe board's socket link, calibrated on the same box's all-gathers (analysis/socket_bandwidth.py) -------------
def test_p2p_board_socket_link_is_the_fit_to_its_all_gather_rows():
    """The collection host's socket link figure is the least-squares fit to its 8-GPU all-gather rows (never to the
    all-reduce rows, which are validation cases); NCCL's 22 GB/s for the assumed Xeon falls short of them."""
    pytest.importorskip("pyarrow")
    from simulator.analysis import socket_bandwidth
    from simulator.config.loader import read_yaml
    from simulator.kernels.measured import data_root

    if data_root() is None:
        pytest.skip("aiconfigurator-core not installed")
    topology = "topologies/pcie8_rtx_pro_6000_p2p.yaml"
    rows = socket_bandwidth.measured_rows("rtx_pro_6000_server", "2.29.2", 8)
    assert len(rows) == 5 and min(b for b, _ in rows) == 32 << 20 and max(b for b, _ in rows) == 512 << 20
    best, cost = socket_bandwidth.fit("rtx_pro_6000_server", "2.29.2", topology)
    shipped = {l["bandwidth_GBps"] for l in read_yaml(topology)["fabric"]["links"] if l["kind"] == "socket"}
    assert shipped == {best}
    data = read_yaml(topology)
    nccl_figure = [socket_bandwidth.predicted_us(data, topology, 22.0, 8, b) / t - 1 for b, t in rows]
    assert cost < 0.05 and min(nccl_figure) > 0.1  # the fit within ~10% a row; 22 GB/s leaves every row >10% slow


def test_l40s_box_switch_uplinks_are_the_fit_to_its_4_gpu_all_gather_rows():
    """The L40S box's switch uplinks (the peer traffic its root complex forwards between switches) are the
    least-squares fit to its 4-GPU all-gather rows (never to the all-reduce rows, the validation cases); PCIe 4.0's
    24 GB/s there leaves every row several times too fast, the fit within ~6% a row."""
    pytest.importorskip("pyarrow")
    from simulator.analysis import socket_bandwidth
    from simulator.config.loader import read_yaml
    from simulator.kernels.measured import data_root

    if data_root() is None:
        pytest.skip("aiconfigurator-core not installed")
    topology = "topologies/pcie8_l40s.yaml"
    rows = socket_bandwidth.measured_rows("l40s", "2.27.3", 4)
    assert len(rows) == 5 and min(b for b, _ in rows) == 32 << 20 and max(b for b, _ in rows) == 512 << 20
    best, cost = socket_bandwidth.fit_uplinks("l40s", "2.27.3", topology, 4)
    data = read_yaml(topology)
    kinds = {n["name"]: n["kind"] for n in data["fabric"]["nodes"]}
    uplinks = [l for l in data["fabric"]["links"] if socket_bandwidth.is_uplink(l, kinds)]
    assert len(uplinks) == 4 and {l["bandwidth_GBps"] for l in uplinks} == {best}
    pcie = [socket_bandwidth.predicted_us(data, topology, 24.0, 4, b, uplinks=True) / t - 1 for b, t in rows]
    assert cost < 5 * 0.06 ** 2 and max(pcie) < -0.7


# --- an eager launch's floor, calibrated on the 2- and 4-GPU small all-reduces (analysis/ll_floor.py) ----------------
@pytest.mark.parametrize("system,version,topology", [("a100_sxm", "2.27.3", "nvlink8_a100"),
                                                     ("b200_sxm", "2.29.2", "nvlink8_b200"),
                                                     ("h100_sxm", "2.29.2", "nvlink8_h100"),
                                                     ("h200_sxm", "2.29.2", "nvlink8_h200")])
def test_eager_floor_is_the_fit_to_the_2_and_4_gpu_rows(system, version, topology):
    """Each NVLink board's eager floor (beyond NCCL's ring LL latency) is the non-negative least-squares fit to its
    own 2- and 4-GPU rows of 512 B - 64 KiB (never the 8-GPU rows, the validation cases). A100 and B200: NCCL's
    figures are ~20-30% fast there, so both extras are positive and the fit brings the rows within ~10%; Hopper:
    NCCL's figures are slow already, so both stay 0."""
    pytest.importorskip("pyarrow")
    pytest.importorskip("scipy")
    from simulator.analysis import ll_floor
    from simulator.config.loader import read_yaml
    from simulator.kernels.measured import data_root

    if data_root() is None:
        pytest.skip("aiconfigurator-core not installed")
    path = f"topologies/{topology}.yaml"
    base, step, cost = ll_floor.fit(system, version, path)
    fabric = read_yaml(path)["fabric"]
    assert (fabric.get("nccl_eager_base_us", 0.0), fabric.get("nccl_eager_step_us", 0.0)) == (base, step)
    rows = ll_floor.measured_rows(system, version)
    assert len(rows) == 16 and {g for g, _, _ in rows} == {2, 4}
    if system in ("a100_sxm", "b200_sxm"):
        assert base > 0 and step > 0 and cost < len(rows) * 0.1 ** 2
    else:
        assert (base, step) == (0.0, 0.0)


def test_b200_calibration_rows_take_a_fixed_part_and_a_part_a_step():
    """Which form B200's extras take, from its calibration rows alone (2 and 4 GPUs, 512 B - 64 KiB): the 512 B rows,
    10.26 us at 2 GPUs (2 ring steps) and 15.09 at 4 (6 steps), lie on 7.845 + 1.2075 us a step by hand, NCCL's ring
    LL being 6.6 + 0.6 a step, so 1.245 us fixed and 0.6075 a step beyond it. A per-step extra alone (NCCL's 6.6 us
    base fixed) would need (10.26 - 7.8) / 2 = 1.23 us a step at 2 GPUs and (15.09 - 10.2) / 6 = 0.815 at 4: no one
    figure fits both. The shipped floor is near the hand line, and the per-link form's best fit leaves every 2-GPU row
    slow and every 4-GPU 512 B - 16 KiB row fast, where the floor's residuals are smaller and unsplit."""
    pytest.importorskip("pyarrow")
    pytest.importorskip("scipy")
    from simulator.analysis import ll_floor, nvlink_latency
    from simulator.config.loader import read_yaml
    from simulator.kernels.measured import data_root

    if data_root() is None:
        pytest.skip("aiconfigurator-core not installed")
    rows = {(g, b): t for g, b, t in ll_floor.measured_rows("b200_sxm", "2.29.2")}
    assert rows[2, 512] == pytest.approx(10.26, abs=0.005) and rows[4, 512] == pytest.approx(15.09, abs=0.005)
    step = (rows[4, 512] - rows[2, 512]) / 4
    fixed = rows[2, 512] - 2 * step
    assert (fixed - 6.6, step - 0.6) == (pytest.approx(1.245, abs=0.01), pytest.approx(0.6075, abs=0.01))
    need2, need4 = (rows[2, 512] - 7.8) / 2, (rows[4, 512] - 10.2) / 6
    assert need2 - need4 > 0.4
    path = "topologies/nvlink8_b200.yaml"
    fabric = read_yaml(path)["fabric"]
    assert {l["latency_us"] for l in fabric["links"] if l["kind"] == "nvlink"} == {0.0}
    assert fabric["nccl_eager_base_us"] == pytest.approx(1.245, abs=0.1)
    assert fabric["nccl_eager_step_us"] == pytest.approx(0.6075, abs=0.05)
    data = read_yaml(path)
    data["fabric"]["nccl_eager_base_us"] = data["fabric"]["nccl_eager_step_us"] = 0.0
    link, link_cost = nvlink_latency.fit("b200_sxm", path)
    per_link = {(g, b): nvlink_latency.predicted_us(data, path, link, g, b) / t - 1 for (g, b), t in rows.items()}
    assert all(e < 0 for (g, _), e in per_link.items() if g == 2)
    assert all(e > 0 for (g, b), e in per_link.items() if g == 4 and b <= 16384)
    _, _, floor_cost = ll_floor.fit("b200_sxm", "2.29.2", path)
    assert floor_cost < link_cost / 3


@pytest.mark.parametrize("name", ["nvlink8_a100", "nvlink8_b200"])
def test_eager_floor_is_paid_by_eager_launches_only_and_is_a_floor(name):
    """A pass's all-reduce keeps NCCL's figures; an eager one takes at least the floor, and an option whose own
    latency is above the floor (LL128, Simple at 2 MiB on 8x A100) keeps it."""
    from simulator.config.base import validate
    from simulator.config.catalog import read_kind
    from simulator.config.topology import Topology
    from simulator.hardware.collectives import AllReduce
    from simulator.hardware.interconnect import Fabric

    path, data = read_kind(f"topologies/{name}.yaml", "topology")
    topo = validate(Topology, data, path)
    f = topo.fabric
    graph, eager = (AllReduce(Fabric(topo), 8, "nccl", launch=launch) for launch in ("graph", "eager"))
    small = eager.cost(512).time_us - graph.cost(512).time_us
    assert small == pytest.approx(f.nccl_eager_base_us + 14 * f.nccl_eager_step_us, abs=1e-6)
    floor = graph.cost(512).latency_us + small
    for g, e in zip(graph.nccl_options(2 << 20), eager.nccl_options(2 << 20)):
        assert e.latency_us == pytest.approx(max(g.latency_us, floor))


def test_l40s_box_uplink_burst_is_the_fit_to_its_4_gpu_all_gather_rows():
    """The uplinks' burst (the bytes a collective's start passes at PCIe 4.0's 24 GB/s before the root complex's
    forwarding rate binds) is the least-squares fit to the box's 4-GPU all-gather rows up to 16 MiB, the uplinks' rate
    fitted first (never the all-reduce rows, the validation cases); the fit brings those rows from ~+40% at 16-64 KiB
    to within ~15% each, and the rate's own fit is unmoved by it."""
    pytest.importorskip("pyarrow")
    from simulator.analysis import socket_bandwidth
    from simulator.config.loader import read_yaml
    from simulator.kernels.measured import data_root

    if data_root() is None:
        pytest.skip("aiconfigurator-core not installed")
    topology = "topologies/pcie8_l40s.yaml"
    rows = socket_bandwidth.burst_rows("l40s", "2.27.3", 4)
    assert len(rows) == 16 and min(b for b, _ in rows) == 512 and max(b for b, _ in rows) == 16 << 20
    best, cost = socket_bandwidth.fit_uplink_burst("l40s", "2.27.3", topology, 4)
    data = read_yaml(topology)
    kinds = {n["name"]: n["kind"] for n in data["fabric"]["nodes"]}
    uplinks = [l for l in data["fabric"]["links"] if socket_bandwidth.is_uplink(l, kinds)]
    assert len(uplinks) == 4 and {l["burst_bytes"] for l in uplinks} == {best} and 0 < best <= 512 * 1024
    none = [socket_bandwidth.burst_predicted_us(data, topology, 0, 4, b) / t - 1 for b, t in rows]
    fitted = [socket_bandwidth.burst_predicted_us(data, topology, best, 4, b) / t - 1 for b, t in rows]
    assert max(none) > 0.35 and max(abs(e) for e in fitted) < 0.15
    assert cost < sum(e * e for e in none) / 5
    assert socket_bandwidth.fit_uplinks("l40s", "2.27.3", topology, 4)[0] == {l["bandwidth_GBps"] for l in uplinks}.pop()


def burst_topology(burst_bytes: float, burst_GBps: float = 24.0) -> Topology:
    """Four GPUs, two to a PCIe switch (24 GB/s links), the two switches' 5 GB/s uplinks to one CPU with a burst."""
    nodes = [{"name": "cpu0", "kind": "cpu"}, {"name": "sw0", "kind": "pcie_switch"}, {"name": "sw1", "kind": "pcie_switch"}]
    nodes += [{"name": f"gpu{i}", "kind": "gpu"} for i in range(4)]
    links = [{"between": [f"gpu{i}", f"sw{i // 2}"], "kind": "pcie", "bandwidth_GBps": 24.0, "latency_us": 0.0}
             for i in range(4)]
    links += [{"between": [f"sw{s}", "cpu0"], "kind": "pcie", "bandwidth_GBps": 5.0, "latency_us": 0.0,
               "burst_bytes": burst_bytes, "burst_GBps": burst_GBps} for s in range(2)]
    base = switch_topology(4).model_dump()
    base["fabric"] = {"nodes": nodes, "links": links, "p2p_level": "system"}
    return Topology.model_validate(base)


@pytest.mark.parametrize("nbytes", [512, 4096, 16384, 65536, 1 << 20])
def test_uplink_burst_by_hand(nbytes):
    """A ring of 4 over two switches crosses each uplink once a direction. Each of an all-reduce's 6 steps moves
    nbytes / 4 per flow, LL sending twice its bytes (flags) and Simple its bytes: the link's first burst_bytes pass at
    24 GB/s, the rest at the rate the option moves them at without the burst (wire over its bandwidth time: the 5
    GB/s link or NCCL's slower channel speed), so the burst saves min(wire, burst) x (1/rate - 1/24) on each option."""
    burst = 40960.0
    plain = AllReduce(Fabric(burst_topology(0.0)), 4, "nccl")
    bursty = AllReduce(Fabric(burst_topology(burst)), 4, "nccl")
    for before, after in zip(plain.nccl_options(nbytes), bursty.nccl_options(nbytes)):
        assert (before.algorithm, before.protocol) == (after.algorithm, after.protocol)
        if before.algorithm != "nccl_ring":
            assert after.time_us == pytest.approx(before.time_us)  # trees keep the sustained rate
            continue
        wire = 6 * nbytes / 4 * (2 if before.protocol == "LL" else 1)
        rate = wire / 1000.0 / (before.time_us - before.latency_us)
        assert rate <= 5.0 + 1e-9
        saved_us = min(wire, burst) * (1 / rate - 1 / 24.0) / 1000.0
        assert before.time_us - after.time_us == pytest.approx(saved_us, rel=1e-9)
        if wire <= burst:  # below the burst the bytes cost wire / 24 GB/s: the sustained rate never binds
            assert after.time_us - after.latency_us == pytest.approx(wire / 24.0 / 1000.0, rel=0.02)


def test_a_burst_needs_its_rate():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="burst_GBps"):
        burst_topology(4096.0, burst_GBps=None)
    with pytest.raises(ValidationError, match="burst_GBps"):
        burst_topology(4096.0, burst_GBps=4.0)


# --- the channels an operation launches (NVIDIA/nccl v2.29.7-1 src/enqueue.cc topoGetAlgoInfo) ----------------------
def test_launched_channels_follow_topo_get_algo_info():
    """comm->nChannels is twice the graphs' 12 (connect.cc); ring LL at 8 ranks needs 8 x 8 = 64 B a thread, so below
    nc x 512 x 64 B a channel goes, then threads halve (while a multiple of 128); LL128 8 B and Simple 64 B a thread."""
    from simulator.hardware.nccl import Graph, launched_channels

    g = Graph(12, 30.0, 30.0)
    ring_ll = {512: (1, 64), 8192: (1, 128), 16384: (1, 256), 32768: (1, 512), 65536: (2, 512),
               786432: (24, 512), 1 << 30: (24, 512)}
    for nbytes, expected in ring_ll.items():
        assert launched_channels(nbytes, "ring", "LL", 8, g, g) == expected
    assert launched_channels(16384, "tree", "LL", 8, g, g) == (4, 512)        # 16384 / (512 x 8)
    assert launched_channels(16384, "ring", "LL128", 8, g, g) == (3, 640)     # 3 x 640 x 8 = 15360
    assert launched_channels(16384, "ring", "Simple", 8, g, g) == (1, 256)    # 1 x 512 x 64 > 16384
    assert launched_channels(16384, "ring", "LL", 2, g, g) == (2, 512)        # 2 ranks: 16 B a thread, 2 x 512 x 16
    assert launched_channels(1 << 20, "ring", "LL", 8, Graph(32, 20.0, 20.0), g) == (24, 512)  # min(ring, tree)


def test_small_ring_runs_on_the_channels_it_launches():
    """8x H100 (12 ring channels of 30 GB/s): ring LL below 32 KiB runs on one channel, so its bus bandwidth is one
    channel's 30 x 0.5 (NCCL's LL figure) instead of the 141 GB/s cap; from 768 KiB all 24 run and NCCL's time is
    unchanged; NVLS keeps its channels at every size. The table NCCL chooses from is NCCL's own, untouched."""
    from simulator.config.loader import read_yaml

    topology = Topology.model_validate(read_yaml("topologies/nvlink8_h100.yaml"))
    ar = AllReduce(Fabric(topology), 8, "nccl")
    table = {(o.algorithm, o.protocol): o for o in ar.nccl_options(16384)}
    assert table[("nccl_ring", "LL")].time_us == pytest.approx(6.6 + 14 * 0.6 + 16384 / (1000 * 141 * 8 / 14))
    cost = ar.cost(16384)
    assert (cost.algorithm, cost.protocol) == ("nccl_ring", "LL")
    assert cost.time_us == pytest.approx(6.6 + 14 * 0.6 + 16384 / (1000 * 30 * 0.5 * 8 / 14))
    # 32 KiB: NCCL still runs ring LL (its table's cheapest), though launched its tree LL would be faster
    table = {(o.algorithm, o.protocol): o for o in ar.nccl_options(32768)}
    assert min(table.values(), key=lambda o: o.time_us) is table[("nccl_ring", "LL")]
    assert ar.cost(32768).protocol == "LL" and ar.cost(32768).algorithm == "nccl_ring"
    big = 1 << 20
    assert ar.cost(big) == min(ar.nccl_options(big), key=lambda o: o.time_us)
    nvls = 2 << 20
    assert ar.cost(nvls).algorithm == "nvls" and ar.cost(nvls) == min(ar.nccl_options(nvls), key=lambda o: o.time_us)
