"""Simulated tokens per wall-second at each fidelity, repeated, and against a bare SimPy loop in the same process.

A shared machine makes one timing worthless: the same figure can move by 2x between runs. Each figure is therefore
measured several times (min and median), and every repetition is paired with a bare SimPy loop of one timeout per
step timed right after it in the same process. The ratio of the two rates moves much less than either, because
both slow down together when the machine is busy: it says how close the simulator is to the cost of SimPy's own
event loop, the floor of any SimPy model that takes one event per step.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

REFERENCE_SCENARIOS = ("pcie8_ngram", "pcie8_eagle3", "pcie8_baseline")  # shipped scenarios, by name
DEFAULT_TOKENS = {"fast": (2048, 8192, 32768), "layer": (2048, 8192), "link": (2048,), "event": (2048,)}
DEFAULT_REPEATS = {"fast": 5, "layer": 3, "link": 3, "event": 3}
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
        return statistics.median(rate / floor for rate, floor in zip(self.tok_per_s, self.floor_steps_per_s))

    @property
    def floor_median(self) -> float:
        return statistics.median(self.floor_steps_per_s)


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

    started = time.perf_counter()
    result = run(scenario, baseline=False, max_work=max_work, **_overrides(fidelity, tokens, seed))
    return time.perf_counter() - started, result


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
    rates, real_time, floors, counts = [], [], [], []
    for rep in range(max(1, repeats)):
        wall, result = run_once(scenario, fidelity, tokens, seed + rep, max_work)
        rates.append(result.tokens / wall)
        real_time.append(result.sim_time_s / wall)
        counts.append(result.tokens)
        floors.append(simpy_floor())
    return BenchRow(scenario, fidelity, counts[0], tuple(rates), tuple(real_time), tuple(floors))
