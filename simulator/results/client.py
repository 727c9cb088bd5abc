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

from ..serving.records import KIND_DECODE, KIND_SPEC
from .quantiles import percentiles
from .sections import ClientFigures, ClientStatsMs


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


def stats_ms(values_us) -> ClientStatsMs | None:
    """mean, median, std (numpy's, population) and p90 / p99 of a sample in microseconds, in milliseconds."""
    a = np.asarray(values_us, dtype=float)
    if a.size == 0:
        return None
    a = a / 1e3
    p50, p90, p99 = percentiles(a, (50, 90, 99))
    return ClientStatsMs(mean=float(a.mean()), median=p50, std=float(a.std()), p90=p90, p99=p99)


def chunk_gaps(steps, first_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(gap, requests, tokens per request) of one instance's decode and speculative steps: a request that was in
    the step before waited from that step's end (a prefill in between stalls it too); one that joins waited from
    its first token (first_tokens: the first-token times of the requests that decode here)."""
    decoding = np.flatnonzero((steps["kind"] == KIND_DECODE) | (steps["kind"] == KIND_SPEC))
    end = steps["start_at"][decoding] + steps["duration_us"][decoding]
    if end.size == 0:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    if not (end[1:] >= end[:-1]).all():  # one instance's steps end in order: a stable sort would leave them
        order = np.argsort(end, kind="stable")
        end, decoding = end[order], decoding[order]
    batch = steps["batch"][decoding].astype(float)
    per_request = steps["tokens"][decoding] / np.maximum(batch, 1)
    del decoding
    first_step = np.searchsorted(end, first_tokens, "right")  # each request's first decode step
    joins = first_step < end.size
    stayed = batch
    stayed -= np.bincount(first_step[joins], minlength=end.size)
    np.maximum(stayed, 0, out=stayed)
    gaps = np.empty(end.size)  # the gap since the step before (none before the first)
    gaps[0] = np.nan
    np.subtract(end[1:], end[:-1], out=gaps[1:])
    keep = (stayed > 0) & np.isfinite(gaps)
    first_step = first_step[joins]
    joined = end[first_step] - first_tokens[joins]
    joined_keep = np.isfinite(joined)  # a joining request counts once
    return (np.concatenate([gaps[keep], joined[joined_keep]]),
            np.concatenate([stayed[keep], np.ones(int(joined_keep.sum()))]),
            np.concatenate([per_request[keep], per_request[first_step][joined_keep]]))


def weighted_stats_ms(pairs: np.ndarray, mean_us: float) -> ClientStatsMs | None:
    """mean (given: the clients' exact one), median, std, p90 and p99 of values each occurring a weight's times,
    given as one complex array, value + 1j x weight (sorted here, in place: the pairs are the only step-sized array
    besides the cumulative weights); percentiles by the inverted weighted CDF (each value holds its share of the
    weight)."""
    if pairs.size == 0:
        return None
    v, w = pairs.real, pairs.imag  # views of the pairs
    total = w.sum()
    if total <= 0:
        return None
    pairs.sort()  # by value (equal values by weight)
    v /= 1e3
    cdf = np.cumsum(w)
    cdf /= total
    at = lambda q: float(v[min(np.searchsorted(cdf, q / 100.0), v.size - 1)])  # noqa: E731
    median, p90, p99 = at(50), at(90), at(99)
    del cdf
    average = float(np.average(v, weights=w))
    v -= average
    v *= v
    return ClientStatsMs(mean=float(mean_us) / 1e3, median=median, std=float(np.sqrt(np.average(v, weights=w))),
                         p90=p90, p99=p99)


def gap_pairs(parts: list, per_token: bool) -> np.ndarray:
    """The instances' chunk gaps (chunk_gaps; parts: each instance's steps and first-token times) as one complex
    array, gap + 1j x requests: vLLM's. per_token: SGLang's, each gap over the tokens a request emits in its step,
    weighted by those tokens. Filled instance by instance (each one's arrays freed as it is), into an array as
    long as the steps and joins could need (its unused tail never touched), made once the first instance's
    temporaries are freed (their memory reused)."""
    pairs, at = None, 0
    for steps, first in parts:
        gaps, counts, per_request = chunk_gaps(steps, first)
        if per_token:
            counts *= per_request  # in place: the same floats
            np.maximum(per_request, 1e-12, out=per_request)
            gaps /= per_request
        if pairs is None:
            pairs = np.empty(sum(len(steps) + len(first) for steps, first in parts), dtype=complex)
        pairs.real[at:at + gaps.size] = gaps
        pairs.imag[at:at + gaps.size] = counts
        at += gaps.size
    return pairs[:at] if pairs is not None else np.zeros(0, dtype=complex)


def itl_stats(run, done) -> tuple[ClientStatsMs | None, ClientStatsMs | None]:
    """vLLM's ITL (one gap per streamed chunk) and SGLang's (a chunk's gap split evenly over its tokens). Their
    means are exact (the requests' decode time over their chunks, or over their tokens after the first); the
    spread comes from the steps' gaps, each request of a step taken to emit the step's mean tokens. One is
    computed, and freed, before the other (their step-sized pairs are never held together)."""
    parts = [(steps, np.array([r.first_token_at for r in reqs if r.first_token_at is not None], dtype=float))
             for steps, reqs in ([(i.steps, i.requests) for i in run.instances] if run.instances
                                 else [(run.steps, run.requests)])]
    decode_us = sum(r.completed_at - r.first_token_at for r in done)
    tokens = sum(r.generated - 1 for r in done)
    pairs = gap_pairs(parts, per_token=False)
    chunks = pairs.imag.sum()
    per_chunk = weighted_stats_ms(pairs, decode_us / chunks) if chunks else None
    del pairs
    per_token = weighted_stats_ms(gap_pairs(parts, per_token=True), decode_us / tokens) if tokens else None
    return per_chunk, per_token


def client_metrics(run, max_concurrency: int | None) -> ClientFigures:
    """TTFT, TPOT, ITL (vLLM's per chunk and SGLang's per token), E2E latency and the client's queueing, as
    the benchmark clients report them, with the output throughput over the benchmark's duration."""
    done = [r for r in run.requests if r.completed_at is not None and r.first_token_at is not None]
    sent = dict(zip((r.request_id for r in done), send_times(done, max_concurrency)))
    ttft = [r.first_token_at - sent[r.request_id] for r in done]
    e2e = [r.completed_at - sent[r.request_id] for r in done]
    tpot = [(r.completed_at - r.first_token_at) / (r.generated - 1) for r in done if r.generated > 1]
    per_chunk, per_token = itl_stats(run, done)
    duration_s = (max(r.completed_at for r in done) - min(sent.values())) / 1e6 if done else 0.0
    return ClientFigures(
        ttft_ms=stats_ms(ttft), tpot_ms=stats_ms(tpot), itl_ms=per_chunk, itl_per_token_ms=per_token,
        e2e_latency_ms=stats_ms(e2e), client_queue_ms=stats_ms([sent[r.request_id] - r.arrived_at for r in done]),
        output_throughput_tok_s=sum(r.generated for r in done) / duration_s if duration_s > 0 else 0.0,
        max_concurrency=max_concurrency)


def client_line(load: dict) -> list[str]:
    """The report's line of the clients' figures (docs/metrics.md), where the run was loaded."""
    c = load.get("client") or {}
    if not c.get("ttft_ms"):
        return []

    def figure(key: str, digits: int = 1) -> str:
        s = c.get(key) or {}
        return f"{s['mean']:,.{digits}f} / {s['p99']:,.{digits}f}" if s else "-"
    return [f"    as the clients    mean / p99 ms: TTFT {figure('ttft_ms')}, TPOT {figure('tpot_ms', 2)}, ITL "
            f"{figure('itl_ms', 2)} per chunk (vLLM), {figure('itl_per_token_ms', 2)} per token (SGLang), E2E "
            f"{figure('e2e_latency_ms', 0)} (docs/metrics.md)"]
