"""Two-batch overlap under expert parallelism (scenarios/event/dsv3_tbo_ep16.yaml, serving/overlap.py): on vs off
with the same host draws, where it pays (64 requests a group: the all-to-all hidden behind the other micro-batch's
compute), where it costs (16 a group: each half reads the experts' weights again), and its limit: a collective in
flight can hide only the one segment the stream runs meanwhile, so what the overlap saves is at most
min(compute, communication) per layer."""
from __future__ import annotations

import os

import numpy as np
import pytest
import simpy

import simulator
import simulator.api.run
from conftest import SCENARIOS
from simulator.timing.linkpass import SharedLinks
from simulator.timing.machine import Machine
from simulator.serving.records import KIND_SPEC
from simulator.timing.stepspec import PassSpec
from simulator.model.cost import PassShape
from simulator.serving.overlap import region, split_plan
from simulator.serving.ranks import RankSet

TBO = os.path.join(SCENARIOS, "event", "dsv3_tbo_ep16.yaml")


@pytest.fixture(scope="module")
def machine():
    return Machine(simulator.api.run.resolve(TBO))


def verify(machine, batch: int):
    """The scenario's verify pass at `batch` requests of its prompt's context: (spec, context)."""
    spec = machine.scenario.spec
    shape = PassShape(spec.speculation.draft_tokens + 1, batch, 0, False, True)
    return PassSpec("target", shape, True), batch * spec.workload.prompt_tokens


def run(machine, plan, waits=None) -> float:
    """One pass on the ranks with the links shared (as at event fidelity), the same draws every time (seed 0)."""
    env = simpy.Environment()
    ranks = RankSet(env, machine.host, machine.tp, SharedLinks(env, machine.fabric).view(0))
    order = ranks.launch(plan, np.random.default_rng(0), 0.0, waits)
    env.run(until=order.synced)
    return order.ends()[-1]


def on_and_off(machine, batch: int) -> tuple[float, float]:
    spec, context = verify(machine, batch)
    plan, waits = split_plan(machine, spec, context)
    return run(machine, plan, waits), run(machine, machine.plan_at("target", spec.shape, True, context))


def test_at_64_requests_a_group_tbo_hides_the_all_to_all(machine):
    batch = machine.scenario.spec.workload.max_running_requests
    assert batch // machine.split.groups == 64
    on, off = on_and_off(machine, batch)
    assert on < 0.95 * off


def test_at_16_requests_a_group_tbo_costs(machine):
    """Each micro-batch's experts read their weights as the whole batch's do: with little to compute per weight, the
    second read costs more than the hidden all-to-all saves."""
    on, off = on_and_off(machine, 16 * machine.split.groups)
    assert on > off


def test_the_overlap_hides_at_most_min_compute_comm_per_layer(machine):
    """TBO against the same two micro-batches run one segment after another (the same plan and draws, no overlap):
    the time saved is positive, at most what each collective's next segment on the stream (the other micro-batch's)
    computes, and so at most min(compute, communication) summed per layer; the stream still runs all the work."""
    spec, context = verify(machine, machine.scenario.spec.workload.max_running_requests)
    plan, waits = split_plan(machine, spec, context)
    on, serial = run(machine, plan, waits), run(machine, plan)
    first, last = region(machine, spec.shape)
    items = range(first, first + 2 * (last + 1 - first))  # the micro-batches' segments, interleaved
    W, T = plan.gpu_us, plan.collective_us
    saved = serial - on
    assert saved > 0
    assert saved <= sum(min(T[i], W[i + 1]) for i in items) + 1e-6
    per_layer = [slice(i, i + 4) for i in range(first, items.stop, 4)]  # two segments a layer, two micro-batches
    assert (last + 1 - first) % 2 == 0
    assert saved <= sum(min(W[s].sum(), T[s].sum()) for s in per_layer) + 1e-6
    assert on >= W.sum()


def test_the_shipped_scenario_runs_its_verify_passes_split():
    """A short run of the scenario: the same steps on and off; a speculative step's verify is split (another
    duration) while every attention group has two requests or more, and runs whole once one has fewer."""
    short = {"workload__requests": 32, "workload__max_running_requests": 32, "workload__output_tokens": 6,
             "workload__prompt_tokens": 64}
    on = simulator.run(TBO, baseline=False, **short)
    off = simulator.run(TBO, baseline=False, runtime__two_batch_overlap=False, **short)
    assert on.tokens == off.tokens
    S = on.run.steps
    spec = S["kind"] == KIND_SPEC
    split = spec & (-(-S["batch"] // 16) >= 2)
    assert split.sum() >= 2 and (spec & ~split).sum() >= 1
    assert np.all(S["pass_us"][split] != off.run.steps["pass_us"][split])
    # (the same floats but for the rounding of times measured from another start)
    assert S["pass_us"][spec & ~split] == pytest.approx(off.run.steps["pass_us"][spec & ~split], rel=1e-12)


def test_two_batch_overlap_needs_the_event_fidelity_and_an_all_to_all(capsys):
    from simulator.cli import main as cli_main
    from simulator.config.errors import ConfigError

    # the command line: --fidelity event is accepted, and a dense TP scenario is one line, exit 2, before any run
    assert cli_main([os.path.join(SCENARIOS, "pcie8_eagle3.yaml"), "--fidelity", "event",
                     "--set", "runtime.two_batch_overlap=true", "--set", "workload.output_tokens=8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "runtime.two_batch_overlap: two-batch overlap hides expert parallelism's all-to-all" in err[0]

    with pytest.raises(ConfigError, match="runtime.two_batch_overlap: two-batch overlap needs the event fidelity"):
        simulator.run(TBO, baseline=False, fidelity="fast")
    with pytest.raises(ConfigError, match="runtime.two_batch_overlap: two-batch overlap hides expert parallelism"):
        simulator.run(os.path.join(SCENARIOS, "pcie8_eagle3.yaml"), baseline=False, fidelity="event",
                      runtime__two_batch_overlap=True, workload__output_tokens=8)
