"""One pass at link fidelity: every collective's transfers are flows on the fabric's links, sharing each link's
bandwidth max-min fairly with whatever else crosses it (hardware/flows.py: re-rated whenever a flow starts or
ends), other instances' collectives included.

Within a pass a host never waits for its GPU, so each rank's launch timeline is drawn up front (the same draws as
the layer fidelity); the stream of rank r runs segment k no earlier than its kernels are launched, arrives at the
collective, and waits for it to finish. The streams meet only at collectives, so a pass is one process that computes
the ranks' arrivals and simulates the collectives: events grow with the segments, not with ranks x segments.

A collective (hardware.collectives.StepPlan: a base latency, then `steps` steps of a latency and a transfer) is one
flow per hop carrying its steps' transfers at once, then its latencies: alone, the hop with the narrowest share
(the plan's `bandwidth_GBps`) takes exactly steps x transfer_us, so with nothing else on the links the pass equals
the layer fidelity's; under contention every hop runs at its max-min rate. Assumptions: the steps' transfers are
one fluid transfer (NCCL pipelines its chunks), and the latencies come after them.
"""
from __future__ import annotations

import numpy as np

from ..cache import current
from ..hardware.flows import BYTES_PER_US_PER_GBPS, FlowNetwork
from ..hardware.gpu import Host
from .timeline import PassPlan, finish_pass, host_ready

class SharedLinks:
    """The fabric's directed links as one flow network that every instance's collectives cross (one per
    Environment), and what sharing cost each instance: `delay_us[owner]`, its collectives' time beyond what they
    take alone."""

    def __init__(self, env, fabric):
        self.env = env
        self.flows = FlowNetwork.from_fabric(env, fabric)
        self.delay_us: dict[int, float] = {}
        self._last = (None, None)  # the last StepPlan and its start terms: a pass repeats one collective

    def view(self, owner: int) -> "InstanceLinks":
        self.delay_us.setdefault(owner, 0.0)
        return InstanceLinks(self, owner)

    def routes(self, hops: tuple):
        """Each hop's directed links, once each, as the network's RouteSet, in the run's store by the network's
        capacities and the hops (frozen values)."""
        flows = self.flows
        return current().get(("linkpass.routes", flows.capacity_key, hops), lambda: flows.route_set(
            tuple(dict.fromkeys(hop.links)) for hop in hops if hop.links))

    def _terms(self, steps) -> tuple:
        """(routes or None, bytes per flow, latency us, time alone us, its lone schedule) of a StepPlan; the last plan's
        are kept (held, so compared by identity safely), as consecutive collectives of a pass are mostly the same
        plan."""
        last, terms = self._last
        if steps is last:
            return terms
        latency = steps.base_us + steps.steps * steps.step_latency_us
        transfer = steps.steps * steps.transfer_us
        routes = self.routes(steps.hops)
        routes = routes if transfer > 0 and routes.routes else None
        nbytes = float(transfer * steps.bandwidth_GBps * BYTES_PER_US_PER_GBPS)
        schedule = self.flows.lone_schedule(routes, nbytes) if routes is not None else None
        terms = (routes, nbytes, latency, latency + transfer, schedule)
        self._last = (steps, terms)
        return terms

    def start(self, steps):
        """The collective's event (its transfers as flows, then its latencies: see the module docstring) and the time
        it takes alone; None for the event if it takes no time."""
        routes, nbytes, latency, alone, schedule = self._terms(steps)
        if routes is not None:
            return self.flows.transfer_group(routes, nbytes, latency, schedule), alone
        return (self.env.timeout(alone) if alone > 0 else None), alone

    def collective(self, steps, owner: int):
        """Generator: the collective on the links; its time beyond `alone` is booked to the owner."""
        start = self.env.now
        event, alone = self.start(steps)
        if event is not None:
            yield event
        self.delay_us[owner] = self.delay_us.get(owner, 0.0) + self.env.now - start - alone


class InstanceLinks:
    """One instance's handle on the shared links."""

    def __init__(self, shared: SharedLinks, owner: int):
        self.shared, self.owner = shared, owner

    @property
    def delay_us(self) -> float:
        return self.shared.delay_us[self.owner]

    def collective(self, steps):
        return self.shared.collective(steps, self.owner)


class LinkPass:
    """One pass as one SimPy process: per collective, the ranks' arrival (each rank's stream, in closed form from
    the previous collective's end and its own launches), then the collective's steps over the links."""

    def __init__(self, plan: PassPlan, host: Host, network: InstanceLinks):
        self.plan = plan
        self.host = host
        self.network = network

    def run(self, env, rng: np.random.Generator, with_spans: bool = False, book=None):
        """Generator for env.process: returns the breakdown dict (scalars); with_spans adds the rank timeline; with
        a PassBook the breakdown is booked there (timeline.finish_pass).

        A rank's stream runs segment k from the end of collective k-1 for W_k, and no earlier than its own launches
        allow (h, timeline.host_ready: exact per kernel): it arrives at max(C + W, h). Streams interact only at
        collectives, so their arrivals are computed, not simulated: the last one is max(C + W, max_r h), so a pass
        costs O(segments) events and O(ranks x segments) array work.
        """
        plan = self.plan
        h, H = host_ready(plan, self.host, rng, 1, with_host=True) if with_spans else \
            (host_ready(plan, self.host, rng, 1), None)  # the same draws; H only for a timeline
        begin = env.now
        ready_at = (begin + h[0]).max(axis=0).tolist()  # the last rank's own launches let it arrive then
        W = plan.gpu_us.tolist()
        collective_us = plan.collective_us.tolist()
        steps_of = plan.collective_steps or (None,) * len(W)
        shared, owner = self.network.shared, self.network.owner
        ends = []
        for k, work in enumerate(W):
            now = env.now
            last = now + work
            if ready_at[k] > last:
                last = ready_at[k]
            if last > now:
                yield env.timeout(last - now)  # the last rank arrives: the collective starts
            steps = steps_of[k]
            if steps is not None and steps.steps:
                start = env.now
                event, alone = shared.start(steps)  # SharedLinks.collective, inlined (one per segment)
                if event is not None:
                    yield event
                    shared.delay_us[owner] = shared.delay_us[owner] + env.now - start - alone
            elif collective_us[k] > 0:
                yield env.timeout(collective_us[k])
            ends.append(env.now - begin)
        return finish_pass(plan, h, H, ends, begin, with_spans, book)
