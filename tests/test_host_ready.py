"""host_ready is the per-kernel recurrence, exactly: checked against a brute-force kernel-by-kernel simulation."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.config.topology import HostSpec
from simulator.timing.kernellines import kernel_lines
from simulator.timing.timeline import PassPlan, collective_ends, host_ready
from simulator.hardware.gpu import Host


def host(launch=10.0, cv=0.0, skew=0.0) -> Host:
    return Host(HostSpec(eager_launch_us=launch, launch_jitter_cv=cv, rank_skew_cv=skew, graph_launch_us=7.0,
                         graph_node_us=0.0, step_overhead_us=0.0, sync_us=0.0))


def kernel_plan(segments: list[tuple], collective_us: list[float], ranks: int) -> tuple[PassPlan, list[list[float]]]:
    """A plan from segments (heavy kernel works, small kernel work, small kernel count), and every segment's kernel
    works written out; a segment with a collective has one more launch (the collective's)."""
    works = [list(heavy) + [small] * count for heavy, small, count in segments]
    K = len(works)
    coll = np.asarray(collective_us, float)
    launches = np.array([len(w) + (1 if c > 0 else 0) for w, c in zip(works, coll)], float)
    positions, suffixes = kernel_lines(segments)
    plan = PassPlan(launches=launches, compute_us=np.zeros(K), memory_us=np.array([sum(w) for w in works]),
                    gap_us=np.zeros(K), last_us=np.array([w[-1] for w in works]), collective_us=coll,
                    allreduce_mask=coll > 0, graph=False, ranks=ranks, line_positions=positions,
                    line_suffix_us=suffixes)
    return plan, works


def brute_force_ends(plan: PassPlan, works: list[list[float]], H: np.ndarray) -> np.ndarray:
    """C[k] of one sample by walking every kernel: launched evenly over its segment's launch time, run in order no
    earlier than its launch; the rank reaches the collective once its kernels ran and the collective is launched."""
    ranks, K = H.shape
    C = np.zeros(K)
    prev = 0.0
    for k in range(K):
        arrivals = []
        for r in range(ranks):
            begin = H[r, k - 1] if k else 0.0
            one = (H[r, k] - begin) / plan.launches[k]
            t = prev
            for i, w in enumerate(works[k]):
                t = max(t, begin + (i + 1) * one) + w
            arrivals.append(max(t, H[r, k]))
        prev = C[k] = max(arrivals) + plan.collective_us[k]
    return C


def test_the_issue_example_heavy_kernel_in_the_middle():
    """Launches at 10/20/30 us (10 us each), works 1/100/1 us: the GPU is done at 121 us, not 112."""
    plan, _ = kernel_plan([([1.0, 100.0, 1.0], 0.0, 0)], [0.0], ranks=1)
    h = host_ready(plan, host(launch=10.0), np.random.default_rng(0), 1)
    assert h[0, 0, 0] == pytest.approx(121.0, abs=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_matches_brute_force_on_random_launches_and_works(seed):
    rng = np.random.default_rng(seed)
    K, ranks = int(rng.integers(1, 12)), int(rng.integers(1, 5))
    segments = []
    for _ in range(K):  # heavy kernels, then (sometimes) a run of equal small ones, as the model launches them
        heavy = rng.exponential(8.0, int(rng.integers(0, 8))).tolist()
        small_count = int(rng.integers(0 if heavy else 1, 12))
        segments.append((heavy, float(rng.uniform(0.5, 3.0)), small_count))
    coll = np.where(rng.random(K) < 0.7, rng.uniform(1.0, 30.0, K), 0.0).tolist()
    plan, works = kernel_plan(segments, coll, ranks)
    spec_host = host(launch=float(rng.uniform(1.0, 15.0)), cv=0.6, skew=0.2)
    samples = 5
    h, H = host_ready(plan, spec_host, np.random.default_rng(seed + 100), samples, with_host=True)
    C = collective_ends(plan, h)
    for s in range(samples):
        assert C[s] == pytest.approx(brute_force_ends(plan, works, H[s]), rel=1e-12, abs=1e-9)


def test_without_kernel_works_a_segment_is_its_first_and_last_kernel():
    """A hand-made plan (no kernel works): the work starts with the first launch and the last kernel (last_us) is
    launched just before the collective, as the first and last kernel of the segment."""
    plan = PassPlan(launches=np.array([3.0]), compute_us=np.zeros(1), memory_us=np.array([5.0]), gap_us=np.zeros(1),
                    last_us=np.array([1.0]), collective_us=np.array([3.0]), allreduce_mask=np.array([True]),
                    graph=False, ranks=1)
    h = host_ready(plan, host(launch=10.0), np.random.default_rng(0), 1)
    assert h[0, 0, 0] == pytest.approx(max(10 + 5.0, 20 + 1.0, 30.0))
