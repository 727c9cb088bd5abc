"""Max-min fair rates of flows over shared links, by progressive filling (the allocation hardware/flows.py re-rates
with), and the same allocation in exact rational arithmetic as a test oracle."""
from __future__ import annotations

from fractions import Fraction
from typing import Hashable, Mapping, Sequence

from .lonegroup import RELATIVE_TIE as _RELATIVE_TIE


def max_min_rates(routes: Sequence[Sequence[Hashable]], capacity_GBps: Mapping[Hashable, float],
                  limits_GBps: Sequence[float | None] | None = None) -> list[float]:
    """Max-min fair rates (GB/s) of flows with the given routes, by progressive filling.

    The unfrozen flows all sit at one level; the next level is the lowest at which a link they cross saturates
    (its capacity left after the frozen flows, over its unfrozen flows) or a flow reaches its own limit. The flows
    that meet it freeze there. Each round freezes at least one flow, so there are at most len(routes) rounds.
    """
    n = len(routes)
    limits = list(limits_GBps) if limits_GBps is not None else [None] * n
    rates = [0.0] * n
    users: dict[Hashable, list[int]] = {}
    for i, route in enumerate(routes):
        for link in route:
            users.setdefault(link, []).append(i)
    left = {link: float(capacity_GBps[link]) for link in users}
    count = {link: len(flows) for link, flows in users.items()}
    active = set(range(n))
    while active:
        level = min((left[link] / count[link] for link in users if count[link]), default=float("inf"))
        capped = [limits[i] for i in active if limits[i] is not None]
        level = min([level, *capped])
        tie = level * (1.0 + _RELATIVE_TIE)
        frozen = {i for i in active if limits[i] is not None and limits[i] <= tie}
        for link, flows in users.items():
            if count[link] and left[link] / count[link] <= tie:
                frozen.update(i for i in flows if i in active)
        for i in frozen:
            rates[i] = level
            for link in routes[i]:
                left[link] -= level
                count[link] -= 1
        active -= frozen
    return rates


def reference_rates(routes: Sequence[Sequence[Hashable]], capacity_GBps: Mapping[Hashable, float],
                    limits_GBps: Sequence[float | None] | None = None) -> list[Fraction]:
    """The same allocation in exact rational arithmetic, written as plainly as possible (a test oracle).

    Raise every unfrozen flow by the largest common increment no link or limit forbids; freeze the flows on the
    links that filled up, and those at their limit; repeat.
    """
    n = len(routes)
    limits = [None if x is None else Fraction(x) for x in (limits_GBps or [None] * n)]
    rates = [Fraction(0)] * n
    frozen = [False] * n
    while not all(frozen):
        links = {link for i in range(n) if not frozen[i] for link in routes[i]}
        steps = []
        for link in links:
            used = sum(rates[i] for i in range(n) if link in routes[i])
            growing = sum(1 for i in range(n) if link in routes[i] and not frozen[i])
            steps.append((Fraction(capacity_GBps[link]) - used) / growing)
        steps += [limits[i] - rates[i] for i in range(n) if not frozen[i] and limits[i] is not None]
        step = min(steps)
        for i in range(n):
            if not frozen[i]:
                rates[i] += step
        for link in links:
            if sum(rates[i] for i in range(n) if link in routes[i]) == Fraction(capacity_GBps[link]):
                for i in range(n):
                    if link in routes[i]:
                        frozen[i] = True
        for i in range(n):
            if limits[i] is not None and rates[i] == limits[i]:
                frozen[i] = True
    return rates
