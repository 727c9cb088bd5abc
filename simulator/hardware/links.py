"""Links as shared resources: each directed link's bandwidth is split equally among the flows crossing it."""
from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from .interconnect import Fabric, Hop

MAX_COMPILED = 1024  # compiled hop routes kept; a run's collectives use a few


class Routes(NamedTuple):
    """A collective's hops compiled to directed-link ids: flows per link, and the slowest hop's share alone."""

    hops: tuple[Hop, ...]
    flows: dict[int, int]  # link id -> flows of this collective on it
    alone_GBps: float


class LinkNetwork:
    """The collectives in flight on a fabric (the link fidelity's contention model).

    A collective registers its hops' flows while it runs; a flow's bandwidth is the smallest equal share of the
    links on its route, as a snapshot taken when the collective starts: it is not re-rated when other flows start
    or end during the transfer (a max-min fluid model would re-rate it). Hop routes are compiled to integer link ids
    once, keyed by the hops themselves (frozen values), in a bounded cache. A collective that starts on idle links
    (the usual case: one TP group's collectives follow each other) takes its precomputed share, so registering
    costs O(1), not O(links).
    """

    def __init__(self, fabric: Fabric):
        self.fabric = fabric
        self._ids: dict[tuple[int, int], int] = {}
        self.capacity: list[float] = []
        self._compiled: dict[tuple, Routes] = {}
        self._active: list[Routes] = []

    def _link_id(self, link: tuple[int, int]) -> int:
        lid = self._ids.get(link)
        if lid is None:
            lid = self._ids[link] = len(self.capacity)
            self.capacity.append(self.fabric.link_of[link].bandwidth_GBps)
        return lid

    def compile(self, hops: tuple[Hop, ...]) -> Routes:
        compiled = self._compiled.get(hops)
        if compiled is None:
            flows = Counter(self._link_id(link) for hop in hops for link in hop.links)
            alone = min((self.capacity[lid] / count for lid, count in flows.items()), default=float("inf"))
            if len(self._compiled) >= MAX_COMPILED:
                self._compiled.clear()
            compiled = self._compiled[hops] = Routes(hops, dict(flows), alone)
        return compiled

    def begin(self, compiled: Routes) -> float:
        """Register the flows; returns the slowest hop's bandwidth share."""
        self._active.append(compiled)
        if len(self._active) == 1:
            return compiled.alone_GBps
        flows = Counter()
        for routes in self._active:
            flows.update(routes.flows)
        return min(self.capacity[lid] / flows[lid] for lid in compiled.flows)

    def end(self, compiled: Routes) -> None:
        self._active.remove(compiled)
