"""A deployment: one engine instance per replica of the scenario's split, each on its own GPUs, behind a router, all
in one SimPy Environment.

What is modelled: `parallelism.dp` replicas (without dp_attention) of a tp-GPU instance, placed by
timing.placement.place (the topology's GPUs in order, or `parallelism.gpus`). Each instance is a Machine over its
own GPUs (its collectives cross those GPUs' routes) and a Server with its own serving loop, batching, speculation
policy and random streams: instance seeds are spawned from the scenario's seed (numpy SeedSequence), so the
instances draw independently and a run is reproducible. The workload's requests are drawn once, from the
scenario's seed, and a Router process sends each to an instance when it arrives. At link fidelity every instance's
collectives are flows on one shared flow network (timing.linkpass.SharedLinks), so what one instance moves slows
another's wherever their routes share a link; `shared_links` names those links.

One instance (dp 1) is exactly the single-server run (serving.simulate): same seed, its own arrivals, no router.
"""
from __future__ import annotations

import numpy as np
import simpy

from ..config import Scenario
from ..config.errors import ConfigError
from .simulate import ON_START, check_fidelity, simulate
from ..timing.machine import Machine
from ..timing.placement import instance_gpus
from .requests import make_requests
from .router import Router
from .server import Server


def instance_machines(scenario: Scenario) -> list[Machine]:
    """One Machine per instance, over that instance's GPUs (one instance on the default GPUs: Machine(scenario))."""
    par = scenario.spec.parallelism
    if par.instances == 1 and par.gpus is None:
        return [Machine(scenario)]
    machines: list[Machine] = []
    for gpus in instance_gpus(scenario):  # the first built from the scenario, the others share its parts
        machines.append(Machine(scenario, gpus, like=machines[0] if machines else None))
    return machines


def instance_seeds(seed: int, instances: int) -> list[int]:
    """The seed of each instance's server: the scenario's own for one instance, else spawned from it."""
    if instances == 1:
        return [seed]
    return [int(child.generate_state(1)[0]) for child in np.random.SeedSequence(seed).spawn(instances)]


def simulate_deployment(scenario: Scenario, machines: list[Machine] | None = None, seed: int | None = None,
                        fidelity: str | None = None, speculate: bool = True,
                        max_steps: int | None = None, on_pass=None, sinks=None) -> list[Server]:
    """Run the scenario's workload on every instance behind the router; returns the servers, in instance order.

    max_steps bounds each instance's steps (traces record the first steps only); on_pass sees instance 0's passes
    (serving.simulate); sinks(i), where given, is instance i's step-log sink (a steps log written as it goes).
    """
    fidelity = check_fidelity(scenario, fidelity)
    machines = machines or instance_machines(scenario)
    seed = scenario.spec.seed if seed is None else seed
    if len(machines) == 1:
        prefill_pool(scenario, 1)
        return [simulate(scenario, machines[0], seed, fidelity, speculate, on_pass, max_steps,
                         sinks(0) if sinks is not None else None)]
    env = simpy.Environment()
    links = None
    if fidelity in ("link", "event"):  # timing.linkpass (flows and their routes) imported only then
        from ..timing.linkpass import SharedLinks

        links = SharedLinks(env, machines[0].fabric)
    servers = [Server(env, machine, instance_seed, fidelity, speculate, on_pass if i == 0 else None, max_steps,
                      routed=True, network=links.view(i) if links is not None else None)
               for i, (machine, instance_seed) in enumerate(zip(machines, instance_seeds(seed, len(machines))))]
    requests = make_requests(scenario.spec.workload, seed, scenario.base_dir, scenario.source)
    checked = set()
    for server in servers:  # once per KV capacity and lookahead (replicas alike: the same check and message)
        fits = (server.admission.kv_capacity, server.admission.lookahead)
        if fits not in checked:
            checked.add(fits)
            server.admission.check_fits(requests, server.machine.memory, scenario.source)
    kind, pool = scenario.spec.deployment.router, prefill_pool(scenario, len(servers))
    env.process(Router(env, servers[:pool or len(servers)], kind).run(requests))
    processes = []
    for i, server in enumerate(servers):
        server.log.sink = sinks(i) if sinks is not None else None
        processes.append(env.process(server.run()))
        for hook in ON_START:
            hook(server)
    if pool:  # prefill/decode disaggregation: the first `pool` instances prefill, the others decode
        # the KV transfers are flows at every fidelity: transfers in flight together share the links they cross (at
        # fast and layer fidelity on a network of their own, the collectives being closed forms)
        from ..timing.linkpass import SharedLinks
        from .disaggregation import KVHandoff

        handoff = KVHandoff(env, servers[:pool], servers[pool:], kind,
                            links if links is not None else SharedLinks(env, machines[0].fabric))
        env.process(handoff.run(processes[:pool]))
    env.run()
    return servers


def check_start(scenario: Scenario, machines: list[Machine] | None = None) -> list[Machine]:
    """What a run refuses at its start, found without simulating: the instances' machines (a fabric without a route,
    weights that do not fit) and a request whose KV cache alone is larger than an instance's (the same check and
    message as the run's: serving.admission). Returns the machines."""
    from ..speculation.setup import build_speculation
    from .admission import Admission

    machines = machines or instance_machines(scenario)
    prefill_pool(scenario, len(machines))
    lookahead = build_speculation(scenario, True).lookahead
    requests = make_requests(scenario.spec.workload, scenario.spec.seed, scenario.base_dir, scenario.source)
    for capacity in dict.fromkeys(machine.memory["kv_capacity_tokens"] for machine in machines):
        machine = next(m for m in machines if m.memory["kv_capacity_tokens"] == capacity)
        Admission(scenario.spec.workload, capacity, lookahead).check_fits(requests, machine.memory, scenario.source)
    return machines


def prefill_pool(scenario: Scenario, instances: int) -> int:
    """deployment.prefill_instances, checked against the instances: one line and exit 2 unless both pools have one."""
    pool = scenario.spec.deployment.prefill_instances
    if pool and not 0 < pool < instances:
        raise ConfigError(scenario.source, "deployment.prefill_instances", f"{pool} prefill instances of the "
                          f"{instances} instances (parallelism.dp) leave no decode instance",
                          f"0 (no disaggregation) up to {instances - 1}" if instances > 1 else "0, or dp of 2 or more")
    return pool


def shared_links(machines: list[Machine]) -> list[str]:
    """Directed links (named "a->b") that routes between two instances' own GPUs both cross: where one instance's
    collectives can slow another's. Empty for one instance."""
    if len(machines) < 2:
        return []
    used = []
    for machine in machines:
        fabric, n = machine.fabric, len(machine.fabric.gpu_names)
        used.append({link for i in range(n) for j in range(n) if i != j for link in fabric.hop(i, j).links})
    names = machines[0].fabric.names
    shared = {link for k, links in enumerate(used) for other in used[k + 1:] for link in links & other}
    return [f"{names[a]}->{names[b]}" for a, b in sorted(shared)]
