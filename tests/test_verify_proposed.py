"""An engine that verifies what a model-free drafter proposed (vLLM V1: runtime.verify_tokens proposed): the step's
verify is 1 + the proposal, a plain decode pass where nothing was proposed, and the accepted tokens are those of the
drafter run without the look-ahead."""
import os

import pytest

import simulator
from simulator.config.speculation import SuffixDrafter
from simulator.speculation.textual import TextAcceptance
from simulator.speculation.trees import Tree
from tests.test_lookup_drafters import PROMPT, STREAM, Text

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = os.path.join(ROOT, "scenarios", "validation", "cases", "h100x8_llama70b_vllm_modelfree.yaml")


def walk(peek: bool) -> tuple[list, list]:
    """(taken, proposed) per step of one request over the stub stream, the proposal looked up first or not."""
    model = TextAcceptance("suffix", SuffixDrafter(max_tree_depth=16), Text())
    request = type("R", (), {"request_id": 0, "prompt_tokens": PROMPT, "output_tokens": len(STREAM) - PROMPT,
                             "generated": 1})()
    state, remaining, tree = model.start_request(request), len(STREAM) - PROMPT - 1, Tree.chain(12)
    taken_each, proposed_each = [], []
    while remaining > 0:
        if peek:
            proposed_each.append(model.proposed(state, remaining, tree.num_drafts))
        taken, emitted, state = model.step(tree, state, (), 0, 0, remaining)
        taken_each.append(taken)
        remaining -= emitted
    return taken_each, proposed_each


def test_the_look_ahead_proposal_is_the_steps_and_bounds_what_it_accepts():
    taken, proposed = walk(peek=True)
    assert taken == walk(peek=False)[0]
    assert all(t <= p <= 12 for t, p in zip(taken, proposed))
    assert 0 in proposed and max(proposed) > 3  # the stream has steps with no match and steps with long ones


def test_a_proposal_sized_step_verifies_what_was_proposed():
    import simpy

    from simulator.serving.server import KIND_DECODE, KIND_SPEC, Server
    from simulator.timing.machine import Machine

    small = [("workload.corpus", "chat"), ("model", "../../models/llama_3_1_8b.yaml"), ("parallelism.tp", 1)]
    scenario = simulator.load_scenario(CASE, small)
    assert scenario.spec.runtime.verify_tokens == "proposed"  # vLLM 0.8.5's profile
    server = Server(simpy.Environment(), Machine(scenario), seed=0, fidelity="fast")
    decision = server.policy.decide(None)
    assert server.proposer(decision) is not None and decision.tree.num_drafts == 32
    none = server.step_spec(KIND_SPEC, decision, 1, 1, 0)
    assert none.main == server.step_spec(KIND_DECODE, None, 1).main and none.draft_host_us > 0
    assert server.step_spec(KIND_SPEC, decision, 1, 1, 5).main.shape.tokens == 6
    assert server.step_spec(KIND_SPEC, decision, 1).main.shape.tokens == 33


def test_a_fixed_verify_costs_more_and_accepts_the_same():
    runs = {mode: simulator.run(CASE, workload__corpus="chat", workload__requests=2, workload__output_tokens=96,
                                model="../../models/llama_3_1_8b.yaml", parallelism__tp=1,
                                runtime__verify_tokens=mode) for mode in ("fixed", "proposed")}
    assert list(runs["fixed"].run.accept_lengths) == list(runs["proposed"].run.accept_lengths)
    assert runs["proposed"].throughput_tok_s > runs["fixed"].throughput_tok_s  # 33 rows a step against 1 + proposed


def test_each_verify_holds_one_plus_the_proposal_of_the_reference_drafter(monkeypatch):
    """The serving loop at batch 1 over the hand-built stream: every step's verify pass holds 1 + the tokens that
    the brute-force SuffixDecoding reference (tests/test_lookup_drafters.py) proposes at that position, and emits
    what that proposal and the stream share plus the bonus token; none proposed: a plain decode step."""
    import simulator.corpora
    from simulator.serving.server import KIND_DECODE, KIND_SPEC
    from tests.test_lookup_drafters import suffix_reference

    monkeypatch.setattr(simulator.corpora, "Corpus", lambda name: Text())
    config = SuffixDrafter(max_tree_depth=64)
    result = simulator.run(CASE, workload__corpus="chat", workload__requests=2, workload__prompt_tokens=PROMPT,
                           workload__output_tokens=len(STREAM) - PROMPT, model="../../models/llama_3_1_8b.yaml",
                           parallelism__tp=1, speculation__suffix__max_tree_depth=64)
    steps = result.run.steps
    decoding = (steps["kind"] == KIND_SPEC) | (steps["kind"] == KIND_DECODE)
    verified, emitted = steps["verify_tokens"][decoding].tolist(), steps["tokens"][decoding].tolist()
    record = []
    suffix_reference(config, 2, 32, record=record)
    assert [(1 + proposed, out) for proposed, out in record] == list(zip(verified, emitted))
    assert min(p for p, _ in record) == 0 and max(p for p, _ in record) > 3


@pytest.mark.parametrize("batch, proposed, rows, graphed", [
    (1, 1, 2, True), (1, 2, 4, True), (1, 4, 8, True), (1, 8, 16, True), (1, 31, 32, True),
    (3, 2, 16, True), (3, 5, 24, True), (64, 7, 512, True), (65, 7, 520, False)])
def test_vllm_pads_a_verifys_token_count_to_a_captured_size(batch, proposed, rows, graphed):
    """vLLM V1 (GPUModelRunner.execute_model) runs b x (1 + k) scheduled tokens as the smallest captured count
    of 1, 2, 4 and the multiples of 8 to 512 (config.py _set_cudagraph_sizes; 18 tokens run as 24, not 32; padding rows through the GEMMs, not attention), eagerly above 512."""
    import simpy

    from simulator.serving.server import KIND_SPEC, Server
    from simulator.timing.machine import Machine

    small = [("workload.corpus", "chat"), ("model", "../../models/llama_3_1_8b.yaml"), ("parallelism.tp", 1),
             ("workload.max_running_requests", 128)]
    scenario = simulator.load_scenario(CASE, small)
    assert scenario.spec.runtime.speculative_graph_pads == "tokens"
    server = Server(simpy.Environment(), Machine(scenario), seed=0, fidelity="fast")
    main = server.step_spec(KIND_SPEC, server.policy.decide(None), batch, 1, proposed).main
    assert (main.shape.tokens, main.shape.batch, main.shape.padding) == (1 + proposed, batch, 0)
    assert (main.shape.query_tokens, main.graph) == (rows, graphed)


def test_vllm_0_8_4_verifies_at_most_32_drafts_a_step():
    """vLLM 0.8.4's rejection sampler takes at most MAX_SPEC_LEN = 32 drafts a request and step: the Arctic case's
    64 speculative tokens (its flag) run at 32, named among the keys the profile gave; SGLang's profile sets no cap."""
    capped = simulator.load_scenario(CASE, [("speculation.method", "suffix")])
    assert capped.spec.speculation.draft_tokens == 32
    assert "speculation.draft_tokens" in capped.engine.keys
    uncapped = simulator.load_scenario(CASE, [("speculation.method", "suffix"), ("engine.name", "sglang"),
                                              ("engine.version", "0.5.9")])
    assert uncapped.spec.speculation.draft_tokens == 64
    assert "speculation.draft_tokens" not in uncapped.engine.keys


def test_vllm_0_8_5_keeps_the_32_draft_cap():
    """vLLM 0.8.5's rejection sampler keeps MAX_SPEC_LEN = 32 (asserted in RejectionSampler.forward): the Arctic case's
    64 speculative tokens under 0.8.5's profile run at 32 too."""
    capped = simulator.load_scenario(CASE, [("speculation.method", "suffix"), ("engine.version", "0.8.5")])
    assert capped.engine.version == "0.8.5"
    assert capped.spec.speculation.draft_tokens == 32
    assert "speculation.draft_tokens" in capped.engine.keys
