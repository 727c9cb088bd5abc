"""An MTP module's eh_proj (model.draft_cards.eh_proj_segment): its bytes and collective by hand, where it sits in the
MTP pass and nowhere else, the engine profile that shards it (TensorRT-LLM 1.0.0, PR #5689) and the memory it holds."""
from __future__ import annotations

import pytest

from conftest import scenario_path
from simulator.config import load_scenario
from simulator.model.cost import PassShape
from simulator.model.draft_cards import EH_PROJ_SMALL_KERNELS, eh_proj_bytes, mtp_card
from simulator.timing.machine import Machine

SGLANG_MTP = scenario_path("validation/cases/h200_deepseek_v3_mtp_tp8.yaml")
TRTLLM_MTP = scenario_path("validation/cases/b200_deepseek_r1_mtp.yaml")
D = 7168  # DeepSeek-V3's hidden size


def _eh_proj(machine, shape, split=None):
    layout = machine.layout("mtp", shape, split)
    names = [[k.name for k in layout.segments[i].kernels] for i in layout.order]
    assert names[1] == ["eh_proj"] and sum(n == ["eh_proj"] for n in names) == 1  # after the head, once
    return layout.segments[layout.order[1]]


@pytest.mark.parametrize("tokens", [1, 4])
def test_replicated_eh_proj_reads_its_whole_matrix_and_reduces_nothing(tokens):
    """SGLang (deepseek_nextn.py's nn.Linear): every rank reads all 2D x D bf16 weights, no collective."""
    machine = Machine(load_scenario(SGLANG_MTP))
    assert machine.runtime.mtp_eh_proj == "replicated"
    seg = _eh_proj(machine, PassShape(tokens, 1))
    (kernel,) = seg.kernels
    assert kernel.bytes == 2 * D * D * 2 + tokens * (2 * D + D) * 2
    assert kernel.flops == 2 * tokens * 2 * D * D
    assert seg.collective is None and seg.small_kernels == EH_PROJ_SMALL_KERNELS


def test_row_parallel_eh_proj_reads_an_eighth_and_all_reduces_the_output():
    """TensorRT-LLM 1.0.0 (the profile's row_parallel): each of 8 ranks reads 2D / 8 rows, then an all-reduce of
    T x D bf16; the same whether the pass lays out as TP8 or TP8 + EP4 (the case's split)."""
    machine = Machine(load_scenario(TRTLLM_MTP))
    assert machine.runtime.mtp_eh_proj == "row_parallel" and machine.split.ep == 4
    shape = PassShape(4, 1)
    for split in (None, machine.split):
        seg = _eh_proj(machine, shape, split)
        assert seg.kernels[0].bytes == 2 * D / 8 * D * 2 + 4 * (2 * D / 8 + D) * 2
        assert (seg.collective, seg.collective_bytes) == ("allreduce", 4 * D * 2)


def test_only_the_mtp_pass_projects():
    machine = Machine(load_scenario(SGLANG_MTP))
    layout = machine.layout("target", PassShape(1, 1))
    assert all(k.name != "eh_proj" for seg in layout.segments for k in seg.kernels)


def test_the_memory_budget_holds_eh_proj_as_the_engine_splits_it():
    """One MTP module: 2D x D bf16 per rank replicated, an eighth of it row-parallel over 8 ranks."""
    card = load_scenario(SGLANG_MTP).model
    mtp = mtp_card(card)
    assert eh_proj_bytes(mtp, 8, "replicated") == 2 * D * D * 2
    assert eh_proj_bytes(mtp, 8, "row_parallel") == 2 * D * D * 2 / 8
    assert eh_proj_bytes(mtp, 8, None) == 0.0
    sglang = load_scenario(SGLANG_MTP)
    sharded = Machine(sglang.with_overrides({"runtime.mtp_eh_proj": "row_parallel"})).memory["weights_GB"]
    assert (Machine(sglang).memory["weights_GB"] - sharded) * 1e9 == pytest.approx(2 * D * D * 2 * 7 / 8, rel=1e-9)
