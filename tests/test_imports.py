"""Bring your own world: config.json -> model card, nvidia-smi -> topology (simulator/importers, `specsim import`).

The shipped config.json files are the models' published configurations (docs/sources.md, "Imported models"); the
hand-written cards and topologies were written before the importers, so an import that equals them is checked
against independent work. Figures asserted literally are read off the published configs, not computed by the code.
"""
from __future__ import annotations

import json
import os

import pytest

from conftest import ROOT, SCENARIOS, TOPOLOGIES
from simulator.cli import main
from simulator.config.base import validate
from simulator.config.loader import read_yaml
from simulator.config.model_card import ModelCard
from simulator.config.topology import Topology
from simulator.hardware.interconnect import Fabric
from simulator.importers.hf_model import card_from_file

HF = os.path.join(SCENARIOS, "models", "hf")
SMI = os.path.join(TOPOLOGIES, "nvidia_smi")
SHORT = ["--set", "workload.requests=1", "--set", "workload.output_tokens=32", "-q"]


def imported(folder: str, name: str | None = None) -> ModelCard:
    return ModelCard.model_validate(card_from_file(os.path.join(HF, folder, "config.json"), name=name)[0])


def shipped(card: str) -> ModelCard:
    return ModelCard.model_validate(read_yaml(os.path.join(SCENARIOS, "models", f"{card}.yaml")))


def cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


# -- models ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("card", ["llama_3_1_8b", "llama_3_1_70b", "kimi_k2_5", "deepseek_v3"])
def test_an_import_equals_the_hand_written_card_but_for_the_draft_head(card):
    """The draft head is another model's config (below); everything else, kernel counts included, is equal (the
    name is an input: config.json has none)."""
    hand = shipped(card)
    assert imported(card, name=hand.name) == hand.model_copy(update={"draft_head": None})


def test_deepseek_v3_with_its_eagle3_head_config_is_the_shipped_card(tmp_path, capsys):
    out = tmp_path / "dsv3.yaml"
    code, _, err = cli(capsys, "import", "model", os.path.join(HF, "deepseek_v3", "config.json"), "--name", "DeepSeek-V3",
                       "--draft-head",
                       os.path.join(HF, "deepseek_v3_eagle3", "config.json"), "-o", str(out))
    assert code == 0, err
    text = out.read_text()
    assert "# first_k_dense_replace" in text and "# num_nextn_predict_layers" in text  # every value says its source
    assert ModelCard.model_validate(read_yaml(str(out))) == shipped("deepseek_v3")


def test_models_without_a_hand_written_card_read_as_published():
    """Figures from the published configs; kernel counts from SGLang's ops (Qwen3 adds q_norm and k_norm)."""
    qwen = imported("qwen3_32b")
    assert (qwen.num_layers, qwen.hidden_size, qwen.vocab_size, qwen.dense_intermediate_size) == (64, 5120, 151936, 25600)
    assert (qwen.attention.num_heads, qwen.attention.num_kv_heads, qwen.attention.head_dim) == (64, 8, 128)
    assert (qwen.kernels.attention, qwen.kernels.dense_mlp, qwen.moe) == (7 + 2, 4, None)
    mixtral = imported("mixtral_8x7b")
    assert (mixtral.num_dense_layers, mixtral.moe.num_experts, mixtral.moe.experts_per_token) == (0, 8, 2)
    assert (mixtral.moe.intermediate_size, mixtral.moe.num_shared_experts, mixtral.kernels.moe) == (14336, 0, 11)
    moe = imported("qwen3_30b_a3b")
    assert (moe.moe.num_experts, moe.moe.experts_per_token, moe.moe.intermediate_size) == (128, 8, 768)
    assert moe.attention.head_dim == 128 and moe.kernels.attention == 9  # head_dim given, not hidden / heads (64)
    kimi = imported("kimi_k2_instruct")  # fp8 blocks like DeepSeek-V3: its kernel counts, 384 experts, 64 heads
    assert (kimi.moe.num_experts, kimi.attention.num_heads, kimi.kernels.attention, kimi.kernels.moe) == (384, 64, 20, 19)


def test_quantisation_formats_map_per_weight_family():
    oss = imported("gpt_oss_120b")  # mxfp4 experts; attention and router kept by modules_to_not_convert
    assert (oss.weights.experts, oss.weights.attention, oss.weights.router, oss.weights.lm_head) == \
        ("fp4", "bf16", "bf16", "bf16")
    assert (oss.weights.quant_group_size, oss.moe.num_experts, oss.moe.experts_per_token) == (32, 128, 4)
    fp8 = imported("llama_3_1_70b_instruct_fp8")  # ModelOpt hf_quant_config.json beside config.json
    assert (fp8.weights.attention, fp8.weights.dense_mlp, fp8.weights.lm_head, fp8.kv_cache_dtype) == \
        ("fp8", "fp8", "bf16", "fp8")
    assert (fp8.kernels.attention, fp8.kernels.dense_mlp) == (7 + 2, 4 + 2)  # an activation quant before each GEMM


@pytest.mark.parametrize("exclude, mtp", [(["lm_head", "model.layers.61*"], "bf16"), (["lm_head"], None),
                                          (["lm_head", "model.layers.61.self_attn*"], None)])
def test_an_nvfp4_checkpoint_that_keeps_its_mtp_layer_unquantised_reads_as_bf16_mtp(tmp_path, exclude, mtp):
    """DeepSeek-V3's config with a ModelOpt NVFP4 hf_quant_config.json beside it: the MTP module is layer 61
    (num_hidden_layers); an exclude entry covering that whole layer keeps its weights in the checkpoint's bf16
    (weights.mtp), one covering part of it or none leaves the module the target's NVFP4."""
    with open(os.path.join(HF, "deepseek_v3", "config.json")) as handle:
        config = json.load(handle)
    config.pop("quantization_config")
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(
        {"quantization": {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": exclude}}))
    card = ModelCard.model_validate(card_from_file(str(tmp_path / "config.json"))[0])
    assert (card.weights.experts, card.weights.attention, card.weights.quant_group_size) == ("fp4", "fp4", 16)
    assert card.mtp_layers == 1 and card.weights.mtp == mtp


@pytest.mark.parametrize("n_group, topk_group, method, expected", [
    (8, 4, "noaux_tc", (8, 4, "top2_sum")), (8, 3, "group_limited_greedy", (8, 3, "max")), (1, 1, "noaux_tc", (1, 1, "top2_sum"))])
def test_the_routers_groups_are_read_from_config_json(tmp_path, n_group, topk_group, method, expected):
    """n_group, topk_group and topk_method become the card's routing groups (DeepSeek-V3: 8, 4, noaux_tc; V2's
    group_limited_greedy ranks a group by its best score); a config without groups routes over every expert."""
    with open(os.path.join(HF, "deepseek_v3", "config.json")) as handle:
        config = json.load(handle)
    config.update(n_group=n_group, topk_group=topk_group, topk_method=method)
    (tmp_path / "config.json").write_text(json.dumps(config))
    moe = ModelCard.model_validate(card_from_file(str(tmp_path / "config.json"))[0]).moe
    assert (moe.num_expert_groups, moe.groups_per_token, moe.group_score) == expected


@pytest.mark.parametrize("groups, chosen", [(7, 4), (8, 9), (256, 1)])
def test_routing_groups_that_cannot_hold_the_top_k_are_one_line(tmp_path, capsys, groups, chosen):
    with open(os.path.join(HF, "deepseek_v3", "config.json")) as handle:
        config = json.load(handle)
    config.update(n_group=groups, topk_group=chosen)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code, out, err = cli(capsys, "import", "model", str(path))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "groups_per_token" in err, err


@pytest.mark.parametrize("config, field", [
    ({"model_type": "falcon"}, "model_type"),
    ({"model_type": "qwen3_moe", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
      "vocab_size": 100, "intermediate_size": 64, "num_experts": 4, "num_experts_per_tok": 2,
      "moe_intermediate_size": 32, "decoder_sparse_step": 2}, "decoder_sparse_step"),
    ({"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 64, "vocab_size": 100}, "num_attention_heads"),
    ({"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100,
      "intermediate_size": 64, "quantization_config": {"quant_method": "bitsandbytes"}}, "quantization_config.quant_method"),
])
def test_what_cannot_be_mapped_is_one_line_naming_the_field(tmp_path, capsys, config, field):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code, out, err = cli(capsys, "import", "model", str(path))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert f"{path}: {field}:" in err or f"{path} (text_config): {field}:" in err


@pytest.mark.parametrize("name", ["nvlink8_h100_qwen3_32b", "nvlink8_h100_mixtral_8x7b", "pcie4_l40s_qwen3_32b"])
def test_scenarios_whose_model_is_a_config_json_run(capsys, name):
    code, out, err = cli(capsys, "run", os.path.join(SCENARIOS, "imports", f"{name}.yaml"), "--format", "json", *SHORT)
    assert code == 0, err
    assert json.loads(out)["throughput_tok_s"] > 0


def test_deepseek_v3_from_config_json_runs_as_the_shipped_card(capsys):
    """Same seed, same scenario, the model from config.json or the hand-written card: the figures agree within 2%."""
    path = os.path.join(SCENARIOS, "imports", "nvlink8_h200_deepseek_v3_mtp.yaml")
    figures = []
    for extra in ([], ["--set", f"model={os.path.join(SCENARIOS, 'models', 'deepseek_v3.yaml')}"]):
        code, out, err = cli(capsys, "run", path, "--format", "json", "--no-baseline", *SHORT, *extra)
        assert code == 0, err
        result = json.loads(out)
        figures.append((result["throughput_tok_s"], result["step_ms"]["verify"]["mean"]))
    (a_tok, a_verify), (b_tok, b_verify) = figures
    assert abs(a_tok - b_tok) <= 0.02 * b_tok and abs(a_verify - b_verify) <= 0.02 * b_verify


# -- machines ----------------------------------------------------------------------------------------------------
def routes(topology: Topology) -> dict:
    fabric = Fabric(topology)
    n = topology.num_gpus
    return {(i, j): ([fabric.names[k] for k in fabric.route(fabric.gpus[i], fabric.gpus[j])], fabric.hop(i, j).p2p,
                     fabric.hop(i, j).path_class) for i in range(n) for j in range(n) if i != j}


def import_topology(capsys, tmp_path, matrix: str, *extra) -> Topology:
    out = tmp_path / "box.yaml"
    code, _, err = cli(capsys, "import", "topology", os.path.join(SMI, matrix), *extra, "-o", str(out))
    assert code == 0, err
    return validate(Topology, read_yaml(str(out)), str(out))


@pytest.mark.parametrize("matrix, csv, topology", [("h100_nvswitch_8gpu.txt", "h100_nvswitch_8gpu.csv", "nvlink8_h100"),
                                                   ("rtx_pro_6000_pcie_8gpu.txt", "rtx_pro_6000_pcie_8gpu.csv",
                                                    "pcie8_rtx_pro_6000")])
def test_an_imported_matrix_reproduces_the_shipped_routes_and_p2p_levels(capsys, tmp_path, matrix, csv, topology):
    box = import_topology(capsys, tmp_path, matrix, "--query", os.path.join(SMI, csv))
    ship = validate(Topology, read_yaml(os.path.join(TOPOLOGIES, f"{topology}.yaml")), topology)
    assert routes(box) == routes(ship)
    assert (box.gpu, box.fabric.p2p_level, box.fabric.nvls) == (ship.gpu, ship.fabric.p2p_level, ship.fabric.nvls)


def test_gpus_behind_two_switches_use_p2p_inside_a_switch_and_host_memory_across(capsys, tmp_path):
    box = import_topology(capsys, tmp_path, "pcie_switch_8gpu.txt", "--gpu", "NVIDIA RTX PRO 6000 Blackwell Server Edition")
    r = routes(box)
    assert r[(0, 3)] == (["gpu0", "pcie_switch0", "gpu3"], True, "pcie_switch")
    assert r[(0, 4)] == (["gpu0", "pcie_switch0", "cpu0", "cpu1", "pcie_switch1", "gpu4"], False, "system")
    assert sorted(n.name for n in box.fabric.nodes if n.kind == "nic") == ["nic0", "nic1"]


def test_the_shipped_l40s_machine_is_the_import_of_its_matrix(capsys, tmp_path):
    out = tmp_path / "pcie4_l40s.yaml"
    code, _, err = cli(capsys, "import", "topology", os.path.join(SMI, "l40s_pcie_4gpu.txt"), "--query",
                       os.path.join(SMI, "l40s_pcie_4gpu.csv"), "--name", "pcie4_l40s", "-o", str(out))
    assert code == 0, err
    assert out.read_text() == open(os.path.join(TOPOLOGIES, "pcie4_l40s.yaml")).read()


@pytest.mark.parametrize("args, where", [
    (["h100_nvswitch_8gpu.txt"], "--gpu"),
    (["h100_nvswitch_8gpu.txt", "--gpu", "NVIDIA GeForce RTX 4090"], "name"),
    (["h100_nvswitch_8gpu.txt", "--query", "l40s_pcie_4gpu.csv"], "<rows>"),
])
def test_topology_mistakes_are_one_line(capsys, args, where):
    argv = [os.path.join(SMI, a) if a.endswith((".txt", ".csv")) else a for a in args]
    code, out, err = cli(capsys, "import", "topology", *argv)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and f": {where}: " in err


def test_an_unknown_cell_names_its_line(capsys, tmp_path):
    text = open(os.path.join(SMI, "l40s_pcie_4gpu.txt")).read().replace("PIX", "PCI", 1)
    bad = tmp_path / "topo.txt"
    bad.write_text(text)
    code, _, err = cli(capsys, "import", "topology", str(bad), "--gpu", "NVIDIA L40S")
    assert code == 2 and "line 2" in err and "'PCI'" in err
