"""The engine's host work around a speculative step (runtime.speculative_host) is charged exactly, on speculative
steps only: eager ops at the host's launch cost, syncs at its sync cost, and Python work per running request."""
from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = os.path.join(ROOT, "scenarios", "validation", "cases", "h100_llama8b_eagle3_mtbench.yaml")
# small: 12 requests of 40 output tokens at concurrency 4, so batches of 1-4 appear
SMALL = ["--set", "workload.requests=12", "--set", "workload.output_tokens=40", "--set", "workload.concurrency=4"]


def steps(tmp_path, name: str, host_path: str) -> list[dict]:
    out = tmp_path / f"{name}.csv"
    subprocess.run([sys.executable, "-m", "simulator", CASE, *SMALL, "--set",
                    f"runtime.speculative_host={host_path}", "--steps-log", str(out), "--format", "json"],
                   check=True, cwd=ROOT, capture_output=True)
    with open(out, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_speculative_host_work_is_charged_exactly_on_speculative_steps(tmp_path):
    import simulator

    host = simulator.load_scenario(CASE).topology.host
    # three host values set, none then some; the profile's others stand alike in both runs (a mapping merges)
    none = steps(tmp_path, "none", "{eager_ops: 0, syncs: 0, per_request_us: 0.0}")
    some = steps(tmp_path, "some", "{eager_ops: 110, syncs: 9, per_request_us: 12.0}")
    speculative = [(a, b) for a, b in zip(none, some) if a["kind"] == "speculative"]
    assert len(speculative) > 10 and {int(a["batch_requests"]) for a, _ in speculative} >= {2, 3, 4}
    for a, b in zip(none, some):
        assert a["kind"] == b["kind"] and a["batch_requests"] == b["batch_requests"]
        extra = float(b["other_us"]) - float(a["other_us"])
        if a["kind"] == "speculative":
            expected = 110 * host.eager_launch_us + 9 * host.sync_us + 12.0 * int(a["batch_requests"])
            assert extra == pytest.approx(expected, abs=0.011)  # the log rounds to 0.01 us
            # serial with the GPU: the step is its drafting, its verify pass and this host work (6 digits logged)
            parts = float(b["draft_us"]) + float(b["pass_us"]) + float(b["other_us"])
            assert float(b["duration_us"]) == pytest.approx(parts, rel=1e-5)
        else:  # plain decode and prefill steps carry none of it
            assert extra == 0.0


def test_breakeven_charges_the_host_path_at_the_tables_batch():
    """The break-even table's speculative step carries the same host work at its batch (the concurrency)."""
    import simulator
    from simulator.analysis.breakeven import breakeven_table

    def table(host_path):
        return breakeven_table(simulator.load_scenario(CASE, [("workload.concurrency", 10),
                                                              ("runtime.speculative_host", host_path)]), (3,), ())

    host = simulator.load_scenario(CASE).topology.host
    none = table({"eager_ops": 0, "syncs": 0, "per_request_us": 0.0})
    some = table({"eager_ops": 110, "syncs": 9, "per_request_us": 12.0})
    expected_ms = (110 * host.eager_launch_us + 9 * host.sync_us + 12.0 * 10) / 1e3
    for a, b in zip(none.rows, some.rows):
        assert b.eager.other_ms - a.eager.other_ms == pytest.approx(expected_ms, rel=1e-12)
        assert b.graph.other_ms - a.graph.other_ms == pytest.approx(expected_ms, rel=1e-12)
        assert (b.eager.verify_ms, b.graph.verify_ms, b.graph.draft_ms) == (a.eager.verify_ms, a.graph.verify_ms,
                                                                              a.graph.draft_ms)
    assert none.decode_step_ms == some.decode_step_ms  # plain decode hides the scheduler and has no such path


def test_graph_passes_run_at_the_captured_batch_size():
    """A graph-captured verify and draft pass of b requests runs padded to the smallest captured size >= b, and
    eagerly at b above the largest; eager passes (the draft extend here) always run at b, unpadded."""
    import simulator
    from simulator.timing.stepspec import speculative_passes
    from simulator.speculation.drafters import HeadDrafter
    from simulator.speculation.trees import Tree

    runtime = simulator.load_scenario(CASE).spec.runtime
    assert runtime.speculative_graph_batch_sizes[-5:] == [31, 64, 96, 128, 160]  # SGLang 0.4.4.post2's, on an H100
    drafter = HeadDrafter("draft_head", graph=True, extend_graph=False)
    expected = {1: 1, 8: 8, 10: 11, 31: 31, 32: 64, 48: 64, 64: 64, 65: 96, 160: 160, 161: None}
    for batch, captured in expected.items():
        verify, drafts = speculative_passes(drafter, Tree.chain(3), batch, runtime, verify_graph=True)
        *heads, extend = drafts
        want = (True, batch, captured - batch) if captured else (False, batch, 0)
        assert (verify.graph, verify.shape.batch, verify.shape.padding) == want
        assert all((d.graph, d.shape.batch, d.shape.padding) == want for d in heads)
        assert len(heads) == 2 and (extend.graph, extend.shape.batch, extend.shape.padding) == (False, batch, 0)
        verify, _ = speculative_passes(drafter, Tree.chain(3), batch, runtime, verify_graph=False)
        assert (verify.graph, verify.shape.batch, verify.shape.padding) == (False, batch, 0)  # eager: never padded


def test_the_engine_steps_use_the_case_runtime():
    """The server's speculative step of 10 requests: verify and the head's draft passes in graphs padded to 11, the
    draft-extend pass eager at 10 (runtime.cuda_graph_draft_extend false), the host path at 10 requests with the
    padded graphs' buffer resets."""
    import simpy

    import simulator
    from simulator.timing.machine import Machine
    from simulator.serving.server import KIND_SPEC, Server

    scenario = simulator.load_scenario(CASE)
    server = Server(simpy.Environment(), Machine(scenario), seed=0, fidelity="fast")
    spec = server.step_spec(KIND_SPEC, server.policy.decide(None), 10)
    assert (spec.main.graph, spec.main.shape.batch, spec.main.shape.padding) == (True, 10, 1)
    *heads, extend = spec.drafts
    assert [(d.graph, d.shape.padding) for d in heads] == [(True, 1), (True, 1)]
    assert (extend.graph, extend.shape.batch, extend.shape.padding) == (False, 10, 0)
    host = scenario.topology.host
    profile = yaml.safe_load(open(os.path.join(ROOT, "engines", "sglang", "0.4.4.post2.yaml")))
    value = {key: item["value"] for key, item in profile["speculative_host"]["default"].items()}
    emitted = 1 + 0.8 + 0.8 * 0.75 + 0.8 * 0.75 * 0.7  # the case's positional acceptance, chain of 3
    per_request = (value["per_request_us"] + 3 * value["per_draft_token_us"] + emitted * value["per_accepted_token_us"]
                   + (emitted + 1) * value["stop_check_us"])  # the case's requests carry one stop string
    # draft steps after the first of three; the padded draft graph's buffer resets (10 runs the graph of 11)
    ops = value["eager_ops"] + 2 * value["eager_ops_per_draft_step"] + value["eager_ops_padded_draft"]
    assert spec.other_us == pytest.approx(host.sync_us + host.step_overhead_us + ops * host.eager_launch_us
                                          + value["syncs"] * host.sync_us + value["step_host_us"] + per_request * 10,
                                          rel=1e-9)
    behind = value["eager_ops_behind_draft_graph"] + value["verify_input_ops"] + value["verify_input_ops_padded"]
    assert spec.behind_drafts == (behind, pytest.approx(behind * host.eager_launch_us, rel=1e-12))


def test_the_host_path_grows_with_batch_depth_drafts_and_emitted_tokens():
    """speculative_host_us: each term scales with what it processes (ops with the draft steps after the first, the
    Python loops with requests x (1, draft tokens, emitted tokens), stop checks once per emitted token and request)."""
    from types import SimpleNamespace

    from simulator.config.scenario import SpeculativeHost
    from simulator.timing.stepspec import speculative_host_us
    from simulator.speculation.trees import Tree

    host = SimpleNamespace(eager_launch_us=10.0, sync_us=20.0)
    extra = SpeculativeHost(eager_ops=7, eager_ops_per_draft_step=3, eager_ops_per_draft_token=2, syncs=2,
                            per_request_us=4.0, per_draft_token_us=0.5, per_accepted_token_us=2.0, stop_check_us=16.0)
    runtime = SimpleNamespace(speculative_host=extra)
    chain5 = Tree.chain(5)
    got = speculative_host_us(host, runtime, 6, chain5, emitted=2.5, stop_strings=1)
    assert got == pytest.approx((7 + 3 * 4 + 6 * 2 * 5) * 10 + 2 * 20 + 6 * (4 + 0.5 * 5 + 2 * 2.5 + 16 * 3.5),
                                rel=1e-12)
    without = speculative_host_us(host, runtime, 6, chain5, emitted=2.5, stop_strings=0)
    assert got - without == pytest.approx(6 * 16 * 3.5, rel=1e-12)
    assert speculative_host_us(host, runtime, 1, Tree.chain(1)) == pytest.approx((7 + 2) * 10 + 2 * 20 + 4 + 0.5 + 2)


def test_padding_rows_cost_gemm_rows_not_attention_or_sampling():
    """A padded pass's GEMMs and all-reduces carry the padding rows; its attention reads only the real requests'
    cache and its sampling and acceptance read only their logits."""
    import simulator
    from simulator.model.cost import PassShape
    from simulator.model.layout import pass_layout

    card = simulator.load_scenario(CASE).model
    real = PassShape(4, 10, 10 * 400, False, True)
    padded = PassShape(4, 10, 10 * 400, False, True, padding=6)
    as_16 = PassShape(4, 16, 10 * 400, False, True)

    def kernels(shape):
        out = {}
        for segment in pass_layout(card, 1, shape).segments:
            for k in segment.kernels:
                out.setdefault(k.name, k)
        return out

    r, p, b = kernels(real), kernels(padded), kernels(as_16)
    assert p["qkv_proj"].flops == b["qkv_proj"].flops > r["qkv_proj"].flops
    assert p["lm_head"].flops == b["lm_head"].flops
    assert p["attention"].bytes == r["attention"].bytes and p["attention"].flops == r["attention"].flops
    assert p["sampling"].bytes == r["sampling"].bytes < b["sampling"].bytes
    assert p["accept_rejection"].bytes == r["accept_rejection"].bytes
    assert p["logits_processing"].bytes == b["logits_processing"].bytes
    assert repr(real) == "PassShape(tokens=4, batch=10, context=4000, tree=False, verify=True)"  # seeds unchanged


def test_eager_ops_per_accepted_token_count_the_accepted_drafts_only():
    """eager_ops_per_accepted_token: charged per accepted draft token of each request, the bonus token excluded."""
    from types import SimpleNamespace

    from simulator.config.scenario import SpeculativeHost
    from simulator.speculation.trees import Tree
    from simulator.timing.stepspec import speculative_host_us

    host = SimpleNamespace(eager_launch_us=10.0, sync_us=20.0)
    runtime = SimpleNamespace(speculative_host=SpeculativeHost(eager_ops=5, eager_ops_per_accepted_token=64))
    assert speculative_host_us(host, runtime, 3, Tree.chain(4), emitted=1.0) == pytest.approx(50.0)
    assert speculative_host_us(host, runtime, 3, Tree.chain(4), emitted=1.64) == pytest.approx(
        50.0 + 3 * 64 * 0.64 * 10.0, rel=1e-12)


def test_syncs_per_draft_step_are_charged_per_draft_step_after_the_first():
    """speculative_host_us: syncs_per_draft_step costs host.sync_us once per draft step after the first (a chain of
    4: 3 of them), beside the fixed syncs."""
    from types import SimpleNamespace

    from simulator.config.scenario import SpeculativeHost
    from simulator.speculation.trees import Tree
    from simulator.timing.stepspec import speculative_host_us

    host = SimpleNamespace(eager_launch_us=10.0, sync_us=20.0)
    runtime = SimpleNamespace(speculative_host=SpeculativeHost(syncs=5, syncs_per_draft_step=2))
    assert speculative_host_us(host, runtime, 8, Tree.chain(4)) == pytest.approx((5 + 2 * 3) * 20.0, rel=1e-12)
    assert speculative_host_us(host, runtime, 8, Tree.chain(1)) == pytest.approx(5 * 20.0, rel=1e-12)


def test_syncs_per_accepted_token_count_the_accepted_drafts_only():
    """syncs_per_accepted_token: host.sync_us per accepted draft token of each request, the bonus token excluded,
    beside the fixed syncs (a step of 1.64 tokens emitted at batch 3: 3 x 0.64 of them)."""
    from types import SimpleNamespace

    from simulator.config.scenario import SpeculativeHost
    from simulator.speculation.trees import Tree
    from simulator.timing.stepspec import speculative_host_us

    host = SimpleNamespace(eager_launch_us=10.0, sync_us=20.0)
    runtime = SimpleNamespace(speculative_host=SpeculativeHost(syncs=2, syncs_per_accepted_token=1))
    assert speculative_host_us(host, runtime, 3, Tree.chain(4), emitted=1.0) == pytest.approx(40.0)
    assert speculative_host_us(host, runtime, 3, Tree.chain(4), emitted=1.64) == pytest.approx(
        40.0 + 3 * 0.64 * 20.0, rel=1e-12)


def test_specbench_eos_walk_is_one_launch_and_one_sync_a_token_emitted():
    """Spec-Bench's EAGLE, EAGLE-2 and PLD loops walk their whole output once a turn for the eos (a 0-dim CUDA eq and
    its `if` a token): transformers 4.37.1's profile spreads it as 1 a step and 1 an accepted draft, for both; EAGLE-3,
    Medusa and Hydra, which only test `eos in output.tolist()`, have none."""
    from simulator.config.engine_profile import load_profile

    host = load_profile("transformers", "4.37.1")[0].speculative_host
    for script in ("inference_eagle2", "eagle2", "inference_eagle", "ngram"):
        work = host[script]
        assert work.eager_ops_per_accepted_token.value == 1 and work.syncs_per_accepted_token.value == 1, script
    for script in ("inference_eagle3", "medusa", "hydra"):
        assert host[script].syncs_per_accepted_token is None, script


MAGICDEC = os.path.join(ROOT, "scenarios", "validation", "cases", "h100x8_llama8b_magicdec.yaml")


def test_magicdec_steps_charge_the_host_work_counted_in_its_benchmark_loops():
    """MagicDec 2024-11 (engines/magicdec/2024-11.yaml), as counted by hand from tests/baseline_benchmark.py and
    tests/StreamingLLM/selfspec_benchmark.py: a plain decode token launches 15 eager ops after a sync (one step-end
    sync charged); a speculative step of gamma 3 launches 113 (verify 9, first draft step 16, two more draft steps of
    10, the verify loop 68) and syncs 19 times (the step's end, 3 benchmark synchronize(), 2 per plan x 4 plans,
    7 in the verify loop), the GPU idle throughout."""
    import simpy

    import simulator
    from simulator.serving.server import KIND_DECODE, KIND_SPEC, Server
    from simulator.timing.machine import Machine

    scenario = simulator.load_scenario(MAGICDEC)
    host = scenario.topology.host
    server = Server(simpy.Environment(), Machine(scenario), seed=0, fidelity="fast")
    spec = server.step_spec(KIND_SPEC, server.policy.decide(None), 32)
    assert spec.other_us == pytest.approx(113 * host.eager_launch_us + 19 * host.sync_us, rel=1e-9)
    plain = server.step_spec(KIND_DECODE, None, 32)
    assert plain.other_us == pytest.approx(15 * host.eager_launch_us + host.sync_us, rel=1e-9)
