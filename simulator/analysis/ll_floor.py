"""Calibrate an NVLink board's eager floor, what nccl-tests' small all-reduces take beyond NCCL's LL figures.

NCCL v2.29.7-1's cost model times a small all-reduce as the ring LL protocol's fixed time (baseLat 6.6 us) plus
2 (n - 1) steps at one per-hop latency for every GPU generation (hwLat, NVLink LL 0.6 us). aiconfigurator-core's
tables are nccl-tests runs (its collector: all_reduce_perf, a thread per GPU in one process, no CUDA graph). Below
64 KiB they are that shape (flat in size, linear in the step count) with the board's own figures: 8x A100 takes
about 10 / 14.5 / 22.6 us at 2 / 4 / 8 GPUs, ~1 us a step and ~2 us more fixed time. So a board carries two
non-negative extras over NCCL's ring LL latency, `fabric.nccl_eager_base_us` and `fabric.nccl_eager_step_us`, a floor
under every protocol of an eagerly launched collective, fitted by non-negative least squares of the relative error
to the **2- and 4-GPU** rows of 512 B to 64 KiB (comm/nccl/<version>/nccl_perf.parquet); the 8-GPU rows stay out of
sample (the validation set's cases). Where NCCL's figures are already slow (Hopper) both stay 0. B200 takes the
same form (1.3 us + 0.62 a step): its 512 B rows (10.26 / 15.09 us at 2 / 4 GPUs) lie on 7.85 + 1.21 us a step,
which a per-link latency alone cannot fit at both counts.
"""
from __future__ import annotations

import copy

import numpy as np

CALIBRATION_RANKS = (2, 4)
CALIBRATION_MAX_ELEMENTS = 32768  # fp16 elements: 64 KiB, where NCCL runs LL and latency dominates
ROUND_US = 0.01


def measured_rows(system: str, version: str) -> list[tuple[int, int, float]]:
    """(ranks, bytes, us) of the calibration rows: all-reduce, fp16, 2 and 4 GPUs, 512 B to 64 KiB."""
    from ..kernels.measured import data_root
    import pyarrow.parquet as pq

    root = data_root()
    if root is None:
        raise RuntimeError("aiconfigurator-core is not installed: pip install 'specsim[measured]'")
    frame = pq.read_table(root / system / "comm" / "nccl" / version / "nccl_perf.parquet").to_pandas()
    rows = frame[(frame.op_name == "all_reduce") & (frame.nccl_dtype == "half")
                 & frame.num_gpus.isin(CALIBRATION_RANKS) & (frame.message_size <= CALIBRATION_MAX_ELEMENTS)]
    return [(int(g), 2 * int(m), 1e3 * float(t)) for g, m, t in zip(rows.num_gpus, rows.message_size, rows.latency)]


def allreduce(topology_data: dict, source: str, ranks: int, base_us: float, step_us: float):
    """NCCL's all-reduce over the topology, launched eagerly, with the eager extras set to (base_us, step_us)."""
    from ..config.base import validate
    from ..config.topology import Topology
    from ..hardware.collectives import AllReduce
    from ..hardware.interconnect import Fabric

    data = copy.deepcopy(topology_data)
    data["fabric"]["nccl_eager_base_us"] = base_us
    data["fabric"]["nccl_eager_step_us"] = step_us
    topology = validate(Topology, data, source)
    return AllReduce(Fabric(topology), ranks, "nccl", topology.gpu.kernel_floor_us, launch="eager")


def fit(system: str, version: str, topology_path: str) -> tuple[float, float, float]:
    """(base us, step us, sum of squared relative errors after the fit): non-negative least squares of
    (t0 + base + steps x step) / t - 1, t0 NCCL's time without extras (ring LL, the floor itself, at every calibration
    row), rounded to 0.01 us; the error is recomputed through the model with the rounded figures."""
    from scipy.optimize import nnls

    from ..config.yaml_files import read_yaml

    data, rows = read_yaml(topology_path), measured_rows(system, version)
    models = {g: allreduce(data, topology_path, g, 0.0, 0.0) for g in {g for g, _, _ in rows}}
    t0 = np.array([models[g].cost(b).time_us for g, b, _ in rows])
    t = np.array([m for _, _, m in rows])
    steps = np.array([2 * (g - 1) for g, _, _ in rows], dtype=float)
    (base, step), _ = nnls(np.column_stack([1 / t, steps / t]), 1 - t0 / t)
    base, step = (round(round(x / ROUND_US) * ROUND_US, 2) for x in (base, step))
    fitted = {g: allreduce(data, topology_path, g, base, step) for g in models}
    cost = float(sum((fitted[g].cost(b).time_us / m - 1) ** 2 for g, b, m in rows))
    return base, step, cost
