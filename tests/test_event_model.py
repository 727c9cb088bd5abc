"""The event fidelity's processes, listed from running simulations: the scheduler, the drafter, every rank's host and
GPU stream and every collective are SimPy processes, a speculative step takes at least ranks x collectives events,
and the exact timelines of tiny passes (two ranks, hand-computed)."""
from __future__ import annotations

import os
from collections import Counter

import numpy as np
import pytest
import simpy

import simulator.api.run
from conftest import SCENARIOS
from simulator.timing.linkpass import SharedLinks
from simulator.timing.machine import Machine
from simulator.serving.records import KIND_SPEC
from simulator.serving.server import Server


class Recording(simpy.Environment):
    """An environment that lists the generator of every process it starts and counts the events it processes."""

    def __init__(self):
        super().__init__()
        self.started: Counter = Counter()
        self.processed = 0

    def process(self, generator):
        self.started[generator.__qualname__] += 1
        return super().process(generator)

    def step(self):
        self.processed += 1
        return super().step()


def pcie8_eagle3_server(env, max_steps=None) -> Server:
    machine = Machine(simulator.api.run.resolve(os.path.join(SCENARIOS, "pcie8_eagle3.yaml")))
    return Server(env, machine, 0, "event", max_steps=max_steps)


def test_every_part_is_a_process_in_a_running_simulation(monkeypatch):
    """Counted exactly: one scheduler, one drafter round per speculative step, a host and a stream per rank, and a
    collective process for every segment of every pass the ranks ran (each ended, each started by its ranks)."""
    from simulator.serving.ranks import RankSet

    orders = []
    launch = RankSet.launch
    monkeypatch.setattr(RankSet, "launch", lambda self, *a, **k: orders.append(launch(self, *a, **k)) or orders[-1])
    env = Recording()
    server = pcie8_eagle3_server(env, max_steps=4)  # the prefill and three speculative steps
    env.process(server.run())
    env.run()
    tp = server.machine.tp
    started = env.started
    assert started["Server.run"] == 1  # the scheduler: batches, admits, asks the policy and drafter, orders passes
    speculative = int((server.log.columns()["kind"] == KIND_SPEC).sum())
    assert speculative == 3 and started["Drafter.propose"] == speculative  # one round of drafts per step
    assert started["Rank.host"] == tp and started["Rank.gpu_stream"] == tp
    assert len(orders) == 1 + 3 * (1 + len(server.step_spec(KIND_SPEC, server.policy.decision, 1).drafts))
    assert started["Collective.run"] == sum(o.plan.num_segments for o in orders)  # every collective of every pass
    assert all(c.process is not None and c.ended_at >= c.started_at for o in orders for c in o.collectives)


def test_a_speculative_step_takes_at_least_ranks_x_collectives_events():
    env = Recording()
    server = pcie8_eagle3_server(env)
    spec = server.step_spec(KIND_SPEC, server.policy.decision, 1)
    plan = server.machine.plan_at("target", spec.main.shape, spec.main.graph, 1000)
    collectives = int((plan.collective_us > 0).sum())

    def scheduler():
        yield from server.costs.step(env, spec, 1000)

    env.process(scheduler())
    env.run()
    assert collectives >= 120  # 61 layers, two all-reduces each (and the logits' all-gather)
    assert env.processed >= server.machine.tp * collectives


def test_two_ranks_meet_at_each_collective_exactly():
    """Two ranks, two segments, hand-computed: rank 1's host is ready late for segment 0, so rank 0 waits; each
    collective starts when the later rank arrives and ends its cost later."""
    from simulator.timing.passplan import PassPlan
    from simulator.serving.ranks import PassOrder, Rank

    env = simpy.Environment()
    plan = PassPlan(launches=np.array([4.0, 4.0]), compute_us=np.array([10.0, 5.0]), memory_us=np.zeros(2),
                    gap_us=np.zeros(2), last_us=np.array([1.0, 1.0]), collective_us=np.array([3.0, 2.0]),
                    allreduce_mask=np.array([True, True]), graph=False, ranks=2)
    h = np.array([[8.0, 20.0], [15.0, 20.0]])  # when each rank's own launches let it end each segment
    order = PassOrder(env, plan, h, np.array([[6.0, 12.0], [13.0, 19.0]]), None)
    ranks = [Rank(env, r) for r in range(2)]
    for rank in ranks:
        env.process(rank.host())
        env.process(rank.gpu_stream())
        rank.orders.put(order)
    env.run()
    # segment 0: rank 0 arrives at max(0 + 10, 8) = 10, rank 1 at max(10, 15) = 15; collective 0: 15 -> 18
    # segment 1: both at max(18 + 5, 20) = 23; collective 1: 23 -> 25
    assert [c.started_at for c in order.collectives] == [15.0, 23.0]
    assert order.ends() == [18.0, 25.0]
    assert order.synced.triggered


def test_host_slowdown_needs_the_event_fidelity():
    from simulator.config.errors import ConfigError

    with pytest.raises(ConfigError, match="runtime.host_slowdown"):
        simulator.run(os.path.join(SCENARIOS, "pcie8_eagle3.yaml"), baseline=False, runtime__host_slowdown={0: 1.2})
