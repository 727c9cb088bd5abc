"""What sweep points share is stored by value (simulator.cache) and changes nothing: a hit gives what the computation
gives; random draws are not stored, so every stream is where the draws leave it."""
from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import scenario_path
from simulator.cache import Store, current, held
from simulator.timing.machine import Machine
from simulator.serving.requests import Request
from simulator.serving.walking import Walks
from simulator.hardware.interconnect import Fabric
from simulator.model.cost import PassShape
from simulator.results.quantiles import percentiles
from simulator.api.run import resolve
from simulator.speculation.acceptance import TraceModel
from simulator.speculation.setup import build_speculation


def _walks(setup, seed: int, prompt: int):
    request = Request(0, prompt, 300, acceptance_state=setup.slots[0].acceptance.start(prompt))
    return Walks(setup.slots, setup.policy, np.random.default_rng(seed)), request


def test_a_lone_walk_is_walked_again_by_another_run():
    """Walks read the acceptance stream: another run's equal walk draws its own uniforms (nothing is looked up by
    a generator's state) and gives the same records and leaves the stream alike."""
    scenario = resolve(scenario_path("pcie8_ngram_long_fitted.yaml"), {})
    setup = build_speculation(scenario)
    a, request_a = _walks(setup, 5, 1000)
    emitted = a.walk_alone(request_a, setup.policy.decision)
    other = build_speculation(scenario)  # another run's objects, equal by value
    b, request_b = _walks(other, 5, 1000)
    assert b.walk_alone(request_b, other.policy.decision) == emitted and sum(emitted) == 300
    assert (a.lengths, a.positions) == (b.lengths, b.positions)
    assert (request_a.acceptance_state, request_a.generated) == (request_b.acceptance_state, request_b.generated)
    assert a._rng.bit_generator.state == b._rng.bit_generator.state
    assert a.uniform_row(40) == b.uniform_row(40)  # the stream goes on alike
    c, request_c = _walks(setup, 6, 1000)  # another stream: other walks
    assert c.walk_alone(request_c, setup.policy.decision) != emitted


def test_only_a_model_that_reads_its_parameters_alone_is_memoised():
    assert TraceModel([1, 2, 3]).value_key is None
    setup = build_speculation(resolve(scenario_path("pcie8_ngram_long_fitted.yaml"), {}))
    assert setup.slots[0].acceptance.value_key == build_speculation(
        resolve(scenario_path("pcie8_ngram_long_fitted.yaml"), {})).slots[0].acceptance.value_key
    other = build_speculation(resolve(scenario_path("pcie8_ngram_long_fitted.yaml"), {"speculation.acceptance.novel_gain": 0.2}))
    assert other.slots[0].acceptance.value_key != setup.slots[0].acceptance.value_key
    computed = build_speculation(resolve(scenario_path("pcie8_ngram.yaml"), {}))  # its caches move with every step
    assert computed.slots[0].acceptance.value_key is None


def test_prefill_rows_are_looked_up_by_value(monkeypatch):
    from simulator.timing import sampling

    machine = Machine(resolve(scenario_path("pcie8_ngram.yaml"), {}))
    shape = PassShape(1024, 1, 0)
    current().clear("sampling.rows", "sampling.samples")
    first = machine.sample_rows("target", shape, False, 21, [5])
    monkeypatch.setattr(sampling, "sample_passes", lambda *a, **k: pytest.fail("evaluated again"))
    again = Machine(resolve(scenario_path("pcie8_ngram.yaml"), {})).sample_rows("target", shape, False, 21, [5])
    assert np.array_equal(first, again)
    monkeypatch.undo()
    whole = machine.samples("target", shape, False, 21)
    assert np.array_equal(first, whole[[5]])


def test_routes_are_shared_by_fabrics_that_differ_in_the_host_memory_hop_alone():
    topology = resolve(scenario_path("pcie8_ngram.yaml"), {}).topology
    slower = topology.model_copy(update={"fabric": topology.fabric.model_copy(update={"shm_hop_latency_us": 9.0})})
    a, b = Fabric(topology), Fabric(slower)
    staged = [a.hop(0, j) for j in range(1, 8) if not a.hop(0, j).p2p]
    assert staged and a._routes is b._routes  # one search for both
    for hop in staged:
        assert b.latency_us(hop) - a.latency_us(hop) == pytest.approx(9.0 - topology.fabric.shm_hop_latency_us)
    wider = topology.model_copy(update={"fabric": topology.fabric.model_copy(
        update={"links": [link.model_copy(update={"bandwidth_GBps": 2 * link.bandwidth_GBps})
                          for link in topology.fabric.links]})})
    assert Fabric(wider)._routes is not a._routes


@pytest.mark.parametrize("seed", range(4))
def test_percentiles_are_numpys(seed):
    rng = np.random.default_rng(seed)
    for n in (1, 2, 3, 7, 64, 1001):
        values = rng.lognormal(3.0, 1.0, n) if seed % 2 else rng.integers(0, 4, n).astype(float)  # ties
        qs = (50, 90, 99, 0, 100, float(rng.uniform(0, 100)))
        assert percentiles(values, qs) == np.percentile(values, qs).tolist()
    for values in ([1.0, np.inf, 3.0], [1.0, np.nan, 2.0], [np.inf]):
        with np.errstate(invalid="ignore"):
            want = np.percentile(values, (10, 50, 100)).tolist()
        got = percentiles(np.array(values), (10, 50, 100))
        assert all(g == w or (math.isnan(g) and math.isnan(w)) for g, w in zip(got, want)), (values, got, want)


def test_nccl_graphs_are_searched_once_per_graph_and_costed_per_latency():
    from simulator.hardware.collectives import AllReduce

    topology = resolve(scenario_path("pcie8_ngram.yaml"), {}).topology
    slower = topology.model_copy(update={"fabric": topology.fabric.model_copy(update={"shm_hop_latency_us": 9.0})})
    with held(Store()) as store:
        a = AllReduce(Fabric(topology), 8)
        b = AllReduce(Fabric(slower), 8)
    assert store.computed["collectives.nccl_graphs"] == 1 and a.graphs == b.graphs
    assert b.cost(1 << 20).time_us > a.cost(1 << 20).time_us  # the latency still reaches the cost


def test_memoised_duration_columns_own_their_floats():
    """A cached column is a copy, not a view that keeps the samples' every collective end alive (a sweep caches a
    few per point: views grew a 1,000-point sweep's memory by ~250 MB)."""

    machine = Machine(resolve(scenario_path("pcie8_ngram.yaml"), {}))
    with held(Store()) as store:
        columns = [machine.sample_durations("target", PassShape(1, 1, 512), True, 9),
                   machine.sample_durations("target", PassShape(9, 1, 512, True, True), False, 9)]
    assert store.count("sampling.durations") == 2 and all(v.base is None for v in columns)


def _anchor_plans(machine, shape, graph):
    from dataclasses import replace

    return [machine.anchor_plan("target", replace(shape, context=c), graph) for c in (0, 256, 512, 1024, 2048, 4096)]


@pytest.mark.parametrize("shape, graph", [(PassShape(9, 1, 0, True, True), False), (PassShape(1, 1, 0), True)])
def test_a_plans_sampled_key_says_what_its_arrays_say(shape, graph):
    """Two built plans have the same sampled_key exactly when every array the closed form reads is the same (the
    key is built from the distinct segments; the fallback reads the arrays themselves); a blended plan has none."""
    from dataclasses import replace

    from simulator.timing import sampling

    machine = Machine(resolve(scenario_path("pcie8_ngram.yaml"), {}))
    plans = _anchor_plans(machine, shape, graph)
    for p in plans:
        for q in plans:
            by_arrays = sampling._sampled(replace(p, sampled_key=None)) == \
                sampling._sampled(replace(q, sampled_key=None))
            assert (p.sampled_key == q.sampled_key) == by_arrays
    assert len({p.sampled_key for p in plans}) < len(plans)  # some anchors share (attention floor-bound at both)
    assert plans[3].blended(plans[4], 0.5, "x").sampled_key is None


@pytest.mark.parametrize("shape, graph", [(PassShape(9, 1, 0, True, True), False), (PassShape(1, 1, 0), True)])
def test_anchors_that_share_a_table_sample_what_each_samples_alone(shape, graph):
    """A table (or duration column) shared by anchors whose plans sample the same values, or evaluated from the
    previous anchor's h with only the segments whose kernel lines differ evaluated again, is bit for bit what each
    anchor's own evaluation gives from cold caches."""
    from dataclasses import replace

    from conftest import clear_sample_caches
    from simulator.timing import sampling

    machine = Machine(resolve(scenario_path("pcie8_ngram.yaml"), {}))
    contexts = (0, 256, 512, 1024, 2048, 4096)
    clear_sample_caches()
    shared = [machine.samples("target", replace(shape, context=c), graph, 4) for c in contexts]
    clear_sample_caches()  # the duration columns alone, each anchor after the last (an eager one patches its h)
    shared_durations = [machine.sample_durations("target", replace(shape, context=c), graph, 5).copy()
                        for c in contexts]
    assert current().count("sampling.by_plan") < len(contexts)
    for c, table, durations in zip(contexts, shared, shared_durations):
        clear_sample_caches()
        assert np.array_equal(machine.samples("target", replace(shape, context=c), graph, 4), table)
        clear_sample_caches()
        assert np.array_equal(machine.sample_durations("target", replace(shape, context=c), graph, 5), durations)
