"""Bounds on the work a command starts: checked before it runs, each with a flag that raises it.

A run's work is estimated from its workload: requests x (output tokens + prefill chunks), weighted by the cost of
its fidelity relative to the fast one: the event loop costs per step, a step generates about one token per request
(more when drafts are accepted, which the estimate ignores: it errs high), and a prompt is prefilled in chunks of
workload.max_prefill_tokens. The weights are the ratio of the fast fidelity's simulated tokens per
wall-second to each fidelity's, as `python -m simulator bench` reports them (README, "Fidelities and speed"): they
size an estimate in a message, never a result.
"""
from __future__ import annotations

import math

from ..config import Scenario
from ..config.errors import ConfigError
from ..config.typical import mean_length

# fast fidelity's simulated tokens per wall-second over each fidelity's (bench: ~117k fast, ~3k layer, 200-400 link)
FIDELITY_WEIGHT = {"fast": 1.0, "layer": 40.0, "link": 400.0}
FAST_STEPS_PER_S = 100_000.0  # the order of the fast fidelity's speed on one core, for the time in the message
MAX_WORK = 20_000_000  # weighted steps: a few minutes at fast fidelity, at most ~1 GB of step records
MAX_POINTS = 100_000  # points in one sweep
MAX_TREE_SIZE = 128  # `tree --size`: the dynamic program is O(size^3 x depth); 128 runs in seconds
PROGRESS_AFTER_S = 5.0  # runs estimated longer than this show a progress bar on stderr


def workload_steps(scenario: Scenario) -> tuple[float, float]:
    """(requests, mean steps per request: output tokens + prefill chunks) of the scenario's workload."""
    workload = scenario.spec.workload
    arrival = workload.arrival
    chunk = workload.max_prefill_tokens
    if getattr(arrival, "kind", None) == "trace":
        from ..engine.requests import read_arrivals

        rows = read_arrivals(arrival, scenario.base_dir, scenario.source)
        return float(len(rows)), sum(o + -(-p // chunk) for _, p, o in rows) / len(rows)
    per_request = mean_length(workload.output_tokens) + math.ceil(mean_length(workload.prompt_tokens) / chunk)
    return float(workload.requests), per_request


def estimate_work(scenario: Scenario, runs: int = 2) -> float:
    """Weighted steps of `runs` simulations of the scenario (a run and its baseline by default)."""
    requests, per_request = workload_steps(scenario)
    return runs * requests * per_request * FIDELITY_WEIGHT.get(scenario.spec.fidelity, 1.0)


def estimated_seconds(work: float) -> float:
    return work / FAST_STEPS_PER_S


def check_work(scenario: Scenario, limit: float | None = None, runs: int = 2, flag: str = "--max-work") -> float:
    """Refuse a run whose estimated work exceeds `limit` (default MAX_WORK); returns the estimate."""
    limit = MAX_WORK if limit is None else limit
    work = estimate_work(scenario, runs)
    if work > limit:
        requests, per_request = workload_steps(scenario)
        fidelity = scenario.spec.fidelity
        raise ConfigError(scenario.source, "workload",
                          f"too much work: {requests:,.0f} requests x {per_request:,.0f} steps at {fidelity} "
                          f"fidelity (weight {FIDELITY_WEIGHT.get(fidelity, 1.0):g}), {runs} run(s) = {work:.3g} "
                          f"weighted steps, roughly {_duration(estimated_seconds(work))}; the limit is {limit:.3g}",
                          f"fewer requests or tokens, or raise the limit with {flag} {_round_up(work)}")
    return work


def check_points(count: float, file: str, limit: int | None = None, flag: str = "--max-points") -> None:
    """Refuse a sweep of more than `limit` points (default MAX_POINTS) before any point is made."""
    limit = MAX_POINTS if limit is None else limit
    if count > limit:
        raise ConfigError(file, "axes", f"{count:.4g} points, more than the limit of {limit:,}",
                          f"fewer values or samples, or raise the limit with {flag} {_round_up(count)}")


def check_workers(workers: int | None, flag: str = "--workers") -> None:
    if workers is not None and workers < 1:
        raise ConfigError("command line", flag, f"{workers} workers", ">= 1")


def cap_workers(workers: int | None, points: int, cpus: int) -> int:
    """Worker processes to start: as asked (default: the CPUs), never more than the points or the CPUs."""
    return max(1, min(workers or cpus, cpus, max(points, 1)))


def _round_up(value: float) -> str:
    """A limit a little above `value`, readable: 1.3e9 -> 2e+09."""
    digits = len(str(int(value))) - 1
    lead = int(value // 10**digits) + 1
    return f"{lead}e{digits}" if digits > 3 else str(int(value) + 1)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds / 3600:.3g} hours"
