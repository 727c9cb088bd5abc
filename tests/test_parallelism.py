"""Parallelism beyond one TP group: every check of the split is one line (file, key path, problem, allowed) and exit
2; ranks are placed on GPUs with their groups; the weights per GPU follow the split."""
from __future__ import annotations

import dataclasses
import os

import pytest
import yaml

from conftest import ROOT, scenario_path
from simulator.cli import main
from simulator.config import build, load_scenario
from simulator.config.errors import ConfigError
from simulator.timing.machine import Machine, memory_budget
from simulator.timing.placement import check_memory, place, stage_layers, weight_bytes_per_gpu
from simulator.model.cards import attention_params, bytes_per_param
from simulator.model.cards import weight_bytes_per_gpu as weight_bytes_per_gpu_of
from simulator.model.draft_cards import draft_head_card

EAGLE3 = scenario_path("pcie8_eagle3.yaml")  # Kimi-K2.5 on the 8-GPU PCIe machine
LLAMA = scenario_path("nvlink8_h100_llama8b_eagle3.yaml")


def scenario(base: str, parallelism: dict, card: str | None = None, **model_changes):
    """The base scenario with `parallelism` replaced, optionally another model card (speculation off), and model-card
    fields changed (dotted keys spelled with __)."""
    with open(base) as handle:
        raw = yaml.safe_load(handle)
    raw["parallelism"] = parallelism
    if card is not None:
        raw["model"] = os.path.join(ROOT, "scenarios", "models", card)
        raw["speculation"] = {"method": "none"}
    sets = [(f"model.{key.replace('__', '.')}", value) for key, value in model_changes.items()]
    return build(raw, base, os.path.dirname(base), sets)


def llama70b(parallelism: dict, **changes):
    return scenario(LLAMA, parallelism, "llama_3_1_70b.yaml", **changes)


def refused(make, *fragments):
    with pytest.raises(ConfigError) as caught:
        make()
    line = str(caught.value)
    assert "\n" not in line
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


# --- every check, one line each ----------------------------------------------------------------------------------

def test_dp_attention_groups_must_divide_tp():
    refused(lambda: scenario(EAGLE3, {"tp": 8, "dp": 3, "dp_attention": True}),
            "parallelism.dp", "dp must divide tp", "allowed: 1, 2, 4, 8")


def test_ep_must_divide_tp():
    refused(lambda: scenario(EAGLE3, {"tp": 8, "ep": 3}), "parallelism.ep", "must divide the tp=8", "allowed: 1, 2, 4, 8")


def test_product_of_degrees_against_gpus():
    refused(lambda: scenario(EAGLE3, {"tp": 8, "dp": 2}), "parallelism", "tp=8 x dp=2 = 16 GPUs", "the 8 of",
            "allowed: at most 8")
    refused(lambda: scenario(EAGLE3, {"tp": 4, "pp": 4}), "tp=4 x pp=4 = 16 GPUs")
    # DP-attention groups live inside the tp ranks: no extra GPUs
    assert scenario(EAGLE3, {"tp": 8, "dp": 8, "dp_attention": True, "ep": 8}).spec.parallelism.num_gpus == 8


def test_tp_alone_keeps_its_messages():
    refused(lambda: scenario(EAGLE3, {"tp": 3}), "parallelism.tp", "does not divide the 8 GPUs", "allowed: 1, 2, 4, 8")
    refused(lambda: scenario(EAGLE3, {"tp": 8}, attention__num_heads=12), "parallelism.tp", "12 attention heads")


def test_heads_of_a_dp_attention_group():
    """tp 8 over dp 2 groups: attention splits 4 ways, and 6 heads do not split 4 ways."""
    line = refused(lambda: llama70b({"tp": 8, "dp": 2, "dp_attention": True}, attention__num_heads=6,
                                    attention__num_kv_heads=6),
                   "parallelism.dp", "tp / dp = 4 does not divide the 6 attention heads")
    assert "allowed: 1, 2, 3, 6" in line


def test_kv_heads_neither_divisor_nor_multiple():
    refused(lambda: llama70b({"tp": 2}, attention__num_heads=24, attention__num_kv_heads=3),
            "parallelism.tp", "3 KV heads", "neither divides the other")


def test_experts_divisible_and_present():
    refused(lambda: llama70b({"tp": 8, "ep": 2}), "parallelism.ep", "has no experts", "allowed: 1")
    refused(lambda: scenario(EAGLE3, {"tp": 8, "ep": 8}, moe__num_experts=12), "parallelism.ep",
            "ep=8 does not divide the 12 experts")


def test_pipeline_stages_need_layers():
    refused(lambda: scenario(EAGLE3, {"tp": 2, "pp": 4}, num_layers=2), "parallelism.pp", "pp=4 stages for the 2 layers",
            "at most 2")


def test_explicit_placement_is_checked():
    base = {"tp": 4, "dp": 2}
    refused(lambda: llama70b({**base, "gpus": [["gpu0", "gpu1", "gpu2", "gpu3"]]}), "parallelism.gpus",
            "1 instances listed", "2 lists of 4")
    refused(lambda: llama70b({**base, "gpus": [["gpu0", "gpu1", "gpu2"], ["gpu4", "gpu5", "gpu6", "gpu7"]]}),
            "parallelism.gpus[0]", "3 GPUs for the tp x pp = 4 ranks")
    refused(lambda: llama70b({**base, "gpus": [["gpu0", "gpu1", "gpu2", "gpu9"], ["gpu4", "gpu5", "gpu6", "gpu7"]]}),
            "parallelism.gpus[0][3]", "'gpu9' is not a GPU", "allowed: gpu0")
    refused(lambda: llama70b({**base, "gpus": [["gpu0", "gpu1", "gpu2", "gpu3"], ["gpu3", "gpu5", "gpu6", "gpu7"]]}),
            "parallelism.gpus[1][0]", "'gpu3' is placed twice")


def test_memory_per_gpu_under_the_split():
    """Kimi-K2.5's INT4 experts need all 8 of these 96 GB GPUs: 2 x TP4 does not fit, nor TP2 x PP2 (its heavier
    second stage named); DP-attention + EP8 over the same 8 ranks does in 4 attention groups, not in 8 (every rank
    then holds the whole attention and embedding: 88.3 GB)."""
    refused(lambda: check_memory(scenario(EAGLE3, {"tp": 4, "dp": 2})), "parallelism", "does not fit",
            "GB of weights per GPU at tp=4, dp=2", "allowed: a larger tp or pp")
    refused(lambda: check_memory(scenario(EAGLE3, {"tp": 2, "pp": 2})), "on pipeline stage 1 at tp=2, pp=2")
    check_memory(scenario(EAGLE3, {"tp": 8, "dp": 4, "dp_attention": True, "ep": 8}))
    refused(lambda: check_memory(scenario(EAGLE3, {"tp": 8, "dp": 8, "dp_attention": True, "ep": 8})),
            "88.3 GB of weights per GPU at tp=8, dp=8, ep=8 with dp_attention")


def test_a_valid_wider_split_is_refused_by_the_engine_not_simulated_as_one_group(capsys):
    """A valid split the engine does not cost (pipeline stages with expert parallelism) exits 2 with one line instead
    of simulating something else (dp replicas run: tests/test_deployment.py; ep < tp: tests/test_ep_tp.py)."""
    code = main([EAGLE3, "--set", "parallelism.tp=4", "--set", "parallelism.pp=2", "--set", "parallelism.ep=4"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().count("\n") == 0 and "parallelism.pp: pp=2 with ep=4 = tp (an all-to-all) is not simulated" in err


# --- placement ---------------------------------------------------------------------------------------------------

def test_two_replicas_of_tp4_take_the_gpus_in_order():
    placement = place(llama70b({"tp": 4, "dp": 2}))
    groups = [[r.gpu for r in g] for g in placement.tp_groups()]
    assert groups == [["gpu0", "gpu1", "gpu2", "gpu3"], ["gpu4", "gpu5", "gpu6", "gpu7"]]
    assert [r.instance for r in placement.ranks] == [0] * 4 + [1] * 4
    assert placement.pipeline_pairs() == [] and placement.machines() == ["node0"]


def test_dp_attention_and_expert_groups():
    placement = place(scenario(EAGLE3, {"tp": 8, "dp": 4, "dp_attention": True, "ep": 2}))
    assert len(placement.tp_groups()) == 1
    assert [[r.index for r in g] for g in placement.attention_groups()] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert [r.expert_shard for r in placement.ranks] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_pipeline_stages_and_explicit_gpus():
    gpus = [["gpu7", "gpu6", "gpu5", "gpu4", "gpu0", "gpu1", "gpu2", "gpu3"]]
    placement = place(llama70b({"tp": 4, "pp": 2, "gpus": gpus}))
    assert [(a.gpu, b.gpu) for a, b in placement.pipeline_pairs()] == \
        [("gpu7", "gpu0"), ("gpu6", "gpu1"), ("gpu5", "gpu2"), ("gpu4", "gpu3")]
    assert [r.stage for r in placement.ranks] == [0] * 4 + [1] * 4


def test_stage_layers_as_sglang_splits_them():
    """Equal shares, the last `layers % pp` stages one more (sglang/srt/distributed/utils.py get_pp_indices)."""
    assert [len(s) for s in stage_layers(61, 4)] == [15, 15, 15, 16]
    assert [len(s) for s in stage_layers(80, 3)] == [26, 27, 27]
    assert [list(s) for s in stage_layers(5, 2)] == [[0, 1], [2, 3, 4]]


# --- weights per GPU ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [EAGLE3, LLAMA, scenario_path("nvlink8_h200_eagle3.yaml")])
def test_tp_alone_weighs_what_the_engine_budgets(path):
    loaded = load_scenario(path)
    machine = Machine(loaded)
    (per_gpu,) = weight_bytes_per_gpu(loaded)
    assert per_gpu == pytest.approx(memory_budget(loaded, machine.cards, machine.tp)["weights_GB"] * 1e9, rel=1e-12)


DSV3_MTP = os.path.join(ROOT, "scenarios", "validation", "cases", "h200_deepseek_v3_mtp_tp8.yaml")


# an MTP module's eh_proj, replicated (SGLang's nn.Linear): 2 x hidden rows x hidden columns, bf16, held by every rank
EH_PROJ_REPLICATED = 2 * 7168 * 7168 * 2


def _one_more_layer(card):
    """What one more MoE decoder layer of the target's kind adds per GPU: the MTP module's weights when they share
    the target's embedding and lm_head (and dtypes)."""
    return card.model_copy(update={"num_layers": card.num_layers + 1, "mtp_layers": 0})


def test_mtp_module_weighs_one_decoder_layer_under_tp():
    """TP8: the MTP module adds one decoder layer's weights and its eh_proj, replicated (SGLang), and no second
    embedding or lm_head (model.cost.mtp_card)."""
    from simulator.model.draft_cards import mtp_card

    loaded = load_scenario(DSV3_MTP)
    card, tp = loaded.model, 8
    assert card.mtp_layers == 1 and card.weights.mtp is None
    with_mtp = memory_budget(loaded, {"target": card, "mtp": mtp_card(card)}, tp)["weights_GB"]
    alone = memory_budget(loaded, {"target": card}, tp)["weights_GB"]
    longer = memory_budget(loaded, {"target": _one_more_layer(card)}, tp)["weights_GB"]
    assert (with_mtp - alone) * 1e9 == pytest.approx((longer - alone) * 1e9 + EH_PROJ_REPLICATED, rel=1e-12)


def test_mtp_module_weighs_one_decoder_layer_under_dp_attention():
    """DP-attention with EP8: the same, on the split path (placement.weight_bytes_per_gpu); eh_proj replicated."""
    loaded = load_scenario(scenario_path("h200_dsv3_dpattn_ep8.yaml"))
    card = loaded.model
    assert card.mtp_layers == 1 and loaded.spec.parallelism.dp_attention
    drop = lambda c: dataclasses.replace(loaded, model=c)  # noqa: E731
    (with_mtp,) = weight_bytes_per_gpu(loaded)
    (alone,) = weight_bytes_per_gpu(drop(card.model_copy(update={"mtp_layers": 0})))
    (longer,) = weight_bytes_per_gpu(drop(_one_more_layer(card)))
    assert with_mtp - alone == pytest.approx(longer - alone + EH_PROJ_REPLICATED, rel=1e-12)

def _dsv3_tp8(speculation: dict, policy: dict | None = None):
    """The DeepSeek-V3 MTP case (TP8) with another speculation config (and policy)."""
    with open(DSV3_MTP) as handle:
        raw = yaml.safe_load(handle)
    raw["speculation"], raw["policy"] = speculation, policy or {"kind": "static"}
    return build(raw, DSV3_MTP, os.path.dirname(DSV3_MTP), [])


CHAIN = {"draft_tokens": 1, "verify": "chain", "acceptance": {"kind": "iid", "alpha": 0.8}}
MLA_LAYER = (512 + 64) * 2  # a token's latent KV a layer, bf16 (kv_lora_rank + qk_rope_head_dim), whole on each rank
EAGLE_HEAD_TP8 = 2 * (8 // 8) * 128 * 2  # the EAGLE-3 head's K and V: 8 kv heads of 128 over tp 8, bf16


@pytest.mark.parametrize("speculation, policy, kv_per_token, parts", [
    ({"method": "mtp", **CHAIN}, None, 62 * MLA_LAYER, {"mtp"}),
    ({"method": "eagle3", **CHAIN}, None, 61 * MLA_LAYER + EAGLE_HEAD_TP8, {"draft_head"}),
    ({"method": "none"}, None, 61 * MLA_LAYER, set()),
    ({"method": "ngram", "draft_tokens": 1}, None, 61 * MLA_LAYER, set()),
    ({"method": "ngram", "draft_tokens": 1},
     {"kind": "multi_drafter", "fallback": {"method": "mtp", "acceptance": {"kind": "iid", "alpha": 0.8}}},
     62 * MLA_LAYER, {"mtp"}),
    ({"method": "mtp", **CHAIN}, {"kind": "hybrid"}, 62 * MLA_LAYER, {"mtp"}),
])
def test_budget_holds_the_draft_parts_of_the_method_that_runs(speculation, policy, kv_per_token, parts):
    """DeepSeek-V3 (an EAGLE-3 head and an MTP module on its card) at TP8: the budget holds the drafters the scenario
    runs and no other's weights or KV: mtp one more MoE layer (59dad49's hand count) and its eh_proj, eagle3 its head,
    n-gram none."""
    loaded = _dsv3_tp8(speculation, policy)
    card, tp = loaded.model, 8
    assert card.draft_head is not None and card.mtp_layers == 1
    memory = Machine(loaded).memory
    assert memory["kv_bytes_per_token"] == kv_per_token
    target = memory_budget(loaded, {"target": card}, tp)["weights_GB"] * 1e9
    extra = {"mtp": memory_budget(loaded, {"target": _one_more_layer(card)}, tp)["weights_GB"] * 1e9 - target
             + EH_PROJ_REPLICATED,
             "draft_head": weight_bytes_per_gpu_of(draft_head_card(card), tp)}
    assert memory["weights_GB"] * 1e9 == pytest.approx(target + sum(extra[p] for p in parts), rel=1e-12)
    (split_path,) = weight_bytes_per_gpu(loaded)  # placement's count (the split path's) holds the same parts
    assert split_path == pytest.approx(memory["weights_GB"] * 1e9, rel=1e-12)


def test_pipeline_stages_share_the_weights():
    """The stages of a pipeline hold the whole model between them (no draft parts here)."""
    whole = weight_bytes_per_gpu(llama70b({"tp": 4}))
    stages = weight_bytes_per_gpu(llama70b({"tp": 4, "pp": 2}))
    assert sum(stages) == pytest.approx(whole[0], rel=1e-12)


def test_dp_attention_replicates_attention_across_groups():
    """With dp attention groups, each rank holds 1/(tp/dp) of the attention instead of 1/tp (the target's layers and
    its EAGLE head's) and the whole embedding instead of 1/tp of it (SGLang replicates it under DP-attention);
    nothing else moves."""
    plain, grouped = (scenario(EAGLE3, {"tp": 8, "dp": dp, "dp_attention": dp > 1, "ep": 8}) for dp in (1, 4))
    extra = 0.0
    for card in (plain.model, draft_head_card(plain.model)):
        extra += card.num_layers * (attention_params(card, 2)[1] - attention_params(card, 8)[1]) * \
            bytes_per_param(card, card.weights.attention)
        extra += card.vocab_size * card.hidden_size * (1 - 1 / 8) * bytes_per_param(card, card.weights.embedding)
    assert weight_bytes_per_gpu(grouped)[0] - weight_bytes_per_gpu(plain)[0] == pytest.approx(extra, rel=1e-9)


@pytest.mark.parametrize("sets, fragment", [
    (["parallelism.tp=8", "parallelism.dp=2"], "parallelism: tp=8 x dp=2 = 16 GPUs"),
    (["parallelism.dp=3", "parallelism.dp_attention=true"], "parallelism.dp: dp_attention splits"),
    (["parallelism.ep=3"], "parallelism.ep: ep=3"),
    (["parallelism.tp=4", "parallelism.dp=2"], "parallelism: Kimi-K2.5 does not fit"),
    (["parallelism.gpus=[[gpu0]]"], "parallelism.gpus[0]: 1 GPUs for the tp x pp = 8 ranks"),
])
def test_every_split_mistake_is_one_line_and_exit_2_from_the_command_line(capsys, sets, fragment):
    argv = [EAGLE3]
    for item in sets:
        argv += ["--set", item]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and err.strip().count("\n") == 0 and "Traceback" not in err
    assert fragment in err, err
