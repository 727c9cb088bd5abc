"""The collectives that close a pass's segments, timed on one instance's ranks, for every split.

What is modelled: each segment's collective (model.cost.Segment: kind and the group it runs among) on the ranks of
the instance's first stage or attention group (every group of a kind is taken to cost what the first does: the
topologies are symmetric inside a machine): the all-reduce as the runtime chooses it (inside a machine or across
machines), all-gather and reduce-scatter as NCCL's ring all-gather (tuning.cc gives ReduceScatter the all-gather's
steps and bandwidth), dispatch and combine as hardware.expert_parallel's all-to-all with the runtime's backend, and
the send/recv of a stage boundary at its slowest boundary. Each returns the time and, for link fidelity, the
collective as steps over its links (a StepPlan; one step for everything but the all-reduce).
"""
from __future__ import annotations

import hashlib

from ..cache import current
from ..config.errors import ConfigError
from ..hardware.collectives import StepPlan
from ..hardware.interconnect import Fabric
from ..hardware.multinode import make_allreduce
from ..model.cost import PassShape, Segment


class SplitCollectives:
    """Every collective a segment can close with, on one instance of `parallelism`."""

    def __init__(self, fabric: Fabric, parallelism, runtime, card, allreduce, allgather, kernel_floor_us: float,
                 source: str):
        self.fabric, self.card, self.runtime = fabric, card, runtime
        # what time() computes from, by value (the run's store keys its results by it)
        self.value_key = hashlib.sha1("\0".join([
            fabric.value_key, parallelism.model_dump_json(), runtime.model_dump_json(), card.model_dump_json(),
            repr((allreduce.value_key, allgather.value_key, kernel_floor_us))]).encode()).hexdigest()
        tp, a = parallelism.tp, parallelism.attention_tp
        self.allreduce = {"tp": allreduce}
        self.gather = {"tp": allgather}
        if a == tp:
            self.allreduce["attention"], self.gather["attention"] = allreduce, allgather
        elif a > 1:
            # the engine's rule (runtime.custom_allreduce) over the attention group; no measured model fitted to it
            self.allreduce["attention"] = make_allreduce(fabric, a, runtime.allreduce, kernel_floor_us,
                                                         custom_rule=runtime.custom_allreduce)
            self.gather["attention"] = make_allreduce(fabric, a, "nccl", kernel_floor_us)
        self.ep_ranks = list(range(parallelism.ep))
        self.nvlink = False
        if parallelism.ep > 1:  # hardware.expert_parallel imported only where experts are split (and pp > 1)
            from ..hardware.expert_parallel import deepep_reaches

            self.nvlink = deepep_reaches(fabric, self.ep_ranks)
        if parallelism.ep > 1 and runtime.ep_backend.startswith("deepep") and not self.nvlink:
            raise ConfigError(source, "runtime.ep_backend", f"{runtime.ep_backend} needs NVLink between the ep="
                              f"{parallelism.ep} ranks of a machine (DeepEP's intranode kernels) and RDMA between "
                              "machines; this fabric joins them otherwise", "nccl, or auto")
        self.boundaries = [[(s * tp + i, (s + 1) * tp + i) for i in range(tp)] for s in range(parallelism.pp - 1)]

    def time(self, segment: Segment, shape: PassShape, steps: bool = True) -> tuple[float, StepPlan | None, bool]:
        """(time us, steps over links or None, whether it is an all-reduce) of the segment's collective, found
        in the run's store by what it reads (the anchors of a pass shape close their segments alike). steps=False:
        the steps are left out (None; only the link fidelity moves them over links)."""
        key = ("split_costs.time", self.value_key, segment.collective, segment.collective_bytes, segment.group,
               segment.collective_tokens, shape.tokens > 1 and not shape.verify, steps)
        return current().get(key, lambda: self._time(segment, shape, steps))

    def _time(self, segment: Segment, shape: PassShape, steps: bool) -> tuple[float, StepPlan | None, bool]:
        kind, nbytes = segment.collective, segment.collective_bytes
        if kind is None:
            return 0.0, None, False
        if kind == "allreduce":
            ar = self.allreduce[segment.group]
            return ar.cost(nbytes).time_us, ar.step_plan(nbytes) if steps else None, True
        if kind in ("allgather", "reducescatter"):
            gather = self.gather[segment.group]
            us = gather.allgather_us(nbytes)
            return us, _one_step(gather.step_plan(0).hops, us, 0.0, self.fabric) if steps else None, False
        if kind in ("dispatch", "combine"):
            return self._all_to_all(segment, shape, steps)
        if kind == "sendrecv":
            from ..hardware.expert_parallel import p2p_latency_us, stage_send_us

            times = [(stage_send_us(self.fabric, pairs, nbytes), pairs) for pairs in self.boundaries]
            us, pairs = max(times)
            if not steps:
                return us, None, False
            hops = [self.fabric.hop(s, d) for s, d in pairs]
            return us, _one_step(hops, us, p2p_latency_us(self.fabric, pairs), self.fabric), False
        raise ValueError(f"unknown collective {kind!r}")

    def _all_to_all(self, segment: Segment, shape: PassShape, steps: bool) -> tuple[float, StepPlan | None, bool]:
        from ..hardware.expert_parallel import ep_all_to_all_us, ep_latency_us, resolve_backend

        m, ranks = self.card.moe, self.ep_ranks
        prefill = shape.tokens > 1 and not shape.verify
        backend = resolve_backend(self.runtime.ep_backend, self.nvlink, prefill)
        combine = segment.collective == "combine"
        us = ep_all_to_all_us(self.fabric, ranks, backend, segment.collective_tokens, self.card.hidden_size,
                              m.num_experts, m.experts_per_token, combine)
        if not steps:
            return us, None, False
        latency = ep_latency_us(self.fabric, ranks, backend, combine)
        hops = [self.fabric.hop(s, d) for s in ranks for d in ranks if s != d]
        return us, _one_step(hops, us, min(latency, us), self.fabric), False


def _one_step(hops, total_us: float, latency_us: float, fabric: Fabric) -> StepPlan | None:
    """A collective as one step over its hops: its latency, then its transfer at the hops' shared bottleneck (at
    link fidelity, traffic from elsewhere on those links stretches the transfer)."""
    if not hops or total_us <= 0:
        return None
    bandwidth = min(fabric.concurrent_bandwidth_GBps(list(hops)))
    return StepPlan(0.0, 1, tuple(hops), latency_us, total_us - latency_us, bandwidth)
