"""The router in front of a deployment's instances: a SimPy process that sends each request, when it arrives, to one
instance's server (serving.server.Server.submit), then tells every server that nothing more will come.

What is modelled: routing costs no time and sees each instance's state at the moment of the arrival (SGLang's
data-parallel controller dispatches from one process as requests come in). round_robin ignores the state;
least_loaded compares the requests each instance holds (waiting, prefilling or decoding), SGLang's shortest_queue.
"""
from __future__ import annotations

from ..config.names import ROUTERS


class Router:
    """Dispatches requests to servers by `kind` (config.deployment.ROUTERS); `sent[i]` counts what instance i got."""

    def __init__(self, env, servers: list, kind: str):
        if kind not in ROUTERS:
            raise ValueError(f"router {kind!r} is not one of {', '.join(ROUTERS)}")
        self.env = env
        self.servers = servers
        self.kind = kind
        self.sent = [0] * len(servers)
        admissions = [getattr(server, "admission", None) for server in servers]  # Servers' (serving.server)
        self._admissions = admissions if None not in admissions else None
        self._next = 0

    def pick(self) -> int:
        """The instance the next request goes to."""
        if self.kind == "round_robin":
            chosen = self._next
            self._next = (self._next + 1) % len(self.servers)
            return chosen
        if self._admissions is None:
            loads = [server.load for server in self.servers]
        else:  # Server.load as each Admission counts it (an arrival compares every instance: the hot path of a
            loads = [a.held for a in self._admissions]  # large deployment)
        return loads.index(min(loads))  # the lowest index on a tie

    def run(self, requests):
        """SimPy process: every request in arrival order, each when it arrives; then every server is closed."""
        env = self.env
        for request in requests:
            if request.arrived_at > env.now:
                yield env.timeout(request.arrived_at - env.now)
            chosen = self.pick()
            request.instance = chosen
            self.sent[chosen] += 1
            self.servers[chosen].submit(request)
        for server in self.servers:
            server.close()
