"""Fidelity levels agree: on every shipped scenario, fast and link mean throughput within 3% of layer (seeded)."""
from __future__ import annotations

import glob
import os

import pytest
import yaml

import simulator
import simulator.results.run
from conftest import SCENARIOS

SHIPPED = sorted(p for p in glob.glob(os.path.join(SCENARIOS, "*.yaml"))
                 if "scenario" not in yaml.safe_load(open(p)))  # sweep files name a base scenario; skip them


def short(path: str) -> dict:
    """A short run of the scenario: a few requests, a few hundred tokens each (link fidelity is slow by design)."""
    spec = simulator.results.run.resolve(path).spec
    requests = min(spec.workload.requests, 4)
    return {"workload__requests": requests, "workload__concurrency": min(spec.workload.concurrency, requests),
            "workload__output_tokens": 96}


@pytest.mark.parametrize("path", SHIPPED, ids=[os.path.basename(p) for p in SHIPPED])
def test_fast_and_link_agree_with_layer(path):
    overrides = short(path)
    layer = simulator.run(path, fidelity="layer", baseline=False, **overrides)
    fast = simulator.run(path, fidelity="fast", baseline=False, **overrides)
    link = simulator.run(path, fidelity="link", baseline=False, **overrides)
    assert fast.throughput_tok_s == pytest.approx(layer.throughput_tok_s, rel=0.03)
    assert link.throughput_tok_s == pytest.approx(layer.throughput_tok_s, rel=0.03)
    assert fast.tokens == layer.tokens == link.tokens


def test_link_fidelity_slows_collectives_that_share_links():
    """Other traffic on the links (registered flows) stretches the collectives' transfers; layer cannot see it."""
    import numpy as np
    import simpy

    from simulator.engine.linkpass import LinkPass
    from simulator.engine.machine import Machine
    from simulator.hardware.links import LinkNetwork
    from simulator.model.cost import PassShape

    machine = Machine(simulator.results.run.resolve(os.path.join(SCENARIOS, "pcie8_eagle3.yaml")))
    plan = machine.plan("target", PassShape(64, 4, 8000), True)  # big messages: bandwidth matters

    def duration(busy: int) -> float:
        network = LinkNetwork(machine.fabric)
        steps = next(s for s in plan.collective_steps if s is not None and s.steps)
        compiled = network.compile(steps.hops)
        for _ in range(busy):  # background flows on the same links
            network.begin(compiled)
        env = simpy.Environment()
        process = env.process(LinkPass(plan, machine.host, network).run(env, np.random.default_rng(0)))
        env.run()
        return process.value["duration"]

    free, shared = duration(0), duration(1)
    assert shared > free * 1.02


@pytest.mark.parametrize("tp", [2, 8])
def test_link_pass_events_grow_with_segments_not_ranks(tp):
    """A link-fidelity pass computes the ranks' arrivals: at most two events per collective (the last arrival, the
    transfer) at any TP size, so its cost is not superlinear in ranks."""
    import numpy as np
    import simpy

    from simulator.engine.linkpass import LinkPass
    from simulator.engine.machine import Machine
    from simulator.hardware.links import LinkNetwork
    from simulator.model.cost import PassShape

    machine = Machine(simulator.results.run.resolve(os.path.join(SCENARIOS, "nvlink8_h100_llama8b_eagle3.yaml"),
                                                    {"parallelism__tp": tp}))
    plan = machine.plan("target", PassShape(4, 1, 1000), False)
    env = simpy.Environment()
    scheduled = []
    schedule = env.schedule
    env.schedule = lambda event, *args, **kwargs: (scheduled.append(event), schedule(event, *args, **kwargs))[1]
    env.process(LinkPass(plan, machine.host, LinkNetwork(machine.fabric)).run(env, np.random.default_rng(0)))
    env.run()
    assert len(scheduled) <= 2 * plan.num_segments + 2
