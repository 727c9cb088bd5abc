"""vLLM 0.8.5's EAGLE-3 draft runs eagerly with PyTorch-native layers (engines/vllm/0.8.5.yaml eager_kernels,
counted by tools/vllm_draft_kernels.py): the head's passes take the profile's counts, the target keeps the model
card's (its graphs are compiled), and SGLang's head keeps the card's."""
import os

import yaml

import simulator
from simulator.model.cost import PassShape
from simulator.model.layout import pass_layout
from simulator.timing.machine import Machine

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = os.path.join(ROOT, "scenarios", "validation", "cases", "h100_llama8b_decode.yaml")
EAGLE3 = [("speculation.method", "eagle3"), ("speculation.draft_tokens", 2), ("speculation.verify", "chain"),
          ("speculation.acceptance", {"library": "eagle3_llama31_8b_mtbench"})]
VLLM = [("engine", {"name": "vllm", "version": "0.8.5"})]


def _launches(card, shape) -> int:
    layout = pass_layout(card, 1, shape)
    return sum(layout.segments[i].num_kernels for i in layout.order)


def test_the_eagle3_head_launches_the_counted_kernels_a_pass():
    counts = yaml.safe_load(open(os.path.join(ROOT, "engines", "vllm", "0.8.5.yaml")))
    head = counts["eager_kernels"]["value"]["draft_head_by_code"]["eagle3"]
    card = Machine(simulator.load_scenario(CASE, VLLM + EAGLE3)).cards["draft_head"]
    # the layout's embedding launch, one layer's attention and MLP, the pass's tail: the tool's 71 a later pass
    assert _launches(card, PassShape(1, 1, 300)) == 1 + head["attention"] + head["dense_mlp"] + head["per_pass"] == 71


def test_the_target_keeps_the_model_cards_counts_and_sglang_its_head():
    vllm = Machine(simulator.load_scenario(CASE, VLLM + EAGLE3)).cards
    sglang = Machine(simulator.load_scenario(CASE, EAGLE3)).cards
    assert vllm["target"].kernels == sglang["target"].kernels
    assert vllm["draft_head"].kernels != sglang["draft_head"].kernels
    assert _launches(sglang["draft_head"], PassShape(1, 1, 300)) == 1 + 7 + 4 + 10  # the card's fused kernels


def test_a_plain_vllm_run_has_no_head_counts_to_take():
    runtime = simulator.load_scenario(CASE, VLLM).spec.runtime
    assert runtime.eager_kernels.decoder is None and runtime.eager_kernels.draft_head is None
