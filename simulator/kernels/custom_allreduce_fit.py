"""A physical model of the engines' custom all-reduce, fitted to aiconfigurator-core's measured tables
(kernels/custom_allreduce.py): below the one-shot bound a rank raises a flag, reads every peer's buffer and raises
another, so a call takes a fixed latency (flags, kernel, and in eager mode the launch) plus bytes over an effective
read bandwidth. Both are fitted per table and launch mode (CUDA graph, eager) by least squares on the relative
error, once more without single-run outliers (some eager rows sit at 2x their neighbours). A fabric the database did not measure takes the median of the fitted parameters over the measured GPUs of
the same fabric class (all NVLink or PCIe) at that GPU count, and says so.
"""
from __future__ import annotations

import statistics

from ..compiled import dataclass
from . import custom_allreduce as tables

ONE_SHOT_MAX_BYTES = 256 * 1024  # the kernels' one-shot bound at 8 ranks (engines/*: custom_allreduce)
PCIE_SYSTEMS = ("rtx_pro_6000_server", "l40s", "b60")  # the database's boards without NVLink between all GPUs


@dataclass(frozen=True)
class FittedMode:
    latency_us: float
    bandwidth_GBps: float
    worst_error: float  # the largest relative miss over the rows it was fitted to (outliers left out)
    label: str = ""  # what it is and what it was fitted to (set for the simulation's use)

    def time_us(self, nbytes: int) -> float:
        return self.latency_us + nbytes / (1000.0 * self.bandwidth_GBps)


@dataclass(frozen=True)
class FittedAllReduce:
    engine: str
    version: str
    ranks: int
    graph: FittedMode
    eager: FittedMode
    basis: str  # which table(s) it was fitted to


def _least_squares(rows: list) -> tuple[float, float]:
    """(latency us, us per byte) minimising the relative error over (bytes, us) rows."""
    w = [1.0 / t ** 2 for _, t in rows]
    sw, sx, sy = sum(w), sum(wi * s for wi, (s, _) in zip(w, rows)), sum(wi * t for wi, (_, t) in zip(w, rows))
    sxx = sum(wi * s * s for wi, (s, _) in zip(w, rows))
    sxy = sum(wi * s * t for wi, (s, t) in zip(w, rows))
    slope = max((sw * sxy - sx * sy) / (sw * sxx - sx * sx), 1e-9)  # a flat table is latency alone
    return (sy - slope * sx) / sw, slope


def _fit(sizes: tuple, times: tuple) -> FittedMode | None:
    """t = a + b x bytes over the one-shot rows, least squares on t / measured - 1, fitted again without the rows
    that miss by more than three times the median miss (single-run outliers: an eager row at 2x its neighbours)."""
    rows = [(s, t) for s, t in zip(sizes, times) if s <= ONE_SHOT_MAX_BYTES and t > 0]
    if len(rows) < 3:
        return None
    latency, slope = _least_squares(rows)
    misses = [abs((latency + slope * s) / t - 1) for s, t in rows]
    cut = 3 * statistics.median(misses)
    kept = [row for row, miss in zip(rows, misses) if miss <= cut]
    if len(kept) >= 3 and len(kept) < len(rows):
        latency, slope = _least_squares(kept)
    worst = max(abs((latency + slope * s) / t - 1) for s, t in kept)
    return FittedMode(latency, 1.0 / (1000.0 * slope), worst)


def fit_table(system: str, engine: str, version: str, ranks: int) -> FittedAllReduce | None:
    """The model fitted to one measured table (None: the table has no rows of both modes for this GPU count)."""
    kernel, modes = tables._rows(system, engine, version, ranks)
    fitted = {mode: _fit(*modes[mode]) for mode in ("graph", "eager")}
    if fitted["graph"] is None or fitted["eager"] is None:
        return None
    return FittedAllReduce(engine, version, ranks, fitted["graph"], fitted["eager"],
                           f"{system} comm/{engine}/{version} ({kernel})")


def fitted(system: str | None, engine: str, wanted: str, ranks: int, nvlink: bool) -> FittedAllReduce | None:
    """The model for this GPU where the database measured it (the version nearest `wanted`, as the tables are read),
    else the median over the measured GPUs of the same fabric class at this GPU count."""
    root = tables.data_root()
    if root is None:
        return None
    if system is not None:
        for version in tables.preference(system, engine, wanted):
            own = fit_table(system, engine, version, ranks)
            if own is not None:
                return own
    fits = []
    for other in sorted(p.name for p in root.iterdir() if p.is_dir()):
        if (other in PCIE_SYSTEMS) == nvlink:
            continue
        for version in tables.preference(other, engine, wanted):
            one = fit_table(other, engine, version, ranks)
            if one is not None:
                fits.append((other, one))
                break
    if not fits:
        return None

    def median(mode: str) -> FittedMode:
        picked = [getattr(f, mode) for _, f in fits]
        return FittedMode(statistics.median(m.latency_us for m in picked),
                          statistics.median(m.bandwidth_GBps for m in picked), max(m.worst_error for m in picked))

    names = ", ".join(name for name, _ in fits)
    return FittedAllReduce(engine, "median", ranks, median("graph"), median("eager"),
                           f"the median over {len(fits)} measured {'NVLink' if nvlink else 'PCIe'} GPUs ({names})")


def simulation_model(scenario, ranks: int, nvlink: bool) -> FittedMode | None:
    """The one-shot kernel the simulation times the engine's custom all-reduce by: the CUDA-graph fit for the
    scenario's engine and GPU (measured kernels only; None: the physical model stands). Eager passes pay the kernel's
    launch as every eager kernel does (host.eager_launch_us), which is what the tables' eager-minus-graph gap is."""
    engine = scenario.engine
    if scenario.spec.runtime.kernels != "measured" or engine is None or engine.name not in tables.ENGINE_DIRS \
            or scenario.topology.gpu.kernel_database is None:  # a GPU outside the database: the physical model
        return None
    model = fitted(scenario.topology.gpu.kernel_database, engine.name, engine.version, ranks, nvlink)
    if model is None:
        return None
    g = model.graph
    label = f"{engine.name} custom all-reduce, fitted to aiconfigurator-core {model.basis} (CUDA graph)"
    return FittedMode(g.latency_us, g.bandwidth_GBps, g.worst_error, label)
