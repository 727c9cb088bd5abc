"""What only processes can say, each a shipped scenario (scenarios/event/) with the effect it models: overlap
scheduling on and off (plain and speculative), one rank's host 20% slower, KV transfers on the decode's links (a
verify pass under host-memory loads; the disaggregated L40S box's KV shards and decode all-reduces on one uplink).
Runs are short and paired by seed (common random numbers: the same host draws in both arms)."""
from __future__ import annotations

import os

import numpy as np
import pytest
import simpy

import simulator
import simulator.api.run
from conftest import SCENARIOS
from simulator.serving.records import KIND_DECODE, KIND_SPEC

EVENT = os.path.join(SCENARIOS, "event")
OVERLAP = os.path.join(EVENT, "overlap_llama8b.yaml")
SLOW = os.path.join(EVENT, "pcie8_eagle3_slow_host.yaml")
KV = os.path.join(EVENT, "two_node_pd_kv_links.yaml")
KV_UPLINKS = os.path.join(EVENT, "pcie8_l40s_pd_kv_links.yaml")
SHORT = {"workload__requests": 2, "workload__max_running_requests": 2, "workload__output_tokens": 48}


def steps_of(result, kind):
    steps = (result.run if hasattr(result, "run") else result).steps
    return steps["duration_us"][steps["kind"] == kind]


@pytest.mark.parametrize("switch, kind, baseline", [("runtime__overlap_schedule_speculative", KIND_SPEC, False),
                                                    ("runtime__overlap_schedule", KIND_DECODE, True)])
def test_overlap_scheduling_hides_the_schedulers_work_behind_the_gpu(switch, kind, baseline):
    """Same draws, overlap on vs off: every step of the kind is shorter by exactly the scheduler's host work, which
    the GPU's pass (several ms here) covers."""
    on = simulator.run(OVERLAP, baseline=baseline, **SHORT)
    off = simulator.run(OVERLAP, baseline=baseline, **{switch: False}, **SHORT)
    on, off = (r.baseline if baseline else r for r in (on, off))
    hidden = simulator.api.run.resolve(OVERLAP).topology.host.step_overhead_us
    steps_on, steps_off = steps_of(on, kind), steps_of(off, kind)
    assert steps_on.size == steps_off.size > 10
    assert steps_off - steps_on == pytest.approx(np.full(steps_on.size, hidden), abs=1e-6)


def test_overlap_exposes_what_the_gpu_does_not_cover():
    """Where the scheduler's work outlasts the GPU's pass, the event fidelity makes the GPU wait for the host (the
    step lasts the host's launch, its preparation and the sync); the closed form takes the work as hidden."""
    slow_scheduler = {"topology__host__step_overhead_us": 20_000.0, **SHORT}  # longer than any pass here
    event = simulator.run(OVERLAP, baseline=False, **slow_scheduler)
    fast = simulator.run(OVERLAP, baseline=False, fidelity="fast", **slow_scheduler)
    host = simulator.api.run.resolve(OVERLAP, slow_scheduler).topology.host
    spec_event = steps_of(event, KIND_SPEC)
    assert spec_event.min() >= host.step_overhead_us + host.sync_us
    assert steps_of(fast, KIND_SPEC).max() < host.step_overhead_us


def test_one_slow_host_holds_every_collective():
    """Rank 3's launches 1.2x as long: the eager verify, paced by the slowest host, is slower, by no more than 20%
    (only host time is scaled), and slower on average; with every rank slowed alike it is exactly the machine whose launch costs are 1.2x
    (the same draws), which the layer fidelity runs too."""
    short = {"workload__output_tokens": 24}
    slow = simulator.run(SLOW, baseline=False, **short)
    even = simulator.run(SLOW, baseline=False, runtime__host_slowdown=None, **short)
    ratio = steps_of(slow, KIND_SPEC) / steps_of(even, KIND_SPEC)
    # never faster (the same draws, one host slower), at most 1.2x, and slower on average: in a pass where another
    # rank's own skew already made it the latest, rank 3's extra 20% may not be the binding one
    assert ratio.min() >= 1.0 and ratio.max() <= 1.2 and ratio.mean() > 1.05
    assert slow.throughput_tok_s < even.throughput_tok_s
    host = simulator.api.run.resolve(SLOW).topology.host
    # the engine's own eager ops around a speculative step scale with the topology's launch cost, not with a rank's
    # slowdown of its pass launches: left out of this comparison (every eager-op count of the profile's host work;
    # its syncs and Python stand alike in both runs)
    short["runtime__speculative_host"] = {"eager_ops": 0, "eager_ops_per_draft_step": 0, "eager_ops_per_draft_token": 0,
                                          "eager_ops_per_accepted_token": 0, "eager_ops_behind_draft_graph": 0}
    everyone = simulator.run(SLOW, baseline=False, runtime__host_slowdown={r: 1.2 for r in range(8)}, **short)
    scaled = simulator.run(SLOW, baseline=False, fidelity="layer", runtime__host_slowdown=None,
                           topology__host__eager_launch_us=host.eager_launch_us * 1.2,
                           topology__host__graph_launch_us=host.graph_launch_us * 1.2, **short)
    assert everyone.run.steps["duration_us"] == pytest.approx(scaled.run.steps["duration_us"], rel=1e-9)


def test_a_kv_transfer_on_a_collectives_links_stretches_it():
    """The decode instance's ranks run a verify pass at event fidelity while KV caches load from host memory onto
    every GPU (a flow on each CPU root port -> GPU link, as a host-cached prefix or a KV transfer staged through host
    memory arrives, three requests at once): the all-reduces, whose SHM route crosses those links, share them max-min
    fairly and take longer than alone, by exactly what the links report as delay; without the transfers there is none. (Over the
    network, ../two_node_pd_kv_links.yaml, the 200G NIC caps each shard far below the links' share the all-reduces
    need: the decode's link delay is about zero there.)"""
    from simulator.serving.deployment import instance_machines
    from simulator.timing.linkpass import SharedLinks
    from simulator.model.cost import PassShape
    from simulator.serving.ranks import RankSet

    decode = instance_machines(simulator.api.run.resolve(KV))[1]
    plan = decode.plan("target", PassShape(64, 4, 4000), False)  # a big verify: its all-reduces move ~3.7 MB
    kinds = {node.name: node.kind for node in decode.fabric.topology.fabric.nodes}
    names = decode.fabric.names
    steps = next(s for s in plan.collective_steps if s is not None and s.steps)
    into_gpus = sorted({link for hop in steps.hops for link in hop.links
                        if kinds[names[link[0]]] == "cpu" and kinds[names[link[1]]] == "gpu"})
    assert len(into_gpus) == 8

    def run(kv_bytes: float) -> tuple[float, float]:
        env = simpy.Environment()
        links = SharedLinks(env, decode.fabric)
        for link in into_gpus if kv_bytes else ():
            for _ in range(3):  # three requests' caches at once: each flow's fair share, 48 / 4 GB/s, is below the
                links.flows.transfer([link], kv_bytes)  # 22 GB/s the all-reduce's narrowest hop gives it alone
        ranks = RankSet(env, decode.host, decode.tp, links.view(1))
        order = ranks.launch(plan, np.random.default_rng(0))
        env.run(until=order.synced)
        return order.ends()[-1], links.delay_us[1]

    alone, no_delay = run(0.0)
    shared, delay = run(20e9)  # outlasts the pass
    assert no_delay == pytest.approx(0.0, abs=1e-6)
    assert delay > 0.01 * alone
    assert shared == pytest.approx(alone + delay, rel=1e-9)


def test_kv_shards_and_the_decodes_all_reduces_share_a_switch_uplink():
    """pcie8_l40s_pd_kv_links, 8 requests of 256 tokens: the decode's ring hops 7 -> 4 and 5 -> 6 go down the root
    port -> switch uplinks (5 GB/s) that the KV shards into GPUs 4-5 and 6-7 come down. At event fidelity the
    transfers slow the all-reduces (the decode's link delay) and the requests' TPOT grows against the layer fidelity,
    whose all-reduces take their time alone (its KV transfers share the links only among themselves). The delay is
    bounded by the KV bytes down one uplink over its bandwidth: an all-reduce's hop, alone at the uplink's rate C (one
    ring hop on it), falls behind only while its rate r < C, the uplink then saturated, so C - r is at most the
    shards' rate there, and its delay at most the shard bytes that crossed meanwhile over C; the two uplinks carry
    equal shards on mirror-image routes at every moment, so a collective's delay is either hop's."""
    from simulator.serving.deployment import instance_machines
    from simulator.serving.disaggregation import _route
    from simulator.model.cost import PassShape

    short = {"workload__requests": 8, "workload__max_running_requests": 8, "workload__output_tokens": 256}
    event = simulator.run(KV_UPLINKS, baseline=False, **short)
    layer = simulator.run(KV_UPLINKS, baseline=False, fidelity="layer", **short)

    prefill, decode = instance_machines(simulator.api.run.resolve(KV_UPLINKS, short))
    names = decode.fabric.names
    plan = decode.plan("target", PassShape(8, 1, 3000), False)
    ring = next(s for s in plan.collective_steps if s is not None and s.steps)
    ring_links = [(names[a], names[b]) for hop in ring.hops for a, b in hop.links]
    kv_hops, kv_fabric, _ = _route(prefill.fabric, decode.fabric)
    shards_on = {}  # shards of one request down each directed link
    for hop in kv_hops:
        for a, b in hop.links:
            key = (kv_fabric.names[a], kv_fabric.names[b])
            shards_on[key] = shards_on.get(key, 0) + 1
    uplinks = [("cpu1", "pcie_switch2"), ("cpu1", "pcie_switch3")]
    assert [ring_links.count(link) for link in uplinks] == [1, 1]  # one ring hop down each
    assert [shards_on[link] for link in uplinks] == [2, 2]  # and two shards of every request

    # seeds 0-4 (the host draws): delay 109.62-109.73 ms; TPOT mean event 30.2034-30.2055 ms, layer 29.9906-29.9927,
    # the gap 0.2124-0.2128 ms: each test below holds by more than a hundred times the spread
    delay = event.run.instances[1].link_delay_us
    assert layer.run.instances[1].link_delay_us == 0.0 and layer.run.instances[0].link_delay_us == 0.0
    assert delay > 0.0
    assert event.deployment.per_instance["1"].tpot_ms.mean > layer.deployment.per_instance["1"].tpot_ms.mean
    received = event.run.instances[1].kv_transfers
    assert len(received) == 8
    shard_bytes_down = sum(2 * nbytes for nbytes, _ in received)  # two shards down each uplink
    capacity = decode.fabric.topology.fabric.links  # the uplink's bandwidth as the topology states it
    C = next(link.bandwidth_GBps for link in capacity if set(link.between) == {"cpu1", "pcie_switch2"})
    assert delay <= shard_bytes_down / (C * 1e3)  # bytes / (GB/s x 1e3 bytes per us) = us


OWN = os.path.join(EVENT, "h100_llama8b_own_gpu_drafter.yaml")


@pytest.mark.parametrize("probs", [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
def test_a_drafter_on_its_own_gpus_drafts_beside_the_verify(probs):
    """Every draft accepted: the next step's drafts are made during the verify, so a step waits only for the draft
    tokens' transfer, far less than drafting on the target's GPUs. None accepted: the drafts made ahead are always
    discarded and redrafted after the verify, so the drafter on its own GPUs gains nothing (the transfers cost)."""
    kw = {"speculation__acceptance": {"kind": "positional", "probs": probs}, "workload__output_tokens": 48}
    own = simulator.run(OWN, baseline=False, **kw)
    same = simulator.run(OWN, baseline=False, runtime__draft_on_own_gpus=False, **kw)
    assert own.tokens == same.tokens
    if probs[0] == 1.0:
        assert own.step_ms["draft"]["p50"] < 0.25 * same.step_ms["draft"]["p50"]
        assert own.throughput_tok_s > same.throughput_tok_s
    else:  # the two arms draw their launches in another order (the drafts made ahead draw too): noise, no gain
        assert own.throughput_tok_s == pytest.approx(same.throughput_tok_s, rel=0.01)


def test_the_shipped_own_gpu_drafter_pays():
    own = simulator.run(OWN, baseline=False, workload__output_tokens=96)
    same = simulator.run(OWN, baseline=False, runtime__draft_on_own_gpus=False, workload__output_tokens=96)
    assert own.throughput_tok_s > same.throughput_tok_s


def test_the_own_gpu_drafter_needs_gpus_and_the_event_fidelity():
    from simulator.config.errors import ConfigError

    with pytest.raises(ConfigError, match="runtime.draft_on_own_gpus: a drafter beside the verify needs the event"):
        simulator.run(OWN, baseline=False, fidelity="fast")
    with pytest.raises(ConfigError, match="needs 8 GPUs of its own"):
        simulator.run(OWN, baseline=False, parallelism__tp=8)


def test_a_drafter_on_its_own_gpus_pays_the_ops_behind_its_draft_graph():
    """The drafter on its own GPUs runs the same round as on the target's (serving.steps.draft_round): the ops issued
    behind its graphed drafts (runtime.speculative_host.eager_ops_behind_draft_graph) still run after them, at the
    kernel floor each where the graph outlasts their launches. None accepted: every step redrafts after the verify,
    so each step's drafting grows by them."""
    kw = {"speculation__acceptance": {"kind": "positional", "probs": [0.0, 0.0, 0.0]}, "workload__output_tokens": 48}
    floor = simulator.load_scenario(OWN).topology.gpu.kernel_floor_us
    none = simulator.run(OWN, baseline=False, **kw)
    some = simulator.run(OWN, baseline=False, runtime__speculative_host__eager_ops_behind_draft_graph=3, **kw)
    assert some.tokens == none.tokens
    # the 3 draft passes' graph (~0.5 ms) outlasts 3 launches: 3 kernels at the H100's floor a step, exactly
    for stat in ("mean", "p50"):
        extra_ms = getattr(some.step_ms["draft"], stat) - getattr(none.step_ms["draft"], stat)
        assert extra_ms == pytest.approx(3 * floor / 1000.0, abs=1e-9)


def test_a_drafter_on_its_own_gpus_leaves_the_verify_inputs_to_the_target():
    """The verify's inputs (runtime.speculative_host.verify_input_ops: the tree's mask, positions and indices, the
    verify batch and its attention metadata; SGLang builds them after the drafter's choice of tokens, in
    build_tree_kernel_efficient and EAGLEWorker.verify) and the tree mask's bytes run on the target's GPUs, idle
    before the verify: the drafter's round does not grow, the target's host work a step grows by n launches and the
    last kernel's floor (the plan's sync waits for it), and by the mask's entries at the H100's bandwidth."""
    from simulator.timing.machine import Machine

    scenario = simulator.load_scenario(OWN)
    base = scenario.spec.runtime.speculative_host.model_dump()
    launch_us, floor = scenario.topology.host.eager_launch_us, scenario.topology.gpu.kernel_floor_us
    kw = {"speculation__acceptance": {"kind": "positional", "probs": [0.0, 0.0, 0.0]}, "workload__output_tokens": 48}

    def speculative(**host):
        steps = simulator.run(OWN, baseline=False, runtime__speculative_host=dict(base, **host), **kw).run.steps
        return {name: steps[name][steps["kind"] == KIND_SPEC] for name in ("draft_us", "other", "context")}

    none = speculative()
    ops = speculative(verify_input_ops=5, eager_ops_behind_draft_graph=3)
    assert len(none["other"]) > 10
    # the drafter's own 3 ops run behind its graph (3 kernels at the floor); the verify's 5 on the target's side
    assert ops["draft_us"] - none["draft_us"] == pytest.approx(np.full(len(none["other"]), 3 * floor), abs=1e-9)
    assert ops["other"] - none["other"] == pytest.approx(np.full(len(none["other"]), 5 * launch_us + floor), abs=1e-9)
    mask = speculative(tree_mask_bytes_per_entry=2.375)
    entries = 4 * (mask["context"] + 4)  # a chain of 3: 4 verified tokens a request, 1 request
    bandwidth = Machine(scenario).gpu.bytes_per_us
    assert mask["draft_us"] - none["draft_us"] == pytest.approx(np.zeros(len(entries)), abs=1e-9)
    assert mask["other"] - none["other"] == pytest.approx(2.375 * entries / bandwidth, rel=1e-6)
