"""workload.turns: a benchmark client whose threads run conversations of several turns in order (SGLang's
benchmark/mtbench run_batch(num_threads=C)): a later turn is sent when the one before it completes, and a thread
takes the next conversation when its last turn completes. Expected values follow from that rule alone."""
from __future__ import annotations

import os

import pytest

import simulator
from simulator.cli import main
from conftest import SCENARIOS, scenario_path

LLAMA = scenario_path("nvlink8_h100_llama8b_eagle3.yaml")
MTBENCH = os.path.join(SCENARIOS, "validation", "cases", "h100_llama8b_eagle3_mtbench.yaml")
UNEVEN = {"kind": "uniform", "low": 20, "high": 80}  # turns of different lengths, so the conversations end apart


def by_id(result):
    return sorted(result.run.requests, key=lambda r: r.request_id)


@pytest.mark.parametrize("speculation", ["eagle3", "none"])
def test_two_threads_over_three_conversations(speculation):
    """Requests 0-1, 2-3, 4-5 are three conversations of two turns; two threads: 0 and 2 are sent at once, 1 when
    0 completes, 3 when 2 completes, 4 (the third conversation) when the first of 1 and 3 completes, 5 when 4 does."""
    r = simulator.run(LLAMA, workload__requests=6, workload__turns=2, workload__max_concurrency=2,
                      workload__max_running_requests=4, workload__prompt_tokens=100, workload__output_tokens=UNEVEN,
                      speculation__method=speculation, baseline=False)
    q = by_id(r)
    assert q[0].arrived_at == 0 and q[2].arrived_at == 0
    assert q[1].arrived_at == q[0].completed_at and q[3].arrived_at == q[2].completed_at
    assert q[4].arrived_at == min(q[1].completed_at, q[3].completed_at)
    assert q[5].arrived_at == q[4].completed_at
    assert r.tokens == sum(x.output_tokens for x in q)


def test_never_more_conversations_in_flight_than_threads():
    """At every send, fewer than max_concurrency other requests are outstanding (one per thread at most)."""
    r = simulator.run(LLAMA, workload__requests=24, workload__turns=3, workload__max_concurrency=3,
                      workload__max_running_requests=8, workload__prompt_tokens=100, workload__output_tokens=UNEVEN,
                      speculation__method="none", baseline=False)
    q = by_id(r)
    for x in q:
        outstanding = sum(1 for y in q if y is not x and y.arrived_at <= x.arrived_at < y.completed_at)
        assert outstanding < 3
    assert sum(1 for x in q if x.arrived_at == 0) == 3


def test_without_a_client_cap_every_first_turn_is_sent_at_once():
    r = simulator.run(LLAMA, workload__requests=6, workload__turns=3, workload__max_running_requests=4,
                      workload__prompt_tokens=100, workload__output_tokens=40, speculation__method="none",
                      baseline=False)
    q = by_id(r)
    assert [x.arrived_at == 0 for x in q] == [True, False, False, True, False, False]
    assert q[4].arrived_at == q[3].completed_at and q[2].arrived_at == q[1].completed_at


def test_the_mtbench_case_runs_64_threads_over_80_questions():
    """The EAGLE-3 batch case at 64: 64 first turns at once; each of the other 96 requests is sent at another's
    completion (a question's second turn at its first's, questions 65-80 at a finished question's second turn)."""
    r = simulator.run(MTBENCH, workload__max_running_requests=64, workload__max_concurrency=64, baseline=False)
    q = by_id(r)
    assert len(q) == 160 and sum(1 for x in q if x.arrived_at == 0) == 64
    completions = {x.completed_at for x in q}
    assert all(x.arrived_at in completions for x in q if x.arrived_at > 0)
    assert all(q[i + 1].arrived_at == q[i].completed_at for i in range(0, 160, 2))


def test_turns_need_arrivals_at_once_on_one_instance(capsys):
    code = main([LLAMA, "--set", "workload.turns=2", "--set", "workload.arrival.kind=poisson",
                 "--set", "workload.arrival.rate_per_s=2"])
    assert code == 2 and "workload.turns" in capsys.readouterr().err
