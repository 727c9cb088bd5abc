"""A flow network: links own their capacity, and the flows crossing them share it max-min fairly.

What is modelled: a transfer is a fluid flow of bytes along a route of directed links. At every moment each link's
bandwidth is split max-min fairly among the flows crossing it (progressive filling, as flow-level network
simulators such as SimGrid's default model do): all flows' rates rise together until a link saturates, the flows
through it are frozen at that rate, and the others keep rising. Whenever a flow starts or ends, every active flow
is re-rated and the completion times of the flows it slowed or sped up move accordingly.

Assumptions: links arbitrate fairly per flow (no per-packet or credit effects, no priority); a rate change takes
effect at once (no TCP-like ramp); a flow's own ceiling (`limit_GBps`, e.g. what one NCCL channel can drive) acts
as a private link. Latency is not a flow's business: a caller that pays a step latency yields a timeout first.

Time is in microseconds, bandwidth in GB/s (1 GB/s = 1e3 bytes per microsecond), as everywhere in the simulator.
"""
from __future__ import annotations

import hashlib
from dataclasses import field
from typing import Hashable, Mapping, Sequence

import simpy

from ..compiled import dataclass
from ..cache import current
from .lonegroup import (BYTES_PER_US_PER_GBPS, RELATIVE_TIE as _RELATIVE_TIE, LoneGroup, RouteSet, Schedule,
                        lone_schedule)
from .maxmin import max_min_rates


@dataclass(eq=False)
class Flow:
    """One transfer in flight: its route, its bytes, and the rates it ran at (`rates`: (at_us, GB/s) changes)."""

    route: tuple
    nbytes: float
    started_at: float
    done: simpy.Event | None  # None for a flow of a group (the group has the event)
    limit_GBps: float | None = None
    remaining: float = 0.0
    rate_GBps: float = 0.0
    finish_at: float = float("inf")
    finished_at: float | None = None
    rates: list[tuple[float, float]] = field(default_factory=list)
    group: "FlowGroup | None" = None  # the group it belongs to (transfer_group), whose event fires instead of `done`


@dataclass(eq=False, slots=True)
class FlowGroup:
    """Flows started together whose one event fires `tail_us` after the last of them has crossed."""

    done: simpy.Event
    left: int
    tail_us: float

    def finish_one(self, env: simpy.Environment) -> None:
        self.left -= 1
        if self.left == 0:  # the event fires tail_us from now, as simpy.Timeout schedules itself (one event, not two)
            self.done._ok, self.done._value = True, None
            env.schedule(self.done, delay=self.tail_us)


class FlowNetwork:
    """The links of a fabric as one shared resource: `transfer(route, nbytes)` is an event that fires when the
    bytes have crossed, at whatever rates max-min sharing gave the flow meanwhile."""

    def __init__(self, env: simpy.Environment, capacity_GBps: Mapping[Hashable, float]):
        for link, value in capacity_GBps.items():
            if not value > 0:
                raise ValueError(f"link {link!r} has capacity {value!r} GB/s; capacities must be positive")
        self.env = env
        self.capacity_GBps = dict(capacity_GBps)
        # the capacities by value, as a digest (a string hashes once): the run's store keys this network's solved
        # rates and lone schedules by it
        self.capacity_key = hashlib.sha1(repr(sorted(self.capacity_GBps.items())).encode()).hexdigest()
        self.active: list[Flow] = []
        self._updated_at = env.now
        self._generation = 0  # a completion timer is live only while no re-rate has happened since it was set
        self._lone: list[LoneGroup] = []  # groups in flight on links nothing else crosses (hardware/lonegroup.py)

    @classmethod
    def from_fabric(cls, env: simpy.Environment, fabric) -> "FlowNetwork":
        """Every directed link of a hardware.interconnect.Fabric, keyed (node, node) as its Hops name them."""
        return cls(env, {pair: link.bandwidth_GBps for pair, link in fabric.link_of.items()})

    def _check(self, route: tuple, nbytes: float, limit_GBps: float | None) -> None:
        if not route or len(set(route)) != len(route):
            raise ValueError(f"a flow needs a route of distinct links, at least one, got {route!r}")
        unknown = [link for link in route if link not in self.capacity_GBps]
        if unknown:
            raise ValueError(f"route crosses unknown link {unknown[0]!r}")
        if nbytes < 0 or (limit_GBps is not None and not limit_GBps > 0):
            raise ValueError(f"a flow needs nbytes >= 0 and a positive limit, got {nbytes!r}, {limit_GBps!r}")

    def route_set(self, routes: Sequence[Sequence[Hashable]]) -> RouteSet:
        """The routes of a group, validated once, for transfer_group (a caller that sends over the same routes again
        keeps it: its links are worked out once, and its lone schedules are stored by its key)."""
        routes = tuple(tuple(route) for route in routes)
        for route in routes:
            self._check(route, 0.0, None)
        key = hashlib.sha1(repr((self.capacity_key, routes)).encode()).hexdigest()
        return RouteSet(routes, frozenset(link for route in routes for link in route), key)

    def transfer_group(self, routes: RouteSet | Sequence[Sequence[Hashable]], nbytes: float,
                       tail_us: float = 0.0, schedule: Schedule | None = None) -> simpy.Event:
        """Start one flow of `nbytes` per route, all now, with one re-rate (the rates are those of starting them one
        by one at this instant); the returned event fires `tail_us` after the last byte of the last flow has crossed
        (a collective's transfers, then its latency, as one event). A group whose links no active flow crosses runs
        on its own (hardware/lonegroup.py): the same times, one timer. schedule: lone_schedule(routes, nbytes), where
        the caller holds it already."""
        routes = routes if isinstance(routes, RouteSet) else self.route_set(routes)
        if nbytes < 0:
            raise ValueError(f"a flow needs nbytes >= 0, got {nbytes!r}")
        group = FlowGroup(self.env.event(), len(routes.routes) if nbytes > 0 else 0, float(tail_us))
        if group.left == 0:
            group.left = 1
            group.finish_one(self.env)
            return group.done
        links = routes.links
        if not self._rejoin(links) and not (self.active and any(
                link in links for flow in self.active for link in flow.route)):
            self._start_lone(group, routes, float(nbytes), schedule)
            return group.done
        self._advance()
        now = self.env.now
        self.active.extend(Flow(route, float(nbytes), now, None, remaining=float(nbytes), group=group)
                           for route in routes.routes)
        self._rerate()
        return group.done

    def lone_schedule(self, routes: RouteSet, nbytes: float) -> Schedule:
        """The schedule of a group of `nbytes` per route on links nothing else crosses, in the run's store by the
        route set's key (the routes and this network's capacities) and the bytes."""
        return current().get(("flows.lone_schedule", routes.key, nbytes),
                             lambda: lone_schedule(routes.routes, nbytes, self._solve))

    def _start_lone(self, group: FlowGroup, routes: RouteSet, nbytes: float, schedule: Schedule | None) -> None:
        """Run a group that shares no link with any active flow on its own schedule, with one timer at its end."""
        if schedule is None:
            schedule = self.lone_schedule(routes, nbytes)
        lone = LoneGroup(group, routes.routes, nbytes, self.env.now, schedule, routes.links)
        self._lone.append(lone)
        timer = self.env.timeout(schedule[0])
        timer.callbacks.append(lambda _event: self._lone_done(lone))

    def _lone_done(self, lone: LoneGroup) -> None:
        if not lone.live:
            return  # put back into the network meanwhile: its flows finish there
        self._lone.remove(lone)
        lone.group.left = 1
        lone.group.finish_one(self.env)

    def _rejoin(self, links) -> bool:
        """Put every lone group that crosses one of `links` back into the network as ordinary flows, with the bytes
        they have left now (a group at its very end stays lone: it carries nothing more). True if any was; the caller
        then re-rates."""
        if not self._lone:
            return False
        now = self.env.now
        crossing = [lone for lone in self._lone if not lone.links.isdisjoint(links) and lone.end_at > now]
        if not crossing:
            return False
        self._advance()
        for lone in crossing:
            self._lone.remove(lone)
            lone.live = False
            left = lone.flows_left(now)
            lone.group.left = len(left)
            self.active.extend(Flow(route, lone.nbytes, lone.started_at, None, remaining=remaining, rate_GBps=rate,
                                    group=lone.group) for route, remaining, rate in left)
        return True

    def transfer(self, route: Sequence[Hashable], nbytes: float, limit_GBps: float | None = None) -> simpy.Event:
        """Start a flow now; the returned event succeeds with the Flow when its last byte has crossed."""
        route = tuple(route)
        self._check(route, nbytes, limit_GBps)
        flow = Flow(route, float(nbytes), self.env.now, self.env.event(), limit_GBps, remaining=float(nbytes))
        if nbytes == 0:
            flow.finished_at = self.env.now
            flow.done.succeed(flow)
            return flow.done
        self._rejoin(route)
        self._advance()
        self.active.append(flow)
        self._rerate()
        return flow.done

    def rates_GBps(self) -> list[float]:
        """The current rate of every active flow, in start order."""
        return [flow.rate_GBps for flow in self.active]

    def _advance(self) -> None:
        """Move every active flow's remaining bytes forward to now at its current rate."""
        elapsed = self.env.now - self._updated_at
        if elapsed > 0:
            for flow in self.active:
                flow.remaining -= flow.rate_GBps * BYTES_PER_US_PER_GBPS * elapsed
        self._updated_at = self.env.now

    def _solve(self, flows: tuple) -> list[float]:
        """max_min_rates of (route, limit) flows, in the run's store by the capacities and the flows: a run's
        collectives make a few flow sets over and over, so most re-rates are a lookup (the same floats)."""
        return current().get(("flows.max_min_rates", self.capacity_key, flows), lambda: tuple(max_min_rates(
            [r for r, _ in flows], self.capacity_GBps, [limit for _, limit in flows])))

    def _rerate(self) -> None:
        """Re-solve the rates of all active flows and set one timer for the earliest completion."""
        now = self.env.now
        rates = self._solve(tuple((f.route, f.limit_GBps) for f in self.active))
        for flow, rate in zip(self.active, rates):
            if rate != flow.rate_GBps:
                flow.rate_GBps = rate
                if flow.group is None:  # a group's flows keep no rate history (the hot path of link fidelity)
                    if flow.rates and flow.rates[-1][0] == now:
                        flow.rates.pop()  # superseded at the same instant (flows starting together)
                    flow.rates.append((now, rate))
            flow.finish_at = now + max(flow.remaining, 0.0) / (rate * BYTES_PER_US_PER_GBPS)
        self._generation += 1
        if self.active:
            first = min(flow.finish_at for flow in self.active)
            timer = self.env.timeout(max(first - now, 0.0))
            generation = self._generation
            timer.callbacks.append(lambda _event: self._on_timer(generation))

    def _on_timer(self, generation: int) -> None:
        if generation != self._generation:
            return  # a re-rate since this timer was set moved the completions
        now = self.env.now
        self._advance()
        tie = now + _RELATIVE_TIE * max(1.0, abs(now))
        finished = [flow for flow in self.active if flow.finish_at <= tie]
        self.active = [flow for flow in self.active if flow.finish_at > tie]
        for flow in finished:
            flow.remaining = 0.0
            flow.finished_at = now
            if flow.group is None:
                flow.rates.append((now, 0.0))
        self._rerate()
        for flow in finished:
            if flow.group is None:
                flow.done.succeed(flow)
            else:
                flow.group.finish_one(self.env)
