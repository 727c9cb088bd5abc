"""Links as shared resources: each directed link's bandwidth is split equally among the flows crossing it."""
from __future__ import annotations

from .interconnect import Fabric, Hop

MAX_COMPILED = 1024  # compiled hop routes kept; a run's collectives use a few


class LinkNetwork:
    """Active flows per directed link of a fabric (the link fidelity's contention model).

    A collective registers its hops' flows while it runs; a flow's bandwidth is the smallest equal share of the
    links on its route, as a snapshot taken when the collective starts: it is not re-rated when other flows start
    or end during the transfer (a max-min fluid model would re-rate it). Hop routes are compiled to integer link ids
    once (hot path), keyed by the hops themselves (frozen values), in a bounded cache.
    """

    def __init__(self, fabric: Fabric):
        self.fabric = fabric
        self._ids: dict[tuple[int, int], int] = {}
        self.capacity: list[float] = []
        self.flows: list[int] = []
        self._compiled: dict[tuple, tuple] = {}

    def _link_id(self, link: tuple[int, int]) -> int:
        lid = self._ids.get(link)
        if lid is None:
            lid = self._ids[link] = len(self.capacity)
            self.capacity.append(self.fabric.link_of[link].bandwidth_GBps)
            self.flows.append(0)
        return lid

    def compile(self, hops: tuple[Hop, ...]) -> tuple:
        compiled = self._compiled.get(hops)
        if compiled is None:
            per_hop = tuple(tuple(self._link_id(l) for l in hop.links) for hop in hops)
            flat = tuple(lid for links in per_hop for lid in links)
            if len(self._compiled) >= MAX_COMPILED:
                self._compiled.clear()
            compiled = self._compiled[hops] = (hops, per_hop, flat)
        return compiled

    def begin(self, compiled) -> float:
        """Register the flows; returns the slowest hop's bandwidth share."""
        flows, capacity = self.flows, self.capacity
        for lid in compiled[2]:
            flows[lid] += 1
        return min(min(capacity[lid] / flows[lid] for lid in links) for links in compiled[1])

    def end(self, compiled) -> None:
        flows = self.flows
        for lid in compiled[2]:
            flows[lid] -= 1
