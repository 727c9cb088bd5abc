"""Assembles one SimPy Environment from a Scenario and runs the decode loop."""
from __future__ import annotations

import simpy

from ..config import Scenario
from ..config.errors import ConfigError
from ..timing.machine import Machine
from .server import Server

FIDELITIES = ("fast", "layer", "link", "event")
ON_START: list = []  # callables given each new Server before it runs: a progress display polls it (results/progress)


def needs_event(scenario: Scenario) -> bool:
    """Whether the scenario sets a key only the event fidelity's processes run (check_fidelity's three)."""
    rt = scenario.spec.runtime
    return bool(rt.draft_on_own_gpus or rt.host_slowdown or rt.two_batch_overlap)


def check_fidelity(scenario: Scenario, fidelity: str | None) -> str:
    """The fidelity to run (the scenario's unless given), or one line if it is not one of FIDELITIES."""
    fidelity = fidelity or scenario.spec.fidelity
    if fidelity not in FIDELITIES:
        raise ConfigError(scenario.source, "fidelity", f"fidelity {fidelity!r} is not available", ", ".join(FIDELITIES))
    if scenario.spec.runtime.draft_on_own_gpus and fidelity != "event":
        raise ConfigError(scenario.source, "runtime.draft_on_own_gpus", f"a drafter beside the verify needs the event "
                          f"fidelity, not {fidelity!r} (the closed form runs the drafts before the verify)",
                          "fidelity: event")
    if scenario.spec.runtime.host_slowdown and fidelity != "event":
        raise ConfigError(scenario.source, "runtime.host_slowdown", f"a slower host needs the event fidelity, not "
                          f"{fidelity!r} (the closed form runs every rank's host alike)", "fidelity: event")
    if scenario.spec.runtime.two_batch_overlap:
        if fidelity != "event":
            raise ConfigError(scenario.source, "runtime.two_batch_overlap", f"two-batch overlap needs the event "
                              f"fidelity, not {fidelity!r} (the closed form runs a pass's segments one after another)",
                              "fidelity: event")
        from .overlap import check_all_to_all  # event fidelity's TBO only

        check_all_to_all(scenario)
    return fidelity


def simulate(scenario: Scenario, machine: Machine | None = None, seed: int | None = None, fidelity: str | None = None,
             speculate: bool = True, on_pass=None, max_steps: int | None = None, sink=None) -> Server:
    """Run the scenario's workload to completion (or max_steps); the server holds the step log and requests.

    on_pass(spec, plan, result) sees every pass with its rank timeline (layer fidelity only); sink: the step log's
    (serving.steplog.StepLog), given each block of steps as it is stored.
    """
    fidelity = check_fidelity(scenario, fidelity)
    machine = machine or Machine(scenario)
    env = simpy.Environment()
    server = Server(env, machine, scenario.spec.seed if seed is None else seed, fidelity, speculate, on_pass, max_steps)
    server.log.sink = sink
    env.process(server.run())
    for hook in ON_START:
        hook(server)
    env.run()
    return server


__all__ = ["Machine", "Server", "simulate", "check_fidelity", "FIDELITIES"]
