"""Piecewise CUDA graphs (vLLM V1): a graph piece per layer replayed by the host, eager attention between; the GPU
waits only where the host falls behind. Hand-worked timelines, and the vLLM profiles' measured host work."""
from __future__ import annotations

import os

import numpy as np
import pytest
import yaml

import simulator
from conftest import ROOT, SCENARIOS
from simulator.config.scenario import PiecewiseHost
from simulator.config.topology import HostSpec
from simulator.hardware.gpu import Host
from simulator.model.cost import PassShape
from simulator.timing.machine import Machine
from simulator.timing.piecewise import host_times, piecewise_ready_us
from simulator.timing.timeline import PassPlan, collective_ends, host_ready

# a pass of head, two layers (attention segment: W 12 of which 9 from attention on, 5 after it; MLP: 6), tail
ROWS = [(2.0, None), (12.0, (9.0, 5.0)), (6.0, None), (12.0, (9.0, 5.0)), (6.0, None), (3.0, None)]
W = [w for w, _ in ROWS]


def test_ready_times_of_a_host_behind_the_gpu():
    """piece 10 us, attention 20: layer 0's attention segment: its own piece from 0, the attention call's kernels
    from 20 (+9), the next piece's from 30 (+5): 35; its MLP in that piece: 30 + 6; layer 1 alike from 30; the tail
    in the last piece (replayed at 60): 63."""
    assert piecewise_ready_us(ROWS, 10.0, 20.0).tolist() == [2.0, 35.0, 36.0, 65.0, 66.0, 63.0]


def test_ready_times_of_a_host_ahead_of_the_gpu():
    """piece 1 us, attention 2: the attention segments from their own piece (0 + 12, 3 + 12), the MLPs after the
    next piece (3 + 6, 6 + 6), the tail at 6 + 3."""
    assert piecewise_ready_us(ROWS, 1.0, 2.0).tolist() == [2.0, 12.0, 9.0, 15.0, 12.0, 9.0]


def test_the_forwards_entry_delays_the_first_piece_and_so_every_segment():
    """An entry of 5 us before the first piece: the host replays it at 5, every segment's R 5 later than at 0."""
    assert piecewise_ready_us(ROWS, 10.0, 20.0, entry_us=5.0).tolist() == [7.0, 40.0, 41.0, 70.0, 71.0, 68.0]


def test_the_host_times_add_the_launches_at_the_eager_launch_cost():
    work = PiecewiseHost(piece_us=0.9, piece_launches=1, attention_us=17.4, attention_launches=2, entry_us=3.0,
                         entry_per_layer_us=1.5)
    assert host_times(work, 12.87, 32) == pytest.approx((0.9 + 12.87, 17.4 + 2 * 12.87, 3.0 + 1.5 * 32))


def _plan(ready) -> PassPlan:
    n = len(W)
    return PassPlan(launches=np.ones(n), compute_us=np.zeros(n), memory_us=np.array(W), gap_us=np.zeros(n),
                    last_us=np.ones(n), collective_us=np.zeros(n), allreduce_mask=np.zeros(n, bool), graph=True,
                    ranks=1, graph_ready_us=None if ready is None else np.array(ready))


def _host() -> Host:
    return Host(HostSpec(eager_launch_us=10.0, launch_jitter_cv=0.0, rank_skew_cv=0.0, graph_launch_us=20.0,
                         graph_node_us=0.0, step_overhead_us=0.0, sync_us=0.0))


def test_a_host_behind_the_gpu_sets_the_pass():
    """The first graph launch at 20, then C_k = max(C_k-1 + W_k, 20 + R_k): 22, max(34, 55), max(61, 56),
    max(73, 85), max(91, 86), max(94, 83): 94 us, where one graph a pass takes 20 + 41 = 61."""
    rng = np.random.default_rng(0)
    slow = _plan([2.0, 35.0, 36.0, 65.0, 66.0, 63.0])
    assert collective_ends(slow, host_ready(slow, _host(), rng, 1))[0].tolist() == [22, 55, 61, 85, 91, 94]
    whole = _plan(None)
    assert collective_ends(whole, host_ready(whole, _host(), rng, 1))[0, -1] == 61.0


def test_a_host_ahead_of_the_gpu_costs_the_pass_nothing():
    """20 + R = 22, 32, 29, 35, 32, 29: never past the GPU's 22, 34, 40, 52, 58, 61: the pass takes 61 us, as one
    graph."""
    fast = _plan([2.0, 12.0, 9.0, 15.0, 12.0, 9.0])
    assert collective_ends(fast, host_ready(fast, _host(), np.random.default_rng(0), 1))[0].tolist() == \
        [22, 34, 40, 52, 58, 61]


CASE = os.path.join(SCENARIOS, "validation", "cases", "h100_llama8b_decode.yaml")


@pytest.mark.parametrize("version", ["0.8.4", "0.8.5"])
def test_vllm_runs_its_graphs_piecewise_with_the_profiles_host_work(version):
    profile = yaml.safe_load(open(os.path.join(ROOT, "engines", "vllm", f"{version}.yaml")))
    raw = {"entry_us": 0.0, "entry_per_layer_us": 0.0, **profile["piecewise_host"]["value"],
           **(profile["compiled_entry"]["value"] if "compiled_entry" in profile else {})}
    scenario = simulator.load_scenario(CASE, [("engine", {"name": "vllm", "version": version})])
    assert scenario.spec.runtime.piecewise_host.model_dump() == raw
    assert simulator.load_scenario(CASE).spec.runtime.piecewise_host is None  # SGLang: one graph a pass


def test_llama8b_on_an_h100_hides_vllms_per_layer_host_work():
    """Llama-3.1-8B at batch 1 on one H100: a layer's GPU work (~190 us) outlasts its host work (a piece and an
    attention call: 0.9 + 17.4 us of Python, 3 launches at 12.87 us, 57 us), so the piecewise pass is the whole
    graph's plus the forward's entry (compiled_entry, before the first piece) and at most the lead-in before the
    host gets ahead: more than the entry, less than the entry and one layer's host work."""
    vllm = Machine(simulator.load_scenario(CASE, [("engine", {"name": "vllm", "version": "0.8.5"})]))
    whole = Machine(simulator.load_scenario(CASE, [("engine", {"name": "vllm", "version": "0.8.5"}),
                                                   ("runtime.piecewise_host", None)]))
    shape = PassShape(1, 1, 300)
    piecewise, graph = (float(m.sample_durations("target", shape, True, 0).mean()) for m in (vllm, whole))
    layer_host = 0.9 + 17.4 + 3 * 12.87
    host = vllm.runtime.piecewise_host
    entry = host.entry_us + host.entry_per_layer_us * 32
    assert entry > 0.0
    assert entry < piecewise - graph < entry + layer_host
    plan = vllm.plan("target", shape, True)
    per_layer_gpu = plan.gpu_us[1:-1].reshape(-1, 2).sum(axis=1)
    assert per_layer_gpu.min() > layer_host
