"""What one instance's passes cost under the wider splits (DP-attention, expert and pipeline parallelism, TP across
machines): the all-to-all and send/recv times against the formulas they implement, the segments each mode adds to
a pass, and every split the engine does not simulate (or that does not fit) as one line and exit 2."""
from __future__ import annotations

import math

import pytest

from conftest import scenario_path, topology_path
from simulator.cli import main
from simulator.config import load_scenario
from simulator.config.base import validate
from simulator.config.loader import read_yaml
from simulator.config.topology import Topology
from simulator.timing.machine import Machine
from simulator.hardware import nccl_tables as T
from simulator.hardware.expert_parallel import BACKENDS, ep_all_to_all_us, ep_latency_us, p2p_latency_us, stage_send_us
from simulator.hardware.interconnect import Fabric
from simulator.model.cost import PassShape
from simulator.model.layout import pass_layout
from simulator.model.split_layout import Split, stage_layers

DSV3 = scenario_path("h200_dsv3_dpattn_ep8.yaml")
KIMI = scenario_path("pcie8_kimi_dpattn_ep8.yaml")
PP2 = scenario_path("h100x2_llama70b_tp8pp2.yaml")
TP16 = scenario_path("h100x2_llama70b_tp16.yaml")
D, K, E = 7168, 8, 256  # DeepSeek-V3: hidden size, experts per token, routed experts


def fabric(name: str) -> Fabric:
    path = topology_path(name + ".yaml")
    return Fabric(validate(Topology, read_yaml(path), path))


def nvlink_GBps(f: Fabric) -> float:
    """One H200's link to the NVSwitch (every GPU has the same)."""
    return next(l.bandwidth_GBps for l in f.topology.fabric.links if l.kind == "nvlink")


# --- all-to-all and send/recv against their formulas ----------------------------------------------------------------

@pytest.mark.parametrize("tokens", [1, 32, 256])
def test_low_latency_dispatch_and_combine_on_an_nvswitch(tokens):
    """Through an NVSwitch each GPU's uplink carries its 7 outgoing flows, all equal: the all-to-all takes
    7 x pair bytes / link bandwidth after DeepEP's latency. Dispatch sends T k / ep tokens per pair in FP8 with a
    fp32 scale per 128 values, combine the same in BF16."""
    f = fabric("nvlink8_h200")
    bw = nvlink_GBps(f) * 1e3  # bytes per us
    pair = tokens * K / 8 * D
    ll = BACKENDS["deepep_low_latency"]
    assert ep_all_to_all_us(f, range(8), ll, tokens, D, E, K, combine=False) == \
        pytest.approx(11.905 + 7 * pair * (1 + 4 / 128) / bw, rel=1e-12)
    assert ep_all_to_all_us(f, range(8), ll, tokens, D, E, K, combine=True) == \
        pytest.approx(12.557 + 7 * pair * 2 / bw, rel=1e-12)


def test_normal_dispatch_sends_a_token_once_per_rank():
    """DeepEP's normal dispatch: a token reaches a rank once if any of its k experts is there, probability
    1 - C(E - E/ep, k) / C(E, k)."""
    f = fabric("nvlink8_h200")
    tokens = 512
    reach = 1 - math.comb(E - E // 8, K) / math.comb(E, K)
    expected = 26.068 + 7 * tokens * reach * D * (1 + 4 / 128) / (nvlink_GBps(f) * 1e3)
    got = ep_all_to_all_us(f, range(8), BACKENDS["deepep_normal"], tokens, D, E, K, combine=False)
    assert got == pytest.approx(expected, rel=1e-12)


def test_nccl_all_to_all_latency_is_a_ring_ll_step():
    """The NCCL fallback: base ring LL latency + one LL NVLink step (tuning.cc v2.29.7-1), BF16 copies per expert."""
    f = fabric("nvlink8_h200")
    latency = T.BASE_LATENCY_US["ring"][0] + T.HW_LATENCY_US["nvlink"]["ring"][0]
    assert p2p_latency_us(f, [(0, 1)]) == pytest.approx(latency)
    got = ep_all_to_all_us(f, range(8), BACKENDS["nccl"], 4, D, E, K, combine=False)
    assert got == pytest.approx(latency + 7 * 4 * K / 8 * D * 2 / (nvlink_GBps(f) * 1e3), rel=1e-12)


def test_stage_boundary_send_recv_across_machines():
    """TP rank i of the first machine sends to TP rank i of the second along its own rail, all eight at once: NCCL's
    network LL step after the base latency, then the bytes at the route's slowest link."""
    f = fabric("two_node_h100")
    pairs = [(i, 8 + i) for i in range(8)]
    nbytes = 2 * 16 * 8192 * 2  # hidden states + residual of 16 tokens, BF16
    slowest = min(f.link_of[l].bandwidth_GBps for l in f.hop(0, 8).links)
    latency = T.BASE_LATENCY_US["ring"][0] + T.HW_LATENCY_US["net"]["ring"][0]
    assert stage_send_us(f, pairs, nbytes) == pytest.approx(latency + nbytes / (slowest * 1e3), rel=1e-12)


# --- the segments each split adds to a pass ----------------------------------------------------------------------

def _kinds(machine: Machine, shape: PassShape) -> list:
    layout = pass_layout(machine.card, machine.tp, shape, False, machine.split)
    return [layout.segments[i].collective for i in layout.order]


def test_dp_attention_with_expert_parallelism_moves_tokens_by_all_to_all():
    """DeepSeek-V3, 8 groups of one rank + EP8: no all-reduce; each of the 58 MoE layers dispatches and combines,
    each of the 3 dense layers gathers every group's tokens and scatters them back, and so does the lm_head."""
    machine = Machine(load_scenario(DSV3))
    kinds = _kinds(machine, PassShape(1, 8))
    assert kinds.count("allreduce") == 0
    assert kinds.count("dispatch") == kinds.count("combine") == 58
    assert kinds.count("reducescatter") == 3 and kinds.count("allgather") == 3 + 2
    layout = pass_layout(machine.card, 8, PassShape(1, 8), False, machine.split)
    dispatch = next(s for s in layout.segments if s.collective == "dispatch")
    assert dispatch.collective_tokens == 1  # a batch of 8 over 8 groups: one token per rank


def test_batch_per_attention_group_and_uneven_shares():
    """A group serves ceil(b / dp) requests: 9 requests over 8 groups attend as 2 per group, while the blocks after
    attention compute the 9 tokens there are (the reduce-scatter moves 9 tokens' worth, not 16)."""
    machine = Machine(load_scenario(DSV3))
    nine, sixteen = (pass_layout(machine.card, 8, PassShape(1, b, 0), False, machine.split) for b in (9, 16))
    first = nine.order[1]  # layer 0's attention, closed by the all-gather before its dense MLP
    assert nine.segments[first].kernels == sixteen.segments[first].kernels
    scatter = [i for i, s in enumerate(nine.segments) if s.collective == "reducescatter"][0]
    assert nine.segments[scatter].collective_bytes == 9 * D * 2 // 8
    assert sixteen.segments[scatter].collective_bytes == 16 * D * 2 // 8


def test_pipeline_stages_send_at_each_boundary_and_run_micro_batches():
    """TP8 x PP2: one send/recv after layer 39 of 80; a batch of 2 runs as 2 micro-batches of 1, so its step costs
    what one request's pass costs."""
    machine = Machine(load_scenario(PP2))
    layout = pass_layout(machine.card, 8, PassShape(1, 2), False, machine.split)
    kinds = [layout.segments[i].collective for i in layout.order]
    assert kinds.count("sendrecv") == 1
    assert kinds.index("sendrecv") == 1 + 2 * len(stage_layers(80, 2)[0])  # head, then 40 layers of two segments
    one, two = (machine.plan("target", PassShape(1, b, 0), True) for b in (1, 2))
    assert two.gpu_us.sum() == pytest.approx(one.gpu_us.sum())


def test_expert_parallelism_over_two_machines_takes_deepeps_internode_latencies():
    """DeepSeek-V3 as 16 attention groups + EP16 over two H100 machines: DeepEP reaches the ranks (NVLink inside a
    machine, RDMA between), its two-node latencies apply, and the pair bytes cross the NICs after them."""
    machine = Machine(load_scenario(DSV3, ["topology=two_node_h100", "parallelism.tp=16", "parallelism.dp=16",
                                           "parallelism.ep=16"]))
    f, ll = machine.fabric, BACKENDS["deepep_low_latency"]
    tokens = 16
    got = ep_all_to_all_us(f, range(16), ll, tokens, D, E, K, combine=False)
    nic = min(l.bandwidth_GBps for l in f.topology.fabric.links if l.kind == "network") * 1e3
    remote = 8 * tokens * K / 16 * D * (1 + 4 / 128)  # what one GPU sends the other machine's 8 ranks
    assert ep_latency_us(f, range(16), ll, combine=False) == 22.6
    assert ep_latency_us(f, range(16), ll, combine=True) == 25.9
    assert got >= 22.6 + remote / nic
    assert ep_all_to_all_us(f, range(8), ll, tokens, D, E, K, combine=False) < got  # one machine: intranode


def test_tp16_all_reduce_is_nccls_model_between_machines():
    """One token's 16 KiB all-reduce over 2 machines x 8 H100 (NVLink inside, 8 NICs of 400 Gb/s each), worked out
    by hand from NCCL 2.29's tuning.cc: NCCL picks tree LL at this size.
    - channels: one per NIC, 8, each at the fastest sm90 inter-node search speed the NIC carries, 48 GB/s (no
      duplication: sm90 below 50 GB/s with more than 4 channels); bus bandwidth 8 x 48 = 384 GB/s;
    - tree: min(384 x 0.92, 8 channels x 41.4 GB/s Hopper per-channel tree cap at 2 nodes) = 331.2; LL: min(331.2 /
      3.8, llMaxBw 39.0 for 2 nodes) = 39.0; all-reduce algorithm bandwidth half of it, 19.5 GB/s;
    - latency: tree LL base 6.8 us + 2 x ((8 - 1) NVLink tree LL hops x 0.6 us + log2(2) network tree LL hop x 5.0 us)
      = 25.2 us;
    - time: 25.2 + 16384 B / (1000 x 19.5 GB/s x 0.7, the tree LL correction for log2(16384 / 64) = 8) us.
    The runner-up, ring LL, has 6.6 + 28 x max(0.6, 1.0 us network overhead) + 2 x 2.7 = 40.0 us of latency alone.
    """
    machine = Machine(load_scenario(TP16))
    nbytes = 8192 * 2
    expected = 6.8 + 2 * (7 * 0.6 + 1 * 5.0) + nbytes / (1000 * 19.5 * 0.7)
    cost = machine.allreduce.cost(nbytes)
    assert (cost.algorithm, cost.protocol) == ("nccl_tree", "LL")
    assert cost.time_us == pytest.approx(expected, rel=1e-12)


def test_plain_split_keeps_the_tp_layout():
    machine = Machine(load_scenario(scenario_path("nvlink8_h200_eagle3.yaml")))
    assert machine.split == Split(8, 8) and machine.split.is_plain
    shape = PassShape(4, 2, 100, False, True)
    assert pass_layout(machine.card, 8, shape, False, machine.split) == pass_layout(machine.card, 8, shape, False)


def test_dp_attention_groups_multiply_the_kv_capacity():
    """Each group caches its own requests: 4 groups of 2 ranks hold 4 x one GPU's tokens."""
    machine = Machine(load_scenario(KIMI))
    memory = machine.memory
    per_gpu = (memory["usable_GB"] - memory["weights_GB"]) * 1e9 // (memory["kv_bytes_per_token"] * 4)
    assert memory["kv_capacity_tokens"] == pytest.approx(4 * per_gpu, abs=4)


# --- what is not simulated, or does not fit: one line, exit 2 ----------------------------------------------------

@pytest.mark.parametrize("path, sets, fragment", [
    (DSV3, ["parallelism.ep=3"], "parallelism.ep: ep=3 expert groups must divide the tp=8 ranks"),
    (DSV3, ["parallelism.ep=4", "runtime.ep_backend=nccl"], "runtime.ep_backend: nccl with ep=4 < tp=8"),
    (DSV3, ["parallelism.tp=16"], "parallelism.tp: tp=16 does not divide the 8 GPUs"),
    (DSV3, ["parallelism.dp=16"], "parallelism.dp: dp_attention splits the tp=8 ranks into dp=16"),
    (KIMI, ["parallelism.dp=8"], "parallelism: Kimi-K2.5 does not fit: 88.3 GB of weights per GPU"),
    (KIMI, ["parallelism.dp=2", "runtime.ep_backend=deepep_low_latency"],
     "runtime.ep_backend: deepep_low_latency needs NVLink"),
    (PP2, ["parallelism.pp=4"], "parallelism: tp=8 x pp=4 = 32 GPUs"),
    (PP2, ["parallelism.dp_attention=true"], "parallelism.pp: pp=2 with dp_attention"),
    (TP16, ["parallelism.ep=16"], "parallelism.ep: ep=16 but Llama-3.1-70B has no experts"),
    (TP16, ["parallelism.tp=32"], "parallelism.tp: tp=32 does not divide the 16 GPUs"),
])
def test_split_mistakes_are_one_line_and_exit_2(capsys, path, sets, fragment):
    argv = [path]
    for item in sets:
        argv += ["--set", item]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and err.strip().count("\n") == 0 and "Traceback" not in err, err
    assert fragment in err, err


def test_the_report_says_what_a_split_moves(capsys):
    """The table names the split and counts each collective of a decode pass (no all-reduce line when there is none)."""
    assert main([DSV3, "--set", "workload.output_tokens=64"]) == 0
    out = capsys.readouterr().out
    assert "TP8, DP-attention in 8 groups + EP8" in out
    assert "per decode pass of batch 8: 5 allgather x" in out and "58 dispatch x" in out and "58 combine x" in out
    assert "all-reduce " not in out


def test_auto_backend_is_low_latency_for_decode_and_normal_for_prefill():
    """runtime.ep_backend auto over NVLink: DeepEP's low-latency kernels for decode and verify passes, its normal
    kernels for prefill (SGLang's --deepep-mode auto); the NCCL fallback where the EP ranks lack NVLink."""
    machine = Machine(load_scenario(DSV3))
    f = machine.fabric
    dispatch = next(s for s in pass_layout(machine.card, 8, PassShape(1, 8), False, machine.split).segments
                    if s.collective == "dispatch")
    verify = PassShape(4, 8, 0, False, True)
    # the segment's one token per rank, by hand as in the tests above: low latency 11.905 us + 7 pairs of k / ep x D
    # FP8 bytes with a scale per 128 over the GPU's NVLink; normal 26.068 us + 7 x reach x D x (1 + 4 / 128)
    bw = nvlink_GBps(f) * 1e3
    reach = 1 - math.comb(E - E // 8, K) / math.comb(E, K)
    low_latency = 11.905 + 7 * (K / 8 * D) * (1 + 4 / 128) / bw
    normal = 26.068 + 7 * reach * D * (1 + 4 / 128) / bw
    for shape, expected in ((PassShape(1, 8), low_latency), (verify, low_latency), (PassShape(64, 8), normal)):
        us, steps, is_allreduce = machine.collectives.time(dispatch, shape)
        assert us == pytest.approx(expected, rel=1e-12)
        assert not is_allreduce and steps.steps == 1 and steps.step_latency_us + steps.transfer_us == pytest.approx(us)
    # the NCCL fallback where the EP ranks lack NVLink: chosen, its time by hand in test_nccl_all_to_all_latency_is_a_ring_ll_step
    kimi = Machine(load_scenario(KIMI))
    seg = next(s for s in pass_layout(kimi.card, 8, PassShape(1, 4), False, kimi.split).segments
               if s.collective == "dispatch")
    assert kimi.collectives.time(seg, PassShape(1, 4))[0] == pytest.approx(
        ep_all_to_all_us(kimi.fabric, range(8), BACKENDS["nccl"], 1, 7168, 384, 8, False), rel=1e-12)


def test_all_gather_between_machines_is_tuning_ccs_ring():
    """The logits' (and DP-attention's) all-gather over 2 x 8 H100: ring, nsteps 15 of which 1 crosses the network
    (tuning.cc v2.29.7-1: nInterSteps = nNodes - 1), intra steps max(NVLink step, net overhead 1.0 x3 for Simple),
    bus bandwidth 8 channels x 48 GB/s (LL: x0.5 capped at llMaxBw 39.0; LL128: x0.92 capped at 8 x 36.7),
    algorithm bandwidth x 16 / 15."""
    from simulator.hardware.multinode import multinode_allgather_options

    got = {o.protocol: (o.latency_us, o.algbw_GBps) for o in multinode_allgather_options(fabric("two_node_h100"), 16)}
    expected = {"LL": (6.6 + 14 * 1.0 + 2.7, 39.0 * 16 / 15),
                "LL128": (14.0 + 14 * 1.9 + 4.0, min(384 * 0.92, 8 * 36.7) * 16 / 15),
                "Simple": (8.4 + 14 * 3.4 + 14.0, 384.0 * 16 / 15)}
    assert set(got) == set(expected)
    for proto, values in expected.items():
        assert got[proto] == pytest.approx(values, rel=1e-12), proto
