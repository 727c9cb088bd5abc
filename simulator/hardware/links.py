"""Links as shared resources: each directed link's bandwidth is split equally among the flows crossing it."""
from __future__ import annotations

from .interconnect import Fabric, Hop


class LinkNetwork:
    """Active flows per directed link of a fabric (the link fidelity's contention model).

    A collective registers its hops' flows while it runs; a flow's bandwidth is the smallest equal share of the
    links on its route, taken when the collective starts (a fluid approximation of the links' arbitration).
    Hop routes are compiled to integer link ids once (hot path).
    """

    def __init__(self, fabric: Fabric):
        self.fabric = fabric
        self._ids: dict[tuple[int, int], int] = {}
        self.capacity: list[float] = []
        self.flows: list[int] = []
        self._compiled: dict[int, tuple] = {}

    def _link_id(self, link: tuple[int, int]) -> int:
        lid = self._ids.get(link)
        if lid is None:
            lid = self._ids[link] = len(self.capacity)
            self.capacity.append(self.fabric.link_of[link].bandwidth_GBps)
            self.flows.append(0)
        return lid

    def compile(self, hops: tuple[Hop, ...]) -> tuple:
        key = id(hops)
        compiled = self._compiled.get(key)
        if compiled is None:
            per_hop = tuple(tuple(self._link_id(l) for l in hop.links) for hop in hops)
            flat = tuple(lid for links in per_hop for lid in links)
            compiled = self._compiled[key] = (hops, per_hop, flat)  # keep hops alive: the id stays valid
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
