"""The drafting a step costs is one sum at every fidelity: the host proposals, each draft pass's time, what the ops
behind the graphed drafts (and, where the drafter shares the target's GPUs, the verify's inputs and the tree mask)
show past them; with the drafter on GPUs of its own the target runs the verify's inputs and the mask before its
verify. The fast fidelity's closed form (FastStepCosts._draft_us, _other_us), the layer fidelity's step and the event
fidelity's step, their passes stubbed with the same times, agree on every drawn step, so none can drift alone."""
from __future__ import annotations

import os

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

import simulator
import simulator.serving.steps as event_steps
from conftest import SCENARIOS
from simulator.model.cost import PassShape
from simulator.serving.steps import EventStepCosts
from simulator.timing.costs import FastStepCosts
from simulator.timing.layercosts import LayerStepCosts
from simulator.timing.machine import Machine
from simulator.timing.stepspec import PassSpec, StepSpec

OWN = os.path.join(SCENARIOS, "event", "h100_llama8b_own_gpu_drafter.yaml")
MACHINES = {own: Machine(simulator.load_scenario(OWN, [("runtime.draft_on_own_gpus", own)])) for own in (False, True)}
STEP_COST_ROW = {"compute": 0.0, "memory": 0.0, "launch": 0.0, "allreduce_transfer": 0.0, "allreduce_wait": 0.0,
                 "allreduce_only": 0.0, "allreduce_profile": 0.0}


@st.composite
def steps(draw):
    """A speculative step: 1-4 draft passes (each graphed or not, its time), host proposals, ops behind the draft
    graph and the verify's inputs among them (12.87 us a launch), a tree mask's bytes; and a context."""
    n = draw(st.integers(1, 4))
    drafts = tuple(PassSpec("draft", PassShape(i + 1, 1), draw(st.booleans())) for i in range(n))
    times = {d.shape.tokens: draw(st.floats(1.0, 2000.0)) for d in drafts}
    ops = draw(st.integers(0, 60))
    verify_ops = draw(st.integers(0, ops))
    mask = draw(st.sampled_from([(0.0, 0.0), (9.5, 38.0), (2.375e4, 3.0e5)]))
    step = StepSpec(PassSpec("target", PassShape(4, 1, 0, True, True), True), drafts,
                    draw(st.sampled_from([0.0, 93.0])), draw(st.floats(0.0, 2000.0)),
                    behind_drafts=(ops, ops * 12.87), mask_bytes=mask, verify_inputs=(verify_ops, verify_ops * 12.87))
    return step, times, draw(st.integers(1, 40000))


def fast(machine, step, times, context):
    costs = FastStepCosts(machine, 0, np.random.default_rng(0))
    draft = costs._draft_us(step, context, 1, lambda part, shape, graph, seed: np.array([times[shape.tokens]]))
    return float(draft[0]), costs._other_us(step, context)


def stub_pass(env, spec, times, main_us):
    """Generator: a pass of its drawn time (the main pass: main_us), as a pass's result."""
    duration = main_us if spec.part == "target" else times[spec.shape.tokens]
    yield env.timeout(duration)
    return dict(STEP_COST_ROW, duration=duration)


def layer(machine, step, times, context, main_us):
    env = simpy.Environment()
    costs = LayerStepCosts(machine, np.random.default_rng(0))
    costs._run = lambda env, spec, context, main=True: stub_pass(env, spec, times, main_us)
    process = env.process(costs.step(env, step, context))
    env.run()
    row = dict(zip(simulator.timing.costtable.STEP_COST, process.value.table.anchor[0]))
    return row["draft_us"], row["other"], env.now


def event(machine, step, times, context, main_us):
    env = simpy.Environment()
    costs = EventStepCosts(env, machine, np.random.default_rng(0))
    with pytest.MonkeyPatch.context() as patch:  # the passes ordered from the ranks (the drafter's and the target's)
        patch.setattr(event_steps, "run_pass", lambda owner, spec, context, **kw: stub_pass(env, spec, times, main_us))
        process = env.process(costs.step(env, step, context))
        env.run()
    row = dict(zip(simulator.timing.costtable.STEP_COST, process.value.table.anchor[0]))
    # a drafter on its own GPUs: its tokens cross to the target (the links' latency), inside the step's drafting
    handover = costs.drafter.latency_us if machine.scenario.spec.runtime.draft_on_own_gpus else 0.0
    return row["draft_us"] - handover, row["other"], env.now


@pytest.mark.parametrize("own", [False, True])
@settings(max_examples=60, deadline=None)
@given(drawn=steps())
def test_the_fidelities_draft_one_round(own, drawn):
    step, times, context = drawn
    machine = MACHINES[own]
    main_us = 3000.0
    draft, other = fast(machine, step, times, context)
    # the model's terms written out: n launches at 12.87 us behind the graphed passes' time, each kernel at least
    # the floor; the mask's bytes at the H100's achievable bandwidth, on the side that builds the verify's inputs
    floor, bandwidth = machine.gpu.floor_us, machine.gpu.bytes_per_us
    ops, verify_ops = step.behind_drafts[0], step.verify_inputs[0]
    mask_us = (step.mask_bytes[0] * context + step.mask_bytes[1]) / bandwidth
    graphed = sum(times[d.shape.tokens] for d in step.drafts if d.graph)

    def after(n: int, behind_us: float) -> float:
        return max(n * 12.87 + floor - behind_us, n * floor) if n else 0.0
    own_ops = ops - verify_ops if own else ops
    expected_draft = step.draft_host_us + sum(times.values()) + after(own_ops, graphed) + (0.0 if own else mask_us)
    expected_other = step.other_us + ((after(verify_ops, 0.0) + mask_us) if own and (ops or any(step.mask_bytes))
                                      else 0.0)
    assert (draft, other) == pytest.approx((expected_draft, expected_other), rel=1e-9, abs=1e-9)
    layer_draft, layer_other, elapsed = layer(machine, step, times, context, main_us)
    assert (layer_draft, layer_other) == (draft, other)  # the same floats: the same sums in the same order
    assert elapsed == pytest.approx(draft + other + main_us, rel=1e-12)
    got = event(machine, step, times, context, main_us)
    assert got == pytest.approx((draft, other, got[2]), rel=1e-12, abs=1e-9)
    if not own:
        assert other == step.other_us  # the verify's inputs and the mask are in the drafting
