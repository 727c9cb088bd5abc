"""The structural speculation methods (speculation/methods.py): verify shapes and draft passes counted by hand from
each method's structure, EAGLE-2's selection on a hand-worked example, and the sparse-KV self-draft's crossover."""
from dataclasses import replace

import pytest

from simulator.config.errors import ConfigError
from simulator.config.methods import DynamicTreeConfig, LookaheadConfig
from simulator.timing.stepspec import PassSpec, speculative_passes
from simulator.model.cost import PassShape
from simulator.api.run import resolve
from simulator.speculation.methods import (HydraDrafter, LookaheadDrafter, MedusaDrafter, dynamic_tree,
                                           lookahead_tree)
from simulator.speculation.trees import Tree

MAGICDEC = "scenarios/validation/cases/h100x8_llama8b_magicdec.yaml"


class _Runtime:
    speculative_graph_batch_sizes = None


def test_lookahead_verify_is_the_window_plus_the_candidates():
    config = LookaheadConfig(window=7, ngram=5, guesses=7)
    tree = lookahead_tree(config)
    # 7 candidates of 4 tokens, each a chain hanging from the current token
    assert tree.num_drafts == 28 and tree.depth == 4 and len(tree.children[0]) == 7
    assert all(len(tree.children[node]) <= 1 for node in range(1, tree.size))
    verify, drafts = speculative_passes(LookaheadDrafter(config), tree, 3, _Runtime(), False)
    # the current token, W (N - 1) = 28 window tokens and G (N - 1) = 28 candidate tokens, per request
    assert verify.shape.tokens == 57 and verify.shape.batch == 3 and verify.shape.tree
    assert drafts == ()


def test_medusa_runs_one_pass_hydra_one_per_expanded_depth():
    tree = Tree.from_parents([-1, 0, 0, 1, 1, 2, 3])  # depth 1: nodes 1, 2 expand; depth 2: node 3 does
    assert [(p.part, p.tokens) for p in MedusaDrafter(True, 3).passes(tree, 4)] == [("medusa", 1)]
    assert [(p.part, p.tokens) for p in HydraDrafter(True, 3).passes(tree, 4)] == [("hydra1", 1), ("hydra2", 2),
                                                                               ("hydra3", 1)]


def test_eagle2_keeps_the_most_confident_candidates():
    # depth 1: ranks 0.6, 0.3; depth 2: ranks 0.5, 0.2. Candidates (top-2 a depth): A .6, B .3, then AA .3, BA .15
    # (AB .12 and BB .06 lose the depth's top-2)
    P = ((0.6, 0.3), (0.5, 0.2))
    assert dynamic_tree(P, 2, 2, 3).parents == (-1, 0, 0)  # A, B
    assert dynamic_tree(P, 2, 2, 4).parents == (-1, 0, 0, 1)  # A, B, AA (B before AA at equal confidence: earlier)
    assert dynamic_tree(P, 2, 2, 5).parents == (-1, 0, 0, 1, 2)  # + BA
    with pytest.raises(ValueError, match="num_draft_tokens <= eagle_topk x num_steps"):
        DynamicTreeConfig(eagle_topk=2, num_steps=2, num_draft_tokens=6)


def test_a_method_whose_shape_fixes_draft_tokens_says_which():
    with pytest.raises(ConfigError, match="draft_tokens: 28"):
        resolve("scenarios/pcie8_lookahead.yaml", {"speculation__draft_tokens": 8})
    with pytest.raises(ConfigError, match="num_heads >= 4"):
        from simulator.speculation.setup import build_speculation
        build_speculation(resolve("scenarios/pcie8_medusa.yaml", {"speculation__heads": {"num_heads": 3}}))


def test_sparse_self_draft_pays_only_at_long_context_and_high_batch():
    """MagicDec's crossover: the draft is the target reading 512 cached tokens a request. At 1K tokens of context the
    draft passes cost about a decode each and speculation loses at any batch; at 32K and batch 64 the KV read
    dominates a decode, the draft stays cheap, and the step-level speedup exceeds 1 and grows with the batch."""
    from simulator.timing.machine import Machine
    from simulator.speculation.setup import build_speculation

    scenario = resolve(MAGICDEC, {})
    machine, slot, runtime = Machine(scenario), build_speculation(scenario).slots[0], scenario.spec.runtime

    def mean_us(spec, context):
        shape = replace(spec.shape, context=context)
        return float(machine.sample_durations(spec.part, shape, spec.graph, 0).mean())

    def speedup(context, batch):
        verify, drafts = speculative_passes(slot.drafter, slot.tree, batch, runtime, True)
        step = mean_us(verify, context * batch) + sum(mean_us(d, context * batch) for d in drafts)
        decode = mean_us(PassSpec("target", PassShape(1, batch), True), context * batch)
        return slot.acceptance.expected_tokens(slot.tree) * decode / step

    assert [d.kv_budget for d in slot.drafter.passes(slot.tree, 1)] == [512] * 3
    assert speedup(1000, 1) < 1 and speedup(1000, 64) < 1
    assert speedup(32000, 64) > 1.2 > speedup(32000, 1)
    assert speedup(32000, 64) > speedup(32000, 16) > speedup(32000, 1)


def test_medusa_heads_cost_k_lm_heads_and_resblocks():
    """K heads of one ResBlock each: K hidden x hidden linears and K hidden x vocab lm-heads (split over tp) a token."""
    from simulator.model.layout import pass_layout
    from simulator.model.heads import hydra_card, medusa_card

    target = resolve("scenarios/pcie8_medusa.yaml", {}).model
    d, vocab, tp = target.hidden_size, target.vocab_size, 8
    kernels = {k.name: k for k in pass_layout(medusa_card(target, 4, 1), tp, PassShape(1, 2)).segments[0].kernels}
    assert kernels["head_lm_heads"].flops == pytest.approx(2 * 2 * d * 4 * vocab / tp)
    assert kernels["head_resblocks"].flops == pytest.approx(2 * 2 * d * 4 * d)
    # Hydra's third head reads the hidden state and 3 token embeddings: a (4 d) x d linear and its residual projection
    hydra = {k.name: k for k in pass_layout(hydra_card(target, 3, 1), tp, PassShape(1, 2)).segments[0].kernels}
    assert hydra["head_resblocks"].flops == pytest.approx(2 * 2 * (2 * 4 * d) * d)


class _View:
    """A batch of `batch` requests whose step costs 1000 us of weights plus 10 us a verified token."""

    def __init__(self, batch):
        self.batch, self.context_tokens = batch, 0

    def expected_step_us(self, decision, batch, context):
        tokens = decision.tree.size if decision is not None else 1
        return 1000.0 + 10.0 * batch * tokens


@pytest.mark.parametrize("batch, bound, chosen", [(1, None, 7), (32, None, 3), (32, 64, 1), (128, 64, 0)])
def test_dynamic_length_picks_by_batch_within_the_captured_graphs(batch, bound, chosen):
    """Tokens a step 1 + 0.8 + ... + 0.8^k (the prior, weighted so it does not move) over its cost, by hand: at batch
    1 the longest tier wins (4.16 / 1080 us); at 32, 3 drafts (2.95 / 2280 beats 3.69 / 2920); a 64-token graph
    leaves 1 draft at batch 32 (2 x 32 tokens) and nothing but plain decode at 128."""
    from simulator.config.policy import DynamicLengthPolicy
    from simulator.speculation.policies import build_policy

    config = DynamicLengthPolicy(kind="dynamic_length", choices=[0, 1, 3, 5, 7], prior_acceptance=0.8,
                                 prior_weight=1e9, max_graph_tokens=bound)
    policy = build_policy(config, Tree.chain(3), Tree.chain)
    decision = policy.decide(_View(batch))
    assert (decision.tree.num_drafts if decision is not None else 0) == chosen
