"""A cluster generated from one machine: `topology: {node: nvlink8_h100, nodes: 16, network: {kind: rail, nic_GBps:
48}}` copies a single-machine topology N times, gives each machine its NICs and joins them by a rail-optimised or a
fat-tree network, so nobody writes out 128 machines' nodes and links by hand.

What is modelled (assumptions): NICs per GPU sit on a PCIe switch shared with their GPU (as on HGX boards: the switch
inserted on the GPU's link to its socket where the machine has none), so GPUDirect RDMA applies (NCCL's default
NCCL_NET_GDR_LEVEL=PXB); NICs per socket hang off the socket's root complex, so transfers are staged through host
memory. A NIC's PCIe link is as fast as its GPU's (or, per socket, the fastest GPU link on that socket). A rail is one
non-blocking switch joining NIC r of every machine (no spine: traffic between rails crosses NVLink or PCIe inside a
machine first). A fat tree puts each machine's NICs on consecutive leaf switches and joins the leaves through one
non-blocking spine, each leaf's uplink as fast as its NICs together. Generating two nvlink8_h100 machines on rails at
48 GB/s gives topologies/two_node_h100.yaml's fabric; two pcie8_rtx_pro_6000 machines with a NIC per socket on one
leaf at 24 GB/s give topologies/two_node_pcie8_rtx_pro_6000.yaml's (tests/test_cluster.py).
"""

from typing import Any, Literal, Optional

from pydantic import Field

from .base import Strict
from .errors import ConfigError
from .topology import Micros, Rate


class ClusterNetwork(Strict):
    """The network between the generated machines."""

    kind: Literal["rail", "fat_tree"] = Field(description=(
        "rail: NIC r of every machine on rail switch r (rail-optimised); fat_tree: each machine's NICs on leaf "
        "switches, the leaves joined through a non-blocking spine"))
    nic_GBps: Rate = Field(description="Bandwidth of one NIC's network port per direction (400G NDR: 50 on the wire, "
                                       "about 48 sustained)")
    nics: Literal["per_gpu", "per_socket"] = Field("per_gpu", description=(
        "per_gpu: one NIC per GPU on a PCIe switch it shares with its GPU (GPUDirect RDMA); per_socket: one NIC per "
        "CPU socket on its root complex (transfers staged through host memory)"))
    transport: Literal["infiniband", "roce"] = Field("infiniband", description="infiniband | roce")
    nics_per_leaf: int = Field(32, ge=1, le=4096, description="fat_tree: NIC ports on one leaf switch")
    latency_us: Micros = Field(0.0, description=(
        "Latency a network link adds beyond NCCL's per-step network figure (which covers a NIC-switch-NIC crossing)"))


class Cluster(Strict):
    """A topology generated as `nodes` copies of one machine joined by a network (instead of gpu/host/fabric)."""

    node: str = Field(description="The machine: a single-machine topology's name (specsim list topologies) or path")
    nodes: int = Field(ge=2, le=1024, description="How many machines")
    network: ClusterNetwork = Field(description="The network between the machines")
    name: Optional[str] = Field(None, description="The cluster's name (default: NODExN)")


def generate(cluster: Cluster, machine: dict, source: str) -> dict:
    """The topology mapping (as a topology file has it) of `cluster` built from one machine's topology mapping."""
    fabric = machine.get("fabric") or {}
    nodes, links = fabric.get("nodes") or [], fabric.get("links") or []
    if any(n.get("machine") is not None or n.get("kind") in ("nic", "switch") for n in nodes):
        raise ConfigError(source, "topology.node", f"{cluster.node} is not a single machine (it has NICs, switches "
                          "or machines)", "a single-machine topology such as nvlink8_h100")
    net = cluster.network
    out_nodes: list[dict] = []
    out_links: list[dict] = []
    nics: list[list[str]] = []  # per machine, its NICs' names
    for m in range(cluster.nodes):
        inner, inner_links, machine_nics = _one_machine(nodes, links, net, f"n{m}_", f"node{m}", source)
        out_nodes += inner
        out_links += inner_links
        nics.append(machine_nics)
    network_link = {"kind": "network", "bandwidth_GBps": net.nic_GBps, "latency_us": net.latency_us}
    if net.kind == "rail":
        for rail in range(len(nics[0])):
            out_nodes.append({"name": f"rail{rail}", "kind": "switch"})
            out_links += [{"between": [machine_nics[rail], f"rail{rail}"], **network_link} for machine_nics in nics]
    else:
        ports = [nic for machine_nics in nics for nic in machine_nics]
        leaves = [ports[i:i + net.nics_per_leaf] for i in range(0, len(ports), net.nics_per_leaf)]
        for k, leaf in enumerate(leaves):
            out_nodes.append({"name": f"leaf{k}", "kind": "switch"})
            out_links += [{"between": [nic, f"leaf{k}"], **network_link} for nic in leaf]
        if len(leaves) > 1:
            out_nodes.append({"name": "spine", "kind": "switch"})
            out_links += [{"between": [f"leaf{k}", "spine"], **network_link,
                           "bandwidth_GBps": net.nic_GBps * len(leaf)} for k, leaf in enumerate(leaves)]
    out_fabric = {**fabric, "nodes": out_nodes, "links": out_links,
                  "network": {"transport": net.transport, "gpudirect_rdma": net.nics == "per_gpu"}}
    keep = {k: v for k, v in machine.items() if k not in ("name", "description", "fabric")}
    name = cluster.name or f"{machine.get('name', cluster.node)}x{cluster.nodes}"
    description = (f"{cluster.nodes} x {machine.get('name', cluster.node)}, {net.nics.replace('_', ' ')} NICs at "
                   f"{net.nic_GBps:g} GB/s, {net.kind.replace('_', ' ')} network (generated)")
    return {"name": name, "description": description, **keep, "fabric": out_fabric}


def _one_machine(nodes: list[dict], links: list[dict], net: ClusterNetwork, prefix: str, machine: str, source: str
                 ) -> tuple[list[dict], list[dict], list[str]]:
    """One machine's nodes and links, renamed, with its NICs (and the PCIe switches they share with GPUs)."""
    kind = {n["name"]: n.get("kind") for n in nodes}
    gpus = [n["name"] for n in nodes if n.get("kind") == "gpu"]
    pcie_of = {}  # GPU -> (index of its PCIe link, the link's other end)
    for i, link in enumerate(links):
        ends = list(link.get("between") or [])
        if link.get("kind") == "pcie" and len(ends) == 2:
            for end, other in (ends, ends[::-1]):
                if kind.get(end) == "gpu" and kind.get(other) in ("cpu", "pcie_switch") and end not in pcie_of:
                    pcie_of[end] = (i, other)
    missing = [g for g in gpus if g not in pcie_of]
    if missing:
        raise ConfigError(source, "topology.node", f"GPU {missing[0]!r} has no PCIe link to a CPU or PCIe switch, "
                          "so no NIC can be placed by it", "a machine whose GPUs have a PCIe link to the host")
    named = lambda name: prefix + name  # noqa: E731
    out_nodes = [{**n, "name": named(n["name"]), "machine": machine} for n in nodes]
    out_links = [{**link, "between": [named(e) for e in link["between"]]} for link in links]
    added_nodes, added_links, nics = [], [], []
    if net.nics == "per_gpu":
        uplinks = []
        for j, gpu in enumerate(gpus):
            i, parent = pcie_of[gpu]
            link = {k: v for k, v in links[i].items() if k != "between"}
            switch = named(parent)
            if kind[parent] == "cpu":  # a PCIe switch between the GPU and its socket, shared with the NIC
                switch = named(f"pcie{j}")
                added_nodes.append({"name": switch, "kind": "pcie_switch", "machine": machine})
                out_links[i] = {**link, "between": [named(gpu), switch]}
                uplinks.append({**link, "between": [switch, named(parent)]})
            nics.append(named(f"nic{j}"))
            added_links.append({**link, "between": [nics[-1], switch]})
        added_links += uplinks
    else:
        sockets = [n["name"] for n in nodes if n.get("kind") == "cpu"]
        if not sockets:
            raise ConfigError(source, "topology.node", "the machine has no CPU socket to place a NIC on",
                              "nics: per_gpu, or a machine with cpu nodes")
        for j, cpu in enumerate(sockets):
            on = [links[i] for g, (i, parent) in pcie_of.items() if parent == cpu] or [links[pcie_of[gpus[0]][0]]]
            fastest = max(on, key=lambda link: link.get("bandwidth_GBps", 0))
            nics.append(named(f"nic{j}"))
            speed = {k: v for k, v in fastest.items() if k != "between"}
            added_links.append({**speed, "between": [nics[-1], named(cpu)]})
    added_nodes += [{"name": nic, "kind": "nic", "machine": machine} for nic in nics]
    last = max(i for i, _ in pcie_of.values())  # the NICs' links follow the machine's last GPU PCIe link
    return out_nodes + added_nodes, out_links[:last + 1] + added_links + out_links[last + 1:], nics
