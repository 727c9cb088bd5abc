"""Whole runs: determinism, a breakdown that sums to the total, monotone physics, and the reference figures."""
from __future__ import annotations

import json

import pytest

import simulator
from conftest import SHORT, scenario_path

EAGLE3 = scenario_path("pcie8_eagle3.yaml")
BASELINE = scenario_path("pcie8_baseline.yaml")


def stable(result) -> str:
    data = result.to_dict()
    data.pop("wall_time_s")
    return json.dumps(data, sort_keys=True, default=float)


@pytest.mark.parametrize("fidelity", ["fast", "layer"])
def test_same_seed_same_result_bit_for_bit(fidelity):
    a = simulator.run(EAGLE3, fidelity=fidelity, **SHORT)
    b = simulator.run(EAGLE3, fidelity=fidelity, **SHORT)
    assert stable(a) == stable(b)
    c = simulator.run(EAGLE3, fidelity=fidelity, seed=1, **SHORT)
    assert stable(c) != stable(a)


@pytest.mark.parametrize("path", [EAGLE3, BASELINE])
def test_breakdown_sums_to_total(path):
    r = simulator.run(path, **SHORT)
    per_token = sum(r.breakdown_ms_per_token.values())
    assert per_token == pytest.approx(r.sim_time_s * 1e3 / r.tokens, rel=1e-3)
    assert all(v >= 0 for v in r.breakdown_ms_per_token.values())


def test_throughput_falls_when_link_latency_rises():
    tok_s = [simulator.run(BASELINE, set_args=[f"topology.fabric.shm_hop_latency_us={x}"], **SHORT).throughput_tok_s
             for x in (0.0, 1.58, 5.0)]
    assert tok_s[0] > tok_s[1] > tok_s[2]
    socket = [simulator.run(EAGLE3, set_args=[f"topology.fabric.links[8].latency_us={x}"], **SHORT).throughput_tok_s
              for x in (0.2, 3.0)]
    assert socket[0] > socket[1]


def test_kwargs_overrides_and_result_object():
    r = simulator.run(EAGLE3, speculation__draft_tokens=2, **SHORT)
    assert isinstance(r, simulator.Result)
    assert r.speculation["draft_tokens"] == 2
    assert max(int(k) for k in r.accept_len_hist) <= 3


def test_layer_and_fast_agree():
    fast = simulator.run(EAGLE3, fidelity="fast", workload__requests=1, workload__output_tokens=1024)
    layer = simulator.run(EAGLE3, fidelity="layer", workload__requests=1, workload__output_tokens=1024)
    assert fast.throughput_tok_s == pytest.approx(layer.throughput_tok_s, rel=0.03)
    assert fast.mean_accept_len == layer.mean_accept_len  # same acceptance draws


# --- the reference machine (docs/reference.md), as issue 2's acceptance states it -------------------------------------
@pytest.fixture(scope="module")
def reference():
    return simulator.run(EAGLE3)


def test_reference_baseline_throughput():
    r = simulator.run(BASELINE)
    assert 78 <= r.throughput_tok_s <= 86  # measured: 82


def test_reference_eagle3_verify_and_allreduce(reference):
    assert 27 <= reference.step_ms["verify"]["mean"] <= 33  # measured: ~30 ms
    # predicted: not in the calibration set (scenarios/measured/reference.yaml)
    assert 22 <= reference.allreduce_ms_per_pass["verify"]["profiled_rank"] <= 28  # measured: ~25 ms
    assert reference.allreduce_per_pass == 123  # 2 per layer x 61, plus the vocab-parallel embedding's


def test_reference_eagle3_accept_and_breakeven(reference):
    assert 1.9 <= reference.mean_accept_len <= 2.1
    assert reference.throughput_tok_s < reference.baseline_tok_s
    # docs/reference.md: 2.46 from the verify alone; drafting and SGLang 0.5.9's host work around the step add the rest
    assert 2.3 <= reference.breakeven_accept_len <= 2.7


def test_cuda_graph_verify_is_cheaper_and_moves_breakeven(reference):
    graph = simulator.run(EAGLE3, runtime__cuda_graph_verify=True)
    assert graph.step_ms["verify"]["mean"] < 0.6 * reference.step_ms["verify"]["mean"]
    assert graph.breakeven_accept_len < reference.breakeven_accept_len


def test_step_tables_are_shared_by_value_across_runs():
    """A second run on an equal machine (a new Machine object, as a sweep point builds) reuses the first's step
    tables; another seed does not."""
    import numpy as np

    from simulator.timing.machine import Machine
    from simulator.timing.costs import FastStepCosts
    from simulator.timing.stepspec import PassSpec, StepSpec
    from simulator.model.cost import PassShape
    from simulator.api.run import resolve

    step = StepSpec(PassSpec("target", PassShape(1, 1), True), other_us=15.0)
    tables = [FastStepCosts(Machine(resolve(scenario_path("pcie8_eagle3.yaml"))), seed, np.random.default_rng(0))
              ._table(step, 512) for seed in (0, 0, 1)]
    assert tables[0] is tables[1] and tables[2] is not tables[0]
