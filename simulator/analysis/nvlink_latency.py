"""Calibrate an NVLink fabric's per-link latency beyond NCCL's per-hop figure from measured small all-reduces.

NCCL v2.29.7-1's cost model has one per-step NVLink latency for every GPU generation (tuning.cc hwLatencies, LL
0.6 us). A fabric whose measured small all-reduces (aiconfigurator-core, comm/nccl/2.29.2/nccl_perf.parquet) were
slower per step would carry the extra as the `latency_us` of each GPU <-> NVSwitch link (a step crosses two). Hopper
needs none; B200's rows (10.26 / 15.09 us at 512 B on 2 / 4 GPUs) have a fixed part this form has no place for, so
B200 takes the eager floor's form instead (ll_floor.py). It is fitted, by least squares of the relative error on a 0.05 us grid, to the **2- and 4-GPU** rows of
512 B to 64 KiB only; the 8-GPU rows stay out of sample (they are the validation set's cases,
scenarios/validation/aiconfigurator_nccl.yaml). A negative fit is clipped to 0: NCCL's own figure is the floor.
"""
from __future__ import annotations

import copy

import numpy as np

CALIBRATION_RANKS = (2, 4)
CALIBRATION_MAX_ELEMENTS = 32768  # fp16 elements: 64 KiB, where latency dominates
GRID_US = tuple(round(0.05 * i, 2) for i in range(41))  # 0 .. 2 us per link


def measured_rows(system: str) -> list[tuple[int, int, float]]:
    """(ranks, bytes, us) of the calibration rows: all-reduce, fp16, 2 and 4 GPUs, 512 B to 64 KiB."""
    from ..kernels.measured import data_root
    import pyarrow.parquet as pq

    root = data_root()
    if root is None:
        raise RuntimeError("aiconfigurator-core is not installed: pip install 'specsim[measured]'")
    frame = pq.read_table(root / system / "comm" / "nccl" / "2.29.2" / "nccl_perf.parquet").to_pandas()
    rows = frame[(frame.op_name == "all_reduce") & (frame.nccl_dtype == "half")
                 & frame.num_gpus.isin(CALIBRATION_RANKS) & (frame.message_size <= CALIBRATION_MAX_ELEMENTS)]
    return [(int(g), 2 * int(m), 1e3 * float(t)) for g, m, t in zip(rows.num_gpus, rows.message_size, rows.latency)]


def nccl_with_links(topology_data: dict, source: str, kind: str, field: str, value: float, ranks: int, select=None):
    """NCCL's collectives over the topology with `field` of every `kind` link set to `value` (a fit's trial); select:
    a further test select(link, {node name: node kind}) a link must pass."""
    from ..config.base import validate
    from ..config.topology import Topology
    from ..hardware.collectives import AllReduce
    from ..hardware.interconnect import Fabric

    data = copy.deepcopy(topology_data)
    kinds = {node["name"]: node["kind"] for node in data["fabric"]["nodes"]}
    for link in data["fabric"]["links"]:
        if link["kind"] == kind and (select is None or select(link, kinds)):
            link[field] = value
    topology = validate(Topology, data, source)
    return AllReduce(Fabric(topology), ranks, "nccl", topology.gpu.kernel_floor_us)


def predicted_us(topology_data: dict, source: str, link_latency_us: float, ranks: int, nbytes: int) -> float:
    """NCCL's all-reduce time over the topology with every NVLink link's latency set to `link_latency_us`."""
    return nccl_with_links(topology_data, source, "nvlink", "latency_us", link_latency_us, ranks).cost(nbytes).time_us


def fit(system: str, topology_path: str) -> tuple[float, float]:
    """(per-link latency in us, sum of squared relative errors) minimising the calibration rows' error."""
    from ..config.yaml_files import read_yaml

    data, rows = read_yaml(topology_path), measured_rows(system)
    costs = []
    for x in GRID_US:
        errors = [predicted_us(data, topology_path, x, g, b) / t - 1.0 for g, b, t in rows]
        costs.append(float(np.sum(np.square(errors))))
    best = int(np.argmin(costs))
    return GRID_US[best], costs[best]
