"""Expert parallelism's dispatch and combine, and the send/recv between pipeline stages, as times on a fabric.

What is modelled: a dispatch sends every token of an EP rank to the ranks holding its experts, a combine sends the
experts' outputs back; both are one all-to-all (parallel_collectives.all_to_all_us: every pair's bytes as fluid
flows started together on the fabric's routes, max-min shared), after a fixed latency that depends on the backend:

- `deepep_low_latency` (DeepEP's low-latency kernels, SGLang --deepep-mode low_latency, decode): one message per
  token and top-k expert (tokens x k / ep per pair, uniform routing), FP8 dispatch with one fp32 scale per 128 values,
  BF16 combine. Latencies: DeepEP's low-latency dispatch / combine of one token on 8 x H200 inside one machine,
  11.9 / 12.6 us (aiconfigurator-core 0.12.0, systems/data/h200_sxm/comm/sglang/0.5.12/wideep_deepep_ll_perf.parquet:
  hidden 7168, top-8, 256 experts, num_token 1; docs/sources.md "Expert parallelism").
- `deepep_normal` (DeepEP's normal kernels, prefill): a token goes once to each rank holding any of its experts
  (parallel_collectives.ep_bytes_per_pair_once_per_rank), FP8 dispatch, BF16 combine. Latencies: 26.1 / 46.9 us
  (the same data set's wideep_deepep_normal_perf.parquet at one token, the fastest SM setting).
- `nccl` (the fallback: ncclSend/ncclRecv to every peer in one group): one copy per token and expert, BF16 both ways.
  Latency: NCCL's ring LL base latency plus one step of the path class (tuning.cc v2.29.7-1: an all-to-all's sends
  all leave at once) plus what the route adds; the same data set's measured NCCL alltoall of 256 elements on
  8 x H200 took 7.4-11.6 us (model: 7.2), on 8 x RTX PRO 6000 9.5 us (model with the reference's staging: 9.2).

Between machines (EP ranks on 2, 4 or 8 machines, DeepEP's internode kernels over RDMA) the latencies are the same
data set's figures for that many nodes (SGLang 0.5.6.post2, wideep_deepep_{ll,normal}_perf.parquet, node_num 2 / 4 / 8,
the smallest token count measured; normal: the transmit time at the fastest SM setting): low-latency dispatch /
combine 22.6 / 25.9, 27.1 / 28.4, 28.7 / 30.8 us (2 tokens); normal 26.6 / 49.0, 37.8 / 59.8, 37.9 / 65.0 us
(1 token). Machine counts between those take the next measured count's figure (3 machines: 4's).

DeepEP's README (github.com/deepseek-ai/DeepEP, "Performance") reports, on H800, normal kernels at 153 / 158 GB/s
(NVLink, EP8) and low-latency kernels over RDMA at 77 / 114 us for 128 tokens (EP8): the transfer part here is the
fabric's, not those figures. DeepEP needs NVLink between the ranks of one machine and RDMA between machines (README
"Requirements"): a fabric without them takes `nccl`.

Send/recv between pipeline stages: every tp rank sends its copy of the stage's output to the same tp rank of the
next stage, all at once (parallel_collectives.pipeline_boundary_us), after the same NCCL point-to-point latency.
"""
from __future__ import annotations

from typing import Sequence

from ..compiled import dataclass
from . import nccl_tables as T
from .interconnect import Fabric
from .parallel_collectives import all_to_all_us, ep_bytes_per_pair, ep_bytes_per_pair_once_per_rank, \
    pipeline_boundary_us

FP8_WITH_SCALES = 1.0 + 4.0 / 128  # FP8 values and one fp32 scale per 128 (DeepEP's FP8 dispatch)
BF16 = 2.0


@dataclass(frozen=True)
class Backend:
    """One dispatch/combine implementation: its fixed latencies, wire formats and whether a token is sent once per
    destination rank (True) or once per expert (False)."""

    name: str
    dispatch_latency_us: float | None  # inside one machine; None: NCCL's point-to-point latency on the route
    combine_latency_us: float | None
    dispatch_bytes_per_value: float
    combine_bytes_per_value: float
    once_per_rank: bool
    net_latency_us: tuple[tuple[int, float, float], ...] = ()  # (machines, dispatch, combine) between machines


BACKENDS = {
    "deepep_low_latency": Backend("deepep_low_latency", 11.905, 12.557, FP8_WITH_SCALES, BF16, False,
                                  ((2, 22.6, 25.9), (4, 27.1, 28.4), (8, 28.7, 30.8))),
    "deepep_normal": Backend("deepep_normal", 26.068, 46.860, FP8_WITH_SCALES, BF16, True,
                             ((2, 26.6, 49.0), (4, 37.8, 59.8), (8, 37.9, 65.0))),
    "nccl": Backend("nccl", None, None, BF16, BF16, False),
}


def deepep_reaches(fabric: Fabric, ranks: Sequence[int]) -> bool:
    """Whether DeepEP can join these ranks: NVLink inside a machine, the network (RDMA) between machines."""
    return all(fabric.hop(s, d).over_nvlink or fabric.hop(s, d).net for s in ranks for d in ranks if s != d)


def p2p_latency_us(fabric: Fabric, pairs: Sequence[tuple[int, int]]) -> float:
    """NCCL's latency for sends that leave at once: the ring LL base latency and one LL step of the slowest pair's
    path class (NVLink, PCIe or network, tuning.cc's hwLatencies), plus what that route adds (staging, links)."""
    worst = 0.0
    for src, dst in pairs:
        hop = fabric.hop(src, dst)
        hw = "net" if hop.net else "nvlink" if hop.over_nvlink else "pci"
        worst = max(worst, T.HW_LATENCY_US[hw]["ring"][0] + fabric.latency_us(hop))
    return T.BASE_LATENCY_US["ring"][0] + worst if pairs else 0.0


def resolve_backend(choice: str, nvlink: bool, prefill: bool) -> Backend:
    """The backend a pass uses: auto is DeepEP's auto mode (normal for prefill, low-latency otherwise) over NVLink,
    else NCCL. An explicit DeepEP choice without NVLink is the caller's error to report."""
    if choice == "auto":
        choice = ("deepep_normal" if prefill else "deepep_low_latency") if nvlink else "nccl"
    return BACKENDS[choice]


def ep_pair_bytes(backend: Backend, tokens_per_rank: int, hidden_size: int, num_experts: int, experts_per_token: int,
                  ep: int, combine: bool) -> float:
    """Expected bytes one EP rank sends each other one in a dispatch (or a combine) of tokens_per_rank tokens."""
    value = backend.combine_bytes_per_value if combine else backend.dispatch_bytes_per_value
    if backend.once_per_rank:
        return ep_bytes_per_pair_once_per_rank(tokens_per_rank, hidden_size, num_experts, experts_per_token, ep, value)
    return ep_bytes_per_pair(tokens_per_rank, hidden_size, experts_per_token, ep, value)


def ep_all_to_all_us(fabric: Fabric, ranks: Sequence[int], backend: Backend, tokens_per_rank: int, hidden_size: int,
                     num_experts: int, experts_per_token: int, combine: bool) -> float:
    """One dispatch (combine=False) or combine among `ranks`: the backend's latency, then every pair's bytes."""
    ep = len(ranks)
    if ep <= 1 or tokens_per_rank <= 0:
        return 0.0
    nbytes = ep_pair_bytes(backend, tokens_per_rank, hidden_size, num_experts, experts_per_token, ep, combine)
    return all_to_all_us(fabric, ranks, nbytes, ep_latency_us(fabric, ranks, backend, combine))


def ep_latency_us(fabric: Fabric, ranks: Sequence[int], backend: Backend, combine: bool) -> float:
    """The backend's fixed latency of a dispatch or combine among `ranks` (NCCL's p2p latency for the fallback)."""
    pairs = [(s, d) for s in ranks for d in ranks if s != d]
    if backend.dispatch_latency_us is None:
        return p2p_latency_us(fabric, pairs)
    if any(fabric.hop(s, d).net for s, d in pairs):
        machine_of = fabric.topology.machine_of
        machines = len({machine_of[fabric.gpu_names[r]] for r in ranks})
        _, dispatch, combine_us = next(row for row in backend.net_latency_us if row[0] >= machines)
        return combine_us if combine else dispatch
    return backend.combine_latency_us if combine else backend.dispatch_latency_us


def stage_send_us(fabric: Fabric, pairs: Sequence[tuple[int, int]], nbytes: float) -> float:
    """Activations from every rank of a pipeline stage to its peer in the next: NCCL's p2p latency, then the bytes."""
    return pipeline_boundary_us(fabric, pairs, nbytes, p2p_latency_us(fabric, pairs))
