"""Properties of whole runs over generated machines, model cards, runtimes and acceptance models (issue 5, Trust).

Every example is a small scenario (1-2 requests, 64-512 output tokens, a few layers) built from dicts with inline
topology and model, so hundreds of runs fit in a minute. Comparisons between two machines use the same seed: the fast
fidelity draws its pass samples from the seed and the pass shape only (common random numbers across machine
changes), and acceptance from the seed only, so a slower link can only move every sample one way and the
comparisons below are exact (up to float rounding, REL).
"""
from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, example, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import simulator
from simulator.config.errors import ConfigError
from simulator.serving.server import KIND_DECODE, KIND_PREFILL, KIND_SPEC
from simulator.config.policy import HybridPolicy
from simulator.timing.costs import FastStepCosts
from simulator.timing.stepspec import PassSpec, StepSpec
from simulator.timing.machine import Machine
from simulator.model.cost import PassShape
from simulator.speculation.policies import Hybrid
from simulator.speculation.trees import Tree
from conftest import clear_sample_caches
from strategies import (TINY_CARD, TINY_GPU, TINY_HOST, divisors, gpu_specs, host_specs, make_scenario, model_cards, nvswitch_fabric, pcie_fabric,
                        POLICY_KINDS, permitted_allreduce, policies_for, runtimes, scenarios, served_scenarios, speculations, topology, workloads)

REL = 1e-9  # float rounding allowance for comparisons that are exact in exact arithmetic
# Standard errors allowed for a sampling-noise term checked in every Hypothesis example: with ~40 examples (and
# Hypothesis hunting for extremes), 4 keeps the chance of a false alarm over a whole run near 0.3% (Bonferroni:
# two-sided P(|z| > 4) = 6e-5 per example), where 3 would fire in ~10% of runs.
Z_FAMILY = 4.0
FEW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MANY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TIME_FIELDS = ("duration_us", "draft_us", "pass_us", "compute", "memory", "launch", "allreduce_transfer",
               "allreduce_wait", "draft", "other", "allreduce_only", "allreduce_profile")


def run(raw: dict, **kwargs):
    return simulator.run(make_scenario(raw), **kwargs)


def stable(result) -> str:
    data = result.to_dict()
    data.pop("wall_time_s")
    return json.dumps(data, sort_keys=True, default=float)


def numbers(value, path="result"):
    """Every number inside a nested dict/list, with its path."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, (int, float, np.floating, np.integer)):
        yield path, float(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from numbers(v, f"{path}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from numbers(v, f"{path}[{i}]")


@st.composite
def scenarios_with_policies(draw):
    """A generated scenario (fixed-length workload) with any policy its speculation admits."""
    raw = draw(scenarios())
    return raw, draw(policies_for(raw))


# --- tokens are conserved ------------------------------------------------------------------------------------------


@MANY
@given(scenarios_with_policies())
def test_every_token_counted_once_and_accept_lengths_within_the_tree(case):
    raw, raw["policy"] = case
    r = run(raw)
    w = raw["workload"]
    for summary in (r.run, r.baseline):
        assert summary.tokens == w["requests"] * w["output_tokens"]
        assert all(req.generated == w["output_tokens"] and req.completed_at is not None for req in summary.requests)
    assert r.tokens == w["requests"] * w["output_tokens"]
    steps = r.run.steps
    spec = steps["kind"] == KIND_SPEC
    lengths = r.run.accept_lengths
    # one accept length per request per speculative step, in step order
    depth_per_request = np.repeat(steps["depth"][spec], steps["batch"][spec].astype(int))
    assert lengths.size == depth_per_request.size
    assert np.all(lengths >= 1) and np.all(lengths <= depth_per_request + 1)
    # the step log accounts for every token: prefill's first token, one per plain step and request, accept lengths
    assert steps["tokens"][spec].sum() == lengths.sum()
    assert steps["tokens"][steps["kind"] == KIND_DECODE].sum() == steps["batch"][steps["kind"] == KIND_DECODE].sum()
    assert steps["tokens"][steps["kind"] == KIND_PREFILL].sum() == w["requests"]
    assert sum(r.accept_len_hist.values()) == lengths.size


@FEW
@given(scenarios(), st.integers(1, 6))
def test_full_acceptance_chain_of_k_emits_k_plus_1_per_step(raw, k):
    raw["speculation"].update(draft_tokens=k, verify="chain", tree={"kind": "chain"},
                              acceptance={"kind": "iid", "alpha": 1.0})
    r = run(raw, baseline=False)
    out = raw["workload"]["output_tokens"]
    expected = np.minimum(k + 1, out - r.run.accept_positions)  # a request's last step is cut at its output length
    assert r.run.accept_lengths.tolist() == expected.tolist()
    # spec steps, bar each request's last, emit k+1 tokens per request
    assert np.sum(r.run.accept_lengths == k + 1) >= r.run.accept_lengths.size - raw["workload"]["requests"]


@MANY
@given(scenarios(), st.sampled_from(["iid", "positional"]))
def test_zero_acceptance_is_never_faster_than_plain_decode(raw, kind):
    rt = raw["runtime"]
    # verify and plain decode under different runtimes (graph vs eager) compare the runtimes, not speculation: a
    # generated host whose graph launch (20 us) costs more than a tiny model's eager launches makes an eager verify
    # cheaper than a graph decode (found by this test). Same runtime: a 2-token pass costs at least a 1-token one.
    assume(rt["cuda_graph_decode"] == rt["cuda_graph_verify"])
    raw["speculation"]["acceptance"] = ({"kind": "iid", "alpha": 0.0} if kind == "iid" else
                                        {"kind": "positional", "probs": [0.0], "repeat_last": True})
    r = run(raw)
    assert r.mean_accept_len == 1.0
    assert r.throughput_tok_s <= r.baseline_tok_s * (1 + REL), (r.throughput_tok_s, r.baseline_tok_s)


# --- monotone in the machine -------------------------------------------------------------------------------------


@st.composite
def slower_machines(draw):
    """(scenario, slower copy, what changed): one link slower, host-memory hops slower, or launches costlier."""
    raw = draw(scenarios())
    slower = copy.deepcopy(raw)
    topo = slower["topology"]
    choice = draw(st.sampled_from(["link_latency", "link_bandwidth", "shm_hop_latency", "eager_launch"]))
    if choice in ("link_latency", "link_bandwidth") and topo["fabric"]["links"]:
        i = draw(st.integers(0, len(topo["fabric"]["links"]) - 1))
        link = topo["fabric"]["links"][i]
        if choice == "link_latency":
            link["latency_us"] += draw(st.floats(0.01, 20.0))
        else:
            link["bandwidth_GBps"] /= draw(st.floats(1.01, 100.0))
        what = f"{choice} of link {i} ({link['between']})"
    elif choice == "eager_launch":
        topo["host"]["eager_launch_us"] *= draw(st.floats(1.01, 5.0))
        what = choice
    else:
        topo["fabric"]["shm_hop_latency_us"] += draw(st.floats(0.01, 20.0))
        what = "shm_hop_latency_us"
    return raw, slower, what


def _route_flip_case():
    """Found by this test: on an NVSwitch board whose NVLink hops carry 0.5 us of latency, a 1 KiB message is
    fastest over PCIe through the CPU (host memory, no P2P); 2 us more on a GPU's PCIe link moves the route onto
    NVLink, where P2P and custom all-reduce make every all-reduce cheaper: the slower link raises throughput."""
    gpu = {**TINY_GPU, "name": "g", "memory_bandwidth_GBps": 500.0, "memory_efficiency": 0.5,
           "peak_TFLOPS": {"bf16": 100.0}, "compute_efficiency": 0.5}
    host = {**TINY_HOST, "eager_launch_us": 2.0, "launch_jitter_cv": 0.0, "rank_skew_cv": 0.0, "graph_launch_us": 5.0,
            "graph_node_us": 0.0, "step_overhead_us": 0.0, "sync_us": 0.0}
    card = {**{k: v for k, v in TINY_CARD.items() if k != "draft_head"}, "name": "m", "num_layers": 1,
            "num_dense_layers": 1, "hidden_size": 256, "vocab_size": 1000,
            "attention": {"kind": "gqa", "num_heads": 2, "num_kv_heads": 2, "head_dim": 32},
            "dense_intermediate_size": 512, "kernels": {"attention": 1, "dense_mlp": 1, "per_pass": 0, "verify_per_pass": 0}}
    fabric = nvswitch_fabric(2, nvlink_GBps=100.0, nvlink_latency_us=0.5, nvls=False, sockets=1,
                             shm_hop_latency_us=0.0)
    raw = {"name": "route_flip", "topology": topology(fabric, gpu, host), "model": card, "parallelism": {"tp": 2},
           "runtime": {"cuda_graph_decode": False}, "workload": {"requests": 1, "prompt_tokens": 1, "output_tokens": 64},
           "policy": {"kind": "static"}, "seed": 0}
    slower = copy.deepcopy(raw)
    slower["topology"]["fabric"]["links"][0]["latency_us"] = 2.0  # gpu0 - cpu0
    return raw, slower, "link_latency of link 0 (gpu0-cpu0), 0 -> 2 us"


@MANY
@given(slower_machines())
@example(_route_flip_case())
def test_throughput_never_rises_on_a_slower_machine(case):
    raw, slower, what = case
    fast = run(raw)
    try:
        slow = run(slower)
    except ConfigError as exc:  # e.g. a slower NVLink leaves a forced nvls all-reduce without a channel: no machine
        assume("NCCL's search finds no NVLS channel" not in str(exc))
        raise
    assert slow.throughput_tok_s <= fast.throughput_tok_s * (1 + REL), (what, fast.throughput_tok_s, slow.throughput_tok_s)
    assert slow.baseline_tok_s <= fast.baseline_tok_s * (1 + REL), (what, fast.baseline_tok_s, slow.baseline_tok_s)
    assert fast.mean_accept_len == slow.mean_accept_len  # acceptance draws do not depend on the machine


@FEW
@given(scenarios(), st.floats(1.01, 10.0))
def test_throughput_never_falls_when_memory_bandwidth_rises(raw, factor):
    faster = copy.deepcopy(raw)
    faster["topology"]["gpu"]["memory_bandwidth_GBps"] *= factor
    base, quick = run(raw), run(faster)
    assert quick.throughput_tok_s >= base.throughput_tok_s * (1 - REL)
    assert quick.baseline_tok_s >= base.baseline_tok_s * (1 - REL)


# --- the books balance -------------------------------------------------------------------------------------------


@MANY
@given(scenarios_with_policies())
def test_the_books_balance_and_every_number_is_finite(case):
    raw, raw["policy"] = case
    r = run(raw)
    assert_books_balance(r)
    assert_finite(r)


def assert_books_balance(r) -> None:
    """The breakdown sums to the time per token, no category is negative, every step time is >= 0."""
    per_token_ms = r.sim_time_s * 1e3 / r.tokens
    assert sum(r.breakdown_ms_per_token.values()) == pytest.approx(per_token_ms, rel=1e-3)
    # 'other' holds sim_time - sum(step durations): zero up to the rounding of the clock's sum, so allow that much
    assert all(v >= -1e-9 * per_token_ms for v in r.breakdown_ms_per_token.values()), r.breakdown_ms_per_token
    for summary in (r.run, r.baseline):
        for name in TIME_FIELDS:
            # a category is a difference of clock times: allow rounding, 1e-9 of the step
            floor = -1e-9 * np.maximum(summary.steps["duration_us"], 1.0)
            assert np.all(summary.steps[name] >= floor), (name, summary.steps[name].min())
    for stats in r.step_ms.values():
        assert stats is None or all(v >= 0 for v in stats.values())
    assert r.throughput_tok_s > 0 and r.baseline_tok_s > 0 and r.sim_time_s > 0


def assert_finite(r) -> None:
    for path, value in numbers(r.to_dict()):
        assert math.isfinite(value), (path, value)


def assert_every_request_served(r) -> None:
    """Each request, whatever its drawn lengths and however often it was preempted, ends with exactly its own output
    length generated; the run's tokens are their sum, in both the speculative run and the baseline."""
    for summary in (r.run, r.baseline):
        if summary is None:
            continue
        for request in summary.requests:
            assert request.completed_at is not None and request.generated == request.output_tokens, request
        assert summary.tokens == sum(request.output_tokens for request in summary.requests)


# --- under load: length distributions, arrivals, memory pressure, every policy ----------------------------------


SERVED = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("policy", POLICY_KINDS)
@SERVED
@given(data=st.data())
def test_served_workloads_complete_every_request_and_balance_their_books(policy, data):
    raw = data.draw(served_scenarios(policy=policy))
    r = run(raw)
    assert_every_request_served(r)
    assert_books_balance(r)
    assert_finite(r)
    event(f"preempted: {r.run.preemptions > 0}")
    kv = r.run
    assert kv.kv_peak_tokens <= kv.kv_capacity_tokens or kv.kv_capacity_tokens == 0
    if policy == "dynamic_length":  # each verify is one of its tiers, inside the largest captured graph
        steps = r.run.steps
        spec = steps["kind"] == KIND_SPEC
        sizes, batch = steps["verify_tokens"][spec], steps["batch"][spec]
        assert set((sizes - 1).tolist()) <= set(raw["policy"]["choices"])
        bound = raw["policy"]["max_graph_tokens"]
        assert bound is None or np.all(batch * sizes <= bound), bound


@pytest.mark.parametrize("overflow", ["queue", "preempt"])
@SERVED
@given(data=st.data())
def test_squeezed_kv_cache_queues_or_preempts_and_still_serves_every_request(overflow, data):
    raw = data.draw(served_scenarios(squeeze=True))
    raw["workload"]["kv_overflow"] = overflow
    r = run(raw)
    assert_every_request_served(r)
    assert_books_balance(r)
    assert r.run.kv_peak_tokens <= r.run.kv_capacity_tokens
    if overflow == "queue":
        assert r.run.preemptions == 0
    event(f"preempted: {r.run.preemptions > 0}")


def test_multi_drafter_without_speculative_steps_reports_finite_shares():
    """A multi-drafter run without a speculative step (one output token: the prefill emits it) reports shares of 0."""
    from test_oracles import CARD, GPU, HOST

    raw = {"name": "one_token", "topology": topology(pcie_fabric(1, sockets=1), GPU, HOST),
           "model": copy.deepcopy(CARD), "parallelism": {"tp": 1},
           "workload": {"requests": 1, "prompt_tokens": 8, "output_tokens": 1},
           "speculation": {"method": "ngram", "draft_tokens": 2, "acceptance": {"kind": "iid", "alpha": 0.5}},
           "policy": {"kind": "multi_drafter", "fallback": {"method": "eagle3", "acceptance": {"kind": "iid", "alpha": 0.5}}}}
    assert_finite(run(raw))


# --- forced all-reduce algorithms --------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["nvls", "one_shot", "two_shot"])
@SERVED
@given(data=st.data())
def test_a_forced_allreduce_is_the_one_every_pass_uses(algorithm, data):
    """Where the fabric permits it (an NVSwitch board with multicast for NVLS, peer-to-peer between all ranks for the
    custom all-reduce), a forced algorithm runs for every all-reduce of decode and verify, and the run balances."""
    raw = data.draw(scenarios(fabric="nvswitch" if algorithm == "nvls" else None, min_tp=2))
    if algorithm == "nvls":
        raw["topology"]["fabric"]["nvls"] = True
    assume(algorithm in permitted_allreduce(raw["topology"], raw["parallelism"]["tp"]))
    raw["runtime"]["allreduce"] = algorithm
    r = run(raw)
    for kind, choice in r.allreduce_choice.items():
        assert choice["algorithm"] == algorithm, (kind, choice)
    assert_books_balance(r)
    assert_finite(r)


# --- at layer fidelity ----------------------------------------------------------------------------------------

LAYER = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@LAYER
@given(served_scenarios(max_output=24))
def test_layer_fidelity_serves_every_request_and_balances_its_books(raw):
    raw["workload"]["requests"] = min(raw["workload"]["requests"], 2)
    r = run(raw, fidelity="layer")
    assert_every_request_served(r)
    assert_books_balance(r)
    assert_finite(r)


@LAYER
@given(served_scenarios(max_output=16))
def test_link_fidelity_equals_layer_on_one_isolated_group(raw):
    """One TP group alone on its machine: nothing else shares the links, so the link fidelity's per-rank processes
    and per-step transfers reproduce the layer fidelity's recurrence, step by step, to rounding."""
    raw["workload"]["requests"] = min(raw["workload"]["requests"], 2)
    layer = run(raw, fidelity="layer", baseline=False)
    link = run(raw, fidelity="link", baseline=False)
    assert link.tokens == layer.tokens
    assert link.run.steps["duration_us"] == pytest.approx(layer.run.steps["duration_us"], rel=1e-9, abs=1e-6)
    assert link.throughput_tok_s == pytest.approx(layer.throughput_tok_s, rel=1e-9)


@FEW
@given(scenarios(), st.sampled_from(["fast", "layer", "link"]))
def test_same_seed_same_result_bit_for_bit_with_cold_and_warm_caches(raw, fidelity):
    raw["fidelity"] = fidelity
    if fidelity != "fast":  # an event per collective (layer) or per link transfer (link): keep it short
        raw["workload"]["output_tokens"] = 64
    clear_sample_caches()
    cold = run(raw)
    warm = run(raw)  # memoised pass samples and tables
    again = run(copy.deepcopy(raw))
    assert stable(cold) == stable(warm) == stable(again)


@FEW
@given(scenarios(), scenarios())
def test_result_does_not_depend_on_what_ran_before_in_the_process(raw, other):
    """A run's result is a function of its scenario and seed, not of the memoised samples other runs left behind
    (a sweep's worker processes and a single run must agree). The other run shares the seed, the drafter and the
    workload, as the points of a sweep do, so its pass shapes are the ones the caches hold."""
    raw["workload"]["output_tokens"] = 64  # four runs per example: keep each short
    other.update(seed=raw["seed"], workload=copy.deepcopy(raw["workload"]), speculation=copy.deepcopy(raw["speculation"]))
    other["model"]["mtp_layers"] = raw["model"]["mtp_layers"]
    other["runtime"].update({k: raw["runtime"][k] for k in ("cuda_graph_decode", "cuda_graph_verify", "cuda_graph_draft")})
    clear_sample_caches()
    alone = run(raw)
    run(other)
    clear_sample_caches()
    run(other)  # warm the caches with the other scenario only
    after_other = run(raw)
    assert stable(after_other) == stable(alone)


# --- break-even ----------------------------------------------------------------------------------------------------


def expected_plain_step_us(scenario, machine, contexts) -> np.ndarray:
    """The cost model's expected plain-decode step (batch 1) at each context: the mean of its memoised samples."""
    host, runtime = scenario.topology.host, scenario.spec.runtime
    plain = StepSpec(PassSpec("target", PassShape(1, 1), runtime.cuda_graph_decode),
                     other_us=host.sync_us + (0.0 if runtime.overlap_schedule else host.step_overhead_us))
    planner = FastStepCosts(machine, scenario.spec.seed, np.random.default_rng(0))
    return np.array([planner.mean_step_us(plain, int(c)) for c in contexts])


@MANY
@given(scenarios())
def test_speculation_beats_baseline_exactly_when_accept_length_exceeds_breakeven(raw):
    """Speedup > 1 exactly when the mean accept length A exceeds the break-even B, outside a stated noise margin.

    One request at a time, static policy. The speculative run has prefill time P_s and N_s steps of total S_tot for
    the n tokens after prefill, so A = n / N_s exactly. B = S_tot / sum_i D(c_i), D(c) the cost model's expected plain
    step at each speculative step's context c_i (D_spec their mean). The baseline takes P_b + n D_hat, D_hat the mean
    of its n realised plain steps. Hence

        A > B        <=>  n D_spec > S_tot
        speedup > 1  <=>  P_b + n D_hat > P_s + S_tot

    They differ by Delta = (P_b - P_s) + n (D_hat - D_base) + n (D_base - D_spec), D_base the expected plain step
    averaged over the baseline's own contexts. The first and last terms are computed exactly from the step logs (the
    prefill draws differ between runs once a second request's prefill lands at a different point of the draw stream;
    the contexts of the two runs differ). The middle term is sampling noise: each realised step is one draw from the
    shape's memoised samples, so D_hat - D_base has standard error sd(realised - expected) / sqrt(n), and we allow
    Z_FAMILY of them. Outside |n D_spec - S_tot| > margin the two statements must agree; inside, the speedup must still lie within
    margin / (P_s + S_tot) of the noise-free value (P_s + n D_spec) / (P_s + S_tot), which itself lies between 1 and
    A / B (prefill enters both throughputs, pulling the speedup towards 1 without moving it across).
    """
    raw["workload"]["concurrency"] = 1
    scenario = make_scenario(raw)
    machine = Machine(scenario)
    r = simulator.run(scenario)
    A, B = r.mean_accept_len, r.breakeven_accept_len
    main, base = r.run.steps, r.baseline.steps
    spec, plain = r.run.spec_steps, r.baseline.decode_steps
    n = r.tokens - raw["workload"]["requests"]
    assert spec.sum() > 0 and plain.sum() == n and main["tokens"][spec].sum() == n
    assert A == pytest.approx(n / spec.sum(), rel=1e-12)
    S_tot = float(main["duration_us"][spec].sum())
    D_spec = expected_plain_step_us(scenario, machine, main["context"][spec])
    assert B == pytest.approx(S_tot / D_spec.sum(), rel=1e-9)  # the break-even as defined above
    D_expected = expected_plain_step_us(scenario, machine, base["context"][plain])
    realised = base["duration_us"][plain]
    noise_se = float(np.std(realised - D_expected, ddof=1) / np.sqrt(n)) if n > 1 else 0.0
    P_s = float(main["duration_us"][main["kind"] == KIND_PREFILL].sum())
    P_b = float(base["duration_us"][base["kind"] == KIND_PREFILL].sum())
    margin = abs(P_b - P_s) + n * (Z_FAMILY * noise_se + abs(D_expected.mean() - D_spec.mean())) + REL * (P_s + S_tot)
    decisive = abs(n * D_spec.mean() - S_tot) > margin
    event(f"decisive: {decisive}")
    if decisive:
        assert (r.speedup > 1) == (A > B), (r.speedup, A, B, margin / S_tot)
    noise_free = (P_s + n * D_spec.mean()) / (P_s + S_tot)
    assert min(1.0, A / B) - REL <= noise_free <= max(1.0, A / B) + REL
    assert abs(r.speedup - noise_free) <= margin / (P_s + S_tot) + REL, (r.speedup, noise_free, margin / (P_s + S_tot))


# --- NVLink against PCIe -------------------------------------------------------------------------------------------


@st.composite
def pcie_and_nvlink_twins(draw):
    """The same GPUs, host, model, runtime, workload and seed on a PCIe tree and on an NVSwitch board."""
    n = draw(st.integers(2, 16))
    tp = draw(st.sampled_from(divisors(n)))
    gpu, host = draw(gpu_specs()), draw(host_specs())
    sockets = draw(st.integers(1, 2))
    pcie_GBps, pcie_latency = draw(st.floats(16, 64)), draw(st.floats(0, 1))
    shm = draw(st.floats(0, 5))
    pcie = pcie_fabric(n, sockets, draw(st.sampled_from([0, 1, 2, 4])),
                       draw(st.sampled_from(["nvlink", "pcie_switch", "cpu", "system"])), pcie_GBps, pcie_latency,
                       shm_hop_latency_us=shm)
    nvlink = nvswitch_fabric(n, nvlink_GBps=pcie_GBps * draw(st.floats(2, 20)),
                             nvlink_latency_us=pcie_latency * draw(st.floats(0, 1)), nvls=draw(st.booleans()),
                             sockets=sockets, pcie_GBps=pcie_GBps, pcie_latency_us=pcie_latency, shm_hop_latency_us=shm)
    card = draw(model_cards(tp))
    common = {"name": "twin", "model": card, "parallelism": {"tp": tp}, "runtime": draw(runtimes()),
              "workload": draw(workloads()), "seed": draw(st.integers(0, 2**32 - 1)), "policy": {"kind": "static"},
              "speculation": draw(speculations(card, tp=tp))}
    return ({**common, "topology": topology(pcie, gpu, host, "pcie")},
            {**common, "topology": topology(nvlink, gpu, host, "nvlink")})


@MANY
@given(pcie_and_nvlink_twins())
def test_nvlink_board_is_never_slower_than_pcie(twins):
    pcie, nvlink = (run(raw) for raw in twins)
    assert nvlink.throughput_tok_s >= pcie.throughput_tok_s * (1 - REL), (nvlink.throughput_tok_s, pcie.throughput_tok_s)
    assert nvlink.baseline_tok_s >= pcie.baseline_tok_s * (1 - REL), (nvlink.baseline_tok_s, pcie.baseline_tok_s)


# --- the hybrid policy as a state machine --------------------------------------------------------------------------


class HybridPolicyMachine(RuleBasedStateMachine):
    """Random step times and accept lengths fed to the hybrid on/off policy; its promises hold after every step."""

    @initialize(hysteresis=st.floats(0, 0.5), probe_every=st.integers(1, 8), extra=st.integers(0, 3),
                estimator=st.sampled_from(["ema", "window"]), depth=st.integers(1, 4))
    def setup(self, hysteresis, probe_every, extra, estimator, depth):
        config = HybridPolicy(kind="hybrid", hysteresis=hysteresis, probe_every=probe_every,
                              max_probe_every=probe_every * 2**extra, estimator=estimator)
        self.policy = Hybrid(config, Tree.chain(depth))
        self.config, self.depth = config, depth
        self.decisions = 0
        self.plain_streak = 0  # plain decisions in a row while off
        self.last_was_probe = False

    @rule(step_us=st.floats(1.0, 1e5), accept=st.integers(1, 5))
    def step(self, step_us, accept):
        p = self.policy
        was_on = p.on
        decision = p.decide(None)
        if self.decisions == 0:
            assert decision is None  # a plain step first, to learn its cost
        if was_on:
            assert decision is not None  # on: every step speculates
        elif decision is None:
            self.plain_streak += 1
        else:
            assert not self.last_was_probe, "probed twice in a row while off"
            self.plain_streak = 0
        self.last_was_probe = decision is not None and not was_on
        p.observe(decision, step_us, float(min(accept, self.depth + 1)) if decision else 1.0, 1)
        self.decisions += 1
        if p.on:
            self.plain_streak = 0
            self.last_was_probe = False

    @invariant()
    def probing_interval_stays_in_its_bounds(self):
        if hasattr(self, "policy"):
            assert self.config.probe_every <= self.policy.interval <= self.config.max_probe_every
            # while off it probes at least once every max_probe_every plain steps (after the first one)
            assert self.plain_streak <= self.config.max_probe_every + 1

    @invariant()
    def hysteresis_band_is_respected(self):
        if not hasattr(self, "policy"):
            return
        p = self.policy
        estimate, breakeven = p._estimate(), p.breakeven()
        if estimate is None or breakeven is None:
            return
        h = self.config.hysteresis
        if p.on:
            assert estimate >= (1 - h) * breakeven * (1 - REL)
        else:
            assert estimate <= (1 + h) * breakeven * (1 + REL)


TestHybridPolicyMachine = HybridPolicyMachine.TestCase
TestHybridPolicyMachine.settings = settings(max_examples=60, stateful_step_count=60, deadline=None)
