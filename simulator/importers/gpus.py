"""Which GPU an nvidia-smi name is, and the figures an imported machine takes over from a shipped one.

A GPU that a shipped topology carries stands for itself with that topology's GPU, host and link figures (named in the
output as taken over from it); a GPU no shipped machine carries has a file under topologies/gpus/ (its GPU with
sources, its PCIe generation), and the host figures of the reference machine.
"""
from __future__ import annotations

import os

from ..compiled import dataclass
from ..config.catalog import data_dir
from ..config.errors import ConfigError

REFERENCE = "pcie8_rtx_pro_6000"  # the calibrated host figures an imported machine without its own take over
# nvidia-smi's name -> the shipped topology carrying that GPU
SHIPPED = {
    "NVIDIA H100 80GB HBM3": "nvlink8_h100",
    "NVIDIA H200": "nvlink8_h200",
    "NVIDIA B200": "nvlink8_b200",
    "NVIDIA A100-SXM4-80GB": "nvlink8_a100",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": "pcie8_rtx_pro_6000",
}
PCIE_GENERATION = {80: 4, 89: 4, 90: 5, 100: 5, 120: 5}
# NCCL's bandwidth assumptions (NVIDIA/nccl v2.29.7-1 src/graph/topo.h; docs/sources.md): PCIe per generation, GB/s
NCCL_PCIE_GBPS = {4: 24.0, 5: 48.0}
# NVLink per link and direction as NCCL's topology code assumes it (SM80/SM90/SM100_NVLINK_BW), and links per GPU
NCCL_NVLINK_GBPS = {80: 20.0, 90: 20.6, 100: 40.1}
NVLINKS_PER_GPU = {80: 12, 90: 18, 100: 18}


@dataclass(frozen=True)
class GPUEntry:
    """A GPU as an import uses it: its spec mapping, the host mapping, where each came from, its PCIe bandwidth, and
    the shipped machine (if any) whose link figures are taken over."""

    gpu: dict
    host: dict
    source: str
    host_source: str
    pcie_GBps: float
    machine: dict | None


def _read(path: str) -> dict:
    from ..config.yaml_files import read_yaml

    return read_yaml(path)


def _extra_gpus() -> dict[str, str]:
    folder = os.path.join(data_dir("topology"), "gpus")
    out = {}
    for entry in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if entry.endswith(".yaml"):
            path = os.path.join(folder, entry)
            for name in _read(path).get("nvidia_smi_names", []):
                out[name] = path
    return out


def known_names() -> list[str]:
    return sorted({*SHIPPED, *_extra_gpus()})


def lookup(name: str, file: str) -> GPUEntry:
    """The GPU nvidia-smi calls `name`; a one-line error listing the known names otherwise."""
    topologies = data_dir("topology")
    reference = _read(os.path.join(topologies, f"{REFERENCE}.yaml"))
    if name in SHIPPED:
        path = os.path.join(topologies, f"{SHIPPED[name]}.yaml")
        machine = _read(path)
        gpu = machine["gpu"]
        sm = gpu.get("sm_version", 90)
        return GPUEntry(gpu, machine["host"], f"topologies/{SHIPPED[name]}.yaml", f"topologies/{SHIPPED[name]}.yaml",
                        NCCL_PCIE_GBPS[PCIE_GENERATION.get(sm, 5)], machine)
    extra = _extra_gpus()
    if name in extra:
        data = _read(extra[name])
        return GPUEntry(data["gpu"], reference["host"], f"topologies/gpus/{os.path.basename(extra[name])}",
                        f"topologies/{REFERENCE}.yaml (the reference calibration)",
                        NCCL_PCIE_GBPS[int(data.get("pcie_generation", 5))], None)
    raise ConfigError(file, "name", f"no GPU entry for {name!r}",
                      ", ".join(known_names()) + " (--gpu NAME picks one; a new GPU is a file in topologies/gpus/)")
