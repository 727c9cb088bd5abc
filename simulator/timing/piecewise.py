"""A CUDA-graph pass captured piecewise (vLLM V1: torch.compile's graph split at every attention call): the host
replays one graph piece, calls attention eagerly, replays the next piece, and so on, so a segment's kernels are
queued only when the host has reached them. Per segment k of the pass, the time after the pass's first graph launch
at which its kernels can have run, R_k (timeline.host_ready: h = start + R; one graph a pass: R = W).

Assumptions: the host times are deterministic (the pass's first launch keeps its jitter); a segment with an attention
kernel holds one attention call and ends in the next piece (its kernels before attention in the current piece, the
attention kernels queued by the call, the rest by the next piece's replay); a segment without one lies in the piece
current when it starts; the pass's tail (lm_head, sampling) is queued with the last piece."""
from __future__ import annotations

import numpy as np

ATTENTION_KERNELS = ("attention", "mla_attention")  # model.cost's attention kernels: where the graph is split


def piecewise_ready_us(rows: list[tuple[float, tuple[float, float] | None]], piece_us: float,
                       attention_us: float, entry_us: float = 0.0) -> np.ndarray:
    """R per segment, in the pass's order, from (W, (S, P)) per segment: W its GPU work, S the work from its
    attention kernel on and P the work after it (None: no attention call in the segment); piece_us and attention_us
    the host time of one piece's replay and of one attention call, launches included; entry_us the host's time in
    the compiled forward's entry before the first piece. With t the host's time when the segment's piece was
    replayed (entry_us for the first), a segment without attention: R = t + W; with attention: R = max(t + W,
    t + attention_us + S, t' + P), t' = t + attention_us + piece_us (the next piece replayed)."""
    t, out = entry_us, []
    for work, split in rows:
        if split is None:
            out.append(t + work)
            continue
        suffix, post = split
        after = t + attention_us + piece_us
        out.append(max(t + work, t + attention_us + suffix, after + post))
        t = after
    return np.array(out, dtype=float)


def attention_split_us(segment, times) -> tuple[float, float] | None:
    """(S, P) of a segment (piecewise_ready_us) from its KernelTimes (the heavy kernels' times in launch order, the
    small element-wise ones after them, as kernel_lines orders them), or None where it has no attention kernel."""
    small = times.small_us * (times.num_kernels - len(times.kernel_us))
    for i, kernel in enumerate(segment.kernels):
        if kernel.name in ATTENTION_KERNELS:
            return float(sum(times.kernel_us[i:])) + small, float(sum(times.kernel_us[i + 1:])) + small
    return None


def host_times(piecewise, eager_launch_us: float, layers: int) -> tuple[float, float, float]:
    """(one piece's replay, one attention call, the forward's entry) in us: each its Python plus its launches at
    eager_launch_us; the entry's time for a pass of `layers` layers."""
    return (piecewise.piece_us + piecewise.piece_launches * eager_launch_us,
            piecewise.attention_us + piecewise.attention_launches * eager_launch_us,
            piecewise.entry_us + piecewise.entry_per_layer_us * layers)
