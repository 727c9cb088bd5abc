"""A machine: its GPUs, the host that launches their kernels, and the fabric graph that joins them."""
from __future__ import annotations

from typing import Literal

from typing import Annotated

from pydantic import Field, NonNegativeFloat, model_validator

from .base import Strict

Dtype = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4", "fp4"]
# Physical ranges: anything outside is a typo, and would make simulated times overflow or vanish
Rate = Annotated[float, Field(ge=1e-3, le=1e6)]  # GB/s or TFLOPS
Micros = Annotated[float, Field(ge=0.0, le=1e6)]  # up to a second
PositiveMicros = Annotated[float, Field(gt=0.0, le=1e6)]


class GPUSpec(Strict):
    name: str = Field(description="Marketing name, for reports")
    memory_GB: float = Field(gt=0, le=1e5, description="Device memory per GPU")
    memory_bandwidth_GBps: Rate = Field(description="Peak device-memory bandwidth")
    memory_efficiency: float = Field(ge=0.01, le=1, description="Achievable fraction of peak bandwidth in decode kernels")
    peak_TFLOPS: dict[Dtype, Rate] = Field(min_length=1, description="Dense tensor throughput per compute dtype")
    compute_efficiency: float = Field(ge=0.01, le=1, description="Achievable fraction of peak tensor throughput")
    kernel_floor_us: Micros = Field(description="Shortest time any kernel occupies the GPU (launch latency on device, ramp-up, tail)")


class HostSpec(Strict):
    eager_launch_us: PositiveMicros = Field(description="Mean host time per eagerly launched kernel (framework dispatch + cudaLaunchKernel)")
    launch_jitter_cv: NonNegativeFloat = Field(le=5.0, description="Coefficient of variation of one launch's host time")
    rank_skew_cv: NonNegativeFloat = Field(le=2.0, description="Per-pass spread of host speed between ranks (lognormal sigma)")
    graph_launch_us: PositiveMicros = Field(description="Host time of one cudaGraphLaunch for a whole pass")
    graph_node_us: Micros = Field(description="Device-side gap per kernel node inside a CUDA graph")
    step_overhead_us: Micros = Field(description="Scheduler host time per step (batching, sampling bookkeeping)")
    sync_us: Micros = Field(description="Device-to-host synchronisation latency at the end of a pass")


class FabricNode(Strict):
    name: str
    kind: Literal["gpu", "cpu", "pcie_switch", "nvswitch"] = Field(description="gpu | cpu (socket with its root complex) | pcie_switch | nvswitch")


class FabricLink(Strict):
    between: tuple[str, str] = Field(description="The two node names this link joins")
    kind: Literal["pcie", "nvlink", "socket"] = Field(description="pcie | nvlink | socket (UPI/xGMI between CPU sockets)")
    bandwidth_GBps: Rate = Field(description="Bandwidth per direction")
    latency_us: Micros = Field(description="Latency this link adds to a collective step beyond NCCL's per-hop figure (which covers one GPU link)")


class Fabric(Strict):
    nodes: list[FabricNode] = Field(min_length=1)
    links: list[FabricLink] = Field(default_factory=list)
    p2p_level: Literal["nvlink", "pcie_switch", "cpu", "system"] = Field(
        description="Farthest path over which GPUs use peer-to-peer (as NCCL_P2P_LEVEL: NVL, PXB, PHB, SYS); farther pairs go through host memory")
    shm_hop_latency_us: Micros = Field(
        default=0.0, description="Extra latency per collective step that goes through host memory instead of peer-to-peer")
    nvls: bool = Field(default=False, description="NVSwitch multicast (NVLink SHARP) available for all-reduce")

    @model_validator(mode="after")
    def _check_graph(self):
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError("node names must be unique")
        known = set(names)
        for link in self.links:
            for end in link.between:
                if end not in known:
                    raise ValueError(f"link end {end!r} is not a node name")
            if link.between[0] == link.between[1]:
                raise ValueError(f"link joins {link.between[0]!r} to itself")
        if not any(n.kind == "gpu" for n in self.nodes):
            raise ValueError("the fabric has no node of kind gpu (zero GPUs)")
        return self


class Topology(Strict):
    name: str
    description: str = ""
    gpu: GPUSpec
    host: HostSpec
    fabric: Fabric

    @property
    def gpu_names(self) -> list[str]:
        return [n.name for n in self.fabric.nodes if n.kind == "gpu"]

    @property
    def num_gpus(self) -> int:
        return len(self.gpu_names)
