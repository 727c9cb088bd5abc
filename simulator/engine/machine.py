"""One TP group on one machine: turns a pass shape into a PassPlan (cost model x roofline x collectives).

Plans and their fast-fidelity samples are memoised per (machine, pass kind, shape): a shape is costed once.
"""
from __future__ import annotations

import hashlib
import json
from collections import OrderedDict

import numpy as np

from ..config import Scenario
from ..errors import ConfigError
from ..hardware.collectives import AllReduce, NotPermitted
from ..hardware.gpu import GPU, Host
from ..hardware.interconnect import Fabric
from ..model.cost import PassShape, draft_head_card, mtp_card, pass_segments
from .timeline import PassPlan, sample_passes

FAST_SAMPLES = 64  # passes drawn per shape for the fast fidelity's memoised distribution
_SAMPLE_CACHE: "OrderedDict[tuple, dict]" = OrderedDict()
_SAMPLE_CACHE_SIZE = 20000


class Machine:
    """The hardware and model of a scenario, and the plans of its passes."""

    def __init__(self, scenario: Scenario):
        spec = scenario.spec
        self.scenario = scenario
        self.tp = spec.parallelism.tp
        self.runtime = spec.runtime
        self.card = scenario.model
        self.gpu = GPU(scenario.topology.gpu)
        self.host = Host(scenario.topology.host)
        try:
            self.fabric = Fabric(scenario.topology)
            self.allreduce = AllReduce(self.fabric, self.tp, spec.runtime.allreduce, self.gpu.floor_us)
            self.allgather = AllReduce(self.fabric, self.tp, "nccl", self.gpu.floor_us)
        except NotPermitted as exc:
            raise ConfigError(scenario.source, "runtime.allreduce", str(exc), "auto, nccl, nccl_ring, nccl_tree") from None
        except ValueError as exc:
            raise ConfigError(scenario.source, "topology.fabric", str(exc)) from None
        self.cards = {"target": self.card}
        if self.card.draft_head is not None:
            self.cards["draft_head"] = draft_head_card(self.card)
        if self.card.mtp_layers:
            self.cards["mtp"] = mtp_card(self.card)
        physical = {
            "topology": scenario.topology.model_dump(mode="json"), "model": self.card.model_dump(mode="json"),
            "tp": self.tp, "runtime": self.runtime.model_dump(mode="json"),
        }
        self.key = hashlib.sha1(json.dumps(physical, sort_keys=True).encode()).hexdigest()
        self._plans: dict[tuple, PassPlan] = {}

    def plan(self, part: str, shape: PassShape, graph: bool) -> PassPlan:
        """The plan of a pass of `part` (target, draft_head, mtp) over `shape`, eager or graph-captured."""
        key = (part, shape, graph)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._build(part, shape, graph)
        return plan

    def _build(self, part: str, shape: PassShape, graph: bool) -> PassPlan:
        segments = pass_segments(self.cards[part], self.tp, shape, self.runtime.fuse_allreduce_rmsnorm)
        times = [self.gpu.segment(s) for s in segments]
        node_us = self.scenario.topology.host.graph_node_us if graph else 0.0
        collective = []
        for s in segments:
            if s.collective == "allreduce":
                collective.append(self.allreduce.cost(s.collective_bytes).time_us)
            elif s.collective == "allgather":
                collective.append(self.allgather.allgather_us(s.collective_bytes))
            else:
                collective.append(0.0)
        return PassPlan(
            launches=np.array([t.num_kernels + (1 if s.collective else 0) for t, s in zip(times, segments)], float),
            compute_us=np.array([t.compute_us for t in times]),
            memory_us=np.array([t.memory_us for t in times]),
            gap_us=np.array([(t.num_kernels + (1 if s.collective else 0)) * node_us for t, s in zip(times, segments)]),
            last_us=np.array([t.last_kernel_us for t in times]),
            collective_us=np.array(collective),
            allreduce_mask=np.array([s.collective == "allreduce" for s in segments]),
            graph=graph,
            ranks=self.tp,
            label=f"{part} {shape.tokens}x{shape.batch} ctx{shape.context}{' tree' if shape.tree else ''}"
                  f" {'graph' if graph else 'eager'}",
        )

    def samples(self, part: str, shape: PassShape, graph: bool, seed: int) -> dict[str, np.ndarray]:
        """FAST_SAMPLES passes of this shape from the layer model, memoised across runs of the same machine."""
        key = (self.key, part, shape, graph, seed)
        hit = _SAMPLE_CACHE.get(key)
        if hit is not None:
            _SAMPLE_CACHE.move_to_end(key)
            return hit
        # the draws depend on the seed and the shape, not on the machine: what-if runs share them (common numbers)
        entropy = int.from_bytes(hashlib.sha1(repr((part, shape, graph)).encode()).digest()[:8], "little")
        rng = np.random.default_rng([seed, entropy])
        result = sample_passes(self.plan(part, shape, graph), self.host, rng, FAST_SAMPLES)
        _SAMPLE_CACHE[key] = result
        if len(_SAMPLE_CACHE) > _SAMPLE_CACHE_SIZE:
            _SAMPLE_CACHE.popitem(last=False)
        return result
