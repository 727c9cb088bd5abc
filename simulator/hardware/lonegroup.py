"""A flow group that shares no link with any other flow in flight, run without the network's per-flow events.

What is modelled: max-min sharing splits into independent problems over link-disjoint sets of flows, so a group
(hardware/flows.py, transfer_group) whose links nothing else crosses evolves on its own: its flows start at the
rates of solving the group alone, and whenever some of them finish the rest are re-solved among themselves. That
evolution depends only on the group's routes and bytes, so it is computed once (`lone_schedule`, the same
progressive filling and the same tie rule as the network's re-rates) and the network sets one timer at its end.
If another flow later starts on one of its links, the group is put back into the network as ordinary flows with the
bytes they have left at that instant (`LoneGroup.flows_left`), and sharing goes on from there exactly as if it
had always been there.
"""
from __future__ import annotations

from typing import Callable, Sequence

from ..compiled import dataclass

BYTES_PER_US_PER_GBPS = 1e3
RELATIVE_TIE = 1e-12  # completions within this relative distance are simultaneous (flows.py's tie rule)

# a schedule: its end (us after the start) and its phases, each (end offset in us, every flow's rate in GB/s then,
# 0 once it has finished)
Schedule = tuple[float, tuple[tuple[float, tuple[float, ...]], ...]]


def lone_schedule(routes: Sequence[tuple], nbytes: float, solve: Callable[[tuple], list[float]]) -> Schedule:
    """The phases of a group of flows of `nbytes` each, started together on links nothing else crosses.

    `solve` gives the max-min rates of a tuple of (route, limit) flows. Each phase ends at the earliest completion;
    the flows that complete then (within the tie) leave and the rest are re-solved, as the network's timer does."""
    n = len(routes)
    remaining = [float(nbytes)] * n
    alive = list(range(n))
    t = 0.0
    phases = []
    while alive:
        rates = solve(tuple((routes[i], None) for i in alive))
        finish = [t + max(remaining[i], 0.0) / (rate * BYTES_PER_US_PER_GBPS) for i, rate in zip(alive, rates)]
        first = min(finish)
        tie = first + RELATIVE_TIE * max(1.0, abs(first))
        phase = [0.0] * n
        for i, rate in zip(alive, rates):
            phase[i] = rate
            remaining[i] -= rate * BYTES_PER_US_PER_GBPS * (first - t)
        phases.append((first, tuple(phase)))
        alive = [i for i, end in zip(alive, finish) if end > tie]
        t = first
    return t, tuple(phases)


@dataclass(frozen=True, eq=False)
class RouteSet:
    """A group's routes as one network validated them (FlowNetwork.route_set), the links they hold, and `key`: a
    digest of the routes and the network's capacities, which the run's store keys the group's lone schedules by."""

    routes: tuple
    links: frozenset
    key: str


@dataclass(eq=False, slots=True)
class LoneGroup:
    """A group in flight on its own: where it started, its schedule, and the set of links it holds."""

    group: object  # the flows.FlowGroup whose event fires at the end
    routes: tuple
    nbytes: float
    started_at: float
    schedule: Schedule
    links: frozenset
    live: bool = True  # False once put back into the network (its timer then does nothing)

    @property
    def end_at(self) -> float:
        return self.started_at + self.schedule[0]

    def flows_left(self, now: float) -> list[tuple[tuple, float, float]]:
        """(route, bytes left, current rate) of each flow still crossing at `now` (before the schedule's end)."""
        offset = now - self.started_at
        remaining = [self.nbytes] * len(self.routes)
        before = 0.0
        for end, rates in self.schedule[1]:
            upto = min(end, offset)
            for i, rate in enumerate(rates):
                remaining[i] -= rate * BYTES_PER_US_PER_GBPS * (upto - before)
            if end > offset:
                return [(route, remaining[i], rates[i]) for i, route in enumerate(self.routes) if rates[i] > 0]
            before = end
        return []
