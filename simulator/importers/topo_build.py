"""The fabric an `nvidia-smi topo -m` matrix implies: sockets, PCIe switches, root ports, NVLink, NICs.

Devices are grouped per socket by their NUMA affinity (or, without it, by which pairs are not SYS apart). Inside a
socket, devices that are pairwise PIX share a PCIe switch, switches whose devices are PXB apart hang below a common
upper switch, and what remains (PHB / NODE apart) sits on its own root port of the socket's CPU; PHB and NODE both
route through the CPU here (the host bridges are not nodes). GPUs that are NV# apart are joined by # NVLinks: where
# x (GPUs - 1) exceeds a GPU's NVLink count, the links go to an NVSwitch. Every bandwidth and latency the matrix
does not give is named in the output as assumed or as taken over from a shipped machine.
"""
from __future__ import annotations

import re

from ..config.errors import ConfigError
from .gpus import NCCL_NVLINK_GBPS, NVLINKS_PER_GPU, GPUEntry
from .nvidia_smi import TopoMatrix

SOCKET_GBPS, SOCKET_LATENCY_US = 22.0, 0.2  # NCCL's SRP_QPI_BW; a UPI/xGMI crossing (*estimate*), as the reference


def _groups(items: list[str], joined) -> list[list[str]]:
    """Connected components of `joined` over items, in first-seen order."""
    out: list[list[str]] = []
    for item in items:
        hits = [g for g in out if any(joined(item, other) for other in g)]
        merged = [item] + [x for g in hits for x in g]
        out = [g for g in out if g not in hits] + [sorted(merged, key=items.index)]
    return sorted(out, key=lambda g: items.index(g[0]))


def _nv(cell: str) -> int:
    match = re.fullmatch(r"NV(\d+)", cell)
    return int(match.group(1)) if match else 0


def sockets(m: TopoMatrix, file: str) -> list[list[str]]:
    """GPUs and NICs per socket, sockets in NUMA order."""
    gpus = m.gpus
    if all(m.numa.get(g) for g in gpus):
        order = sorted({m.numa[g] for g in gpus}, key=lambda v: (len(v), v))
        groups = [[g for g in gpus if m.numa[g] == node] for node in order]
    else:  # no NUMA column: pairs that are not SYS apart share a socket
        groups = _groups(gpus, lambda a, b: m.cell(a, b) != "SYS")
    for nic in m.nics:
        near = [i for i, g in enumerate(groups) if any(m.cell(nic, d) not in ("SYS", "X") for d in g if d in gpus)]
        if near:
            groups[near[0]].append(nic)
    return groups


def build_fabric(m: TopoMatrix, entry: GPUEntry, file: str) -> tuple[dict, list[str]]:
    """(the fabric mapping, the assumptions made, one line each)."""
    sm = int(entry.gpu.get("sm_version", 90))
    pcie = entry.pcie_GBps
    assumed = [f"PCIe links {pcie:g} GB/s per direction, latency 0 beyond NCCL's per-hop figure: NCCL's figure for "
               f"the GPU's PCIe generation (a x16 uplink assumed for every switch)"]
    groups = sockets(m, file)
    nodes = [{"name": f"cpu{i}", "kind": "cpu"} for i in range(len(groups))]
    links: list[dict] = []
    name = {g: f"gpu{g[3:]}" for g in m.gpus}
    name.update({n: f"nic{n[3:] if n.startswith('NIC') else n.split('_')[-1]}" for n in m.nics})
    switch_count = 0

    def link(a: str, b: str, kind: str, bw: float, lat: float = 0.0) -> None:
        links.append({"between": [a, b], "kind": kind, "bandwidth_GBps": bw, "latency_us": lat})

    for s, members in enumerate(groups):
        pcie_near = lambda a, b: m.cell(a, b) == "PIX"  # noqa: E731
        for group in _groups(members, pcie_near):
            bad = [(a, b) for a in group for b in group if a != b and m.cell(a, b) not in ("PIX",) and not _nv(m.cell(a, b))]
            if bad:
                a, b = bad[0]
                raise ConfigError(file, f"{a}-{b}", f"{m.cell(a, b)}, but both share a PCIe switch with the same "
                                  "devices (PIX)", "a matrix whose PIX pairs are transitive")
        lower = _groups(members, pcie_near)
        upper = _groups(list(range(len(lower))), lambda i, j: any(
            m.cell(a, b) in ("PIX", "PXB") for a in lower[i] for b in lower[j]))
        for cluster in upper:
            top = f"cpu{s}"
            if len(cluster) > 1:
                top = f"pcie_switch{switch_count}"
                switch_count += 1
                nodes.append({"name": top, "kind": "pcie_switch"})
                link(top, f"cpu{s}", "pcie", pcie)
            for i in cluster:
                group = lower[i]
                parent = top
                if len(group) > 1:
                    parent = f"pcie_switch{switch_count}"
                    switch_count += 1
                    nodes.append({"name": parent, "kind": "pcie_switch"})
                    link(parent, top, "pcie", pcie)
                for device in group:
                    link(name[device], parent, "pcie", pcie)
    placed = {d for g in groups for d in g}
    unplaced = [d for d in m.devices if d not in placed]
    if [d for d in unplaced if d.startswith("GPU")]:
        raise ConfigError(file, unplaced[0], "no socket found for this GPU", "a NUMA Affinity or a non-SYS peer")
    nodes += [{"name": name[g], "kind": "gpu"} for g in m.gpus]
    nodes += [{"name": name[n], "kind": "nic"} for n in m.nics if n in placed]
    if unplaced:
        assumed.append(f"left out, SYS to every GPU: {', '.join(unplaced)}")
    for i in range(len(groups)):
        for j in range(i + 1, len(groups)):
            link(f"cpu{i}", f"cpu{j}", "socket", SOCKET_GBPS, SOCKET_LATENCY_US)
    if len(groups) > 1:
        assumed.append(f"socket links {SOCKET_GBPS:g} GB/s (NCCL's SRP_QPI_BW), latency {SOCKET_LATENCY_US} us "
                       "(a UPI/xGMI crossing, *estimate*), as the reference machine")
    nvswitch = _nvlinks(m, name, sm, entry, link, nodes, assumed)
    fabric = {"p2p_level": "pcie_switch", "nvls": bool(nvswitch and sm >= 90)}
    if any(m.cell(a, b) in ("PHB", "NODE", "SYS") for a in m.gpus for b in m.gpus):
        fabric["shm_hop_latency_us"] = 1.80
        assumed.append("shm_hop_latency_us 1.80: the reference machine's calibration, taken over for the GPU pairs "
                       "NCCL stages through host memory (across root ports)")
    assumed.append("p2p_level pcie_switch: NCCL's default (NCCL_P2P_LEVEL PXB)")
    return {**fabric, "nodes": nodes, "links": links}, assumed


def _nvlinks(m: TopoMatrix, name: dict, sm: int, entry: GPUEntry, link, nodes: list, assumed: list) -> bool:
    """Add the NVLink links; True where they go to an NVSwitch."""
    gpus = m.gpus
    counts = {(a, b): _nv(m.cell(a, b)) for a in gpus for b in gpus if a < b and _nv(m.cell(a, b))}
    if not counts:
        return False
    per_link = NCCL_NVLINK_GBPS.get(100 if sm >= 100 else 90 if sm >= 90 else 80)
    latency = 0.0
    machine = entry.machine or {}
    shipped = [l for l in machine.get("fabric", {}).get("links", []) if l["kind"] == "nvlink"]
    if shipped:
        latency = float(shipped[0]["latency_us"])
    bonds = {g: sum(c for (a, b), c in counts.items() if g in (a, b)) for g in gpus}
    limit = NVLINKS_PER_GPU.get(100 if sm >= 100 else 90 if sm >= 90 else 80, 18)
    source = f"{entry.source}'s NVLink latency" if shipped else "latency 0 beyond NCCL's per-hop figure (assumed)"
    if max(bonds.values()) > limit:  # more bonded links than a GPU has: they end at an NVSwitch
        nodes.insert(len([n for n in nodes if n["kind"] == "cpu"]), {"name": "nvswitch", "kind": "nvswitch"})
        for g in gpus:
            width = max(c for (a, b), c in counts.items() if g in (a, b))
            link(name[g], "nvswitch", "nvlink", round(width * per_link, 3), latency)
        assumed.append(f"NV# x (GPUs - 1) exceeds {limit} NVLinks a GPU: the links end at one non-blocking NVSwitch; "
                       f"{per_link} GB/s per link (NCCL's figure for sm_{sm}), {source}")
        return True
    for (a, b), count in sorted(counts.items(), key=lambda kv: (gpus.index(kv[0][0]), gpus.index(kv[0][1]))):
        link(name[a], name[b], "nvlink", round(count * per_link, 3), latency)
    assumed.append(f"direct NVLink bonds, {per_link} GB/s per link (NCCL's figure for sm_{sm}), {source}")
    return False
