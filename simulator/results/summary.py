"""Result of a run: throughput, step times, accept statistics and a time breakdown, as pure functions of the step log."""
from __future__ import annotations

from dataclasses import field, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from ..compiled import dataclass
from ..serving.records import KIND_DECODE, KIND_SPEC, StepColumns
from .client import client_metrics, send_times
from .planner import target_check
from .quantiles import percentiles
from .collective_sections import AllreduceChoices, CollectiveFigures
from .sections import (AcceptWindow, AllreduceMs, BreakdownMs, KernelSources, LoadFigures, PercentilesMs, PlannerFigures,
                       PolicyFigures, Provenance, SpeculationFigures, StatsMs, StepTimesMs, WhatIf, json_of)

if TYPE_CHECKING:
    from .deployment import DeploymentFigures

BREAKDOWN = BreakdownMs._keys()  # compute, memory, launch, allreduce_transfer, allreduce_wait, draft, other


def step_table(server) -> StepColumns:
    """The server's step log as named columns (times in microseconds), costs blended between their anchors."""
    return server.log.columns()


def _stats_ms(values_us: np.ndarray) -> StatsMs | None:
    if values_us.size == 0:
        return None
    p50, p99 = percentiles(values_us, (50, 99))
    return StatsMs(float(values_us.mean()) / 1e3, p50 / 1e3, p99 / 1e3)


WINDOW_TOKENS = 512


def accept_windows(lengths: np.ndarray, positions: np.ndarray, window: int = WINDOW_TOKENS) -> list[AcceptWindow]:
    """Mean accept length of the speculative steps whose request had generated [start, end) tokens."""
    if lengths.size == 0:
        return []
    bins = positions // window
    steps = np.bincount(bins)
    totals = np.bincount(bins, weights=lengths)  # integer lengths: exact sums, the same means as per-window masks
    return [AcceptWindow(b * window, (b + 1) * window, total / count, count)
            for b, (total, count) in enumerate(zip(totals.tolist(), steps.tolist())) if count]


MOST_WINDOWS = 8  # the report's line of accept-length windows holds at most this many (the JSON has them all)


def merged_windows(windows: list[AcceptWindow], most: int = MOST_WINDOWS) -> list[AcceptWindow]:
    """Consecutive windows merged, a whole number of them each, into at most `most`: each mean weighted by steps."""
    size = -(-len(windows) // most)
    out = []
    for i in range(0, len(windows), size):
        group = windows[i:i + size]
        steps = sum(w["steps"] for w in group)  # by key: AcceptWindows, or the mappings a caller wrote
        out.append(AcceptWindow(group[0]["start"], group[0]["start"] + size * (group[0]["end"] - group[0]["start"]),
                                sum(w["mean_accept_len"] * w["steps"] for w in group) / steps, steps))
    return out


@dataclass(frozen=True)
class RunSummary:
    """What one simulated run (speculative or baseline) measured."""

    tokens: int
    sim_time_us: float
    throughput_tok_s: float
    steps: StepColumns
    accept_lengths: np.ndarray
    accept_positions: np.ndarray
    requests: list
    kv_peak_tokens: int = 0
    kv_capacity_tokens: int = 0
    preemptions: int = 0
    slots: tuple = ()  # the run's drafters (speculation.setup.DrafterSlot), for figures derived from the run
    instances: tuple = ()  # a deployment's per-instance summaries (results.deployment); empty for one instance
    link_delay_us: float = 0.0  # link fidelity: collective time beyond what the collectives take alone (contention)
    kv_transfers: tuple = ()  # a decode instance's KV caches received: (bytes per rank, microseconds) each

    @property
    def decode_steps(self) -> np.ndarray:
        return self.steps["kind"] == KIND_DECODE

    @property
    def spec_steps(self) -> np.ndarray:
        return self.steps["kind"] == KIND_SPEC


def summarize(server, steps: StepColumns | None = None) -> RunSummary:
    """The server's run; steps: its log's columns where read already (a deployment's, joined)."""
    steps = step_table(server) if steps is None else steps
    tokens = int(steps["tokens"].sum())
    end = max((r.completed_at or 0.0) for r in server.requests) if server.requests else 0.0
    begin = min(r.arrived_at for r in server.requests) if server.requests else 0.0
    sim_time = float(end - begin)  # from the first arrival to the last completion
    throughput = tokens / (sim_time / 1e6) if sim_time > 0 else 0.0
    return RunSummary(tokens, sim_time, throughput, steps, _int_array(server.accept_lengths),
                      _int_array(server.accept_positions), server.requests, int(server.kv_peak),
                      int(server.kv_capacity), int(server.preemptions), tuple(server.slots),
                      link_delay_us=server.link_delay_us, kv_transfers=tuple(server.kv_received))


def _int_array(values) -> np.ndarray:
    """A run's per-walk integers as numpy, without a copy where they are a typed array already (serving.walking)."""
    if getattr(values, "typecode", None) == "i":
        return np.frombuffer(values, dtype=np.intc) if len(values) else np.zeros(0, dtype=np.intc)
    return np.asarray(values, dtype=np.int64)


@dataclass(frozen=True)
class Result:
    """Everything a report, a sweep or a plot needs from one scenario run (and its baseline)."""

    scenario: str
    fidelity: str
    seed: int
    throughput_tok_s: float
    baseline_tok_s: float
    speedup: float
    tpot_ms: float
    ttft_ms: float
    mean_accept_len: float
    accept_len_hist: dict[str, int]
    step_ms: StepTimesMs
    breakdown_ms_per_token: BreakdownMs
    allreduce_per_pass: int
    allreduce_ms_per_pass: dict[str, AllreduceMs]  # "verify", "decode": where the run has such passes
    breakeven_accept_len: float | None
    sim_time_s: float
    wall_time_s: float
    tokens: int
    allreduce_choice: AllreduceChoices
    speculation: SpeculationFigures
    description: str = ""
    graph_verify: bool = False
    eager_verify: bool = True
    accept_len_windows: list[AcceptWindow] = field(default_factory=list)  # per window of each request's tokens
    policy: PolicyFigures | None = None  # how often the policy speculated, with which drafter
    what_if: WhatIf = field(default_factory=WhatIf)  # the report's quick levers (derived.what_if)
    load: LoadFigures | None = None  # latency percentiles, goodput, queueing, KV use
    baseline_load: LoadFigures | None = None
    planner: PlannerFigures | None = None  # per GPU, goodput at the target, cost (results/planner.py)
    kernels: KernelSources | None = None  # which source timed each kernel family (measured/roofline)
    provenance: Provenance | None = None  # what was run (results/provenance.py)
    collectives: CollectiveFigures = field(default_factory=CollectiveFigures)  # a wider split's, per decode pass
    deployment: DeploymentFigures | None = None  # the instances and their figures (results/deployment.py)
    run: RunSummary | None = field(default=None, repr=False, compare=False)
    baseline: RunSummary | None = field(default=None, repr=False, compare=False)

    @property
    def extra(self) -> dict[str, Any]:
        """The fields after `speculation`, by name (for callers written against the old string-keyed dict)."""
        names = [f.name for f in fields(self)]
        return {k: getattr(self, k) for k in names[names.index("speculation") + 1:] if k not in ("run", "baseline")}

    def to_dict(self) -> dict[str, Any]:
        return {f.name: json_of(getattr(self, f.name)) for f in fields(self) if f.name not in ("run", "baseline")}


def breakdown_per_token(run: RunSummary) -> BreakdownMs:
    """Milliseconds per generated token by category; they sum to sim_time / tokens.

    A deployment of n instances books each instance's steps and its idle time within the deployment's span, and
    divides by n: the instances' time per token, averaged over them (it sums to span / tokens as well).
    """
    s = run.steps
    if run.tokens == 0:
        return BreakdownMs(*(0.0 for _ in BREAKDOWN))
    n = max(1, len(run.instances))
    out = {k: float(s[k].sum()) for k in BREAKDOWN}
    out["other"] += n * run.sim_time_us - float(s["duration_us"].sum())  # idle gaps between steps, if any
    return BreakdownMs(**{k: v / n / run.tokens / 1e3 for k, v in out.items()})


def _percentiles_ms(values_us: list[float]) -> PercentilesMs | None:
    if not values_us:
        return None
    a = np.asarray(values_us) / 1e3
    p50, p90, p99 = percentiles(a, (50, 90, 99))
    return PercentilesMs(float(a.mean()), p50, p90, p99)


def load_metrics(run: RunSummary, target, max_concurrency: int | None = None) -> LoadFigures:
    """Per-request latency percentiles, request throughput, goodput under the latency target, queueing, KV use;
    `client`: TTFT, TPOT, ITL and E2E as the benchmark clients compute them (results.client). Latencies count
    from when the client sends a request (its arrival, or later with workload.max_concurrency)."""
    done = [r for r in run.requests if r.completed_at is not None and r.first_token_at is not None]
    sent = send_times(done, max_concurrency)
    ttft = [r.first_token_at - s for r, s in zip(done, sent)]
    tpot = [(r.completed_at - r.first_token_at) / (r.generated - 1) for r in done if r.generated > 1]
    queue = [r.admitted_at - s for r, s in zip(done, sent) if r.admitted_at is not None]
    seconds = run.sim_time_us / 1e6
    good = [r for r, t in zip(done, ttft) if t / 1e3 <= target.ttft_ms and
            (r.generated <= 1 or (r.completed_at - r.first_token_at) / (r.generated - 1) / 1e3 <= target.tpot_ms)]
    decoding = run.steps["kind"] > 0
    return LoadFigures(
        ttft_ms=_percentiles_ms(ttft), tpot_ms=_percentiles_ms(tpot), queue_ms=_percentiles_ms(queue),
        request_throughput_rps=len(done) / seconds if seconds > 0 else 0.0,
        goodput_rps=len(good) / seconds if seconds > 0 else 0.0,
        goodput_tok_s=sum(r.generated for r in good) / seconds if seconds > 0 else 0.0,
        slo_attainment=len(good) / len(done) if done else 0.0,
        target=target_check(ttft, tpot, target),
        kv_peak_tokens=run.kv_peak_tokens, kv_capacity_tokens=run.kv_capacity_tokens,
        kv_peak_fraction=run.kv_peak_tokens / run.kv_capacity_tokens if run.kv_capacity_tokens else 0.0,
        preemptions=run.preemptions,
        mean_batch=float(run.steps.at("batch", decoding).mean()) if decoding.any() else 0.0,
        max_waiting=int(run.steps["waiting"].max()) if run.steps["waiting"].size else 0,
        client=client_metrics(run, max_concurrency))


def mean_step_us(run: RunSummary, mask: np.ndarray) -> float | None:
    durations = run.steps.at("duration_us", mask)
    return float(durations.mean()) if durations.size else None


def accept_histogram(lengths: np.ndarray) -> dict[str, int]:
    if lengths.size == 0:
        return {}
    counts = np.bincount(lengths)
    return {str(k): int(c) for k, c in enumerate(counts) if k > 0}
