"""Calibrate a PCIe board's link (the peer traffic it carries per direction) from measured all-gathers.

With peer-to-peer across sockets, an 8-GPU ring crosses the CPU interconnect twice, so NCCL's channel search (and
so every large collective) is set by what that link carries. Neither the source nor NCCL's topology code knows the
collection host's CPU, so the link's figure is fitted: by least squares of the relative error on a 1 GB/s grid,
NCCL's ring all-gather over the board to the box's measured **all-gather** rows of 32 MiB - 512 MiB at every GPU
(aiconfigurator-core, comm/nccl/<version>/nccl_perf.parquet); the all-reduce rows stay out of sample (they are the
validation set's cases, scenarios/validation/aiconfigurator_nccl.yaml). The search's speeds are discrete, so the
fit is a plateau; the smallest value on it is kept.

Two links are fitted so: the socket link (`fit`), and the PCIe switch uplinks that carry peer traffic between two
switches through a CPU's root complex (`fit_uplinks`: the root complex's peer-to-peer forwarding rate). With the
uplinks' rate fitted, their burst (`fit_uplink_burst`: the bytes a collective's start passes at the link's line rate
before the forwarding rate binds) is fitted the same way to the same box's all-gather rows of every size.
"""
from __future__ import annotations


import numpy as np

CALIBRATION_OP = "all_gather"
CALIBRATION_MIN_ELEMENTS = 1 << 24  # fp16 elements: 32 MiB and up, where bandwidth dominates
GRID_GBPS = tuple(float(x) for x in range(16, 49))


def measured_rows(system: str, version: str, ranks: int) -> list[tuple[int, float]]:
    """(bytes, us) of the calibration rows: all-gather, fp16, `ranks` GPUs, 32 MiB and up (nccl-tests' size, the
    whole gathered buffer)."""
    from ..kernels.measured import data_root
    import pyarrow.parquet as pq

    root = data_root()
    if root is None:
        raise RuntimeError("aiconfigurator-core is not installed: pip install 'specsim[measured]'")
    frame = pq.read_table(root / system / "comm" / "nccl" / version / "nccl_perf.parquet").to_pandas()
    rows = frame[(frame.op_name == CALIBRATION_OP) & (frame.nccl_dtype == "half") & (frame.num_gpus == ranks)
                 & (frame.message_size >= CALIBRATION_MIN_ELEMENTS)]
    return [(2 * int(m), 1e3 * float(t)) for m, t in zip(rows.message_size, rows.latency)]


UPLINK_GRID_GBPS = tuple(0.5 * i for i in range(2, 49))  # 1 .. 24 GB/s, a PCIe 4.0 x16 link's NCCL figure at most


def is_uplink(link: dict, kinds: dict[str, str]) -> bool:
    """A PCIe link between a PCIe switch and a CPU socket (the switch's uplink into the root complex)."""
    return link["kind"] == "pcie" and sorted(kinds[end] for end in link["between"]) == ["cpu", "pcie_switch"]


def predicted_us(topology_data: dict, source: str, socket_GBps: float, ranks: int, nbytes: int,
                 uplinks: bool = False) -> float:
    """NCCL's ring all-gather of nbytes in all (nbytes / ranks from each rank) with the socket link (or, uplinks=True,
    every PCIe switch's uplink) at socket_GBps."""
    from .nvlink_latency import nccl_with_links

    if not uplinks:
        return nccl_with_links(topology_data, source, "socket", "bandwidth_GBps", socket_GBps, ranks).allgather_us(
            nbytes // ranks)
    return nccl_with_links(without_burst(topology_data), source, "pcie", "bandwidth_GBps", socket_GBps, ranks,
                           select=is_uplink).allgather_us(nbytes // ranks)


def without_burst(topology_data: dict) -> dict:
    """The topology with no link's burst: the rate is fitted first, on rows where the fitted burst moves < 0.2 %,
    and the burst then on the fitted rate (fit_uplink_burst)."""
    import copy

    data = copy.deepcopy(topology_data)
    for link in data["fabric"]["links"]:
        link.pop("burst_bytes", None)
        link.pop("burst_GBps", None)
    return data


def fit(system: str, version: str, topology_path: str) -> tuple[float, float]:
    """(socket link GB/s, sum of squared relative errors) minimising the calibration rows' error."""
    from ..config.yaml_files import read_yaml

    data = read_yaml(topology_path)
    ranks = sum(1 for node in data["fabric"]["nodes"] if node["kind"] == "gpu")
    rows = measured_rows(system, version, ranks)
    costs = [float(np.sum(np.square([predicted_us(data, topology_path, x, ranks, b) / t - 1.0 for b, t in rows])))
             for x in GRID_GBPS]
    best = int(np.argmin(costs))
    return GRID_GBPS[best], costs[best]


def fit_uplinks(system: str, version: str, topology_path: str, ranks: int) -> tuple[float, float]:
    """(switch uplink GB/s, sum of squared relative errors) minimising the error on `ranks` GPUs' all-gather rows:
    choose `ranks` so that the ring crosses a root complex (two switches of one socket) and no socket link."""
    from ..config.yaml_files import read_yaml

    data = read_yaml(topology_path)
    rows = measured_rows(system, version, ranks)
    costs = [float(np.sum(np.square([predicted_us(data, topology_path, x, ranks, b, uplinks=True) / t - 1.0
                                     for b, t in rows]))) for x in UPLINK_GRID_GBPS]
    best = int(np.argmin(costs))  # argmin takes the first (smallest) value of a plateau
    return UPLINK_GRID_GBPS[best], costs[best]


BURST_GRID_BYTES = tuple(4096 * i for i in range(0, 129))  # 0 .. 512 KiB in 4 KiB steps
BURST_CALIBRATION_MAX_ELEMENTS = 1 << 23  # fp16 elements: up to 16 MiB; beyond, a burst of < 1 MiB moves < 1 %


def burst_rows(system: str, version: str, ranks: int) -> list[tuple[int, float]]:
    """(bytes, us) of the burst's calibration rows: all-gather, fp16, `ranks` GPUs, every size up to 16 MiB."""
    from ..kernels.measured import data_root
    import pyarrow.parquet as pq

    root = data_root()
    if root is None:
        raise RuntimeError("aiconfigurator-core is not installed: pip install 'specsim[measured]'")
    frame = pq.read_table(root / system / "comm" / "nccl" / version / "nccl_perf.parquet").to_pandas()
    rows = frame[(frame.op_name == CALIBRATION_OP) & (frame.nccl_dtype == "half") & (frame.num_gpus == ranks)
                 & (frame.message_size <= BURST_CALIBRATION_MAX_ELEMENTS)]
    return [(2 * int(m), 1e3 * float(t)) for m, t in zip(rows.message_size, rows.latency)]


def burst_predicted_us(topology_data: dict, source: str, burst_bytes: float, ranks: int, nbytes: int) -> float:
    """NCCL's ring all-gather of nbytes in all with every PCIe switch uplink's burst at burst_bytes (its rate and
    burst rate as the topology has them)."""
    from .nvlink_latency import nccl_with_links

    return nccl_with_links(topology_data, source, "pcie", "burst_bytes", float(burst_bytes), ranks,
                           select=is_uplink).allgather_us(nbytes // ranks)


def fit_uplink_burst(system: str, version: str, topology_path: str, ranks: int) -> tuple[float, float]:
    """(switch uplink burst bytes, sum of squared relative errors) minimising the error on `ranks` GPUs' all-gather
    rows up to 16 MiB, the uplinks' rate as the topology has it (fit_uplinks); the smallest value of a plateau."""
    from ..config.yaml_files import read_yaml

    data = read_yaml(topology_path)
    rows = burst_rows(system, version, ranks)
    costs = [float(np.sum(np.square([burst_predicted_us(data, topology_path, x, ranks, b) / t - 1.0
                                     for b, t in rows]))) for x in BURST_GRID_BYTES]
    best = int(np.argmin(costs))
    return float(BURST_GRID_BYTES[best]), costs[best]
