"""The engines' custom all-reduce as aiconfigurator-core measured it (kernels/custom_allreduce.py), over the whole
range the engines run it (up to their 8 MiB buffer), CUDA graph and eager apart.

Below the measured kernel's two-shot switch (the rule of the table's release: the engine profile of that version, else
the nearest one below it, table_rule; vLLM's design at every table there is: one-shot at any size on 2 ranks, below
512 KiB up to 4, below 256 KiB up to 8) a rank raises a flag, reads every peer's buffer and raises another: a fixed
latency (flags, kernel, in eager mode the launch) plus bytes over an effective read bandwidth, fitted per table and
mode by least squares on the relative error, once more without single-run outliers (some eager rows sit at 2x their
neighbours). From the switch on (two-shot; on 2 ranks above the fit's 256 KiB) a straight line misses the tables by up
to 50% (the time bends from latency- to bandwidth-bound within 256 KiB..8 MiB), so the time is the table's own rows (a
size run twice: their median) up to the kernel's largest message, log-log interpolated, each row at least the one
before it and the first at least the one-shot fit at the switch (a larger message never takes less); beyond the last
row at the last segment's slope.
The engine being simulated may switch elsewhere (its own profile's rule, runtime.custom_allreduce): a message it runs
one-shot where the table's kernel ran two-shot takes the one-shot fit carried on (the same flags and reads); one it
runs two-shot where the table measured one-shot is not covered (the physical model times it).
A fabric the database did not measure takes the median over the measured GPUs of the same fabric class (all NVLink
or PCIe) at that GPU count, of the fitted parameters below the bound and of the times at each measured size above it,
and says so.
"""
from __future__ import annotations

import math
import statistics

from ..compiled import dataclass
from . import custom_allreduce as tables
from .tables import _version_key

# where the kernel never switches (2 ranks), the straight line is fitted up to here and the rows time it beyond: the
# time bends from latency- to bandwidth-bound above it (a choice of the fit, not an engine's rule)
FIT_MAX_BYTES = 256 * 1024
PCIE_SYSTEMS = ("rtx_pro_6000_server", "l40s", "b60")  # the database's boards without NVLink between all GPUs


@dataclass(frozen=True)
class FittedMode:
    latency_us: float
    bandwidth_GBps: float
    worst_error: float  # the largest relative miss over the rows it was fitted to (outliers left out)
    label: str = ""  # what it is and what it was fitted to (set for the simulation's use)
    two_shot_bytes: int = 0  # the measured kernel ran two-shot from this size on (0: one-shot at every size)
    sizes: tuple = ()  # the measured rows (bytes, ascending) that time a call from sizes[0] on, made monotone
    times: tuple = ()  # their times, us

    def algorithm(self, nbytes: int) -> str:
        """What the measured kernel ran at nbytes (its own switch)."""
        return "two_shot" if self.two_shot_bytes and nbytes >= self.two_shot_bytes else "one_shot"

    def measured_rows(self, nbytes: int, algorithm: str | None = None) -> bool:
        """Whether the table's rows (not the one-shot fit) time nbytes run as `algorithm` (default: the measured
        kernel's own)."""
        mine = self.algorithm(nbytes)
        return bool(self.sizes) and nbytes >= self.sizes[0] and (algorithm or mine) == mine

    def covers(self, nbytes: int, algorithm: str) -> bool:
        """Whether this model times nbytes run as `algorithm`: what the table's kernel ran there, or one-shot (the
        fit carried past the measured kernel's switch); not a two-shot where the table measured one-shot."""
        return algorithm == "one_shot" or algorithm == self.algorithm(nbytes)

    def time_us(self, nbytes: int, algorithm: str | None = None) -> float:
        """nbytes run as `algorithm` (default: what the measured kernel ran): the rows, or the one-shot fit."""
        if self.measured_rows(nbytes, algorithm):
            return _along(self.sizes, self.times, nbytes)
        return self.latency_us + nbytes / (1000.0 * self.bandwidth_GBps)

    def how(self, nbytes: int, algorithm: str) -> str:
        """What times nbytes run as `algorithm`, as a label's tail."""
        if self.measured_rows(nbytes, algorithm):
            return " above the one-shot bound: the table's rows"
        if self.algorithm(nbytes) != algorithm:
            return " one-shot past the measured kernel's two-shot switch: the one-shot fit"
        return ""


@dataclass(frozen=True)
class FittedAllReduce:
    engine: str
    version: str
    ranks: int
    graph: FittedMode
    eager: FittedMode
    basis: str  # which table(s) it was fitted to


def _along(sizes: tuple, times: tuple, nbytes: int) -> float:
    """Log-log interpolation of monotone rows; the first row's time below them, the last segment's slope beyond."""
    if nbytes <= sizes[0]:
        return times[0]
    for s0, t0, s1, t1 in zip(sizes, times, sizes[1:], times[1:]):
        if nbytes <= s1:
            w = (math.log(nbytes) - math.log(s0)) / (math.log(s1) - math.log(s0))
            return math.exp((1 - w) * math.log(t0) + w * math.log(t1))
    slope = (times[-1] - times[-2]) / (sizes[-1] - sizes[-2]) if len(sizes) > 1 else 0.0
    return times[-1] + slope * (nbytes - sizes[-1])


def _monotone(sizes: tuple, times: tuple, floor_us: float) -> tuple[tuple, tuple]:
    """The rows with each time at least the one before it, the first at least floor_us (the fit at the bound)."""
    out, best = [], floor_us
    for t in times:
        best = max(best, t)
        out.append(best)
    return tuple(sizes), tuple(out)


def _least_squares(rows: list) -> tuple[float, float]:
    """(latency us, us per byte) minimising the relative error over (bytes, us) rows."""
    w = [1.0 / t ** 2 for _, t in rows]
    sw, sx, sy = sum(w), sum(wi * s for wi, (s, _) in zip(w, rows)), sum(wi * t for wi, (_, t) in zip(w, rows))
    sxx = sum(wi * s * s for wi, (s, _) in zip(w, rows))
    sxy = sum(wi * s * t for wi, (s, t) in zip(w, rows))
    slope = max((sw * sxy - sx * sy) / (sw * sxx - sx * sx), 1e-9)  # a flat table is latency alone
    return (sy - slope * sx) / sw, slope


def table_rule(engine: str, version: str):
    """The custom all-reduce rule of the kernel a table of `version` measured: the engine profile of that release,
    else of the nearest release below it (else the oldest above), its kernel's switch taken as unchanged between."""
    from ..config.engine_profile import known_versions, load_profile

    have = sorted(known_versions(engine), key=_version_key)
    below = [v for v in have if _version_key(v) <= _version_key(version)]
    release = below[-1] if below else have[0]
    rule = load_profile(engine, release)[0].custom_allreduce.value
    if rule is None:
        raise ValueError(f"engines/{engine}/{release}.yaml runs no custom all-reduce, yet stands for the {engine} "
                         f"{version} table's kernel")
    return rule


def _fit(sizes: tuple, times: tuple, two_shot_bytes: int, max_bytes: int) -> FittedMode | None:
    """t = a + b x bytes over the one-shot rows (below two_shot_bytes, the measured kernel's switch; 0: up to
    FIT_MAX_BYTES), least squares on t / measured - 1, fitted again without the rows that miss by more than three
    times the median miss (single-run outliers: an eager row at 2x its neighbours); from the switch to the kernel's
    largest message (max_bytes, to the first row at or above it) the table's rows, made monotone."""
    bound = two_shot_bytes
    rows = [(s, t) for s, t in zip(sizes, times) if (s < bound if bound else s <= FIT_MAX_BYTES) and t > 0]
    if len(rows) < 3:
        return None
    latency, slope = _least_squares(rows)
    misses = [abs((latency + slope * s) / t - 1) for s, t in rows]
    cut = 3 * statistics.median(misses)
    kept = [row for row, miss in zip(rows, misses) if miss <= cut]
    if len(kept) >= 3 and len(kept) < len(rows):
        latency, slope = _least_squares(kept)
    worst = max(abs((latency + slope * s) / t - 1) for s, t in kept)
    start = bound or FIT_MAX_BYTES
    last = min((s for s in sizes if s >= max_bytes), default=max_bytes)
    runs: dict[int, list] = {}  # a size measured more than once (some tables ran each twice): the runs' median
    for s, t in zip(sizes, times):
        if start <= s <= last and t > 0:
            runs.setdefault(s, []).append(t)
    above = sorted((s, statistics.median(ts)) for s, ts in runs.items())
    table = _monotone(*zip(*above), latency + slope * start) if above else ((), ())
    return FittedMode(latency, 1.0 / (1000.0 * slope), worst, "", bound, *table)


def fit_table(system: str, engine: str, version: str, ranks: int, rule=None) -> FittedAllReduce | None:
    """The model fitted to one measured table (None: the table has no rows of both modes for this GPU count); rule:
    its kernel's (default table_rule's)."""
    kernel, modes = tables._rows(system, engine, version, ranks)
    if not kernel:
        return None
    rule = rule or table_rule(engine, version)
    fitted = {mode: _fit(*modes[mode], rule.two_shot_bytes(ranks), rule.max_bytes) for mode in ("graph", "eager")}
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
    rules: dict[str, object] = {}  # each table version's kernel rule, read once in this call

    def fit(system_name: str, version: str) -> FittedAllReduce | None:
        if version not in rules:
            rules[version] = table_rule(engine, version)
        return fit_table(system_name, engine, version, ranks, rules[version])

    if system is not None:
        for version in tables.preference(system, engine, wanted):
            own = fit(system, version)
            if own is not None:
                return own
    fits = []
    for other in sorted(p.name for p in root.iterdir() if p.is_dir()):
        if (other in PCIE_SYSTEMS) == nvlink:
            continue
        for version in tables.preference(other, engine, wanted):
            one = fit(other, version)
            if one is not None:
                fits.append((other, one))
                break
    if not fits:
        return None

    def median(mode: str) -> FittedMode:
        picked = [getattr(f, mode) for _, f in fits]
        latency = statistics.median(m.latency_us for m in picked)
        bandwidth = statistics.median(m.bandwidth_GBps for m in picked)
        sizes = sorted({s for m in picked for s in m.sizes})  # above the bound: the median time at each size
        times = [statistics.median(m.time_us(s) for m in picked) for s in sizes]
        table = _monotone(sizes, times, latency + sizes[0] / (1000.0 * bandwidth)) if sizes else ((), ())
        switches = {m.two_shot_bytes for m in picked}  # each table's kernel's own switch: one, or no median
        if len(switches) != 1:
            raise ValueError(f"the measured {engine} kernels switch to two-shot at {sorted(switches)} B: no median")
        return FittedMode(latency, bandwidth, max(m.worst_error for m in picked), "", switches.pop(), *table)

    names = ", ".join(name for name, _ in fits)
    return FittedAllReduce(engine, "median", ranks, median("graph"), median("eager"),
                           f"the median over {len(fits)} measured {'NVLink' if nvlink else 'PCIe'} GPUs ({names})")


def simulation_model(scenario, ranks: int, nvlink: bool) -> FittedMode | None:
    """The kernel the simulation times the engine's custom all-reduce by: the CUDA-graph model (fit below the one-shot
    bound, measured rows above) for the scenario's engine and GPU (measured kernels only; None: the physical model stands). Eager passes pay the kernel's
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
    return FittedMode(g.latency_us, g.bandwidth_GBps, g.worst_error, label, g.two_shot_bytes, g.sizes, g.times)
