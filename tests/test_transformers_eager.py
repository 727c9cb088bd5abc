"""The transformers profile's eager host model: at batch 1 a plain decode step is host-bound, every counted PyTorch
call costing the fitted eager_launch_us; the engine's `script` flag picks whose step code is costed."""
import os

import yaml

import simulator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = os.path.join(ROOT, "scenarios", "validation", "cases", "a100_vicuna7b_specbench.yaml")
PROFILE = os.path.join(ROOT, "engines", "transformers", "4.37.1.yaml")


def test_a_plain_decode_step_is_the_counted_calls_times_the_fitted_call_time():
    profile = yaml.safe_load(open(PROFILE))
    k = profile["eager_kernels"]["value"]["decoder"]
    calls = 32 * (k["attention"] + k["dense_mlp"]) + k["per_pass"]  # Llama-2-7B's 32 layers
    host_ms = calls * profile["eager_launch_us"]["value"] / 1e3
    result = simulator.run(CASE, speculation__method="none", workload__output_tokens=16).to_dict()
    decode = result["step_ms"]["baseline_decode"]["mean"]
    # host-bound: the GPU's ~8 ms of weight reads hide under the launches; the end-of-step sync and launch jitter
    # are the rest (a few per cent)
    assert host_ms <= decode <= 1.05 * host_ms


def test_the_script_flag_selects_the_methods_own_step_code():
    spec_eagle = simulator.load_scenario(CASE, [("engine.script", "inference_eagle")]).spec.runtime
    spec_eagle2 = simulator.load_scenario(CASE, [("engine.script", "inference_eagle2")]).spec.runtime
    profile = yaml.safe_load(open(PROFILE))["speculative_host"]
    assert spec_eagle.speculative_host.eager_ops == profile["inference_eagle"]["eager_ops"]["value"]
    assert (spec_eagle2.speculative_host.eager_ops_per_draft_token
            == profile["inference_eagle2"]["eager_ops_per_draft_token"]["value"])



def _launches(card, shape):
    from simulator.model.layout import pass_layout

    layout = pass_layout(card, 1, shape)
    return sum(layout.segments[i].num_kernels for i in layout.order)


def test_a_chain_verify_through_transformers_copies_the_query_once_a_layer():
    """transformers 4.37.1 LlamaSdpaAttention: a pass of more than one query token over the KV cache keeps a 4D mask
    (modeling_attn_mask_utils.py _prepare_4d_causal_attention_mask_for_sdpa), and with a mask the attention makes the
    query contiguous, a copy after apply_rotary_pos_emb, and the output's transpose().contiguous() copies at more than
    one token: two launches more a layer in a chain verify (PLD's, SpS's; tools/specbench_calls.py), none in a decode
    step (mask None at one token) and none beyond tree_attention in a tree verify (Spec-Bench's own
    modeling_llama_kv.py, matmul attention)."""
    from simulator.model.cost import PassShape
    from simulator.timing.machine import Machine

    card = Machine(simulator.load_scenario(CASE)).cards["target"]  # Llama-2-7B: 32 layers
    decode = _launches(card, PassShape(1, 1, 400))
    chain = _launches(card, PassShape(11, 1, 400, False, True))
    tree = _launches(card, PassShape(61, 1, 400, True, True))
    assert chain - decode == 32 * 2  # the query's and the output's contiguous() in each of the 32 layers
    assert tree - decode == 32 * 9  # tree_attention alone: eager attention (+5) and KVCache.cat (+4) a layer
    # the decode step: the layout's embedding launch, 32 x (28 + 14) in the layers and 31 a pass (4.37.1
    # greedy_search's loop 14, the `== 0` its `if unfinished_sequences.max() == 0` launches included)
    assert decode == 1 + 32 * (28 + 14) + 31


def test_the_sps_loop_counts_the_assistants_two_token_forward():
    """Spec-Bench's SpS (transformers 4.37.1 assisted generation): each round the assistant's first forward takes two
    tokens (get_candidates crops its cache to new_cur_len - 2), so it builds the 4D mask (to_4d: 14 launches) and
    copies the query and the output's transpose in each of Vicuna-68M's 2 layers (4), and reads the mask back
    (_unmask_unattended's attention_mask.cpu()), as the target's chain verify does once more."""
    runtime = simulator.load_scenario(CASE, [("speculation.method", "draft_model"), (
        "speculation.draft_model", {"model": "../../models/vicuna_68m.yaml"})]).spec.runtime
    loop = 3 + 3 + 5 + 2 + 6 + 1 + 2 + 5  # the loop's own ops (get_candidates, setup, eos, mask, accept, ...)
    # generate()'s right-padding check on the assistant's input each round (eq, sum, gt, and the `if` that reads it)
    assert runtime.speculative_host.eager_ops == loop + 14 + 4 + 3
    # the loop's reads 6, two _unmask_unattended reads, the padding check's, greedy_search's eos tensor copied in,
    # the 4D-mask check's `if torch.all(attention_mask == 1)` in the verify and the assistant's first forward (2), less
    # the end-of-step sync host.sync_us charges (tools/specbench_syncs.py: 12 a round of one draft)
    assert runtime.speculative_host.syncs == 6 + 2 + 1 + 1 + 2 - 1
    # each further draft: one more assistant forward's mask check and greedy_search step's eos `if`
    assert runtime.speculative_host.syncs_per_draft_step == 2


# Spec-Bench (commit fd2c1cd) model/eagle/choices.py: mc_sim_7b_63, the default tree of evaluation/inference_eagle.py
EAGLE1_TREE = [[0], [1], [2], [3], [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0], [2, 1], [3, 0], [0, 0, 0],
               [0, 0, 1], [0, 0, 2], [0, 1, 0], [0, 1, 1], [0, 2, 0], [0, 2, 1], [1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 1],
               [0, 0, 0, 2], [0, 0, 0, 0, 0], [0, 0, 0, 0, 1]]


def _validation_case(name_start):
    path = os.path.join(ROOT, "scenarios", "validation", "spec_bench_a100.yaml")
    return next(c for c in yaml.safe_load(open(path))["cases"] if c["name"].startswith(name_start))


def test_the_eagle_cases_verify_spec_benchs_own_tree_of_25():
    """The EAGLE rows' tree is the source's choices list in generate_tree_buffers' order (by length, then value), as
    parents (root -1); its 25 drafts in 5 levels."""
    ordered = sorted(EAGLE1_TREE, key=lambda path: (len(path), path))
    index = {tuple(path): i + 1 for i, path in enumerate(ordered)}
    parents = [-1] + [index.get(tuple(path[:-1]), 0) for path in ordered]
    for size in ("7B", "13B", "33B"):
        case = _validation_case(f"Vicuna-{size} EAGLE (")
        assert case["set"]["speculation.tree"] == {"kind": "parents", "parents": parents}
        assert case["set"]["speculation.draft_tokens"] == len(EAGLE1_TREE) == 25
    assert max(len(path) for path in EAGLE1_TREE) == 5


def test_the_eagle_loop_repeats_the_hidden_state_once_a_parent_a_level():
    """model/eagle/cnets.py topK_genrate's repeat_hidden: one repeat per entry of repeat_nums, which
    generate_tree_buffers fills with one entry per distinct parent among each level's nodes with children; the
    loop's other ops (40), the last topk and two cats (3) and the end-of-turn eos walk's bonus-token share (1) beside
    them."""
    with_children = {tuple(path[:-1]) for path in EAGLE1_TREE if len(path) > 1}
    levels = {}
    for node in with_children:
        levels.setdefault(len(node), set()).add(node[:-1])
    repeats = sum(len(parents) for parents in levels.values())
    assert sorted((depth, len(parents)) for depth, parents in levels.items()) == [(1, 1), (2, 2), (3, 1), (4, 1)]
    profile = yaml.safe_load(open(PROFILE))["speculative_host"]
    assert profile["inference_eagle"]["eager_ops"]["value"] == 40 + 3 + repeats + 1 == 49


def test_hydra_expands_only_the_nodes_whose_children_have_children():
    """model/hydra/hydra_heads/mlp_head.py _grounded_proposal on the mc_sim_7b_63 tree of the Hydra case: a topk and a
    cat for every node with children, embed, list index and cat only where children_to_expand > 0 (a child with
    children of its own), one cat a head that expanded any."""
    case = yaml.safe_load(open(os.path.join(ROOT, "scenarios", "validation", "spec_bench_a100_methods.yaml")))
    parents = next(c for c in case["cases"] if "Hydra" in c["name"])["set"]["speculation.tree"]["parents"]
    has_children = set(parents[1:])
    expand = {p for node, p in enumerate(parents) if p >= 0 and node in has_children}
    depth = [0] * len(parents)
    for node in range(1, len(parents)):
        depth[node] = depth[parents[node]] + 1
    heads_that_expand = {depth[node] for node in expand}
    assert (len(has_children), len(expand), len(heads_that_expand)) == (22, 5, 3)
    proposal = 4 + 6 * 4 + 2 * len(has_children) + 3 * len(expand) + len(heads_that_expand)
    profile = yaml.safe_load(open(PROFILE))["speculative_host"]
    assert profile["hydra"]["eager_ops"]["value"] == proposal - 40 + 3 + 8 + 14 + 2 == 77
