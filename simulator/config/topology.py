"""A machine: its GPUs, the host that launches their kernels, and the fabric graph that joins them."""

from typing import Annotated, Literal, Optional

from pydantic import Field, NonNegativeFloat, model_validator

from . import rules
from .base import Strict
from .gpus import board_gpu, gpu_of, what_if_gpu  # noqa: F401  (re-exported: read from here)
from .names import MEASURED_GPU_FIELDS, ROOFLINE_SETS  # noqa: F401  (MEASURED_GPU_FIELDS re-exported)
from .surface import TopologySurface

Dtype = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4", "fp4"]
# Physical ranges: anything outside is a typo, and would make simulated times overflow or vanish
Rate = Annotated[float, Field(ge=1e-3, le=1e6)]  # GB/s or TFLOPS
Micros = Annotated[float, Field(ge=0.0, le=1e6)]  # up to a second
PositiveMicros = Annotated[float, Field(gt=0.0, le=1e6)]


RooflineSet = Literal[ROOFLINE_SETS]  # type: ignore[valid-type]


class KernelEfficiency(Strict):
    """The shape-aware roofline's fitted parameters for one kind of kernel (simulator/kernels/roofline.py)."""

    memory_efficiency: float = Field(ge=0.01, le=1, description="Achievable fraction of peak memory bandwidth")
    compute_efficiency: float = Field(ge=0.01, le=1, description="Achievable fraction of peak tensor throughput")
    overhead_us: Micros = Field(description="Fixed time per kernel (launch on device, ramp-up, tail, small stages)")
    wave_us: Micros = Field(0.0, description="Shortest time of one wave of work tiles (one per SM)")


class GPUSpec(Strict):
    """One GPU model: memory, bandwidth, peak throughput and the efficiencies reached."""

    name: str = Field(description="Marketing name, for reports")
    memory_GB: float = Field(gt=0, le=1e5, description="Device memory per GPU")
    memory_bandwidth_GBps: Rate = Field(description="Peak device-memory bandwidth")
    memory_efficiency: float = Field(ge=0.01, le=1, description="Achievable fraction of peak bandwidth in decode kernels")
    read_bandwidth_GBps: Optional[Rate] = Field(None, description=(
        "Highest device-memory bandwidth a streaming read reaches on this board (measured, below the data sheet's "
        "peak); a scenario that states another board's figure (a power-limited one) runs the data-sheet bandwidth "
        "scaled by the ratio of the two"))
    peak_TFLOPS: dict[Dtype, Rate] = Field(min_length=1, description="Dense tensor throughput per compute dtype")
    compute_efficiency: float = Field(ge=0.01, le=1, description="Achievable fraction of peak tensor throughput")
    kernel_floor_us: Micros = Field(description="Shortest time any kernel occupies the GPU (launch latency on device, ramp-up, tail)")
    num_sms: Optional[int] = Field(None, ge=1, le=100_000, description=(
        "Streaming multiprocessors: the shape-aware roofline rounds work tiles up to whole waves over them"))
    roofline: Optional[dict[RooflineSet, KernelEfficiency]] = Field(None, description=(
        "Fitted per-kernel-kind efficiencies of the shape-aware roofline (python -m simulator kernels); unset: "
        "memory_efficiency / compute_efficiency / kernel_floor_us for every kernel, without shapes"))
    kernel_database: Optional[str] = Field(None, description=(
        "aiconfigurator-core system whose silicon-measured kernels stand for this GPU (h100_sxm, h200_sxm, b200_sxm, "
        "rtx_pro_6000_server, ...); unset: the roofline times every kernel"))
    sm_version: int = Field(90, ge=60, le=200, description="CUDA compute capability x 10 (80 A100, 90 H100/H200, 100 B200, "
                            "120 RTX PRO 6000): selects NCCL's per-architecture tables and channel-search speeds")


class HostSpec(Strict):
    """The host CPU side of each rank: kernel launches, CUDA graphs, scheduler work."""

    eager_launch_us: PositiveMicros = Field(description="Mean host time per eagerly launched kernel (framework dispatch + cudaLaunchKernel)")
    launch_jitter_cv: NonNegativeFloat = Field(le=5.0, description="Coefficient of variation of one launch's host time")
    rank_skew_cv: NonNegativeFloat = Field(le=2.0, description="Per-pass spread of host speed between ranks (lognormal sigma)")
    graph_launch_us: PositiveMicros = Field(description="Host time of one cudaGraphLaunch for a whole pass")
    graph_node_us: Micros = Field(description=(
        "Device-side gap between consecutive kernels on a stream: a CUDA graph's nodes, and eager kernels queued ahead "
        "of the GPU alike (a measured kernel time already includes it)"))
    step_overhead_us: Micros = Field(description="Scheduler host time per step (batching, sampling bookkeeping)")
    sync_us: Micros = Field(description="Device-to-host synchronisation latency at the end of a pass")


class FabricNode(Strict):
    """A node of the fabric graph."""

    name: str = Field(description="Unique node name, referred to by links and placements")
    kind: Literal["gpu", "cpu", "pcie_switch", "nvswitch", "nic", "switch"] = Field(
        description="gpu | cpu (socket with its root complex) | pcie_switch | nvswitch | nic (an InfiniBand/RoCE "
                    "port) | switch (a network switch between machines, e.g. a leaf or one rail's leaf)")
    machine: Optional[str] = Field(None, description=(
        "The server this node sits in (NCCL's node); needed on every node but network switches once a topology "
        "spans machines, omitted on a single machine"))


class FabricLink(Strict):
    """A link between two fabric nodes."""

    between: tuple[str, str] = Field(strict=False, description="The two node names this link joins")
    kind: Literal["pcie", "nvlink", "socket", "network"] = Field(
        description="pcie | nvlink | socket (UPI/xGMI between CPU sockets) | network (a NIC's port to a switch or NIC)")
    bandwidth_GBps: Rate = Field(description="Bandwidth per direction")
    latency_us: Micros = Field(description="Latency this link adds to a collective step beyond NCCL's per-hop figure (which covers one GPU link)")
    burst_bytes: NonNegativeFloat = Field(default=0.0, le=1e9, description=(
        "*Calibrated* where set: bytes per direction that this link passes at burst_GBps at the start of a "
        "collective before bandwidth_GBps binds (a token bucket, full at each collective's start: a PCIe root "
        "complex forwarding a burst of peer writes at link rate); fitted to measured collectives "
        "(simulator/analysis/socket_bandwidth.py fit_uplink_burst); 0: bandwidth_GBps from the first byte"))
    burst_GBps: Optional[Rate] = Field(None, description=(
        "The rate within burst_bytes (the link's own line rate); required with burst_bytes"))


class Network(Strict):
    """How the machines' NICs move data (the wiring, rails included, is in the links)."""

    transport: Literal["infiniband", "roce"] = Field(description="infiniband | roce (RDMA over Converged Ethernet)")
    gpudirect_rdma: bool = Field(description=(
        "NICs read and write GPU memory directly (GPUDirect RDMA; NCCL uses it when GPU and NIC share a PCIe "
        "switch, NCCL_NET_GDR_LEVEL=PXB by default); off: transfers are staged through the host's memory"))


class Fabric(Strict):
    """The graph of GPUs, CPUs, switches and NICs, and the links that join them."""

    nodes: list[FabricNode] = Field(min_length=1, description="GPUs, CPU sockets, PCIe switches, NVSwitches and NICs")
    links: list[FabricLink] = Field(default_factory=list, description="The links between nodes")
    p2p_level: Literal["nvlink", "pcie_switch", "cpu", "system"] = Field(
        description="Farthest path over which GPUs use peer-to-peer (as NCCL_P2P_LEVEL: NVL, PXB, PHB, SYS); farther pairs go through host memory")
    shm_hop_latency_us: Micros = Field(
        default=0.0, description="Extra latency per collective step that goes through host memory instead of peer-to-peer")
    nccl_eager_base_us: Micros = Field(default=0.0, description=(
        "*Calibrated*: the fixed time beyond NCCL's ring LL latency that an eagerly launched NCCL collective takes at "
        "least on this machine, as nccl-tests runs it (one process, a thread per GPU); fitted to measured small "
        "all-reduces (simulator/analysis/ll_floor.py); 0: NCCL's figures alone. Not paid in a pass"))
    nccl_eager_step_us: Micros = Field(default=0.0, description=(
        "*Calibrated*: the same floor's part per ring step (it grows with the GPU count), fitted with "
        "nccl_eager_base_us"))
    nvls: bool = Field(default=False, description="NVSwitch multicast (NVLink SHARP) available for all-reduce")
    network: Optional[Network] = Field(None, description="The network between machines; required with network links")

    _check_graph = model_validator(mode="after")(rules.fabric_graph)


class GPUPrice(Strict):
    """What one GPU of this machine costs to rent, for cost per token (an input with its source, never fitted)."""

    usd_per_gpu_hour: float = Field(gt=0, le=1e4, description="On-demand price of one GPU for one hour, US dollars")
    source: str = Field(min_length=1, description="Where the price is published (provider, offer, page)")
    as_of: str = Field(min_length=1, description="The date the price was read (YYYY-MM-DD); prices change")


class Topology(TopologySurface, Strict):
    """A machine (or machines): GPUs, hosts and fabric."""

    name: str = Field(description="The machine's name (also its catalog name)")
    description: str = Field("", description="Free text for the reader")
    gpu: GPUSpec = Field(description="The GPU model in every GPU slot")
    host: HostSpec = Field(description="The host side of every rank")
    fabric: Fabric = Field(description="How the GPUs are connected")
    price: Optional[GPUPrice] = Field(None, description=(
        "Optional rental price per GPU-hour with its source: results then give the cost per million output tokens"))
