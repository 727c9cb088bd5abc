"""Simulated tokens per wall-second at each fidelity, repeated, and against a bare SimPy loop in the same process.

A shared machine makes one timing worthless: the same figure can move by 2x between runs. Each figure is therefore
measured several times (min and median), and every repetition is paired with a bare SimPy loop of one timeout per
step timed right after it in the same process. The ratio of the two rates moves much less than either, because
both slow down together when the machine is busy: it says how close the simulator is to the cost of SimPy's own
event loop, the floor of any SimPy model that takes one event per step. Each run's CPU seconds (process time) are
recorded beside its wall seconds: on a shared machine the process's own CPU time is the figure that load moves least.
"""
from __future__ import annotations

import os
import statistics
import time

from ..compiled import dataclass

REFERENCE_SCENARIOS = ("pcie8_ngram", "pcie8_eagle3", "pcie8_baseline")  # shipped scenarios, by name
DEFAULT_TOKENS = {"fast": (2048, 8192, 32768), "layer": (2048, 8192), "link": (2048,), "event": (2048,)}
DEFAULT_REPEATS = {"fast": 5, "layer": 3, "link": 3, "event": 3}
# the speed targets (issue 23): (scenario, fidelity, tokens or None for the shipped workload, figure, at least)
TARGETS = (("pcie8_eagle3", "event", 2048, "x_real_cpu", 3.0),
           ("nvlink8_h100_llama8b_eagle3", "event", 2048, "tok_per_cpu_s", 1000.0),
           ("pcie8_ngram", "fast", None, "floor_ratio", 0.25))
FLOOR_STEPS = 50_000  # timeouts in the reference loop: ~50 ms, long enough to time, short next to the figures


@dataclass(frozen=True)
class BenchRow:
    """One figure: per repetition its simulated tokens per wall-second, simulated seconds per wall-second, and the
    paired SimPy loop's timeouts per wall-second."""

    scenario: str
    fidelity: str
    tokens: int  # the first repetition's (other seeds may generate a few more or fewer)
    tok_per_s: tuple[float, ...]
    real_time: tuple[float, ...]
    floor_steps_per_s: tuple[float, ...]
    cpu_s: tuple[float, ...] = ()  # each run's CPU seconds (process time)
    sim_s: tuple[float, ...] = ()  # each run's simulated seconds
    tokens_each: tuple[int, ...] = ()

    @property
    def best_tok_s(self) -> float:
        return max(self.tok_per_s)

    @property
    def median_tok_s(self) -> float:
        return statistics.median(self.tok_per_s)

    @property
    def faster_than_real_time(self) -> float:
        return statistics.median(self.real_time)

    @property
    def floor_ratio(self) -> float:
        """Median over repetitions of (simulated tokens per wall-second) / (SimPy timeouts per wall-second)."""
        return statistics.median(self.each("floor_ratio"))

    def each(self, figure: str) -> tuple[float, ...]:
        """A median figure's value in each run, in run order: the first run is the cold one (the later ones find
        what it stored, e.g. a text drafter's lone walks)."""
        pairs = {"floor_ratio": zip(self.tok_per_s, self.floor_steps_per_s), "x_real_cpu": zip(self.sim_s, self.cpu_s),
                 "tok_per_cpu_s": zip(self.tokens_each, self.cpu_s)}[figure]
        return tuple(a / b for a, b in pairs)

    @property
    def floor_median(self) -> float:
        return statistics.median(self.floor_steps_per_s)

    @property
    def x_real_cpu(self) -> float:
        """Median over runs of simulated seconds per CPU second."""
        return statistics.median(self.each("x_real_cpu"))

    @property
    def tok_per_cpu_s(self) -> float:
        """Median over runs of simulated tokens per CPU second."""
        return statistics.median(self.each("tok_per_cpu_s"))


def simpy_floor(steps: int = FLOOR_STEPS) -> float:
    """Timeouts per wall-second of a bare SimPy process that yields one timeout per step and does nothing else."""
    import simpy

    env = simpy.Environment()

    def loop():
        timeout = env.timeout
        for _ in range(steps):
            yield timeout(1.0)

    env.process(loop())
    started = time.perf_counter()
    env.run()
    return steps / (time.perf_counter() - started)


def _overrides(fidelity: str, tokens: int | None, seed: int) -> dict:
    workload = {} if tokens is None else {"workload__requests": 1, "workload__output_tokens": tokens}
    return {"fidelity": fidelity, "seed": seed, **workload}


def run_once(scenario: str, fidelity: str, tokens: int | None, seed: int, max_work: float | None = None):
    """The speculative run only: one request generating `tokens`, or with tokens None the scenario's own workload."""
    from ..api.run import run

    started, cpu = time.perf_counter(), time.process_time()
    result = run(scenario, baseline=False, max_work=max_work, **_overrides(fidelity, tokens, seed))
    return time.perf_counter() - started, result, time.process_time() - cpu


def estimate(jobs: list[tuple[str, str, int | None, int]]) -> float:
    """Weighted steps of the jobs (scenario, fidelity, tokens, repeats) together (results.limits' estimate)."""
    from ..results.limits import estimate_work
    from ..api.run import resolve

    return sum(repeats * estimate_work(resolve(scenario, _overrides(fidelity, tokens, 0)), runs=1)
               for scenario, fidelity, tokens, repeats in jobs)


def measure(scenario: str, fidelity: str, tokens: int | None, seed: int, repeats: int = 1,
            max_work: float | None = None) -> BenchRow:
    """`repeats` runs, each with a fresh seed (so each starts from cold per-shape caches) and each followed by the
    SimPy reference loop."""
    rates, real_time, floors, counts, cpus, sims = [], [], [], [], [], []
    for rep in range(max(1, repeats)):
        wall, result, cpu = run_once(scenario, fidelity, tokens, seed + rep, max_work)
        rates.append(result.tokens / wall)
        real_time.append(result.sim_time_s / wall)
        counts.append(result.tokens)
        cpus.append(cpu)
        sims.append(result.sim_time_s)
        floors.append(simpy_floor())
    return BenchRow(scenario, fidelity, counts[0], tuple(rates), tuple(real_time), tuple(floors), tuple(cpus),
                    tuple(sims), tuple(counts))


def target_line(row: BenchRow, figure: str, least: float, shipped: bool) -> str:
    """One line: a speed target, the measured figure (median over runs) and whether it holds."""
    value = getattr(row, figure)
    what = {"x_real_cpu": "simulated seconds per CPU second", "tok_per_cpu_s": "simulated tokens per CPU second",
            "floor_ratio": "x the same-process SimPy floor (tok/s per timeout/s)"}[figure]
    workload = "shipped workload" if shipped else f"one request, {row.tokens} tokens"
    name = os.path.splitext(os.path.basename(row.scenario))[0]
    return (f"target: {name} {row.fidelity} ({workload}): {_figure(value)} {what}{cold_warm(row, figure)}, "
            f"at least {_figure(least)}: {'holds' if value >= least else 'DOES NOT HOLD'}")


def cold_warm(row: BenchRow, figure: str) -> str:
    """The figure's first (cold) run and the median of the later (warm) ones, as a parenthesis; empty for one run."""
    values = row.each(figure)
    if len(values) < 2:
        return ""
    return f" (median; cold first run {_figure(values[0])}, warm later runs {_figure(statistics.median(values[1:]))})"


def _figure(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"
