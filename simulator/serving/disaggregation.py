"""Prefill/decode disaggregation: a prefill pool and a decode pool of instances, the KV cache of every request moved
between them over the fabric.

What is modelled (SGLang's and vLLM's disaggregated serving; DistServe, Zhong et al. 2024): the router sends each
arriving request to a prefill instance, which admits it, prefills its prompt in chunks and samples its first token;
the request then leaves the prefill instance (its KV memory freed there) and its KV cache moves to a decode
instance chosen by the same router policy among the decode pool: each prefill rank sends its shard (the request's
prompt and first token, `kv_bytes_per_token` of the instance's memory budget per token and rank) to the decode rank
of the same tp index, all shards at once. The decode instance admits the request without a prefill (its KV cache
reserved as any request's) and decodes it to the end. At fast and layer fidelity a transfer takes its max-min
fluid time alone on the links (hardware.parallel_collectives.kv_transfer_us) plus the route's latency; at link
fidelity its shards are flows on the links the instances' collectives share. Assumptions: the transfer starts when
the prefill ends (no layer-by-layer streaming) and costs the GPUs nothing; a decode instance reserves nothing for a
request before its KV cache arrives.
"""
from __future__ import annotations

from ..cache import current
from ..hardware.interconnect import Fabric
from ..hardware.parallel_collectives import kv_transfer_us
from .router import Router


class KVHandoff:
    """Moves prefilled requests from the prefill servers to the decode servers and closes the decode servers once
    every prefill server has finished and every transfer has landed."""

    def __init__(self, env, prefill: list, decode: list, kind: str, links=None):
        self.env = env
        self.prefill, self.decode = prefill, decode
        self.router = Router(env, decode, kind)
        self.links = links  # timing.linkpass.SharedLinks at link fidelity
        self.moves: list = []
        for index, server in enumerate(prefill):
            server.on_prefilled = lambda request, index=index: self.moves.append(
                env.process(self._move(index, request)))

    def _route(self, p: int, d: int) -> tuple:
        """(hops, fabric, pairs) of the shards from prefill instance p's ranks to decode instance d's, rank by rank:
        in the run's store by the source fabric's value and the sink's GPUs."""
        source, sink = self.prefill[p].machine.fabric, self.decode[d].machine.fabric
        return current().get(("disaggregation.route", source.value_key, tuple(sink.gpu_names)),
                             lambda: _route(source, sink))

    def _move(self, p: int, request):
        """SimPy process: one request's KV cache from prefill instance p to the decode instance the router picks."""
        env = self.env
        d = self.router.pick()
        hops, fabric, pairs = self._route(p, d)
        tokens = request.prompt_tokens + request.generated
        nbytes = tokens * self.prefill[p].machine.memory["kv_bytes_per_token"]
        latency = max(fabric.latency_us(hop) for hop in hops)
        start = env.now
        if self.links is not None:
            yield self.links.flows.transfer_group(self.links.routes(hops), nbytes, latency)
        else:
            yield env.timeout(kv_transfer_us(fabric, pairs, nbytes, latency))
        server = self.decode[d]
        server.kv_received.append((nbytes, env.now - start))
        request.kv_ready = True
        request.instance = len(self.prefill) + d
        self.router.sent[d] += 1
        server.submit(request)

    def run(self, prefill_processes: list):
        """SimPy process: when every prefill server is done and every transfer has landed, close the decode pool."""
        yield self.env.all_of(prefill_processes)
        yield self.env.all_of(self.moves)
        for server in self.decode:
            server.close()


def _route(source: Fabric, sink: Fabric) -> tuple:
    """The hops from each of the source's ranks to the sink's same rank, over the fabric that holds both."""
    tp = len(source.gpu_names)
    fabric = Fabric(source.topology, source.gpu_names + sink.gpu_names)
    pairs = tuple((i, tp + i) for i in range(tp))
    return tuple(fabric.hop(s, t) for s, t in pairs), fabric, pairs
