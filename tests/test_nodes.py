"""Topologies that span machines: NICs, rails, a leaf switch, GPUDirect RDMA on or off, as fabric links."""
from __future__ import annotations

import os

import pytest
import simpy
import yaml

from conftest import ROOT, SHORT, scenario_path, topology_path
from simulator.config import build
from simulator.config.base import validate
from simulator.config.errors import ConfigError
from simulator.config.loader import read_yaml
from simulator.config.topology import Topology
from simulator.timing.placement import place
from simulator.hardware.flows import FlowNetwork
from simulator.hardware.interconnect import Fabric

H100 = topology_path("two_node_h100.yaml")
PCIE = topology_path("two_node_pcie8_rtx_pro_6000.yaml")


def topology(path: str, change=None) -> Topology:
    data = read_yaml(path)
    if change:
        change(data)
    return validate(Topology, data, path)


def names(fabric: Fabric, hop) -> list[tuple[str, str]]:
    return [(fabric.names[a], fabric.names[b]) for a, b in hop.links]


@pytest.mark.parametrize("path", [H100, PCIE])
def test_two_machines_of_eight_gpus(path):
    topo = topology(path)
    assert topo.num_gpus == 16
    machines = [topo.machine_of[g] for g in topo.gpu_names]
    assert machines == ["node0"] * 8 + ["node1"] * 8


@pytest.mark.parametrize("path", [H100, PCIE])
def test_only_pairs_on_different_machines_cross_the_network(path):
    fabric = Fabric(topology(path))
    for a in range(16):
        for b in range(16):
            if a == b:
                continue
            hop = fabric.hop(a, b)
            kinds = {fabric.link_of[link].kind for link in hop.links}
            assert ("network" in kinds) == (a // 8 != b // 8) == hop.net == (hop.path_class == "network")
            assert not (hop.net and hop.p2p)


def test_rail_optimised_h100_pairs_gpu_i_through_rail_i_without_the_host():
    """GPU i of one machine reaches GPU i of the other through its own PCIe switch, NIC and rail switch only."""
    fabric = Fabric(topology(H100))
    for i in range(8):
        route = names(fabric, fabric.hop(i, 8 + i))
        assert route == [(f"n0_gpu{i}", f"n0_pcie{i}"), (f"n0_pcie{i}", f"n0_nic{i}"), (f"n0_nic{i}", f"rail{i}"),
                         (f"rail{i}", f"n1_nic{i}"), (f"n1_nic{i}", f"n1_pcie{i}"), (f"n1_pcie{i}", f"n1_gpu{i}")]
        assert fabric.latency_us(fabric.hop(i, 8 + i)) == 0.0  # NCCL's network step latency covers the crossing


def test_without_gpudirect_rdma_transfers_stage_through_each_host():
    def no_gdr(data):
        data["fabric"]["network"]["gpudirect_rdma"] = False

    fabric = Fabric(topology(H100, no_gdr))
    route = names(fabric, fabric.hop(0, 8))
    assert route[:2] == [("n0_gpu0", "n0_pcie0"), ("n0_pcie0", "n0_cpu0")]
    assert route[-2:] == [("n1_cpu0", "n1_pcie0"), ("n1_pcie0", "n1_gpu0")]
    assert sum(1 for link in route if "rail" in link[0] or "rail" in link[1]) == 2


def test_the_pcie_pair_stages_through_host_memory_and_shares_one_nic_per_socket():
    """GPUDirect RDMA is off (GPU and NIC on different root ports). Two transfers from socket 0 of one machine to the
    other share its 200G NIC: 12 + 12 GB/s of its 24, not 24 each."""
    fabric = Fabric(topology(PCIE))
    first, second = fabric.hop(0, 8), fabric.hop(1, 9)
    assert ("n0_cpu0", "n0_nic0") in names(fabric, first) and ("n0_cpu0", "n0_nic0") in names(fabric, second)
    env = simpy.Environment()
    network = FlowNetwork.from_fabric(env, fabric)
    network.transfer(first.links, 1e6)
    network.transfer(second.links, 1e6)
    assert network.rates_GBps() == [12.0, 12.0]
    other_socket = fabric.hop(4, 12)  # socket 1's NIC is free
    network.transfer(other_socket.links, 1e6)
    assert network.rates_GBps() == [12.0, 12.0, 24.0]


# --- mistakes in a topology that spans machines --------------------------------------------------------------------

def _refused(path, change, *fragments):
    with pytest.raises(ConfigError) as caught:
        topology(path, change)
    line = str(caught.value)
    for fragment in fragments:
        assert fragment in line, (fragment, line)


def test_network_links_need_the_network_section():
    _refused(PCIE, lambda d: d["fabric"].pop("network"), "fabric", "network links need fabric.network")


def test_only_network_links_join_machines():
    def pcie_across(d):
        d["fabric"]["links"].append({"between": ["n0_gpu0", "n1_gpu0"], "kind": "pcie", "bandwidth_GBps": 48,
                                     "latency_us": 0.0})
    _refused(PCIE, pcie_across, "pcie link n0_gpu0-n1_gpu0 joins two machines")


def test_a_network_link_starts_at_a_nic():
    def gpu_to_leaf(d):
        d["fabric"]["links"].append({"between": ["n0_gpu0", "leaf"], "kind": "network", "bandwidth_GBps": 24,
                                     "latency_us": 0.0})
    _refused(PCIE, gpu_to_leaf, "network link n0_gpu0-leaf must join nics and switches")


def test_every_node_but_switches_names_its_machine():
    def drop(d):
        d["fabric"]["nodes"][0].pop("machine")
    _refused(PCIE, drop, "node 'n0_cpu0' names no machine")

    def switch_inside(d):
        d["fabric"]["nodes"][-1]["machine"] = "node0"
    _refused(PCIE, switch_inside, "node 'leaf'", "a network switch sits between machines")


# --- scenarios on two machines ---------------------------------------------------------------------------------------

def _two_node_scenario(parallelism: dict):
    with open(scenario_path("nvlink8_h100_llama8b_eagle3.yaml")) as handle:
        raw = yaml.safe_load(handle)
    raw["topology"] = H100
    raw["parallelism"] = parallelism
    return build(raw, "two_node.yaml", os.path.join(ROOT, "scenarios"))


def test_one_group_inside_one_machine_runs():
    import simulator

    result = simulator.run(_two_node_scenario({"tp": 8}), **SHORT)
    assert result.throughput_tok_s > 0


def test_a_group_spanning_machines_runs_on_nccls_model_between_machines():
    """TP16 over two machines: its all-reduce is NCCL's between machines (no longer refused)."""
    from simulator.timing.machine import Machine
    from simulator.hardware.multinode import MultiNodeAllReduce

    machine = Machine(_two_node_scenario({"tp": 16}))
    assert isinstance(machine.allreduce, MultiNodeAllReduce) and machine.allreduce.ranks == 16


def test_placement_names_the_machines():
    placement = place(_two_node_scenario({"tp": 8, "pp": 2}))
    assert placement.machines() == ["node0", "node1"]
    assert {(a.machine, b.machine) for a, b in placement.pipeline_pairs()} == {("node0", "node1")}


def test_an_allreduce_across_machines_is_refused_not_costed_as_pcie():
    from simulator.hardware.collectives import AllReduce, NotPermitted

    fabric = Fabric(topology(H100))
    with pytest.raises(NotPermitted, match="span machines"):
        AllReduce(fabric, 16)
    assert AllReduce(fabric, 8).cost(14336).time_us > 0
