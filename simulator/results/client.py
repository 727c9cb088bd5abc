"""What a benchmark client measures: TTFT, TPOT, ITL and E2E latency as `vllm bench serve` and
`sglang.bench_serving` compute them (docs/metrics.md has the formulas and where each client's code says so).

Modelled: the client sends a request when it has arrived and, with `workload.max_concurrency`, when fewer than that
many are outstanding (the clients' semaphore); every latency counts from that send. The server streams one chunk
per request per step; vLLM's ITL is the gap between a request's chunks, SGLang's splits a chunk's gap evenly over
the tokens in it. Assumed: a step's gap is the same for every request in its batch (one instance's steps in order).
"""
from __future__ import annotations

import heapq

import numpy as np

from ..engine.records import KIND_DECODE, KIND_SPEC
from .quantiles import percentiles


def send_times(requests, max_concurrency: int | None) -> list[float]:
    """When the client sends each request (microseconds): at its arrival, or, with at most max_concurrency in
    flight, when the earliest of those completes (vLLM's and SGLang's asyncio.Semaphore). One instance admits the
    same requests at the same times either way (its batch cap is min(engine, client)), so the send times follow
    from the simulated completions."""
    if max_concurrency is None:
        return [r.arrived_at for r in requests]
    out, in_flight = [], []  # in_flight: completion times of the requests sent and not yet complete
    for r in sorted(requests, key=lambda r: (r.arrived_at, r.request_id)):
        sent = r.arrived_at
        while in_flight and in_flight[0] <= sent:
            heapq.heappop(in_flight)
        if len(in_flight) >= max_concurrency:
            sent = max(sent, heapq.heappop(in_flight))
        heapq.heappush(in_flight, r.completed_at if r.completed_at is not None else float("inf"))
        out.append((r.request_id, sent))
    by_id = dict(out)
    return [by_id[r.request_id] for r in requests]


def stats_ms(values_us) -> dict[str, float] | None:
    """mean, median, std (numpy's, population) and p90 / p99 of a sample in microseconds, in milliseconds."""
    a = np.asarray(values_us, dtype=float)
    if a.size == 0:
        return None
    a = a / 1e3
    p50, p90, p99 = percentiles(a, (50, 90, 99))
    return {"mean": float(a.mean()), "median": p50, "std": float(a.std()), "p90": p90, "p99": p99}


def step_gaps(steps) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(gap, batch, tokens) of each decode or speculative step of one instance: the gap from the end of the step
    before it (of any kind: a prefill in between stalls every running request) to its own end."""
    ends = steps["start_at"] + steps["duration_us"]
    order = np.argsort(ends, kind="stable")
    kinds, ends = steps["kind"][order], ends[order]
    gaps = np.diff(ends, prepend=ends[:1])
    decoding = (kinds == KIND_DECODE) | (kinds == KIND_SPEC)
    decoding[0] = False  # the first step has no step before it
    return gaps[decoding], steps["batch"][order][decoding], steps["tokens"][order][decoding]


def itl_samples(run) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """vLLM's ITL sample (one gap per request per step, microseconds) and SGLang's as (values, weights): each step's
    gap divided by the mean tokens a request of its batch emitted, weighted by the tokens."""
    parts = [instance.steps for instance in run.instances] if run.instances else [run.steps]
    gaps, batches, tokens = (np.concatenate(x) for x in zip(*(step_gaps(s) for s in parts)))
    per_chunk = np.repeat(gaps, batches.astype(int))
    per_token = gaps * batches / np.maximum(tokens, 1)
    return per_chunk, per_token, tokens.astype(float), batches


def weighted_stats_ms(values_us: np.ndarray, weights: np.ndarray) -> dict[str, float] | None:
    """stats_ms of a sample where value i occurs weights[i] times (whole token counts)."""
    return stats_ms(np.repeat(values_us, weights.astype(int))) if values_us.size else None


def client_metrics(run, max_concurrency: int | None) -> dict:
    """TTFT, TPOT, ITL (vLLM's per chunk and SGLang's per token), E2E latency and the client's queueing, as
    the benchmark clients report them, with the output throughput over the benchmark's duration."""
    done = [r for r in run.requests if r.completed_at is not None and r.first_token_at is not None]
    sent = dict(zip((r.request_id for r in done), send_times(done, max_concurrency)))
    ttft = [r.first_token_at - sent[r.request_id] for r in done]
    e2e = [r.completed_at - sent[r.request_id] for r in done]
    tpot = [(r.completed_at - r.first_token_at) / (r.generated - 1) for r in done if r.generated > 1]
    per_chunk, per_token, tokens, _ = itl_samples(run)
    duration_s = (max(r.completed_at for r in done) - min(sent.values())) / 1e6 if done else 0.0
    return {"ttft_ms": stats_ms(ttft), "tpot_ms": stats_ms(tpot), "itl_ms": stats_ms(per_chunk),
            "itl_per_token_ms": weighted_stats_ms(per_token, tokens), "e2e_latency_ms": stats_ms(e2e),
            "client_queue_ms": stats_ms([sent[r.request_id] - r.arrived_at for r in done]),
            "output_throughput_tok_s": sum(r.generated for r in done) / duration_s if duration_s > 0 else 0.0,
            "max_concurrency": max_concurrency}
