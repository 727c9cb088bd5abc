"""The speed-ups change no figure: each shortcut against the computation it replaces, exactly (same floats)."""
from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest

from conftest import clear_sample_caches, scenario_path
from simulator.cache import Store, current, held
from simulator.timing.machine import Machine
from simulator.timing.kernellines import binding_lines
from simulator.timing.timeline import PassPlan, blend, eager_launch, host_ready
from simulator.hardware.gpu import MIN_LAUNCH_FRACTION
from simulator.model.cost import PassShape
from simulator.api.run import resolve


def full_max(one, positions, suffixes):
    return (one[..., None] * positions + suffixes).max(axis=-1)


def pruned_max(one, positions, suffixes):
    positions, suffixes = binding_lines(one, positions, suffixes)
    out = one * positions[:, 0] + suffixes[:, 0]
    for j in range(1, positions.shape[1]):
        out = np.maximum(out, one * positions[:, j] + suffixes[:, j])
    return out, positions.shape[1]


@pytest.mark.parametrize("seed", range(5))
def test_pruned_kernel_lines_give_the_same_maximum(seed):
    rng = np.random.default_rng(seed)
    K, M = 40, 9
    positions = np.sort(rng.integers(1, 40, (K, M)), axis=1).astype(float)
    suffixes = np.sort(rng.uniform(0, 100, (K, M)), axis=1)[:, ::-1].copy()
    suffixes[:, -1] = rng.choice([0.0, 1e-9, 3.0], K)  # near-ties and zero suffixes too
    positions[: K // 4, -2:] = 0.0  # padded rows
    suffixes[: K // 4, -2:] = 0.0
    one = rng.uniform(0.5, 8.0, (64, 8, K))
    got, _ = pruned_max(one, positions, suffixes)
    assert np.array_equal(got, full_max(one, positions, suffixes))


def test_pruned_lines_on_the_reference_machine():
    machine = Machine(resolve(scenario_path("pcie8_ngram.yaml"), {}))
    plan = machine.anchor_plan("target", PassShape(9, 1, 2048, True, True), False)
    draws = machine.host.draws(np.random.default_rng(3), 64, machine.tp, plan.num_segments, stratified=True)
    one = machine.host.eager_launch_us(plan.launches, None, 64, machine.tp, draws) / plan.launches
    got, width = pruned_max(one, *plan.ready_lines)
    assert np.array_equal(got, full_max(one, *plan.ready_lines))
    assert width <= 3 < plan.ready_lines[0].shape[1]


@pytest.mark.parametrize("stratified", [True, False])
def test_eager_launches_are_the_broadcast_formula(stratified):
    machine = Machine(resolve(scenario_path("pcie8_ngram.yaml"), {}))
    plan = machine.anchor_plan("target", PassShape(9, 1, 2048, True, True), False)
    host, launches = machine.host, plan.launches
    draws = host.draws(np.random.default_rng(6), 64, machine.tp, plan.num_segments, stratified=stratified)
    z, skew = draws
    spec = host.spec
    cv, mean = spec.launch_jitter_cv, spec.eager_launch_us
    want = launches * mean * np.maximum(1.0 + cv * z / np.sqrt(launches), MIN_LAUNCH_FRACTION)
    want = want * np.exp(spec.rank_skew_cv * skew - spec.rank_skew_cv**2 / 2)
    got = host.eager_launch_us(launches, None, 64, machine.tp, draws)
    assert spec.rank_skew_cv > 0 and np.array_equal(got, want) and got.strides == want.strides
    _, _, one, (low, high) = eager_launch(plan, host, None, 64, draws)
    assert np.array_equal(one, want / launches) and one.strides == (want / launches).strides
    assert np.array_equal(low, one.min(axis=(0, 1))) and np.array_equal(high, one.max(axis=(0, 1)))


def test_host_ready_is_the_unfused_formula():
    machine = Machine(resolve(scenario_path("pcie8_ngram.yaml"), {}))
    plan = machine.anchor_plan("target", PassShape(9, 1, 2048, True, True), False)
    draws = machine.host.draws(np.random.default_rng(4), 64, machine.tp, plan.num_segments, stratified=True)
    L = machine.host.eager_launch_us(plan.launches, None, 64, machine.tp, draws)
    H = np.cumsum(L, axis=2)
    kernels, _ = pruned_max(L / plan.launches, *plan.ready_lines)
    want = np.maximum(H - L + kernels, H)
    launch = eager_launch(plan, machine.host, None, 64, draws)
    assert binding_lines(launch[2], *plan.ready_lines, launch[3])[0].shape[1] > 1  # the loop over lines runs
    got, got_H = host_ready(plan, machine.host, None, 64, with_host=True, draws=draws, launch=launch)
    assert np.array_equal(got, want) and got.strides == want.strides and np.array_equal(got_H, H)
    got = host_ready(plan, machine.host, None, 2, draws=(draws[0][:2], draws[1][:2]))  # a few samples, unpruned
    assert np.array_equal(got, np.maximum(H[:2] - L[:2] + full_max(L[:2] / plan.launches, *plan.ready_lines), H[:2]))


def test_graph_draws_are_the_eager_draws_skew():
    machine = Machine(resolve(scenario_path("pcie8_ngram.yaml"), {}))
    eager = machine.host.draws(np.random.default_rng(5), 64, 8, 30, stratified=True)
    graph = machine.host.draws(np.random.default_rng(5), 64, 8, 30, stratified=True, launches=False)
    assert graph[0] is None and np.array_equal(graph[1], eager[1])


def test_blended_plan_is_the_replaced_plan():
    machine = Machine(resolve(scenario_path("pcie8_eagle3.yaml"), {}))
    a = machine.anchor_plan("target", PassShape(4, 2, 1024), False)
    b = machine.anchor_plan("target", PassShape(4, 2, 2048), False)
    w = 0.37
    want = dataclasses.replace(a, compute_us=blend(a.compute_us, b.compute_us, w),
                               memory_us=blend(a.memory_us, b.memory_us, w), last_us=blend(a.last_us, b.last_us, w),
                               line_suffix_us=blend(a.line_suffix_us, b.line_suffix_us, w), label="x",
                               sampled_key=None)  # a blend is no anchor's plan: it keeps no sampled key
    got = a.blended(b, w, "x")
    for field in dataclasses.fields(PassPlan):
        if field.name == "steps_of":  # the anchor's steps, read from it rather than built again: compared below
            continue
        x, y = getattr(got, field.name), getattr(want, field.name)
        assert np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y, field.name
    assert got.collective_steps == want.collective_steps
    assert np.array_equal(got.gpu_us, want.compute_us + want.memory_us + want.gap_us)
    assert machine.plan_at("target", PassShape(4, 2), False, 1400).label == "target 4x2 ctx1400 eager"


def test_plans_are_shared_by_value_not_by_machine():
    scenario = resolve(scenario_path("pcie8_ngram.yaml"), {})
    shape = PassShape(1, 1, 512)
    first, second = Machine(scenario), Machine(scenario)
    assert second.anchor_plan("target", shape, True) is first.anchor_plan("target", shape, True)
    other = Machine(resolve(scenario_path("pcie8_ngram.yaml"), {"topology__host__graph_node_us": 0.9}))
    assert other.key != first.key
    assert other.anchor_plan("target", shape, True) is not first.anchor_plan("target", shape, True)


def test_fused_acceptance_step_is_accepted_then_advance():
    from simulator.speculation.setup import build_speculation

    scenario = resolve(scenario_path("pcie8_ngram_long_fitted.yaml"), {})
    model = build_speculation(scenario, True).slots[0].acceptance
    tree = build_speculation(scenario, True).slots[0].tree
    rng = np.random.default_rng(0)
    uniforms = rng.random(20_000).tolist()
    moved = 0
    for i in range(1000):
        state = (bool(rng.random() < 0.3), int(rng.integers(0, 20_000)))
        at, remaining = 17 * i, int(rng.integers(1, 10))
        accepted = model.accepted(tree, state, uniforms, at)
        emitted = min(accepted + 1, remaining)
        want = (accepted, emitted, model.advance(state, emitted, uniforms[at + 16]))
        assert model.step(tree, state, uniforms, at, at + 16, remaining) == want
        moved += want[2][0] != state[0]
    assert moved > 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_malloc_is_tuned_on_glibc():
    from simulator.experiments.memory import tune_malloc

    assert tune_malloc() is True


def test_startup_gc_is_off_while_loading_frozen_for_the_run_and_undone_after():
    import gc

    from simulator.experiments.memory import SWEEP_GC_YOUNG, startup_gc

    assert gc.isenabled() and gc.get_freeze_count() == 0
    threshold = gc.get_threshold()
    made = []
    with startup_gc() as started:
        off = gc.isenabled()
        made.append([made])  # a cycle made during the start-up
        started()
        on, frozen, young = gc.isenabled(), gc.get_freeze_count(), gc.get_threshold()[0]
    assert (off, on) == (False, True) and frozen > 0  # the start-up's objects left out of the run's collections
    assert young == max(SWEEP_GC_YOUNG, threshold[0])  # the run's young collections as a sweep point's
    assert gc.isenabled() and gc.get_freeze_count() == 0  # undone: the cycle is collectable again
    assert gc.get_threshold() == threshold
    with pytest.raises(ValueError), startup_gc():
        raise ValueError("a user's mistake while loading")
    assert gc.isenabled() and gc.get_freeze_count() == 0 and gc.get_threshold() == threshold


def test_shared_launches_give_the_same_tables():
    from simulator.timing import sampling as module

    def table_at_2048(first_anchors):
        clear_sample_caches()
        machine = Machine(resolve(scenario_path("pcie8_ngram.yaml"), {}))
        for context in first_anchors:
            machine.samples("target", PassShape(9, 1, context, True, True), False, 99)
        shared = current().count("sampling.launch")
        return machine.samples("target", PassShape(9, 1, 2048, True, True), False, 99), shared

    alone, _ = table_at_2048(())
    after, shared = table_at_2048((512, 1024))  # the 2048 anchor reuses the launches computed at 512
    assert shared == 1 and np.array_equal(alone, after)


@pytest.mark.parametrize("name, overrides, speculate, shortcut", [
    ("pcie8_ngram.yaml", {"workload__requests": 3, "workload__output_tokens": 700}, True, "decode_alone"),
    ("pcie8_ngram.yaml", {"workload__requests": 4, "workload__output_tokens": 700,  # one at a time, arrivals mid-run
                          "workload__arrival": {"kind": "poisson", "rate_per_s": 0.2}}, True, "decode_alone"),
    ("pcie8_ngram.yaml", {"workload__requests": 4, "workload__output_tokens": 700,  # the baseline: plain decode
                          "workload__arrival": {"kind": "poisson", "rate_per_s": 0.2}}, False, "decode_alone"),
    ("nvlink8_h100_llama8b_poisson.yaml", {"workload__requests": 24}, True,  # batches that change, arrivals mid-step
     "fixed_decision"),
    ("pcie8_tp4_dp2.yaml", {"workload__requests": 6, "workload__output_tokens": 64, "workload__concurrency": 1,
                            "deployment__router": "least_loaded"}, True, "decode_alone"),  # two instances, one clock
    ("nvlink8_h100_llama8b_trace.yaml", {"workload__concurrency": 1}, True, "decode_alone"),  # replayed arrivals
    ("pcie8_tp4_dp2.yaml", {"workload__requests": 40, "workload__output_tokens": 64, "workload__concurrency": 8,
                            "deployment__router": "least_loaded",  # plain decode in runs, some cut by arrivals
                            "workload__arrival": {"kind": "poisson", "rate_per_s": 10.0}}, False, "decode_plain"),
])
def test_the_decode_loops_shortcuts_are_its_steps(monkeypatch, name, overrides, speculate, shortcut):
    """The decode loop's shortcuts give its steps exactly: a lone request's steps as arrays (decode_alone) and a
    plain batch's in runs (decode_plain) against the loop stepping them, and a fixed decision read once against the
    policy asked and told every step."""
    from simulator.serving import decoding
    from simulator.serving.deployment import simulate_deployment

    scenario = resolve(scenario_path(name), overrides)
    taken = {"decode_alone": 0, "fixed_decision": 0, "decode_plain": 0}
    alone, fixed, plain = decoding.decode_alone, decoding.fixed_decision, decoding.decode_plain

    def counted_alone(server):
        taken["decode_alone"] += 1
        return alone(server)

    def counted_plain(server):
        taken["decode_plain"] += 1
        return plain(server)

    def counted_fixed(server):
        result = fixed(server)
        taken["fixed_decision"] += result[0]
        return result
    monkeypatch.setattr(decoding, "decode_alone", counted_alone)
    monkeypatch.setattr(decoding, "decode_plain", counted_plain)
    monkeypatch.setattr(decoding, "fixed_decision", counted_fixed)

    def run():
        servers = simulate_deployment(scenario, seed=3, fidelity="fast", speculate=speculate)
        return ([s.log.columns().as_dict() for s in servers], [s.accept_lengths for s in servers],
                [[(r.completed_at, r.first_token_at, r.acceptance_state) for r in s.requests] for s in servers],
                [(s.kv_peak, s.env.now) for s in servers])

    fused = run()
    assert taken[shortcut] > 0  # the shortcut under test ran
    if shortcut == "decode_alone":
        monkeypatch.setattr(decoding, "runs_alone", lambda server: False)
    elif shortcut == "decode_plain":
        monkeypatch.setattr(decoding, "runs_plain", lambda server: False)
    else:
        monkeypatch.setattr(decoding, "fixed_decision", lambda server: (False, None))
    ran = dict(taken)
    general = run()
    assert taken[shortcut] == ran[shortcut]  # the loop without it
    assert fused[1:] == general[1:]
    for got, want in zip(fused[0], general[0]):
        assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in want)
    batches = np.concatenate([log["batch"] for log in general[0]])
    waiting = np.concatenate([log["waiting"] for log in general[0]])
    assert len(set(batches.tolist())) > (2 if "poisson" in name else 0)
    assert len(set(waiting.tolist())) > (1 if "arrival" in str(overrides) else 0)


def test_a_stationary_models_step_is_its_walk():
    from simulator.speculation.setup import build_speculation

    slot = build_speculation(resolve(scenario_path("pcie8_eagle3.yaml"), {}), True).slots[0]
    rng = np.random.default_rng(1)
    uniforms = rng.random(20_000).tolist()
    accepted = []
    for i in range(1000):
        at, remaining = 16 * i, int(rng.integers(1, 10))
        want = slot.acceptance.walker(slot.tree)(uniforms, at)
        accepted.append(want)
        assert slot.acceptance.step(slot.tree, None, uniforms, at, at + 16, remaining) == \
            (want, min(want + 1, remaining), None)
    assert min(accepted) == 0 < max(accepted)  # the root shortcut and the walk both taken


def test_anchors_of_many_contexts_are_each_ones():
    from simulator.timing.machine import context_anchors, context_anchors_many

    contexts = list(range(-2, 5000)) + [2**k + d for k in range(8, 40) for d in (-1, 0, 1)]
    lows, highs, weights = context_anchors_many(np.array(contexts))
    assert [(int(a), int(b), float(w)) for a, b, w in zip(lows, highs, weights)] == \
        [context_anchors(c) for c in contexts]


@pytest.mark.parametrize("shape, graph", [(PassShape(1024, 1, 0), False), (PassShape(9, 1, 2048, True, True), False),
                                          (PassShape(1, 1, 1024), True), (PassShape(512, 3, 1500), False)])
def test_a_few_sample_rows_are_those_of_the_whole_table(shape, graph):
    from simulator.timing import sampling

    machine = Machine(resolve(scenario_path("pcie8_ngram.yaml"), {}))
    whole = machine.samples("target", shape, graph, 77)
    rng = np.random.default_rng(0)
    for n in [1, 1, 2, 3, 7, 8, 9, 33, 64]:  # one row, a few, more than the pruning threshold, all (with repeats)
        current().clear("sampling.samples", "sampling.rows_all", "sampling.rows_seen")  # these rows alone
        rows = rng.choice(64, n, replace=bool(n % 2)).tolist()
        assert np.array_equal(machine.sample_rows("target", shape, graph, 77, rows), whole[rows]), rows


@pytest.mark.parametrize("shape, graph", [(PassShape(1024, 1, 0), False), (PassShape(512, 3, 1500), False),
                                          (PassShape(1, 1, 1024), True)])
def test_a_shapes_later_rows_are_read_from_all_its_rows_evaluated_at_once(shape, graph, monkeypatch):
    """After ROWS_ALONE distinct rows evaluated alone, the next evaluates every row at once (the whole table's
    floats), and the rows after it evaluate nothing."""
    from simulator.timing import sampling

    machine = Machine(resolve(scenario_path("pcie8_ngram.yaml"), {}))
    with held(Store()) as store:
        whole = machine.samples("target", shape, graph, 78).copy()
    with held(Store()) as store:
        alone = [machine.sample_rows("target", shape, graph, 78, [i]) for i in range(sampling.ROWS_ALONE)]
        assert store.count("sampling.rows") == sampling.ROWS_ALONE and not store.count("sampling.rows_all")
        after = machine.sample_rows("target", shape, graph, 78, [40])
        assert store.count("sampling.rows_all") == 1 and store.count("sampling.samples") == 0
        assert np.array_equal(np.concatenate(alone + [after]), whole[[*range(sampling.ROWS_ALONE), 40]])
        assert np.array_equal(store.peek(("sampling.rows_all", *sampling._key(machine, "target", shape, graph, 78))),
                              whole)
        monkeypatch.setattr(sampling, "sample_passes", lambda *a, **k: pytest.fail("evaluated again"))
        assert np.array_equal(machine.sample_rows("target", shape, graph, 78, [63, 5]), whole[[63, 5]])


def test_a_sparse_step_is_the_whole_tables_step():
    from simulator.timing.costs import FastStepCosts
    from simulator.timing.stepspec import PassSpec, StepSpec

    machine = Machine(resolve(scenario_path("pcie8_ngram.yaml"), {}))
    spec = StepSpec(PassSpec("target", PassShape(512, 2), False), other_us=30.0)
    contexts = [0, 100, 1000, 1000, 3000, 256, 5000, 70000]
    sparse = FastStepCosts(machine, 11, np.random.default_rng(4))
    with held(Store()) as store:
        got = [sparse.sparse_step(spec, c) for c in contexts]  # before any whole table of this seed exists
    assert store.count("costs.pair") == store.count("costs.step_table") == 0
    whole = FastStepCosts(machine, 11, np.random.default_rng(4))
    for c, (duration, table, row, weight) in zip(contexts, got):
        want = whole.step(spec, c)
        assert (duration, weight) == (want[0], want[3])
        assert np.array_equal(table.anchor[row], want[1].anchor[want[2]])
        assert np.array_equal(table.delta[row], want[1].delta[want[2]])


def test_sparse_steps_read_from_all_rows_are_the_whole_tables_steps():
    """Once a shape's rows are all evaluated at both anchors (sampling.ROWS_ALONE), sparse_step reads a table of
    every row (costs.sparse_rows): each step the whole table's (duration, weight and every STEP_COST field)."""
    from simulator.timing.costs import FastStepCosts
    from simulator.timing.stepspec import PassSpec, StepSpec

    machine = Machine(resolve(scenario_path("pcie8_ngram.yaml"), {}))
    spec = StepSpec(PassSpec("target", PassShape(256, 1), False), other_us=30.0)
    contexts = [0, 700, 3000, 0, 5000] * 8
    sparse = FastStepCosts(machine, 12, np.random.default_rng(5))
    with held(Store()) as store:
        got = [sparse.sparse_step(spec, c) for c in contexts]
    assert store.count("costs.sparse_rows") >= 3 and store.count("costs.pair") == store.count("costs.step_table") == 0
    assert sum(table.num_rows() == 64 for _, table, _, _ in got) > len(contexts) / 2
    whole = FastStepCosts(machine, 12, np.random.default_rng(5))
    for c, (duration, table, row, weight) in zip(contexts, got):
        want = whole.step(spec, c)
        assert (duration, weight) == (want[0], want[3])
        assert np.array_equal(table.anchor[row], want[1].anchor[want[2]])
        assert np.array_equal(table.delta[row], want[1].delta[want[2]])


@pytest.mark.parametrize("shape, graph", [(PassShape(9, 1, 2048, True, True), False), (PassShape(4, 1, 1024), True)])
def test_sample_durations_are_the_tables_duration_column(shape, graph):
    from simulator.timing import sampling

    machine = Machine(resolve(scenario_path("pcie8_ngram.yaml"), {}))
    clear_sample_caches()
    alone = sampling.sample_durations(machine, "target", shape, graph, 5).copy()  # without the whole table
    assert not current().count("sampling.samples")
    clear_sample_caches()
    whole = sampling.samples(machine, "target", shape, graph, 5)
    assert sampling.SAMPLE_FIELDS[0] == "duration" and np.array_equal(alone, whole[:, 0])


def test_steps_are_repeated_step():
    from simulator.timing.costs import FastStepCosts, INDEX_BLOCK
    from simulator.timing.stepspec import PassSpec, StepSpec

    machine = Machine(resolve(scenario_path("pcie8_ngram.yaml"), {}))
    spec = StepSpec(PassSpec("target", PassShape(4, 1), True), other_us=30.0)
    rng = np.random.default_rng(8)
    contexts = np.concatenate([100 + np.cumsum(rng.integers(1, 5, 600)), [3000, 40, 40, 70000, 300]])
    one, many = (FastStepCosts(machine, 11, np.random.default_rng(4)) for _ in range(2))
    for costs in (one, many):
        costs.take_indices(INDEX_BLOCK - 300)  # the steps cross into the next block of row indices
    durations, tables, rows, weights = many.steps(spec, contexts)  # a StepCosts
    want = [one.step(spec, int(c)) for c in contexts]
    assert durations.tolist() == [w[0] for w in want] and rows.tolist() == [w[2] for w in want]
    assert weights.tolist() == [w[3] for w in want] and (one.index_at, one.indices) == (many.index_at, many.indices)
    runs = [table for table, count in tables for _ in range(count)]
    assert len(runs) == len(contexts) and all(np.array_equal(got.anchor, w[1].anchor) and
                                              np.array_equal(got.delta, w[1].delta) for got, w in zip(runs, want))
    assert len(tables) >= 6  # anchors change along the run and back


@pytest.mark.parametrize("shape, graph", [(PassShape(9, 1, 2048, True, True), False), (PassShape(1, 1, 1024), True)])
def test_the_latest_rank_without_the_ranks_is_the_maximum_over_them(shape, graph):
    from simulator.timing import sampling
    from simulator.timing.timeline import latest_ready

    machine = Machine(resolve(scenario_path("pcie8_ngram.yaml"), {"topology.host.rank_skew_cv": 0.3}))
    plan, draws_key = sampling._plan(machine, "target", shape, graph, 3)
    draws = sampling._draws(machine, "target", shape, graph, 3, draws_key, plan.num_segments)
    launch = sampling._launch(machine, plan, draws_key, draws)
    h = host_ready(plan, machine.host, None, sampling.FAST_SAMPLES, draws=draws, launch=launch)
    assert np.array_equal(latest_ready(plan, machine.host, sampling.FAST_SAMPLES, draws, launch), h.max(axis=1))


@pytest.mark.parametrize("order", ["C", "F", "stratified"])
def test_a_running_sum_is_cumsum(order):
    """timeline.running_sum: np.cumsum over the segments, the same floats in the same layout, whatever the layout."""
    from simulator.timing.timeline import running_sum

    rng = np.random.default_rng(2)
    values = rng.lognormal(0.0, 2.0, (64, 8, 124))
    L = np.ascontiguousarray(values.transpose(1, 2, 0)).transpose(2, 0, 1) if order == "stratified" else \
        np.asarray(values, order=order)
    got, want = running_sum(L), np.cumsum(L, axis=2)
    assert got.strides == want.strides and np.array_equal(got, want)
    H, low, high = running_sum(L, extremes=True)
    assert np.array_equal(H, want)
    assert np.array_equal(low, L.min(axis=(0, 1))) and np.array_equal(high, L.max(axis=(0, 1)))


@pytest.mark.parametrize("samples", [1, 2, 64])
def test_collective_ends_are_the_running_maximum_in_the_layout_of_the_draws(samples):
    """collective_ends_after: C_k = max(u running maximum, 0) + cumsum(W + T), the same floats and layout as
    numpy's accumulate over the ready times' own layout (a stratified draw's samples are contiguous)."""
    from simulator.timing import sampling
    from simulator.timing.timeline import collective_ends_after, last_collective_end

    machine = Machine(resolve(scenario_path("pcie8_ngram.yaml"), {}))
    shape = PassShape(9, 1, 2048, True, True)
    plan, draws_key = sampling._plan(machine, "target", shape, False, 3)
    draws = sampling._draws(machine, "target", shape, False, 3, draws_key, plan.num_segments)
    draws = tuple(d[:samples] for d in draws)
    hmax = host_ready(plan, machine.host, None, samples, draws=draws).max(axis=1)
    cum = np.cumsum(plan.gpu_us + plan.collective_us)
    want = np.maximum(np.maximum.accumulate(hmax + plan.collective_us - cum, axis=1), 0.0) + cum
    got = collective_ends_after(plan, hmax)
    assert got.strides == want.strides and np.array_equal(got, want)
    assert samples == 1 or not hmax.flags.c_contiguous  # the layout the shortcut is for
    assert np.array_equal(last_collective_end(plan, hmax), want[:, -1])  # a duration alone: no running maximum
