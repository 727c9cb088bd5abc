"""Generated clusters (config/cluster.py): N copies of one machine and a network, checked against the two hand-written
two-machine topologies, and their mistakes reported as one line."""
from __future__ import annotations

import os

import pytest

from simulator.config.errors import ConfigError
from simulator.config.loader import build, read_yaml
from simulator.config.topology import Topology
from simulator.hardware.interconnect import Fabric

BASE = read_yaml("scenarios/nvlink8_h100_llama8b_poisson.yaml")


def generated(**topology) -> Topology:
    return build(dict(BASE, topology=topology), "scenarios/x.yaml", "scenarios").topology


def test_two_hgx_machines_on_rails_are_the_shipped_two_node_h100():
    made = generated(node="nvlink8_h100", nodes=2, network={"kind": "rail", "nic_GBps": 48})
    assert made.fabric == Topology.model_validate(read_yaml("topologies/two_node_h100.yaml")).fabric


def test_two_pcie_machines_on_one_leaf_are_the_shipped_two_node_pcie8():
    made = generated(node="pcie8_rtx_pro_6000", nodes=2, network={"kind": "fat_tree", "nic_GBps": 24,
                                                                    "nics": "per_socket"})
    shipped = read_yaml("topologies/two_node_pcie8_rtx_pro_6000.yaml")["fabric"]
    for node in shipped["nodes"]:
        node["name"] = node["name"].replace("leaf", "leaf0")
    for link in shipped["links"]:
        link["between"] = [end.replace("leaf", "leaf0") for end in link["between"]]
    assert made.fabric.model_dump() == Topology.model_validate(
        {**read_yaml("topologies/two_node_pcie8_rtx_pro_6000.yaml"), "fabric": shipped}).fabric.model_dump()


def test_a_fat_tree_crosses_its_spine_between_leaves_and_not_within_one():
    made = generated(node="nvlink8_h100", nodes=8, network={"kind": "fat_tree", "nic_GBps": 48, "nics_per_leaf": 16})
    assert made.num_gpus == 64 and set(made.machine_of.values()) == {f"node{m}" for m in range(8)}
    fabric = Fabric(made, ["n0_gpu0", "n1_gpu0", "n2_gpu0"])
    names = lambda hop: {fabric.names[n] for link in hop.links for n in link}  # noqa: E731
    assert "spine" not in names(fabric.hop(0, 1)) and "leaf0" in names(fabric.hop(0, 1))  # nodes 0, 1: leaf 0
    assert {"leaf0", "spine", "leaf1"} <= names(fabric.hop(0, 2)) and fabric.hop(0, 2).net


@pytest.mark.parametrize("topology, where", [
    ({"node": "nvlink8_h100", "nodes": 1, "network": {"kind": "rail", "nic_GBps": 48}}, "topology.nodes"),
    ({"node": "nvlink8_h100", "nodes": 4, "network": {"kind": "torus", "nic_GBps": 48}}, "topology.network.kind"),
    ({"node": "no_such_machine", "nodes": 4, "network": {"kind": "rail", "nic_GBps": 48}}, "topology.node"),
    ({"node": "two_node_h100", "nodes": 4, "network": {"kind": "rail", "nic_GBps": 48}}, "topology.node"),
])
def test_mistakes_are_one_line_naming_the_key(topology, where):
    with pytest.raises(ConfigError) as caught:
        build(dict(BASE, topology=topology), "scenarios/x.yaml", "scenarios")
    assert caught.value.path == where and "\n" not in str(caught.value)


def test_deepep_between_four_machines_is_the_measured_four_node_latency():
    """EP32 over four generated H200 machines: DeepEP's fixed latency is aiconfigurator-core's node_num 4 row at its
    smallest token count (read from the data set here, where it is installed)."""
    pd = pytest.importorskip("pandas")
    data = pytest.importorskip("aiconfigurator_core")
    from simulator.hardware.expert_parallel import BACKENDS, ep_latency_us

    folder = os.path.join(os.path.dirname(data.__file__), "systems/data/h200_sxm/comm/sglang/0.5.6.post2")
    table = pd.read_parquet(os.path.join(folder, "wideep_deepep_ll_perf.parquet"))
    table = table[(table.node_num == 4) & (table.hidden_size == 7168) & (table.num_topk == 8)]
    row = table[table.num_token == table.num_token.min()].iloc[0]
    made = generated(node="nvlink8_h200", nodes=4, network={"kind": "rail", "nic_GBps": 48})
    fabric = Fabric(made)
    ranks = list(range(32))
    backend = BACKENDS["deepep_low_latency"]
    assert ep_latency_us(fabric, ranks, backend, False) == pytest.approx(row.dispatch_avg_t_us, abs=0.05)
    assert ep_latency_us(fabric, ranks, backend, True) == pytest.approx(row.combine_avg_t_us, abs=0.05)
    assert ep_latency_us(fabric, ranks[:16], backend, True) == 25.9  # two machines: node_num 2's
