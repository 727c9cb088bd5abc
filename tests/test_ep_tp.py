"""Expert parallelism with 1 < ep < tp ("EP4TP2"): the experts' kernel at the busiest expert rank's load, what the
split moves (TP's all-reduce, no all-to-all, as SGLang runs it without DeepEP), the experts' kernel per rank, the
weights per GPU, and the all-to-all backends it cannot take as one line and exit 2."""
from __future__ import annotations

import pytest

from conftest import scenario_path
from simulator.cli import main
from simulator.config import load_scenario
from simulator.timing.machine import Machine
from simulator.timing.placement import replicates_shared_experts, weight_bytes_per_gpu
from simulator.kernels.roofline import _work
from simulator.kernels.shapes import MoE
from simulator.model.routing import busiest_at
from simulator.model.cost import PassShape
from simulator.model.layout import pass_layout

DSV3 = scenario_path("h200_dsv3_dpattn_ep8.yaml")
TP_ONLY = ["parallelism.dp=1", "parallelism.dp_attention=false"]
D, K, E, INTER = 7168, 8, 256, 2048  # DeepSeek-V3: hidden size, experts per token, routed experts, expert width


def busiest_one_token(ep: int) -> float:
    """The busiest of ep ranks' share of one token's experts over the mean rank's, under DeepSeek-V3's group-limited
    routing (model.routing, checked against exact counts in tests/test_routing.py)."""
    return busiest_at(E, K, 8, 4, "top2_sum", ep, 1)[0]


def test_roofline_takes_the_busiest_ranks_load():
    """The fused-MoE roofline's FLOPs and bytes scale with the busiest rank's load (experts and routed tokens)."""
    base = MoE(2.0, D, INTER, K, E, 2, "fp4", ep=4)
    flops, nbytes, _, _ = _work(base, 148)
    flops2, nbytes2, _, _ = _work(MoE(2.0, D, INTER, K, E, 2, "fp4", ep=4, busiest=1.5, busiest_routed=1.5), 148)
    assert (flops2, nbytes2) == pytest.approx((1.5 * flops, 1.5 * nbytes), rel=1e-12)
    # more routed tokens on the same experts: only the activations grow (2 tokens x 8 / 4 = 4 pairs, 3.8 experts)
    _, nbytes3, _, _ = _work(MoE(2.0, D, INTER, K, E, 2, "fp4", ep=4, busiest_routed=1.5), 148)
    assert nbytes3 - nbytes == pytest.approx(0.5 * 4 * (D + 3 * INTER / 2) * 2.0, rel=1e-12)


def _machine(*sets: str) -> Machine:
    return Machine(load_scenario(DSV3, list(sets)))


def _collectives(machine: Machine, shape: PassShape) -> list:
    layout = pass_layout(machine.card, machine.tp, shape, False, machine.split)
    return [(layout.segments[i].collective, layout.segments[i].collective_bytes, layout.segments[i].group)
            for i in layout.order]


@pytest.mark.parametrize("shape", [PassShape(1, 1), PassShape(4, 8, 800, False, True)])
def test_ep_below_tp_moves_what_tp_moves(shape):
    """TP8 + EP4 without DP-attention: the same all-reduces (count, bytes, group) as TP8, no dispatch or combine."""
    ep4, tp8 = _machine(*TP_ONLY, "parallelism.ep=4"), _machine(*TP_ONLY, "parallelism.ep=1")
    assert _collectives(ep4, shape) == _collectives(tp8, shape)
    assert not {"dispatch", "combine"} & {kind for kind, _, _ in _collectives(ep4, shape)}


def test_ep_below_tp_with_dp_attention_gathers_and_scatters():
    """DP-attention in 8 groups + EP4: each MoE layer's block between the all-gather and reduce-scatter, and no
    all-to-all."""
    kinds = [kind for kind, _, _ in _collectives(_machine("parallelism.ep=4"), PassShape(1, 8))]
    assert kinds.count("reducescatter") == 61 and kinds.count("dispatch") == 0 and kinds.count("allreduce") == 0


def test_ep_below_tp_expert_kernel_is_the_busiest_groups_share():
    """One token on TP8 + EP4: this rank's 64 experts at 1/2 width, the busiest group's distinct experts and routed
    tokens; the shared expert stays split over the 8 ranks, as under TP8."""
    ep4, tp8 = _machine(*TP_ONLY, "parallelism.ep=4"), _machine(*TP_ONLY, "parallelism.ep=1")
    moe, plain = ({k.name: k for seg in pass_layout(m.card, 8, PassShape(1, 1), False, m.split).segments
                   for k in seg.kernels if any(x.name == "experts_gate_up" for x in seg.kernels)} for m in (ep4, tp8))
    ratio = busiest_one_token(4)
    assert ratio * K / 4 == pytest.approx(3.93, abs=0.02)  # of one token's 8 experts, in 4 of the 8 groups
    touched = routed = K / 4 * ratio  # one token: its 8 experts, 2 per rank on average, each one routed token
    inter = INTER / 2
    assert ep4.card.weights.experts == "fp8"
    wb = 1.0
    assert moe["experts_gate_up"].bytes == pytest.approx(touched * D * 2 * inter * wb + routed * (D + 2 * inter) * 2,
                                                         rel=1e-9)
    assert moe["experts_gate_up"].flops == pytest.approx(2 * routed * D * 2 * inter, rel=1e-9)
    assert moe["experts_down"].shape.tp == 2 and moe["experts_down"].shape.ep == 4
    assert moe["shared_gate_up"] == plain["shared_gate_up"] and moe["router"] == plain["router"]


def test_ep_below_tp_holds_tps_weights():
    """64 experts at 1/2 width are 32 experts' worth, as TP8's 256 at 1/8; no DeepEP, so the shared expert is split."""
    ep4 = load_scenario(DSV3, [*TP_ONLY, "parallelism.ep=4"])
    tp8 = load_scenario(DSV3, [*TP_ONLY, "parallelism.ep=1"])
    assert not replicates_shared_experts(ep4)
    assert weight_bytes_per_gpu(ep4) == pytest.approx(weight_bytes_per_gpu(tp8), rel=1e-12)


@pytest.mark.parametrize("backend", ["deepep_low_latency", "deepep_normal", "nccl"])
def test_an_all_to_all_backend_needs_ep_equal_tp(capsys, backend):
    code = main([DSV3, "--set", "parallelism.ep=4", "--set", f"runtime.ep_backend={backend}"])
    err = capsys.readouterr().err
    assert code == 2 and err.strip().count("\n") == 0 and "Traceback" not in err, err
    assert f"runtime.ep_backend: {backend} with ep=4 < tp=8" in err, err


def test_ep_below_tp_runs(capsys):
    assert main([DSV3, *sum((["--set", s] for s in TP_ONLY), []), "--set", "parallelism.ep=4",
                 "--set", "workload.output_tokens=16", "--set", "workload.requests=2"]) == 0
    out = capsys.readouterr().out
    assert "TP8 + EP4" in out and "dispatch" not in out


def test_pipeline_stages_with_ep_below_tp():
    """TP4 x PP2 + EP2 per stage: TP's all-reduces and the stage boundary's send/recv, as TP4 x PP2, with every MoE
    layer's experts as one rank of a 2-group, half-width expert split holds them."""
    pp = ["parallelism.dp=1", "parallelism.dp_attention=false", "parallelism.tp=4", "parallelism.pp=2"]
    ep2, ep1 = _machine(*pp, "parallelism.ep=2"), _machine(*pp, "parallelism.ep=1")
    shape = PassShape(1, 2)
    assert _collectives(ep2, shape) == _collectives(ep1, shape)
    assert [kind for kind, _, _ in _collectives(ep2, shape)].count("sendrecv") == 1
    experts = next(k for k in pass_layout(ep2.card, 4, shape, False, ep2.split).segments[3].kernels
                   if k.name == "experts_down")
    assert (experts.shape.tp, experts.shape.ep) == (2, 2)
    assert experts.shape.busiest == experts.shape.busiest_routed == busiest_one_token(2)  # a micro-batch of 1


@pytest.mark.parametrize("shape", [PassShape(1, 1), PassShape(4, 8, 800, False, True)])
def test_ep_below_tp_fuses_the_norm_into_tps_all_reduce_as_tp_does(shape):
    """With the all-reduce fused with the next RMSNorm, TP8 + EP4 launches exactly TP8's kernels a segment: its
    all-reduces are TP's (TensorRT-LLM's DeepseekV3DecoderLayer fuses them whatever the expert split), one
    launch fewer per fused segment than unfused."""
    ep4, tp8 = _machine(*TP_ONLY, "parallelism.ep=4"), _machine(*TP_ONLY, "parallelism.ep=1")

    def launches(machine, fused):
        layout = pass_layout(machine.card, 8, shape, fused, machine.split)
        return [layout.segments[i].num_kernels for i in layout.order]

    fused_ep4, fused_tp8, unfused_ep4 = launches(ep4, True), launches(tp8, True), launches(ep4, False)
    assert fused_ep4 == fused_tp8
    # every layer's two segments one launch fewer (head and tail have no norm after their collective)
    assert [a - b for a, b in zip(unfused_ep4, fused_ep4)] == [0] + [1] * (2 * 61) + [0]


def test_ep_equal_to_tp_fuses_only_its_dense_layers_all_reduces():
    """TP8 with ep = 8 and no DP-attention: the dense layers keep TP's all-reduces (fused with the next RMSNorm, one
    launch fewer in each of their two segments), the MoE layers' reduce-scatter, dispatch, combine and all-gather
    are not TP's all-reduce and launch as unfused (split_layout.py's docstring)."""
    ep8 = _machine(*TP_ONLY, "parallelism.ep=8")
    card = ep8.card
    dense, moe = card.num_dense_layers, card.num_layers - card.num_dense_layers
    assert (ep8.split.ep, ep8.split.tp, ep8.split.groups, dense, moe) == (8, 8, 1, 3, 58)

    def launches(fused):
        layout = pass_layout(card, 8, PassShape(1, 1), fused, ep8.split)
        return [layout.segments[i].num_kernels for i in layout.order]

    unfused, fused = launches(False), launches(True)
    # head; per dense layer attention and MLP; per MoE layer attention's reduce-scatter, the router's dispatch, the
    # experts' combine, the all-gather back; tail
    assert len(unfused) == 1 + 2 * dense + 4 * moe + 1
    assert [a - b for a, b in zip(unfused, fused)] == [0] + [1] * (2 * dense) + [0] * (4 * moe) + [0]
