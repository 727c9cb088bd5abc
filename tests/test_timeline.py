"""The rank timeline: exact small timelines, barrier waiting booked apart from transfer, closed form == events."""
from __future__ import annotations

import numpy as np
import pytest
import simpy

from simulator.config.topology import HostSpec
from simulator.timing.timeline import LayerPass, PassPlan, breakdown, collective_ends, host_ready, sample_passes
from simulator.hardware.gpu import Host


def plan(ranks=2, launches=(2, 2), compute=(0, 0), memory=(5.0, 5.0), coll=(3.0, 0.0), graph=False) -> PassPlan:
    n = len(launches)
    return PassPlan(launches=np.array(launches, float), compute_us=np.array(compute, float),
                    memory_us=np.array(memory, float), gap_us=np.zeros(n), last_us=np.ones(n),
                    collective_us=np.array(coll, float), allreduce_mask=np.array([c > 0 for c in coll]),
                    graph=graph, ranks=ranks)


def host(launch=10.0, cv=0.0, skew=0.0) -> Host:
    return Host(HostSpec(eager_launch_us=launch, launch_jitter_cv=cv, rank_skew_cv=skew, graph_launch_us=7.0,
                         graph_node_us=0.0, step_overhead_us=0.0, sync_us=0.0))


def test_golden_timeline_launch_bound():
    """Two kernels + an all-reduce per segment, 10 us per launch: the host is the bottleneck.

    Segment 0: 3 launches end at 30 us; the all-reduce starts at 30 and ends at 33.
    Segment 1: 2 launches end at 50; its last kernel (1 us) was launched at 40 and its 5 us of work started
    at 33 + ... the GPU can finish by max(33 + 5, 50 - 10 + 1, 50) = 50: the pass ends at 50.
    """
    p = plan(launches=(3, 2))
    env = simpy.Environment()
    log = []
    process = env.process(LayerPass(p, host()).run(env, np.random.default_rng(0),
                                                   on_collective=lambda k, s, e: log.append((k, s, e))))
    env.run()
    assert log == [(0, 30.0, 33.0), (1, 50.0, 50.0)]
    result = process.value
    assert result["duration"] == pytest.approx(50.0)
    assert result["allreduce_transfer"] == pytest.approx(3.0)
    assert result["allreduce_wait"] == pytest.approx(0.0)
    parts = sum(result[k] for k in ("compute", "memory", "launch", "allreduce_transfer", "allreduce_wait"))
    assert parts == pytest.approx(result["duration"])


def test_golden_timeline_gpu_bound_graph():
    """In a CUDA graph every kernel is queued at the launch (7 us): the GPU work and collectives are the path."""
    p = plan(memory=(40.0, 20.0), graph=True)
    h = host_ready(p, host(), np.random.default_rng(0), 1)
    C = collective_ends(p, h)
    assert C[0].tolist() == pytest.approx([7 + 40 + 3, 7 + 40 + 3 + 20])


def test_late_rank_shows_up_as_the_others_waiting():
    """Rank 1's host is 25 us late reaching the first all-reduce: rank 0 waits 25 us, rank 1 waits nothing."""
    p = plan(launches=(1, 1), memory=(5.0, 5.0), coll=(3.0, 3.0))
    h = np.array([[[10.0, 30.0], [35.0, 55.0]]])  # (samples, ranks, segments): when each rank could arrive
    C = collective_ends(p, h)
    assert C[0].tolist() == pytest.approx([38.0, 58.0])
    b = breakdown(p, h, C)
    # per rank waits: segment 0: rank0 35-10 = 25, rank1 0; segment 1: rank0 arrives 38+5=43 -> waits 12, rank1 0
    assert b["allreduce_wait"][0] == pytest.approx((25 + 0) / 2 + (12 + 0) / 2)
    assert b["allreduce_transfer"][0] == pytest.approx(6.0)
    total = sum(b[k][0] for k in ("compute", "memory", "launch", "allreduce_transfer", "allreduce_wait"))
    assert total == pytest.approx(b["duration"][0])
    # a profile of rank 0 shows waiting + transfer in every all-reduce: (25 + 3) + (12 + 3)
    assert b["allreduce_profile"][0] == pytest.approx(np.median([28 + 15, 3 + 3]))


@pytest.mark.parametrize("graph", [False, True])
def test_closed_form_equals_event_simulation(graph):
    """The running-maximum closed form (fast fidelity) and the SimPy loop (layer fidelity) agree exactly."""
    rng = np.random.default_rng(3)
    K = 40
    p = plan(ranks=8, launches=rng.integers(1, 20, K), compute=rng.uniform(0, 5, K), memory=rng.uniform(1, 40, K),
             coll=rng.uniform(0, 30, K), graph=graph)
    h_host = host(launch=8.0, cv=0.5, skew=0.1)
    env = simpy.Environment()
    process = env.process(LayerPass(p, h_host).run(env, np.random.default_rng(11)))
    env.run()
    closed = sample_passes(p, h_host, np.random.default_rng(11), 1)
    for key in ("duration", "launch", "allreduce_wait", "allreduce_transfer", "allreduce_profile"):
        assert process.value[key] == pytest.approx(float(closed[key][0]), rel=1e-9, abs=1e-9)
    assert env.now == pytest.approx(process.value["duration"], rel=1e-12)


def test_breakdown_sums_to_duration_over_many_random_passes():
    rng = np.random.default_rng(5)
    K = 30
    p = plan(ranks=4, launches=rng.integers(1, 30, K), compute=rng.uniform(0, 10, K), memory=rng.uniform(0, 50, K),
             coll=rng.uniform(0, 40, K))
    b = sample_passes(p, host(cv=0.8, skew=0.3), rng, 500)
    total = sum(b[k] for k in ("compute", "memory", "launch", "allreduce_transfer", "allreduce_wait"))
    assert np.allclose(total, b["duration"], rtol=1e-12)
    assert (b["launch"] >= -1e-9).all() and (b["allreduce_wait"] >= -1e-9).all()


def test_more_host_skew_means_more_waiting():
    p = plan(ranks=8, launches=[20] * 30, compute=[0.0] * 30, memory=[10.0] * 30, coll=[5.0] * 30)
    calm = sample_passes(p, host(cv=0.2, skew=0.0), np.random.default_rng(1), 200)
    skewed = sample_passes(p, host(cv=0.2, skew=0.2), np.random.default_rng(1), 200)
    assert skewed["allreduce_wait"].mean() > 2 * calm["allreduce_wait"].mean()
    assert skewed["duration"].mean() > calm["duration"].mean()


def test_pass_book_splits_in_bulk_to_the_same_values():
    """Passes booked and split a block at a time give exactly the breakdown each would get alone."""
    from simulator.timing.passbook import PassBook

    rng = np.random.default_rng(3)
    book, expected, slots = PassBook(), [], []
    for graph in (False, True, False):
        p = plan(graph=graph)
        for _ in range(3):
            h = host_ready(p, host(cv=0.3, skew=0.2), rng, 1)
            C = collective_ends(p, h)
            expected.append({k: float(v[0]) for k, v in breakdown(p, h, C).items()})
            slots.append(book.add(p, h, C))
    for slot, alone in zip(slots, expected):
        booked = book.categories(slot)
        assert booked == {k: alone[k] for k in booked}
