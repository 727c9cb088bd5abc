"""Benchmark clients' result files (vllm bench serve --save-result, sglang.bench_serving) in calibrate and validate,
and the client-side latencies (TTFT, TPOT, ITL, E2E) they are compared with."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench_writer import client_record
from conftest import ROOT, scenario_path

BENCH = os.path.join(ROOT, "tests", "data", "bench")
VLLM, SGLANG = os.path.join(BENCH, "vllm_pcie8_eagle3.json"), os.path.join(BENCH, "sglang_pcie8_eagle3.jsonl")


def test_the_shipped_files_map_to_their_workload():
    from simulator.analysis.bench_files import read_bench

    for path, client in ((VLLM, "vllm"), (SGLANG, "sglang")):
        bench = read_bench(path)
        raw = json.loads(open(path).read().splitlines()[-1])
        assert bench.client == client
        assert bench.overrides == {"workload.requests": raw["completed"],
                                   "workload.prompt_tokens": raw["total_input_tokens"] // raw["completed"],
                                   "workload.output_tokens": raw["total_output_tokens"] // raw["completed"],
                                   "workload.arrival": {"kind": "all_at_once"},
                                   "workload.max_concurrency": raw["max_concurrency"]}
        names = {name for name, *_ in bench.figures()}
        assert {"mean TTFT", "mean TPOT", "mean E2E latency", "output throughput"} <= names


def test_validate_reads_a_client_file_against_a_scenario(capsys):
    from simulator.cli import main

    assert main(["validate", VLLM]) == 2
    assert "--scenario" in capsys.readouterr().err
    assert main(["validate", VLLM, SGLANG, "--scenario", "pcie8_eagle3", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["cases"]
    assert {r["source"] for r in rows} == {"vllm_pcie8_eagle3", "sglang_pcie8_eagle3"}
    itl = {r["case"] for r in rows if "ITL" in r["case"]}
    assert "mean ITL (per chunk)" in itl and "mean ITL (per token)" in itl  # the clients differ here


def test_calibrate_recovers_the_parameter_a_client_file_was_made_at(tmp_path):
    """A file written (in SGLang's format) from a run at eager_launch_us = 16 is fitted back from 12.87."""
    from simulator.analysis.calibrate import calibrate
    from simulator.api.run import run

    made_at = 16.0
    short = {"workload__requests": 3, "workload__prompt_tokens": 256, "workload__output_tokens": 64,
             "workload__max_concurrency": 1}
    path = tmp_path / "bench.jsonl"
    path.write_text(json.dumps(client_record(run(scenario_path("pcie8_eagle3.yaml"), **short,
                                                 topology__host__eager_launch_us=made_at), "sglang")) + "\n")
    fit = calibrate(scenario_path("pcie8_eagle3.yaml"), str(path), ["topology.host.eager_launch_us"])
    assert fit.success
    assert abs(fit.values[0] - made_at) <= max(3 * fit.sigmas[0], 1e-3 * made_at)


def test_step_gaps_and_requests_give_the_same_mean_itl():
    """vLLM's mean ITL two ways: the requests' decode time over their chunks (results.client's mean), and the
    steps' gaps weighted by the requests in each (the spread's sample): one instance batched, and two instances."""
    from simulator.results.client import chunk_gaps
    from simulator.api.run import run

    for name, extra in (("pcie8_eagle3.yaml", {"workload__max_running_requests": 2, "workload__requests": 5}),
                        ("pcie8_tp4_dp2.yaml", {"workload__max_running_requests": 2, "workload__requests": 6})):
        r = run(scenario_path(name), workload__output_tokens=48, workload__prompt_tokens=256, **extra)
        parts = [(i.steps, i.requests) for i in r.run.instances] or [(r.run.steps, r.run.requests)]
        total = count = 0.0
        for steps, requests in parts:
            gaps, counts, _ = chunk_gaps(steps, np.array([q.first_token_at for q in requests]))
            total, count = total + float((gaps * counts).sum()), count + float(counts.sum())
        assert total / count / 1e3 == pytest.approx(r.load["client"]["itl_ms"]["mean"], rel=1e-9)


class _Request:
    def __init__(self, i, arrived, completed):
        self.request_id, self.arrived_at, self.completed_at = i, arrived, completed


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0.1, 50)), min_size=1, max_size=30), st.integers(1, 5))
def test_the_client_never_has_more_than_its_concurrency_in_flight(spans, limit):
    """Requests served FIFO (completion = send + service, one server per slot) sent by send_times: never more than
    `limit` in flight, never before arrival, and without a limit exactly at arrival."""
    from simulator.results.client import send_times

    arrivals = sorted(a for a, _ in spans)
    slots = [0.0] * limit  # a server that runs `limit` at once, FIFO: the clients' semaphore and the engine agree
    requests = []
    for i, (arrived, (_, service)) in enumerate(zip(arrivals, spans)):
        start = max(arrived, min(slots))
        slots[slots.index(min(slots))] = start + service
        requests.append(_Request(i, arrived, start + service))
    sent = send_times(requests, limit)
    assert all(s >= r.arrived_at for s, r in zip(sent, requests))
    for s in sent:
        in_flight = sum(1 for t, r in zip(sent, requests) if t <= s < r.completed_at)
        assert in_flight <= limit
    assert send_times(requests, None) == [r.arrived_at for r in requests]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.5, 1.0, 2.25, 7.0, 1e3, 3.5e4]), st.integers(1, 40)), min_size=1,
                max_size=120))
def test_weighted_itl_percentiles_are_the_expanded_samples(pairs):
    """The ITL spread from (gap, weight) pairs equals the sample with each gap repeated weight times: its
    inverted-CDF percentiles (the smallest gap whose share of the weight at or below reaches q, in integers) and
    its population std; the pairs' ties in any order."""
    from simulator.results.client import weighted_stats_ms

    values = np.array([v for v, _ in pairs])
    weights = np.array([w for _, w in pairs])
    expanded = np.sort(np.repeat(values, weights)) / 1e3
    total = int(weights.sum())
    got = weighted_stats_ms(values + 1j * weights.astype(float), 123.0)
    for name, q in (("median", 50), ("p90", 90), ("p99", 99)):
        assert got[name] == expanded[-(-q * total // 100) - 1], name
    assert got["std"] == pytest.approx(float(expanded.std()), rel=1e-9, abs=1e-12)
    assert got["mean"] == 0.123
