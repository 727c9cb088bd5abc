"""Bounds on the work a command starts: checked before it runs, each with a flag that raises it.

A run's work is estimated from its workload: requests x (output tokens + prefill chunks), weighted by the cost of
its fidelity relative to the fast one: the event loop costs per step, a step generates about one token per request
(more when drafts are accepted, which the estimate ignores: it errs high), and a prompt is prefilled in chunks of
workload.max_prefill_tokens. The weights are the ratio of the fast fidelity's simulated tokens per
wall-second to each fidelity's, as `python -m simulator bench` reports them (README, "Fidelities and speed"): they
size an estimate in a message, never a result. A request costs REQUEST_STEPS steps of its own (its arrival,
admission and records), and the peak memory is estimated apart (docs/reliability.md, "Limits"): the run keeps
records per step and per request. Every limit is a finite number above 0: nan, inf, 0 or a negative limit would
switch the bound off, or refuse everything.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..config.errors import ConfigError

if TYPE_CHECKING:  # the command line's parser reads the limits below without loading the configuration's models
    from ..config import Scenario

# fast fidelity's simulated tokens per wall-second over each fidelity's (bench: ~117k fast, ~3k layer, 200-400 link)
FIDELITY_WEIGHT = {"fast": 1.0, "layer": 40.0, "link": 400.0, "event": 1300.0}  # event: 3.2x link's wall time
# (one 512-token request and its baseline: 7.1 s against 2.2 s, measured on the shared 2-core machine)
FAST_STEPS_PER_S = 100_000.0  # the order of the fast fidelity's speed on one core, for the time in the message
MAX_WORK = 20_000_000  # weighted steps: a few minutes at fast fidelity
# a one-token request at concurrency 1 costs ~63 us a run against ~10 us a step (measured, fast fidelity): its own
# arrival, admission and records are about 4 steps' work beyond its prefill chunk and token
REQUEST_STEPS = 4.0
MAX_MEMORY_GB = 1.0  # the default bound on a command's estimated peak resident memory
# the interpreter, numpy, SimPy and a machine's tables before the first step: 48-55 MB measured (fast), up to ~75 MB
# at link fidelity; rounded up
BASE_MEMORY_GB = 0.15
# peak RSS growth per simulated step of one run (a request's output tokens + prefill chunks; its own records are
# within it: a request is at least 2 steps), measured with resource.getrusage: fast 185-373 B (one-token requests
# at concurrency 1 the most), layer 640-1,500 B, link ~1,500-3,700 B (tests/test_limits.py checks that the estimate
# bounds a measured run); rounded up
STEP_BYTES = {"fast": 500.0, "layer": 2_000.0, "link": 4_000.0, "event": 4_000.0}  # event: as link (the same
# 96 MB peak for one 512-token request and its baseline; not measured longer)
MAX_POINTS = 100_000  # points in one sweep
MAX_TREE_SIZE = 128  # `tree --size`: the dynamic program is O(size^3 x depth); 128 runs in seconds
PROGRESS_AFTER_S = 5.0  # runs estimated longer than this show a progress bar on stderr


def workload_steps(scenario: Scenario) -> tuple[float, float]:
    """(requests, mean steps per request: output tokens + prefill chunks) of the scenario's workload."""
    from ..config.typical import mean_length

    workload = scenario.spec.workload
    arrival = workload.arrival
    chunk = workload.max_prefill_tokens
    if getattr(arrival, "kind", None) == "trace":
        from ..serving.requests import read_arrivals

        rows = read_arrivals(arrival, scenario.base_dir, scenario.source)
        return float(len(rows)), sum(o + -(-p // chunk) for _, p, o in rows) / len(rows)
    per_request = mean_length(workload.output_tokens) + math.ceil(mean_length(workload.prompt_tokens) / chunk)
    return float(workload.requests), per_request


def estimate_work(scenario: Scenario, runs: int = 2) -> float:
    """Weighted steps of `runs` simulations of the scenario (a run and its baseline by default), each request
    counted as REQUEST_STEPS steps more than its tokens and prefill chunks."""
    requests, per_request = workload_steps(scenario)
    return runs * requests * (per_request + REQUEST_STEPS) * FIDELITY_WEIGHT.get(scenario.spec.fidelity, 1.0)


def estimate_memory_GB(scenario: Scenario, runs: int = 2) -> float:
    """Estimated peak resident memory of `runs` simulations held together (a run and its baseline), in GB: an
    upper bound from the measured bytes per step (STEP_BYTES), the interpreter included."""
    requests, per_request = workload_steps(scenario)
    step_bytes = STEP_BYTES.get(scenario.spec.fidelity, max(STEP_BYTES.values()))
    return BASE_MEMORY_GB + runs * requests * per_request * step_bytes / 1e9


def estimated_seconds(work: float) -> float:
    return work / FAST_STEPS_PER_S


def check_limit(value: float | None, flag: str, default: float, where: str = "command line") -> float:
    """A limit as given (default when None): a finite number above 0, else one line naming the flag."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(where, flag, f"{value!r} is not a usable limit", "a finite number above 0, e.g. "
                          f"{default:g}")
    return value


def limit_value(flag: str, default: float):
    """An argparse `type` reading a limit: refused at once (exit 2, one line) unless finite and above 0."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ConfigError("command line", flag, f"{text!r} is not a number", "a finite number above 0") from None
        return check_limit(value, flag, default)

    return parse


def check_work(scenario: Scenario, limit: float | None = None, runs: int = 2, flag: str = "--max-work",
               memory_GB: float | None = None, where: str = "command line", memory_flag: str = "--max-memory-GB"
               ) -> float:
    """Refuse a run whose estimated work exceeds `limit` (default MAX_WORK), or whose estimated peak memory
    exceeds `memory_GB` (default MAX_MEMORY_GB); returns the work estimate."""
    limit = check_limit(limit, flag, MAX_WORK, where)
    memory_limit = check_limit(memory_GB, memory_flag, MAX_MEMORY_GB, where)
    work = estimate_work(scenario, runs)
    requests, per_request = workload_steps(scenario)
    fidelity = scenario.spec.fidelity
    size = f"{requests:,.0f} requests x ({per_request:,.0f} steps + {REQUEST_STEPS:g} a request) at {fidelity} fidelity"
    if work > limit:
        raise ConfigError(scenario.source, "workload",
                          f"too much work: {size} (weight {FIDELITY_WEIGHT.get(fidelity, 1.0):g}), {runs} run(s) = "
                          f"{work:.3g} weighted steps, roughly {_duration(estimated_seconds(work))}; the limit is "
                          f"{limit:.3g}", f"fewer requests or tokens, or raise the limit with {flag}{_sep(flag)}{_round_up(work)}")
    memory = estimate_memory_GB(scenario, runs)
    if memory > memory_limit:
        raise ConfigError(scenario.source, "workload",
                          f"too much memory: {size}, {runs} run(s) kept = about {memory:.3g} GB at peak; the limit is "
                          f"{memory_limit:g} GB", f"fewer requests or tokens, or raise the limit with {memory_flag}"
                          f"{_sep(memory_flag)}{math.ceil(memory)}")
    return work


MEMORY_FLAG = "--max-memory-GB"
# up to this many requests the start checks (machines, each request's KV cache: ~0.1 s for 10,000) come before the
# limits, so a context no GPU holds is named as such rather than as too much work; above it, after them
START_CHECK_REQUESTS = 10_000


def check_run(scenario: Scenario, max_work: float | None = None, runs: int = 2, memory_GB: float | None = None
              ) -> float:
    """Everything a command's run would refuse, found before it starts: the limits (check_work) and what the run
    checks at its start (serving.deployment.check_start: a fabric without a route, a request larger than the KV
    cache), in the same words. Returns the work estimate."""
    from ..serving.deployment import check_start

    if workload_steps(scenario)[0] <= START_CHECK_REQUESTS:
        check_start(scenario)
        return check_work(scenario, max_work, runs, memory_GB=memory_GB)
    work = check_work(scenario, max_work, runs, memory_GB=memory_GB)
    check_start(scenario)
    return work


def check_points(count: float, file: str, limit: int | None = None, flag: str = "--max-points") -> None:
    """Refuse a sweep of more than `limit` points (default MAX_POINTS) before any point is made."""
    limit = check_limit(limit, flag, MAX_POINTS)
    if count > limit:
        raise ConfigError(file, "axes", f"{count:.4g} points, more than the limit of {limit:,}",
                          f"fewer values or samples, or raise the limit with {flag} {_round_up(count)}")


def check_workers(workers: int | None, flag: str = "--workers") -> None:
    if workers is not None and workers < 1:
        raise ConfigError("command line", flag, f"{workers} workers", ">= 1")


def cap_workers(workers: int | None, points: int, cpus: int) -> int:
    """Worker processes to start: as asked (default: the CPUs), never more than the points or the CPUs."""
    return max(1, min(workers or cpus, cpus, max(points, 1)))


def _sep(flag: str) -> str:
    """How a value follows its flag: `--max-work 3e7` on the command line, `max_work=3e7` in the Python API."""
    return " " if flag.startswith("-") else "="


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
