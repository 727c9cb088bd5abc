"""The per-rank timeline of one pass: host launches, GPU kernels and the collectives that synchronise the ranks.

Segment k on rank r: the host finishes launching it at H_r(k) (launches never wait for the GPU), its launches evenly
spaced over the segment's launch time; the GPU runs each kernel i (work w_i) no earlier than its launch l_i, in
order: t_i = max(t_{i-1}, l_i) + w_i from t_0 = C_{k-1}. Unrolled, the rank arrives at the closing collective (whose
own launch comes last, at H_r(k)) at A_r(k) = max(C_{k-1} + W_k, h_r(k)) with h_r(k) = max(H_r(k), max_i l_i + S_i)
and S_i = w_i + ... + w_m the work from kernel i on: h is when the rank's own launches allow it to arrive, exact. The collective starts when
the last rank arrives and ends T_k later: C_k = max_r A_r(k) + T_k. Until then each rank waits; waiting is booked
apart from transfer. Ranks interact only at collectives, so their timelines advance as vectors between them.

`host_ready` draws the launches and evaluates h (vectorised over samples, ranks and segments), `collective_ends` solves the recurrence in closed form for many samples at once
(C_k - sum_{j<=k}(W_j + T_j) is a running maximum), `LayerPass` steps the same recurrence one SimPy event per
collective, and `breakdown` books every rank's time into categories that sum to the pass duration.
"""
from __future__ import annotations

import numpy as np

from ..hardware.gpu import Host, over_samples
from .clock import delay_to
from .kernellines import PRUNE_ROWS, binding_lines
from .passplan import CATEGORIES, PassPlan, blend  # noqa: F401  (re-exported: the plan is the timeline's input)


def eager_launch(plan: PassPlan, host: Host, rng: np.random.Generator | None, samples: int,
                 draws: tuple | None = None) -> tuple:
    """An eager pass's launches: (start, H, one, bounds) per sample, rank and segment: when the host starts launching
    each segment (H - L, L its launch time), when it has launched it (H, the running sum of L), the time of one
    launch, and its range per segment over the samples and ranks where binding_lines prunes (else None). They
    depend on the launch counts and the draws only, so the anchors of one shape can share them (host_ready's
    `launch`)."""
    L = host.eager_launch_us(plan.launches, rng, samples, plan.ranks, draws)
    one = L / over_samples(plan.launches, L)
    if L.shape[0] * L.shape[1] < PRUNE_ROWS:
        H = np.cumsum(L, axis=2)
        return H - L, H, one, None
    H, low, high = running_sum(L, extremes=True)
    # one's range per segment: L's divided by the launch count (rounding is monotonic: the same floats as
    # one.min(axis=(0, 1)) and one.max, without numpy's slow reduction over the samples' strided axes)
    return H - L, H, one, (low / plan.launches, high / plan.launches)


def running_sum(L: np.ndarray, extremes: bool = False):
    """np.cumsum(L, axis=2), the same floats in the same layout (each a sequential sum from the first segment), one
    segment at a time over all samples and ranks, on a copy where each segment's values are contiguous (numpy
    accumulates along a strided axis element by element, ~4x slower at 64 samples x 8 ranks). With extremes, also
    L's minimum and maximum per segment over the samples and ranks."""
    others = sorted(range(L.ndim - 1), key=lambda axis: -abs(L.strides[axis]))  # L's own order of the other axes
    by_segment = L.transpose(L.ndim - 1, *others).copy()  # C order: the segments' rows, summed in place
    flat = by_segment.reshape(L.shape[-1], -1)  # a view: a segment's values a row
    if extremes:
        low, high = flat.min(axis=1), flat.max(axis=1)
    rows = list(flat)
    add = np.add
    for before, row in zip(rows, rows[1:]):
        add(before, row, out=row)
    H = np.empty_like(L)
    H.transpose(L.ndim - 1, *others)[...] = by_segment
    return (H, low, high) if extremes else H


def host_ready(plan: PassPlan, host: Host, rng: np.random.Generator | None, samples: int, with_host: bool = False,
               draws: tuple | None = None, launch: tuple | None = None):
    """h[s, r, k]: the earliest time rank r's own host allows it to arrive at collective k.

    With with_host, also H[s, r, k]: when rank r's host has launched segment k (for timelines and traces).
    `launch`: eager_launch's arrays for this plan's launch counts and draws, when already computed.
    """
    if plan.graph:
        start = host.graph_launch_us(rng, samples, plan.ranks, draws)[:, :, None]
        h = start + plan.graph_ready[None, None, :]  # every kernel queued at the graph launch (or piece by piece)
        return (h, np.broadcast_to(start, h.shape)) if with_host else h
    start, H, one, bounds = launch if launch is not None else eager_launch(plan, host, rng, samples, draws)
    h = eager_ready(start, H, one, bounds, *plan.ready_lines)
    return (h, H) if with_host else h


def eager_ready(start: np.ndarray, H: np.ndarray, one: np.ndarray, bounds: tuple | None, positions: np.ndarray,
                suffixes: np.ndarray) -> np.ndarray:
    """host_ready of an eager pass from its launches (eager_launch's arrays) and its kernel lines per segment. Each
    segment's column is computed on its own, element by element (a max over lines is exact in any order), so a
    subset of the columns gives those columns' floats."""
    positions, suffixes = binding_lines(one, positions, suffixes, bounds)
    # the latest kernel finish its launches allow: the largest line, one column of lines at a time (the same floats
    # as a max over a fourth axis, without numpy's slow reduction over a short last axis), in place, each line's
    # per-segment values spread over one rank's samples first (as gpu.over_samples, into one buffer)
    spread = np.empty_like(one[:, :1, :])
    kernels, line = np.empty_like(one), None
    for j in range(positions.shape[1]):
        target = kernels if j == 0 else line
        spread[...] = positions[:, j]
        np.multiply(one, spread, out=target)
        spread[...] = suffixes[:, j]
        target += spread
        if j:
            np.maximum(kernels, line, out=kernels)
        elif positions.shape[1] > 1:
            line = np.empty_like(one)
    kernels += start  # h = max(H - L + kernels, H)
    return np.maximum(kernels, H, out=kernels)


def collective_ends(plan: PassPlan, h: np.ndarray) -> np.ndarray:
    """C[s, k] for many samples: C_k = max(C_{k-1} + W_k, max_r h_rk) + T_k, C_0 = 0, as a running maximum."""
    return collective_ends_after(plan, h.max(axis=1))


def collective_ends_after(plan: PassPlan, hmax: np.ndarray) -> np.ndarray:
    """collective_ends from the latest rank's ready time per sample and segment, hmax = max_r h."""
    u, cum = _slack(plan, hmax)
    if u.shape[0] > 1 and not u.flags.c_contiguous:  # samples laid out contiguously (stratified draws)
        # the running maximum along each sample's contiguous row (numpy accumulates a strided axis element by
        # element, ~1.5x slower), written back in u's layout: the same floats, and the layout later arithmetic
        # and reductions see
        running = np.empty_like(u)
        running[...] = np.maximum.accumulate(np.ascontiguousarray(u), axis=1)
    else:
        running = np.maximum.accumulate(u, axis=1)
    return np.maximum(running, 0.0) + cum


def last_collective_end(plan: PassPlan, hmax: np.ndarray) -> np.ndarray:
    """collective_ends_after(plan, hmax)[:, -1], the same floats, without the running maximum: the last end is
    max(max_k u_k, 0) + the sum of every W + T, and a maximum is exact in any order (a pass's duration)."""
    u, cum = _slack(plan, hmax)
    return np.maximum(u.max(axis=1), 0.0) + cum[-1]


def _slack(plan: PassPlan, hmax: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The recurrence's u_k = max_r h_rk + T_k - sum_{j<=k}(W_j + T_j), and that running sum."""
    cum = np.cumsum(plan.gpu_us + plan.collective_us)
    return hmax + plan.collective_us - cum, cum


def latest_ready(plan: PassPlan, host: Host, samples: int, draws: tuple, launch: tuple | None = None) -> np.ndarray:
    """host_ready(...).max(axis=1), the same floats, for the given draws: a CUDA-graph pass's h = launch + W is not
    built, its maximum over the ranks being the latest launch + W (rounding is monotonic)."""
    if plan.graph:
        return host.graph_launch_us(None, samples, plan.ranks, draws).max(axis=1)[:, None] + plan.graph_ready[None, :]
    return host_ready(plan, host, None, samples, draws=draws, launch=launch).max(axis=1)


def breakdown(plan: PassPlan, h: np.ndarray, C: np.ndarray) -> dict[str, np.ndarray]:
    """Per-sample duration and rank-averaged time per category (they sum to the duration)."""
    n = C.shape[0]
    return stacked_breakdown(plan.gpu_us[None, :], plan.collective_us[None, :], plan.allreduce_mask,
                             plan.compute_us[None, :], plan.memory_us[None, :], plan.gap_us[None, :], h, C, n)


def stacked_breakdown(W, T, ar, compute, memory, gap, h: np.ndarray, C: np.ndarray, samples: int = 0):
    """breakdown() of many passes of one layout at once: per pass its own segment arrays (rows of W, T, compute,
    memory, gap: (passes, K); or one row for `samples` samples of one plan), rank timelines h (N, R, K) and
    collective ends C (N, K)."""
    prev = np.concatenate([np.zeros((C.shape[0], 1)), C[:, :-1]], axis=1)
    A = np.maximum(prev[:, None, :] + W[:, None, :], h)
    scratch = np.subtract(A, prev[:, None, :])  # A - prev - W in one buffer, in that order (the same floats)
    idle = np.subtract(scratch, W[:, None, :], out=scratch).mean(axis=1)  # GPU waits for its own host
    waits = (C - T)[:, None, :] - A  # per rank: at the barrier until the collective starts
    wait = waits.mean(axis=1)  # waits for the other ranks
    ar_transfer = T[:, ar].sum(axis=1)
    per_rank_ar = waits[:, :, ar].sum(axis=2) + ar_transfer[:, None]
    out = {
        "duration": C[:, -1],
        "compute": compute.sum(axis=1),
        "memory": memory.sum(axis=1),
        "launch": idle.sum(axis=1) + gap.sum(axis=1),
        # the logits all-gather is a collective too; its time is booked with the all-reduces' transfer/wait
        "allreduce_transfer": T.sum(axis=1),
        "allreduce_wait": wait.sum(axis=1),
        "allreduce_only": (wait[:, ar] + T[:, ar]).sum(axis=1),
        # what a profile of one rank shows: the median rank's all-reduce time (transfer + waiting)
        "allreduce_profile": median_last(per_rank_ar),
    }
    if samples:  # one plan's figures, the same for every sample
        for name in ("compute", "memory", "allreduce_transfer"):
            out[name] = np.full(samples, out[name][0])
        out["launch"] = idle.sum(axis=1) + gap.sum(axis=1)[0]
    return out


def median_last(x: np.ndarray) -> np.ndarray:
    """np.median over the last axis, the same values (the middle one, or the mean of the middle two), without
    np.median's per-call overhead and its import of numpy.ma."""
    ordered = np.sort(x, axis=-1)
    middle = ordered.shape[-1] // 2
    if ordered.shape[-1] % 2:
        return ordered[..., middle]
    return (ordered[..., middle - 1] + ordered[..., middle]) / 2.0


def sample_passes(plan: PassPlan, host: Host, rng: np.random.Generator | None, samples: int,
                  draws: tuple | None = None, launch: tuple | None = None) -> dict[str, np.ndarray]:
    """Many independent passes of one plan, evaluated at once (the closed form of the layer model)."""
    h = host_ready(plan, host, rng, samples, draws=draws, launch=launch)
    return breakdown(plan, h, collective_ends(plan, h))


class LayerPass:
    """One pass at layer fidelity: a SimPy process stepping the recurrence collective by collective (each reported
    to on_collective when it ends; it started when the last rank arrived).

    Inlined for speed: a collective's end is an event only when another process is due by then; otherwise nothing
    can happen in between and the pass runs on to the next one, with one event at its end. The times are the same
    floats as with an event per collective (the clock adds up the same delays; delay_to)."""

    def __init__(self, plan: PassPlan, host: Host):
        self.plan = plan
        self.host = host
        self._W = plan.gpu_us.tolist()
        self._T = plan.collective_us.tolist()

    def run(self, env, rng: np.random.Generator, on_collective=None, with_spans: bool = False, book=None):
        """Generator for env.process: returns the breakdown dict (scalars); with_spans adds the rank timeline.
        With a PassBook (timing.passbook) the breakdown is booked there: the dict holds the duration and the slot."""
        h, H = host_ready(self.plan, self.host, rng, 1, with_host=True) if with_spans else \
            (host_ready(self.plan, self.host, rng, 1), None)  # the same draws; H only for a timeline
        hmax = h[0].max(axis=0).tolist()
        W, T = self._W, self._T
        now = begin = env.now
        due = env.peek()  # the next other event: it cannot change while this pass yields nothing
        ends = []
        end = ends.append
        c = 0.0
        for k, (w, t, ready) in enumerate(zip(W, T, hmax)):
            start = c + w
            if ready > start:
                start = ready  # the last rank arrives: the collective starts
            now += start - c + t  # the collective's end, as SimPy's clock adds it up
            c = start + t
            end(c)
            if due <= now:  # another process is due by then: an event here (see the class docstring)
                yield env.timeout(delay_to(env.now, now))
                due = env.peek()
            if on_collective is not None:
                on_collective(k, begin + start, begin + c)
        if env.now < now:
            yield env.timeout(delay_to(env.now, now))
        return finish_pass(self.plan, h, H, ends, begin, with_spans, book)


DURATION_ONLY = "duration only"  # finish_pass's book for a pass whose breakdown nobody reads (a draft pass)


def finish_pass(plan: PassPlan, h: np.ndarray, H: np.ndarray | None, ends: list, begin: float, with_spans: bool, book):
    """A pass's result from its collective ends: its breakdown now, booked for later (a PassBook), or with book
    DURATION_ONLY its duration alone."""
    if book is DURATION_ONLY and not with_spans:
        return {"duration": ends[-1]}
    C = np.asarray(ends)[None, :]
    if book is not None and not with_spans:
        return {"duration": ends[-1], "slot": book.add(plan, h, C)}
    result = {key: float(value[0]) for key, value in breakdown(plan, h, C).items()}
    if with_spans:
        result["_spans"] = spans(plan, h[0], H[0], C[0], begin)
    return result


def spans(plan: PassPlan, h: np.ndarray, H: np.ndarray, C: np.ndarray, begin: float = 0.0) -> dict[str, np.ndarray]:
    """One pass's timeline in absolute times, per rank r and segment k, for traces.

    host_start/host_end (R, K): the host launching segment k; arrive (R, K): the rank reaches collective k (its GPU
    work for the segment done); collective_start/collective_end (K,): the last rank arrived / the transfer ended.
    GPU busy time of segment k on rank r is gpu_us[k] ending at `arrive` unless the rank waited for its own host.
    """
    prev = np.concatenate([[0.0], C[:-1]])
    arrive = np.maximum(prev + plan.gpu_us, h)
    host_end = H
    host_start = np.concatenate([np.zeros((H.shape[0], 1)), H[:, :-1]], axis=1) if not plan.graph else \
        np.zeros_like(H)
    return {"host_start": begin + host_start, "host_end": begin + host_end, "arrive": begin + arrive,
            "collective_start": begin + C - plan.collective_us, "collective_end": begin + C,
            "gpu_us": plan.gpu_us, "collective_us": plan.collective_us, "allreduce": plan.allreduce_mask}
