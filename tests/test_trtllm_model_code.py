"""TensorRT-LLM 1.0.0's own model code in its passes (engines/trtllm/1.0.0.yaml replicated_embedding): DeepseekV3Model
builds its Embedding without a mapping, so under TP every rank holds the whole table and runs no all-reduce after it;
its lm_head stays split by vocabulary with the logits all-gathered, and Llama4Model's embedding stays vocab-parallel.
Expected figures from DeepSeek-V3's config.json (hidden 7168, vocab 129280), worked out here."""
from __future__ import annotations

import pytest

from conftest import scenario_path
from simulator.config import load_scenario
from simulator.model.cost import PassShape
from simulator.timing.machine import Machine

DSR1 = scenario_path("validation/cases/b200_deepseek_r1_mtp.yaml")
SCOUT = scenario_path("validation/cases/b200_llama4_scout_ngram.yaml")
HIDDEN, VOCAB = 7168, 129280
SGLANG = [("engine.name", "sglang"), ("engine.version", "0.5.9")]


def machine(path, *overrides) -> Machine:
    return Machine(load_scenario(path, list(overrides)))


def ends(layout):
    return layout.segments[layout.order[0]], layout.segments[layout.order[-1]]


def passes(m: Machine, part: str, tokens: int = 1):
    """The part's pass as the case runs it (its split: attention TP8, experts EP4 x TP2)."""
    return ends(m.layout(part, PassShape(tokens, 1, 100), m.split))


@pytest.mark.parametrize("part", ["target", "mtp"])
def test_deepseek_embeds_on_every_rank_without_an_all_reduce(part):
    trt = machine(DSR1)
    assert list(trt.runtime.replicated_embedding) == ["DeepseekV3ForCausalLM"]
    head, tail = passes(trt, part)
    assert head.collective is None and head.collective_bytes == 0
    assert tail.collective == "allgather"  # the lm_head is still vocab-split
    (lm_head,) = [k for k in tail.kernels if k.name == "lm_head"]
    assert lm_head.shape.n == VOCAB // 8


def test_sglang_keeps_the_vocab_parallel_embedding_of_the_same_case():
    head, _ = passes(machine(DSR1, *SGLANG), "target")
    assert head.collective == "allreduce" and head.collective_bytes == HIDDEN * 2  # one bf16 row


def test_llama4_keeps_its_vocab_parallel_embedding_under_trtllm():
    scout = machine(SCOUT)
    head, tail = passes(scout, "target")
    assert (head.collective, tail.collective) == ("allreduce", "allgather")


def test_the_whole_table_is_held_on_every_rank():
    whole = machine(DSR1).memory["weights_GB"]
    split = machine(DSR1, ("runtime.replicated_embedding", [])).memory["weights_GB"]
    # DeepSeek-V3's bf16 embedding: 7/8 more of it on each of the 8 ranks
    assert (whole - split) * 1e9 == pytest.approx(VOCAB * HIDDEN * 2 * 7 / 8, rel=1e-9)


def test_the_plain_tp_layout_drops_the_same_all_reduce():
    head, _ = ends(machine(DSR1, ("parallelism.ep", 1)).layout("target", PassShape(1, 1, 100)))
    assert head.collective is None and head.collective_bytes == 0


def test_an_mtp_draft_gathers_each_ranks_top1_not_its_logits():
    """DeepseekV3MTPHead leaves the draft logits vocab-split; the draft sampler all-gathers each rank's max and argmax
    (two fp32 a token); the target's verify still gathers its logits (bf16, each rank's eighth of the vocabulary)."""
    trt = machine(DSR1)
    assert trt.runtime.mtp_draft_gather == "top1"
    _, draft = passes(trt, "mtp", tokens=2)
    assert (draft.collective, draft.collective_bytes) == ("allgather", 2 * 2 * 4)
    _, verify = passes(trt, "target", tokens=2)
    assert (verify.collective, verify.collective_bytes) == ("allgather", 2 * VOCAB // 8 * 2)
    _, sglang = passes(machine(DSR1, *SGLANG), "mtp", tokens=2)
    assert sglang.collective_bytes == 2 * VOCAB // 8 * 2
