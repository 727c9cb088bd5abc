"""One pass at link fidelity: every collective's steps cross the fabric's links, sharing each link's bandwidth with
whatever else crosses it at that moment.

Within a pass a host never waits for its GPU, so each rank's launch timeline is drawn up front (the same draws as
the layer fidelity); the stream of rank r runs segment k no earlier than its kernels are launched, arrives at the
collective, and waits for it to finish. The streams meet only at collectives, so a pass is one process that computes
the ranks' arrivals and simulates the collectives: events grow with the segments, not with ranks x segments. With
nothing else on the links the result equals the layer fidelity's.
"""
from __future__ import annotations

import numpy as np

from ..hardware.gpu import Host
from ..hardware.links import LinkNetwork
from .timeline import PassPlan, finish_pass, host_ready


class LinkPass:
    """One pass as one SimPy process: per collective, the ranks' arrival (each rank's stream, in closed form from
    the previous collective's end and its own launches), then the collective's steps over the links."""

    def __init__(self, plan: PassPlan, host: Host, network: LinkNetwork):
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
                yield from self._collective(env, steps)
            elif collective_us[k] > 0:
                yield env.timeout(collective_us[k])
            ends.append(env.now - begin)
        return finish_pass(plan, h, H, ends, begin, with_spans, book)

    def _collective(self, env, steps):
        """A collective's steps over its links, each link's bandwidth shared by every flow on it when it starts."""
        network = self.network
        compiled = network.compile(steps.hops)
        share = network.begin(compiled)
        step_us = steps.step_latency_us + steps.transfer_us * (steps.bandwidth_GBps / share)
        if share < steps.bandwidth_GBps:  # other traffic on these links: every step is an event
            if steps.base_us > 0:
                yield env.timeout(steps.base_us)
            for _ in range(steps.steps):
                yield env.timeout(step_us)
        else:  # inlined for speed: free links make every step alike, so one event covers them
            yield env.timeout(steps.base_us + steps.steps * step_us)
        network.end(compiled)
