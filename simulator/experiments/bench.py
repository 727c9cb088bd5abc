"""Simulated tokens per wall-second at each fidelity, and how much faster than the modelled machine that is."""
from __future__ import annotations

import time
from dataclasses import dataclass

REFERENCE_SCENARIOS = ("scenarios/pcie8_ngram.yaml", "scenarios/pcie8_eagle3.yaml", "scenarios/pcie8_baseline.yaml")
DEFAULT_TOKENS = {"fast": (2048, 8192, 32768), "layer": (2048, 8192), "link": (2048,)}


@dataclass(frozen=True)
class BenchRow:
    scenario: str
    fidelity: str
    tokens: int
    wall_s: float
    sim_s: float

    @property
    def tokens_per_wall_s(self) -> float:
        return self.tokens / self.wall_s

    @property
    def faster_than_real_time(self) -> float:
        return self.sim_s / self.wall_s


def measure(scenario: str, fidelity: str, tokens: int | None, seed: int) -> BenchRow:
    """The speculative run only, from a cold per-shape cache (a fresh seed): one request generating `tokens`, or
    with tokens None the scenario's own workload as shipped."""
    from ..results.run import run

    workload = {} if tokens is None else {"workload__requests": 1, "workload__output_tokens": tokens}
    started = time.perf_counter()
    result = run(scenario, baseline=False, fidelity=fidelity, seed=seed, **workload)
    wall = time.perf_counter() - started
    return BenchRow(scenario, fidelity, result.tokens, wall, result.sim_time_s)
