"""What a planner compares between deployments: throughput per GPU, goodput at a latency target, cost per token.

- Per GPU: the run's output tokens per second divided by the GPUs the deployment holds (tp x pp per instance, times
  its instances: `parallelism.num_gpus`), not by the machine's GPUs: a tp=4 group on an 8-GPU box is charged 4.
- Goodput: output tokens per second of the requests that met both latency targets (TTFT and mean TPOT after the
  first token, the workload's `target`), as vLLM's benchmark counts "good" requests; the run *meets* the target
  when the target's percentile of TTFT and of TPOT over its requests are within the limits.
- Cost: where the topology names a price per GPU-hour (`topology.price`, with its source), US dollars per million
  output tokens = GPUs x price per hour / (3600 x tokens per second) x 1e6; the GPUs are paid for whether they are
  busy or not, so the figure assumes the load of this run around the clock.

`RANKINGS` names the figures `compare`, `plan` and `sweep` rank by, each with the direction that is better.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

from .sections import GpuPrice, LoadFigures, PlannerFigures, TargetCheck


class Ranking(NamedTuple):
    """A figure to rank deployments by: its dotted path in a result's JSON and whether higher is better."""

    path: str
    higher_is_better: bool
    label: str


RANKINGS: dict[str, Ranking] = {
    "throughput": Ranking("throughput_tok_s", True, "tok/s"),
    "throughput_per_gpu": Ranking("planner.throughput_tok_s_per_gpu", True, "tok/s per GPU"),
    "goodput": Ranking("load.goodput_tok_s", True, "goodput tok/s"),
    "goodput_per_gpu": Ranking("planner.goodput_tok_s_per_gpu", True, "goodput tok/s per GPU"),
    "cost": Ranking("planner.usd_per_mtok", False, "$ per M output tokens"),
    "speedup": Ranking("speedup", True, "speedup"),
}


def target_check(ttft_us: list[float], tpot_us: list[float], target) -> TargetCheck:
    """The target, the percentile latencies it is judged on (ms; None without requests) and whether both are met."""
    import numpy as np  # here, not at the top: `--help` lists the rankings without loading numpy

    from .quantiles import percentiles

    def at(values):
        return percentiles(np.asarray(values) / 1e3, (target.percentile,))[0] if values else None

    ttft, tpot = at(ttft_us), at(tpot_us)
    met = bool(ttft_us) and ttft <= target.ttft_ms and (tpot is None or tpot <= target.tpot_ms)
    return TargetCheck(ttft_ms=target.ttft_ms, tpot_ms=target.tpot_ms, percentile=target.percentile,
                       ttft_ms_at_percentile=ttft, tpot_ms_at_percentile=tpot, met=met)


def per_mtok_usd(gpus: int, usd_per_gpu_hour: float | None, tok_s: float) -> float | None:
    """Dollars per million output tokens at tok_s on gpus GPUs rented at usd_per_gpu_hour (None: no price or no
    tokens)."""
    if usd_per_gpu_hour is None or not tok_s > 0:
        return None
    return gpus * usd_per_gpu_hour / 3600.0 / tok_s * 1e6


def planner_figures(scenario, throughput_tok_s: float, baseline_tok_s: float, load: LoadFigures,
                    baseline_load: LoadFigures) -> PlannerFigures:
    """The planner's figures of one run and its baseline (the `planner` section of a Result)."""
    gpus = scenario.spec.parallelism.num_gpus
    price = scenario.topology.price
    usd = price.usd_per_gpu_hour if price is not None else None
    goodput, baseline_goodput = load.goodput_tok_s, baseline_load.goodput_tok_s
    return PlannerFigures(
        gpus=gpus,
        throughput_tok_s_per_gpu=throughput_tok_s / gpus,
        baseline_tok_s_per_gpu=baseline_tok_s / gpus,
        goodput_tok_s_per_gpu=goodput / gpus,
        baseline_goodput_tok_s_per_gpu=baseline_goodput / gpus,
        target_met=load.target.met if load.target is not None else None,
        baseline_target_met=baseline_load.target.met if baseline_load.target is not None else None,
        price=GpuPrice(**price.model_dump()) if price is not None else None,
        usd_per_mtok=per_mtok_usd(gpus, usd, throughput_tok_s),
        baseline_usd_per_mtok=per_mtok_usd(gpus, usd, baseline_tok_s),
        usd_per_good_mtok=per_mtok_usd(gpus, usd, goodput))


def lookup(data: Any, path: str) -> Any:
    """The value at a dotted path of a result's JSON (None where the path stops)."""
    for key in path.split("."):
        if not isinstance(data, Mapping) or key not in data:  # a dict, or a named section (results.sections)
            return None
        data = data[key]
    return data


def sort_key(name: str, value_of=None):
    """A sort key putting the best item first by the named ranking, items without a finite value last.

    `value_of(item, path)` reads the figure (default: `lookup` on the item as a result's JSON)."""
    ranking = RANKINGS[name]
    read = value_of or lookup

    def key(item):
        value = read(item, ranking.path)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            return (1, 0.0)
        return (0, -value if ranking.higher_is_better else value)

    return key


def rank(items: list, name: str, value_of=None) -> list:
    """Items best first by the named ranking (stable: ties and items without the figure keep their order)."""
    return sorted(items, key=sort_key(name, value_of))


def queueing_note(load: dict) -> list[str]:
    """A line saying that the TTFT is mostly waiting in the server's queue (by the workload's design: requests
    arrive faster than the batch cap admits them), and how a benchmark client would count it instead."""
    ttft, queue = (load.get("ttft_ms") or {}).get("p90"), (load.get("queue_ms") or {}).get("p90")
    client = load.get("client") or {}
    if not ttft or queue is None or queue < 0.5 * ttft or client.get("max_concurrency") is not None:
        return []
    return [f"    queueing          TTFT is mostly waiting in the server's queue (p90 {queue:,.1f} ms; up to "
            f"{load.get('max_waiting', 0)} waiting): the workload sends requests faster than the engine admits them "
            "(workload.max_running_requests, KV memory), by design; workload.max_concurrency holds them at the "
            "client instead, as vllm bench serve / sglang.bench_serving --max-concurrency do (docs/metrics.md)"]


def table_lines(result) -> list[str]:
    """The report's lines on per-GPU throughput, goodput at the target and cost (empty before the planner ran)."""
    p, load = result.planner, result.load
    if not p:
        return []
    target = load.target or {}
    pct = f"p{target.get('percentile', 0):g}"
    at = lambda key: "-" if target.get(key) is None else f"{target[key]:,.1f}"  # noqa: E731
    lines = [f"  per GPU             {p['throughput_tok_s_per_gpu']:8.1f} tok/s on {p['gpus']} GPUs; goodput "
             f"{p['goodput_tok_s_per_gpu']:.1f} tok/s per GPU (TTFT <= {target.get('ttft_ms', 0):g} ms, "
             f"TPOT <= {target.get('tpot_ms', 0):g} ms)",
             f"    latency target    {pct} TTFT {at('ttft_ms_at_percentile')} ms, {pct} TPOT "
             f"{at('tpot_ms_at_percentile')} ms: {'met' if p['target_met'] else 'NOT met'}"] + queueing_note(load)
    if p.usd_per_mtok is not None:
        price = p.price
        lines.append(f"    cost              ${p.usd_per_mtok:,.2f} per million output tokens at "
                     f"${price.usd_per_gpu_hour:g} per GPU-hour ({price.source}, {price.as_of})")
    return lines
