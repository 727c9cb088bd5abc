"""Named records for a Result's sections: frozen records whose fields are the section's keys, in the unit the
section's name says (step_ms: milliseconds). Code reads them by attribute (`result.step_ms.verify.p50`); each is also
a read-only Mapping of the same keys, so the JSON, the CSV columns and the dotted paths of sweeps, calibration and
validation (`step_ms.verify.mean`) read them as before. `json_of` turns a section (nested ones too) into its object."""
from __future__ import annotations

from .section_record import Section, json_of  # noqa: F401  (json_of re-exported: callers read it here)


class StatsMs(Section):
    """Mean and percentiles of a set of times, in milliseconds."""

    mean: float
    p50: float
    p99: float


class StepTimesMs(Section):
    """Step times of a run (None where the run has no such step): plain decode steps, the verify pass, the drafting
    and the whole speculative step, and the baseline's plain decode steps."""

    decode: StatsMs | None
    verify: StatsMs | None
    draft: StatsMs | None
    step: StatsMs | None
    baseline_decode: StatsMs | None


class AllreduceMs(Section):
    """A pass's all-reduce time, milliseconds per pass: the mean over ranks, what a profile of one typical rank shows
    (the median rank's), and the mean over ranks split into transfer and waiting for the slowest rank."""

    rank_mean: float
    profiled_rank: float
    transfer: float
    wait: float


class BreakdownMs(Section):
    """Milliseconds per generated token by category (they sum to the simulated time per token)."""

    compute: float  # kernels the roofline or the database finds compute-bound
    memory: float  # kernels bound by memory
    launch: float  # the GPU idle, waiting for its host's launches
    allreduce_transfer: float  # collectives moving bytes (the all-reduces, and any other of the split)
    allreduce_wait: float  # ranks waiting at collectives for the slowest
    draft: float  # drafting
    other: float  # the scheduler, syncs and idle time between steps


class SpeculationFigures(Section):
    """What speculated: the method, its draft tokens and verify (chain or tree), and the acceptance model's expected
    tokens per verify (None where the model has no closed form)."""

    method: str
    draft_tokens: int
    verify: str
    expected_accept_len: float | None


class PercentilesMs(Section):
    """Mean and percentiles of per-request latencies, in milliseconds."""

    mean: float
    p50: float
    p90: float
    p99: float


class TargetCheck(Section):
    """The workload's latency target (results.planner.target_check): its limits (ms) and percentile, the run's TTFT
    and TPOT at that percentile (None without such requests) and whether both are within the limits."""

    ttft_ms: float
    tpot_ms: float
    percentile: float
    ttft_ms_at_percentile: float | None
    tpot_ms_at_percentile: float | None
    met: bool


class ClientStatsMs(Section):
    """A latency as the benchmark clients summarise it, in milliseconds: mean, median, standard deviation
    (population), p90 and p99."""

    mean: float
    median: float
    std: float
    p90: float
    p99: float


class ClientFigures(Section):
    """What the benchmark clients report (results.client.client_metrics): TTFT, TPOT, ITL per chunk (vLLM's) and per
    token (SGLang's), end-to-end latency and the client's own queueing (None without such requests), the output
    throughput over the benchmark's duration and the client's concurrency cap (None without one)."""

    ttft_ms: ClientStatsMs | None
    tpot_ms: ClientStatsMs | None
    itl_ms: ClientStatsMs | None
    itl_per_token_ms: ClientStatsMs | None
    e2e_latency_ms: ClientStatsMs | None
    client_queue_ms: ClientStatsMs | None
    output_throughput_tok_s: float
    max_concurrency: int | None


class LoadFigures(Section):
    """A run under its load: per-request latencies (None without such requests), request throughput and goodput under
    the latency target, the target's check (results.planner.target_check), KV cache use, preemptions, batch and
    queue, and the benchmark clients' own figures (results.client.client_metrics)."""

    ttft_ms: PercentilesMs | None
    tpot_ms: PercentilesMs | None
    queue_ms: PercentilesMs | None
    request_throughput_rps: float
    goodput_rps: float
    goodput_tok_s: float
    slo_attainment: float
    target: TargetCheck | None
    kv_peak_tokens: int
    kv_capacity_tokens: int
    kv_peak_fraction: float
    preemptions: int
    mean_batch: float
    max_waiting: int
    client: ClientFigures


class GpuPrice(Section):
    """The topology's rental price of one GPU (config.topology.GPUPrice, whose fields these are): US dollars per
    GPU-hour, where it is published and the date it was read."""

    usd_per_gpu_hour: float
    source: str
    as_of: str


class PlannerFigures(Section):
    """The planner's figures of a run and its baseline: per GPU throughput and goodput, whether the latency target is
    met (None without one), the GPU price (topology `price`, None without one) and US dollars per million tokens
    (all, and good ones only)."""

    gpus: int
    throughput_tok_s_per_gpu: float
    baseline_tok_s_per_gpu: float
    goodput_tok_s_per_gpu: float
    baseline_goodput_tok_s_per_gpu: float
    target_met: bool | None
    baseline_target_met: bool | None
    price: GpuPrice | None
    usd_per_mtok: float | None
    baseline_usd_per_mtok: float | None
    usd_per_good_mtok: float | None


class Provenance(Section):
    """What was run (results.provenance.provenance): the simulator's version, the scenario, topology and model by
    name and file (None for one not read from a file), the overrides as 'a.b=value' texts, the seed, fidelity and
    kernel-cost source, the engine profile (None without one) and the generated one-line description."""

    specsim_version: str
    scenario: str
    scenario_file: str | None
    topology: str
    topology_file: str | None
    model: str
    model_file: str | None
    overrides: tuple[str, ...]
    seed: int
    fidelity: str
    kernel_source: str
    engine: str | None
    engine_profile: str | None
    description: str


class KernelSources(Section):
    """Which source timed the kernels (measured database, roofline, and why), and per kernel family which served."""

    source: str
    families: dict[str, str]


class AcceptWindow(Section):
    """The speculative steps whose request had generated [start, end) tokens: how many, and their mean accept length."""

    start: int
    end: int
    mean_accept_len: float
    steps: int


class PolicyFigures(Section):
    """How the policy chose: its kind, the plain and speculative steps it decided, the share that speculated and,
    for a policy of several drafters, each drafter's share (absent otherwise)."""

    kind: str
    steps: int
    speculative_share: float
    drafter_share: dict[str, float] | None = None

    _optional = ("drafter_share",)


class GraphVerifyWhatIf(Section):
    """The run's speculative steps with the verify pass captured in a CUDA graph: its time, the accept length that
    breaks even, and the speedup at the run's accept length."""

    verify_ms: float
    breakeven_accept_len: float
    speedup_at_this_accept_len: float


class WhatIf(Section):
    """The report's quick levers (results.derived.what_if); empty where none applies."""

    cuda_graph_verify: GraphVerifyWhatIf | None = None

    _optional = ("cuda_graph_verify",)
