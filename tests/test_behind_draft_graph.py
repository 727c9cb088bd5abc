"""The ops an engine issues while its draft graph runs (runtime.speculative_host.eager_ops_behind_draft_graph) cost
only what the graphed drafts do not cover: their kernels after the graph at the kernel floor each, or the host's
issue time past the graph; the verify's tree mask costs its bytes at the GPU's achievable bandwidth."""
from __future__ import annotations

import csv
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = os.path.join(ROOT, "scenarios", "validation", "cases", "h100x8_llama70b_sglang_mtbench.yaml")
SMALL = ["--set", "workload.requests=2", "--set", "workload.turns=1", "--set", "workload.output_tokens=60"]


def test_ops_behind_the_graph_cost_their_kernels_or_the_hosts_lead():
    from simulator.timing.stepspec import exposed_behind_drafts_us

    gpu = SimpleNamespace(floor_us=1.5, bytes_per_us=1000.0)
    step = SimpleNamespace(behind_drafts=(40, 40 * 12.0), mask_bytes=(0.0, 0.0))
    # the graph outlasts the host's 480 us of launches: the 40 kernels run after it, 1.5 us each
    assert exposed_behind_drafts_us(step, 900.0, 0, gpu) == pytest.approx(60.0, rel=1e-12)
    # a 300 us graph: the last op is issued at 480 us and runs its 1.5 us
    assert exposed_behind_drafts_us(step, 300.0, 0, gpu) == pytest.approx(181.5, rel=1e-12)
    # per sample of the graphed drafts' time
    got = exposed_behind_drafts_us(step, __import__("numpy").array([900.0, 300.0]), 0, gpu)
    assert got.tolist() == pytest.approx([60.0, 181.5], rel=1e-12)
    # nothing issued behind: nothing exposed
    assert exposed_behind_drafts_us(SimpleNamespace(behind_drafts=(0, 0.0), mask_bytes=(0.0, 0.0)), 0.0, 0, gpu) == 0


def test_the_verify_inputs_are_the_targets_where_the_drafter_has_its_own_gpus():
    """Of 44 ops behind the draft graph, 37 build the verify's inputs (SGLang 0.4.4.post2's count): on one set of GPUs
    all 44 and the mask follow the graph; with the drafter on its own, it keeps its 7 behind its graph and the target
    runs the 37 with its GPUs idle (the last kernel's floor after the last launch) and the mask before the verify."""
    from simulator.timing.stepspec import exposed_before_verify_us, exposed_behind_drafts_us

    gpu = SimpleNamespace(floor_us=1.5, bytes_per_us=1000.0)
    step = SimpleNamespace(behind_drafts=(44, 44 * 12.0), verify_inputs=(37, 37 * 12.0), mask_bytes=(2.0, 100.0))
    # one set of GPUs: 44 launches (528 us) past a 300 us graph, then the mask's 2 x 450 + 100 bytes at 1000 B/us
    assert exposed_behind_drafts_us(step, 300.0, 450, gpu) == pytest.approx(528 + 1.5 - 300 + 1.0, rel=1e-12)
    assert exposed_before_verify_us(step, 450, gpu) == 0.0
    # own GPUs: the drafter's 7 launches (84 us) are under the graph, their kernels after it at the floor
    assert exposed_behind_drafts_us(step, 300.0, 450, gpu, own_gpus=True) == pytest.approx(7 * 1.5, rel=1e-12)
    assert exposed_before_verify_us(step, 450, gpu, own_gpus=True) == pytest.approx(37 * 12.0 + 1.5 + 1.0, rel=1e-12)


def test_sglangs_ops_behind_the_draft_graph_are_the_drafters_7_and_the_verifys_37():
    from simulator.config.engine_profile import load_profile

    work = load_profile("sglang", "0.4.4.post2")[0].host_work("eagle3", "eagle3")
    assert (work.eager_ops_behind_draft_graph, work.verify_input_ops) == (7, 37)


def test_the_tree_mask_moves_its_entries_bytes():
    """Each request's mask is draft tokens x (context + draft tokens) entries (build_tree_kernel_efficient), each
    moved tree_mask_bytes_per_entry times; the time is the bytes at the GPU's achievable bandwidth."""
    from simulator.config.scenario import SpeculativeHost
    from simulator.speculation.trees import Tree
    from simulator.timing.stepspec import exposed_behind_drafts_us, tree_mask_bytes

    runtime = SimpleNamespace(speculative_host=SpeculativeHost(tree_mask_bytes_per_entry=2.375))
    tree = Tree.chain(7)  # 8 tokens verified a request
    per_context, fixed = tree_mask_bytes(runtime, tree, 3)
    assert (per_context, fixed) == (2.375 * 8 * 3, 2.375 * 8 * 8 * 3)
    step = SimpleNamespace(behind_drafts=(0, 0.0), mask_bytes=(per_context, fixed))
    gpu = SimpleNamespace(floor_us=1.0, bytes_per_us=2.0e6)
    # 3 requests of 1,000 context tokens: 8 x 1,008 entries each
    assert exposed_behind_drafts_us(step, 0.0, 1000, gpu) == pytest.approx(2.375 * 8 * 1008 * 3 / 2.0e6, rel=1e-12)
    assert tree_mask_bytes(SimpleNamespace(speculative_host=SpeculativeHost()), tree, 3) == (0.0, 0.0)
    assert tree_mask_bytes(runtime, None, 3) == (0.0, 0.0)


def steps(tmp_path, name: str, host_path: str, fidelity: str) -> list[dict]:
    out = tmp_path / f"{name}.csv"
    subprocess.run([sys.executable, "-m", "simulator", CASE, *SMALL, "--fidelity", fidelity, "--no-baseline",
                    "--set", f"runtime.speculative_host={host_path}", "--steps-log", str(out), "--format", "json"],
                   check=True, cwd=ROOT, capture_output=True)
    with open(out, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize("fidelity", ["fast", "layer", "event"])
def test_the_70b_tree_hides_its_ops_behind_the_draft_graph(tmp_path, fidelity):
    """Llama-70B's 7 graphed draft steps (~1.6 ms) outlast 44 ops' launches (566 us): each speculative step's
    drafting grows by the 44 kernels at the H100's floor, not by their host time; other steps not at all."""
    import simulator

    floor = simulator.load_scenario(CASE).topology.gpu.kernel_floor_us
    # the profile's other host work stands in both runs (its 44 ops behind the graph and the tree mask's bytes set
    # here: none, then the ops alone)
    none = steps(tmp_path, "none", "{eager_ops_behind_draft_graph: 0, tree_mask_bytes_per_entry: 0}", fidelity)
    some = steps(tmp_path, "some", "{eager_ops_behind_draft_graph: 44, tree_mask_bytes_per_entry: 0}", fidelity)
    assert len(none) == len(some) and sum(a["kind"] == "speculative" for a in none) > 10
    for a, b in zip(none, some):
        extra = float(b["draft_us"]) - float(a["draft_us"])
        assert extra == pytest.approx(44 * floor if a["kind"] == "speculative" else 0.0, abs=0.011)
        assert float(b["other_us"]) == float(a["other_us"])


def test_the_fixed_host_time_is_charged_once_a_step_whatever_the_batch():
    """step_host_us (an attention plan's Python beyond its ops) is one time a step: not per request, draft or op."""
    from simulator.config.scenario import SpeculativeHost
    from simulator.speculation.trees import Tree
    from simulator.timing.stepspec import speculative_host_us

    host = SimpleNamespace(eager_launch_us=10.0, sync_us=20.0)
    runtime = SimpleNamespace(speculative_host=SpeculativeHost(eager_ops=2, syncs=1, step_host_us=85.0))
    for batch in (1, 7, 64):
        assert speculative_host_us(host, runtime, batch, Tree.chain(3)) == pytest.approx(2 * 10 + 20 + 85.0, rel=1e-12)
