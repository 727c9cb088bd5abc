"""Load: arrivals, continuous batching, KV-cache memory, batch-dependent break-even and load-aware policies (issue 6)."""
from __future__ import annotations

import numpy as np
import pytest

import simulator
from simulator.cli import main
from simulator.config.workload import RateArrivals, Workload
from simulator.serving.records import KIND_SPEC
from simulator.serving.requests import make_requests
from conftest import scenario_path

LLAMA = scenario_path("nvlink8_h100_llama8b_eagle3.yaml")
EAGLE3 = scenario_path("pcie8_eagle3.yaml")
PRESSURE = scenario_path("pcie8_kv_pressure.yaml")
GOODPUT = {"kind": "goodput", "choices": [0, 1, 2, 3, 4, 5, 6, 7]}


def test_poisson_arrivals_have_the_configured_rate():
    """Mean inter-arrival time of 2000 requests within 3 standard errors of 1/rate (exponential: sd = mean)."""
    work = Workload(requests=2000, arrival=RateArrivals(kind="poisson", rate_per_s=4.0))
    times = np.array([r.arrived_at for r in make_requests(work, seed=3)]) / 1e6
    gaps = np.diff(times)
    assert abs(gaps.mean() - 0.25) < 3 * 0.25 / np.sqrt(gaps.size)
    assert (gaps >= 0).all()


def test_arrival_trace_is_replayed(tmp_path):
    trace = tmp_path / "arrivals.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,500,64\n0.5,800,32\n2.0,100,16\n")
    r = simulator.run(EAGLE3, workload__arrival={"kind": "trace", "file": str(trace)}, baseline=False)
    arrived = sorted(req.arrived_at / 1e6 for req in r.run.requests)
    assert arrived == pytest.approx([0.0, 0.5, 2.0])
    assert r.tokens == 64 + 32 + 16


def test_continuous_batching_conserves_tokens_and_respects_the_cap():
    r = simulator.run(LLAMA, workload__requests=40, workload__concurrency=8,
                      workload__output_tokens={"kind": "uniform", "low": 50, "high": 300}, baseline=False)
    assert r.tokens == sum(req.output_tokens for req in r.run.requests)
    assert all(req.generated == req.output_tokens for req in r.run.requests)
    steps = r.run.steps
    assert steps["batch"][steps["kind"] > 0].max() <= 8
    # chunked prefill: a 1000-token prompt batch never exceeds max_prefill_tokens per step
    assert steps["verify_tokens"][steps["kind"] == 0].max() <= 8192


def test_chunked_prefill_splits_long_prompts():
    r = simulator.run(EAGLE3, workload__requests=1, workload__prompt_tokens=20000, workload__output_tokens=8,
                      workload__max_prefill_tokens=4096, baseline=False)
    prefill = r.run.steps["kind"] == 0
    assert prefill.sum() == 5  # ceil(20000 / 4096)
    assert r.run.steps["verify_tokens"][prefill].tolist() == [4096, 4096, 4096, 4096, 3616]


def test_request_too_large_for_kv_memory_is_a_clear_error(capsys):
    code = main([PRESSURE, "--set", "workload.prompt_tokens=200000"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "KV cache" in err and "140,889" in err


def test_memory_pressure_queues_and_the_report_shows_it():
    r = simulator.run(PRESSURE)
    load = r.extra["load"]
    assert r.tokens == 16 * 1024
    assert load["max_waiting"] > 0 and load["queue_ms"]["p99"] > 0
    assert load["kv_peak_tokens"] <= load["kv_capacity_tokens"]
    assert load["mean_batch"] < 16  # memory, not the concurrency cap, limits the batch
    from simulator.results.report import to_table
    assert "queueing" in to_table(r) and "KV cache peak" in to_table(r)


def test_preempt_mode_evicts_and_still_finishes_every_request():
    """Admitted on their prompts, long generations outgrow the cache: the newest is evicted and recomputed later."""
    r = simulator.run(PRESSURE, workload__kv_overflow="preempt", workload__prompt_tokens=20000,
                      workload__output_tokens=6000, workload__requests=10, baseline=False)
    load = r.extra["load"]
    assert load["preemptions"] > 0
    assert load["kv_peak_tokens"] <= load["kv_capacity_tokens"]
    assert r.tokens == 10 * 6000
    assert all(req.completed_at is not None for req in r.run.requests)


def test_latency_percentiles_are_ordered():
    r = simulator.run(LLAMA, workload__requests=64, workload__concurrency=8, baseline=False)
    for name in ("ttft_ms", "tpot_ms", "queue_ms"):
        v = r.extra["load"][name]
        assert v["p50"] <= v["p90"] <= v["p99"]
    assert 0 < r.extra["load"]["goodput_rps"] <= r.extra["load"]["request_throughput_rps"]


@pytest.fixture(scope="module")
def concurrency_runs():
    return {c: simulator.run(LLAMA, workload__concurrency=c) for c in (1, 8, 64)}


def test_speedup_falls_as_concurrency_rises(concurrency_runs):
    speedups = [concurrency_runs[c].speedup for c in (1, 8, 64)]
    assert speedups[0] > speedups[1] > speedups[2] > 1.0
    assert speedups[2] < 0.85 * speedups[0]


def test_goodput_policy_is_never_much_worse_and_sometimes_better(concurrency_runs):
    wins = 0
    for c, static in concurrency_runs.items():
        goodput = simulator.run(LLAMA, workload__concurrency=c, policy=GOODPUT, baseline=False)
        best = max(static.throughput_tok_s, static.baseline_tok_s)
        assert goodput.throughput_tok_s >= 0.97 * best, (c, goodput.throughput_tok_s, best)
        wins += goodput.throughput_tok_s > best
    assert wins >= 1


def test_batch_threshold_turns_speculation_off_for_big_batches():
    r = simulator.run(LLAMA, workload__requests=24, workload__concurrency=16,
                      workload__output_tokens={"kind": "uniform", "low": 50, "high": 400},
                      policy={"kind": "batch_threshold", "max_batch": 4}, baseline=False)
    steps = r.run.steps
    spec = steps["kind"] == KIND_SPEC
    assert spec.any() and steps["batch"][spec].max() <= 4
    assert (steps["batch"][steps["kind"] == 1] > 4).all()


def test_batch_table_picks_draft_length_by_batch():
    table = {"kind": "batch_table", "table": [{"max_batch": 2, "draft_tokens": 5}, {"max_batch": 8, "draft_tokens": 2},
                                              {"max_batch": 1000, "draft_tokens": 0}]}
    r = simulator.run(LLAMA, workload__requests=32, workload__concurrency=16, policy=table, baseline=False)
    steps = r.run.steps
    for batch, depth, kind in zip(steps["batch"], steps["depth"], steps["kind"]):
        if kind == 0:
            continue
        expected = 5 if batch <= 2 else 2 if batch <= 8 else 0
        assert depth == expected


def test_breakeven_moves_with_batch_on_the_reference_machine():
    """Decode gets costlier with the batch (more experts touched), the eager verify's host cost does not."""
    be = [simulator.run(EAGLE3, workload__requests=16, workload__concurrency=c).breakeven_accept_len for c in (1, 8)]
    assert be[1] < be[0] - 0.3


def test_kv_reserved_for_the_policys_longest_draft_not_the_scenarios():
    """A batch-table policy that always drafts a chain of 7 on a scenario whose draft_tokens is 1: a request in a
    speculative step holds its context + 8 tokens (the verified chain and its root), not + 2. Worked by hand, from
    the machine's KV capacity C (read from a 1-request run) with two requests of P = (C - 12) // 2 prompt and 4 output
    tokens sent at once, two batch slots, queue mode: reserving P + 4 + 2 each, both fit (2P + 12 <= C) and their
    first speculative step together holds 2 (P + 1) + 2 x 8 = 2P + 18 > C tokens; reserving P + 4 + 8 each
    (2P + 24 > C) admits one at a time, whose steps hold at most P + 3 + 8 <= C."""
    memory = {"runtime__memory_fraction": 0.25}  # Llama-3.1-8B's 16 GB of weights on 20 GB: a cache of tens of K tokens
    probe = simulator.run(LLAMA, **memory, workload__requests=1, workload__output_tokens=2, baseline=False)
    capacity = probe.load.kv_capacity_tokens
    prompt = (capacity - 12) // 2
    assert 1000 < prompt and 2 * prompt + 12 <= capacity < 2 * prompt + 18
    r = simulator.run(LLAMA, **memory, workload__requests=2, workload__max_running_requests=2,
                      workload__prompt_tokens=prompt, workload__output_tokens=4, workload__kv_overflow="queue",
                      speculation__draft_tokens=1, speculation__verify="chain",
                      policy={"kind": "batch_table", "table": [{"max_batch": 64, "draft_tokens": 7}]}, baseline=False)
    steps = r.run.steps
    spec = steps["kind"] == KIND_SPEC
    assert spec.any() and set(steps["verify_tokens"][spec].tolist()) == {8}  # the policy's chain of 7, root included
    assert steps["kv_tokens"].max() <= capacity and r.load.kv_peak_tokens <= capacity
    assert steps["batch"][steps["kind"] > 0].max() == 1  # one request at a time: two would not fit
    assert r.tokens == 8
