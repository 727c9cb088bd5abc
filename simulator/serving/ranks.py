"""The ranks of one TP group at event fidelity: each rank a host process and a GPU stream process, the stream's
queue a simpy.Store; each collective a process that starts when the last of its ranks arrives.

A rank's host takes a pass order from the scheduler, puts the pass's launches on its stream's queue, is busy
launching them (eager: the kernels one by one, with per-launch jitter and a per-rank speed; a CUDA graph: one
launch), and then blocks on the sync: the pass's last collective. The stream runs the pass's segments in order:
segment k starts when collective k-1 has ended and ends no earlier than its own kernels' launches allow (the
exact per-kernel bound of timing.timeline.host_ready, carried with the launches), then the stream arrives at
collective k and waits for it. A collective moves its bytes over the shared links (hardware.flows, max-min fair)
or, without link steps, takes its cost alone. Granularity: one timeout per rank per segment between collectives; a
"collective" of one rank that moves nothing (a TP-1 pass's segment boundaries) is none, so such a pass is one timeout.
"""
from __future__ import annotations

import numpy as np
import simpy

from ..timing.timeline import PassPlan, eager_ready, host_ready
from ..hardware.gpu import Host, over_samples


def launch_times(plan: PassPlan, host: Host, rng: np.random.Generator, slowdown: np.ndarray | None = None):
    """(h, H) of one pass, (ranks, segments) each: when rank r's launches let its stream end segment k, and when its
    host has launched segment k. slowdown: a factor per rank on its host's launch times (None: every rank alike,
    timing.timeline.host_ready's draws and floats exactly)."""
    if slowdown is None:
        h, H = host_ready(plan, host, rng, 1, with_host=True)
        return h[0], H[0]
    if plan.graph:
        start = host.graph_launch_us(rng, 1, plan.ranks)[:, :, None] * slowdown[None, :, None]
        h = start + plan.graph_ready[None, None, :]  # a piecewise pass's later pieces: at the host's own pace
        return h[0], np.broadcast_to(start, h.shape)[0]
    L = host.eager_launch_us(plan.launches, rng, 1, plan.ranks) * slowdown[None, :, None]
    H = np.cumsum(L, axis=2)
    h = eager_ready(H - L, H, L / over_samples(plan.launches, L), None, *plan.ready_lines)
    return h[0], H[0]


class Collective:
    """One collective of a pass: its process starts moving bytes when the last rank arrives; the ranks' streams
    wait on the process itself (a SimPy process is an event). One rank and nothing to move: no process (`process` is
    None) and no event, its start and end are the rank's arrival."""

    __slots__ = ("env", "waiting", "arrived", "process", "steps", "cost_us", "links", "started_at", "ended_at")

    def __init__(self, env: simpy.Environment, ranks: int, steps, cost_us: float, links):
        self.env, self.waiting, self.steps, self.cost_us, self.links = env, ranks, steps, cost_us, links
        self.started_at = self.ended_at = None
        if ranks == 1 and cost_us <= 0 and (steps is None or not steps.steps):
            self.arrived = self.process = None
        else:
            self.arrived = env.event()
            self.process = env.process(self.run())

    def arrive(self) -> None:
        """A rank's stream reaches the collective; the last one starts it."""
        self.waiting -= 1
        if not self.waiting:
            self.arrived.succeed()

    def run(self):
        """SimPy process: wait for every rank, then the transfer (flows on the links, or the cost alone)."""
        yield self.arrived
        env = self.env
        self.started_at = env.now
        steps, links = self.steps, self.links
        if links is not None and steps is not None and steps.steps:
            event, alone = links.shared.start(steps)
            if event is not None:
                yield event
                shared = links.shared
                shared.delay_us[links.owner] = shared.delay_us[links.owner] + env.now - self.started_at - alone
        elif self.cost_us > 0:
            yield env.timeout(self.cost_us)
        self.ended_at = env.now


class PassOrder:
    """A pass as launched: its plan, when its hosts began, each rank's launch-ready times, its collectives, and the
    hosts' sync (every host has seen the pass end)."""

    __slots__ = ("plan", "begin", "ready", "busy_us", "collectives", "synced", "_hosts", "h", "H", "after_us", "work_us",
                 "done", "waits", "idle", "arrive")

    def __init__(self, env, plan: PassPlan, h: np.ndarray, H: np.ndarray, links, after_us: float = 0.0, waits=None):
        """waits: per segment, the collectives it starts after (None: the one before it; serving.overlap's TBO)."""
        self.plan, self.begin, self.h, self.H, self.after_us = plan, env.now, h, H, after_us
        self.waits = waits
        self.idle = [0.0] * plan.ranks  # each stream's wait for its own host (a TBO pass's breakdown)
        self.arrive = [[] for _ in range(plan.ranks)] if waits is not None else None
        self.ready = h.tolist()
        self.work_us = plan.gpu_us.tolist()
        self.busy_us = H[:, -1].tolist()  # each host has launched the pass (a graph: its one launch)
        steps = plan.collective_steps or (None,) * plan.num_segments
        self.collectives = [Collective(env, plan.ranks, s, t, links)
                            for s, t in zip(steps, plan.collective_us.tolist())]
        self.synced = env.event()
        self._hosts = plan.ranks
        last = self.collectives[-1].process
        self.done = last if last is not None else env.event()  # the pass's end (its stream ends it: one rank)

    def ends(self) -> list[float]:
        """Each collective's end after the hosts began (once the pass is done)."""
        return [c.ended_at - self.begin for c in self.collectives]

    def host_synced(self) -> None:
        self._hosts -= 1
        if not self._hosts:
            self.synced.succeed()


class Rank:
    """One rank: its host and its GPU stream (a Store of launched passes)."""

    def __init__(self, env: simpy.Environment, index: int, wake: list | None = None):
        """wake: [time, event], the timeout a rank of the set scheduled last, shared by the set's streams (one event
        wakes every stream due at that same time: batched wake-ups)."""
        self.env, self.index = env, index
        self.wake = [None, None] if wake is None else wake
        self.orders = simpy.Store(env)  # passes the scheduler asks this host to launch
        self.stream = simpy.Store(env)  # the GPU stream's queue: launched passes, run in order

    def host(self):
        """SimPy process: launch each ordered pass into the stream, spend the launch time (and, with the overlap
        scheduler, the next step's preparation after it), then block on the sync with the pass's end."""
        env, r = self.env, self.index
        while True:
            order = yield self.orders.get()
            self.stream.put(order)
            busy = order.busy_us[r] + order.after_us
            if busy > 0:
                yield env.timeout(busy)
            yield order.done
            order.host_synced()

    def gpu_stream(self):
        """SimPy process: run the queued passes in order, one timeout per segment, meeting the other ranks at each
        collective (inlined for speed: the hot loop of the event fidelity). Segments closed by no collective (one
        rank, nothing to move) run on in one timeout: t is the stream's clock ahead of SimPy's, advanced with the
        same float arithmetic as a timeout's."""
        env, r, timeout, wake = self.env, self.index, self.env.timeout, self.wake
        while True:
            order = yield self.stream.get()
            if order.waits is not None:
                yield from self._overlapped(order)
                continue
            begin, ready = order.begin, order.ready[r]
            t = env.now
            for w, at, collective in zip(order.work_us, ready, order.collectives):
                start = t
                at += begin
                if at > t + w:
                    w = at - t
                if w > 0:
                    t = t + w
                if collective.process is None:
                    collective.started_at = collective.ended_at = t
                    continue
                now = env.now
                if t > now:  # the segment's own delay where the stream was not ahead: the floats of one timeout each
                    if start != now:
                        yield timeout(t - now)
                    elif wake[0] == t:  # another stream's timeout, due at exactly this time (and so still pending)
                        yield wake[1]
                    else:
                        wake[1] = timeout(w)
                        wake[0] = t
                        yield wake[1]
                collective.waiting -= 1  # Collective.arrive, inlined
                if not collective.waiting:
                    collective.arrived.succeed()
                yield collective.process
                t = env.now
            if collective.process is None:
                if t > env.now:
                    yield timeout(t - env.now)
                order.done.succeed()


    def _overlapped(self, order):
        """Generator: a pass whose segment k starts once the stream is free and the collectives order.waits[k] have
        ended, the stream not waiting for the one it arrives at (two micro-batches interleaved: serving.overlap)."""
        env, r, timeout = self.env, self.index, self.env.timeout
        begin, collectives, arrive = order.begin, order.collectives, order.arrive[r]
        idle = 0.0
        for w, at, collective, waits in zip(order.work_us, order.ready[r], collectives, order.waits):
            for j in waits:
                if collectives[j].ended_at is None:
                    yield collectives[j].process
            now = env.now
            at += begin
            if at > now + w:
                idle += at - now - w
                w = at - now
            if w > 0:
                yield timeout(w)
            arrive.append(env.now)
            collective.arrive()
        yield collectives[-1].process
        order.idle[r] = idle


class RankSet:
    """The ranks of one group (the target's TP group, or a drafter's own GPUs) with their processes started."""

    def __init__(self, env: simpy.Environment, host: Host, ranks: int, links=None, slowdown=None):
        self.env, self.host, self.links = env, host, links
        self.slowdown = None if slowdown is None else np.asarray(slowdown, dtype=float)
        wake = [None, None]
        self.ranks = [Rank(env, r, wake) for r in range(ranks)]
        for rank in self.ranks:
            env.process(rank.host())
            env.process(rank.gpu_stream())

    def launch(self, plan: PassPlan, rng: np.random.Generator, after_us: float = 0.0, waits=None) -> PassOrder:
        """Order a pass from every host now; after_us: host work each host does after launching it (overlapped);
        waits: PassOrder's."""
        h, H = launch_times(plan, self.host, rng, self.slowdown)
        order = PassOrder(self.env, plan, h, H, self.links, after_us, waits)
        for rank in self.ranks:
            rank.orders.put(order)
        return order
