"""gpt-fast's own model code in its passes (engines/gpt_fast/2023-11.yaml): under tensor parallelism the embedding and
output layer stay whole on every rank (tp.py apply_tp shards only the blocks: no all-reduce after the embedding, no
logits all-gather), and its int4 w1 / w3 are two GEMMs (two tinygemm calls). Expected figures from Llama-2-70B's
config.json (hidden 8192, intermediate 28672, vocab 32000, 80 layers), worked out here."""
from __future__ import annotations

import pytest

from conftest import scenario_path
from simulator.config import load_scenario
from simulator.config.errors import ConfigError
from simulator.model.cost import PassShape
from simulator.timing.machine import Machine

LLAMA70B = scenario_path("validation/cases/a100_llama2_70b_decode.yaml")
HIDDEN, INTER, VOCAB, LAYERS = 8192, 28672, 32000, 80
INT4 = [("model.weights.attention", "int4"), ("model.weights.dense_mlp", "int4"), ("model.weights.lm_head", "int4"),
        ("model.weights.quant_group_size", 32), ("model.weights.quant_zero_point", True)]
INT4_BYTES = 0.5 + 4 / 32  # half a byte a weight, a bf16 scale and a bf16 zero point per 32


def machine(*overrides) -> Machine:
    return Machine(load_scenario(LLAMA70B, list(overrides)))


def test_the_gpt_fast_profile_states_its_model_code():
    runtime = machine(("parallelism.tp", 8)).runtime
    assert runtime.vocab_parallel is False and list(runtime.separate_gate_up) == ["int4"]


def test_whole_vocabulary_layers_run_no_collective_and_the_whole_lm_head_on_each_rank():
    tp8 = machine(("parallelism.tp", 8))
    layout = tp8.layout("target", PassShape(1, 1, 100))
    head, tail = layout.segments[layout.order[0]], layout.segments[layout.order[-1]]
    assert head.collective is None and tail.collective is None
    (lm_head,) = [k for k in tail.kernels if k.name == "lm_head"]
    assert (lm_head.shape.n, lm_head.shape.k) == (VOCAB, HIDDEN)
    # the blocks keep tensor parallelism's two all-reduces a layer
    assert sum(layout.segments[i].collective == "allreduce" for i in layout.order) == 2 * LAYERS


def test_vocab_parallel_splits_the_lm_head_and_gathers_the_logits():
    tp8 = machine(("parallelism.tp", 8), ("runtime.vocab_parallel", True))
    layout = tp8.layout("target", PassShape(1, 1, 100))
    head, tail = layout.segments[layout.order[0]], layout.segments[layout.order[-1]]
    assert (head.collective, tail.collective) == ("allreduce", "allgather")
    assert tail.collective_bytes == VOCAB // 8 * 2  # one row of bf16 logits, each rank's eighth
    (lm_head,) = [k for k in tail.kernels if k.name == "lm_head"]
    assert lm_head.shape.n == VOCAB // 8


def test_whole_vocabulary_layers_are_held_whole_on_each_rank():
    split = machine(("parallelism.tp", 8), ("runtime.vocab_parallel", True)).memory["weights_GB"]
    whole = machine(("parallelism.tp", 8)).memory["weights_GB"]
    # bf16 embedding and lm_head, 7/8 more of each on every rank
    assert (whole - split) * 1e9 == pytest.approx(VOCAB * HIDDEN * (2 + 2) * 7 / 8, rel=1e-9)


def test_int4_gate_and_up_are_two_gemms_of_the_intermediate_width():
    tp8 = machine(("parallelism.tp", 8), ("runtime.separate_gate_up", ["int4"]), *INT4)
    mlp = tp8.layout("target", PassShape(1, 1, 100)).segments[2]
    gemms = [(k.name, k.shape.n, k.shape.k) for k in mlp.kernels]
    assert gemms == [("gate_proj", INTER // 8, HIDDEN), ("up_proj", INTER // 8, HIDDEN), ("down_proj", HIDDEN, INTER // 8)]
    assert mlp.kernels[0].bytes == pytest.approx(INTER / 8 * HIDDEN * INT4_BYTES + (HIDDEN + INTER / 8) * 2, rel=1e-12)


def test_bf16_gate_and_up_stay_one_fused_gemm():
    bf16 = machine(("parallelism.tp", 8), ("runtime.separate_gate_up", ["int4"]))
    mlp = bf16.layout("target", PassShape(1, 1, 100)).segments[2]
    assert [(k.name, k.shape.n) for k in mlp.kernels] == [("gate_up_proj", 2 * INTER // 8), ("down_proj", HIDDEN)]


def test_whole_vocabulary_layers_need_plain_tensor_parallelism():
    with pytest.raises(ConfigError, match="vocab_parallel"):
        machine(("parallelism.tp", 4), ("parallelism.pp", 2))
