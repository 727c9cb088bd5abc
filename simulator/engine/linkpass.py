"""One pass at link fidelity: every rank's GPU stream is a SimPy process, every collective a process whose steps
cross the fabric's links, sharing each link's bandwidth with whatever else crosses it at that moment.

Within a pass a host never waits for its GPU, so each rank's launch timeline is drawn up front (the same draws as
the layer fidelity); the stream of rank r runs segment k no earlier than its kernels are launched, arrives at the
collective, and waits for it to finish. With nothing else on the links the result equals the layer fidelity's.
"""
from __future__ import annotations

import numpy as np

from ..hardware.gpu import Host
from ..hardware.links import LinkNetwork
from .timeline import PassPlan, breakdown, host_ready, spans


class LinkPass:
    def __init__(self, plan: PassPlan, host: Host, network: LinkNetwork):
        self.plan = plan
        self.host = host
        self.network = network

    def run(self, env, rng: np.random.Generator, with_spans: bool = False):
        plan = self.plan
        h, H = host_ready(plan, self.host, rng, 1, with_host=True)
        K, R = plan.num_segments, plan.ranks
        W = plan.gpu_us.tolist()
        if plan.graph:
            first = np.broadcast_to(H[0], (R, K))
            ready = h[0]
        else:
            L = np.diff(np.concatenate([np.zeros((R, 1)), H[0]], axis=1), axis=1)
            one = L / plan.launches
            first = H[0] - L + one
            ready = np.maximum(H[0] - one + plan.last_us, H[0])
        begin = env.now
        first_at = (begin + first).tolist()
        ready_at = (begin + ready).tolist()
        started = [env.event() for _ in range(K)]  # the last rank arrived
        done = [env.event() for _ in range(K)]
        arrived = [0] * K
        ends = [0.0] * K

        def stream(r: int):
            for k in range(K):
                start = max(env.now, first_at[r][k])
                end = max(start + W[k], ready_at[r][k])
                if end > env.now:
                    yield env.timeout(end - env.now)
                arrived[k] += 1
                if arrived[k] == R:  # a counter instead of all_of: one event per collective, not R
                    started[k].succeed()
                yield done[k]

        def collectives():
            network = self.network
            for k in range(K):
                yield started[k]
                steps = plan.collective_steps[k] if plan.collective_steps else None
                if steps is not None and steps.steps:
                    compiled = network.compile(steps.hops)
                    share = network.begin(compiled)
                    contended = share < steps.bandwidth_GBps
                    step_us = steps.step_latency_us + steps.transfer_us * (steps.bandwidth_GBps / share)
                    if contended:  # other traffic on these links: every step is an event
                        if steps.base_us > 0:
                            yield env.timeout(steps.base_us)
                        for _ in range(steps.steps):
                            yield env.timeout(step_us)
                    else:  # inlined for speed: free links make every step alike, so one event covers them
                        yield env.timeout(steps.base_us + steps.steps * step_us)
                    network.end(compiled)
                elif plan.collective_us[k] > 0:
                    yield env.timeout(float(plan.collective_us[k]))
                ends[k] = env.now - begin
                done[k].succeed()

        procs = [env.process(stream(r)) for r in range(R)]
        yield env.process(collectives())
        yield env.all_of(procs)
        C = np.asarray(ends)[None, :]
        result = {key: float(value[0]) for key, value in breakdown(plan, h, C).items()}
        if with_spans:
            result["_spans"] = spans(plan, h[0], H[0], C[0], begin)
        return result
