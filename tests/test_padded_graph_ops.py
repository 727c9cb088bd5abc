"""A step whose batch is not itself a captured size replays its speculative graphs padded, and SGLang resets the
padded graphs' input buffers first (runtime.speculative_host.eager_ops_padded_draft, with the GPU idle, and
verify_input_ops_padded, behind the draft graph with the verify's other inputs); a captured batch, one above the
largest (eager) or an eager pass adds none."""
from __future__ import annotations

import csv
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import yaml

from simulator.config.scenario import SpeculativeHost
from simulator.timing.stepspec import around_drafts, speculative_host_us

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = os.path.join(ROOT, "scenarios", "validation", "cases", "h100x8_llama70b_sglang_mtbench.yaml")
HOST = SimpleNamespace(eager_launch_us=10.0, sync_us=20.0)


def runtime(**kw):
    values = dict(speculative_host=SpeculativeHost(eager_ops=5, eager_ops_padded_draft=3, verify_input_ops=4,
                                                   verify_input_ops_padded=2),
                  speculative_graph_batch_sizes=[1, 2, 4, 8, 9, 11, 13], speculative_graph_pads="requests",
                  cuda_graph_draft=True, cuda_graph_verify=True)
    return SimpleNamespace(**{**values, **kw})


@pytest.mark.parametrize("batch, padded", [(10, True), (3, True), (11, False), (1, False), (14, False)])
def test_the_padding_ops_come_with_a_padded_batch_only(batch, padded):
    """10 and 3 pad (to 11 and 4); 11 and 1 are captured; 14 is above the largest, run eagerly."""
    rt = runtime()
    assert speculative_host_us(HOST, rt, batch) == (80.0 if padded else 50.0)
    around = around_drafts(HOST, rt, None, batch)
    assert around["behind_drafts"] == around["verify_inputs"] == ((6, 60.0) if padded else (4, 40.0))


def test_each_graph_pads_only_where_it_is_graphed():
    eager_verify, eager_draft = runtime(cuda_graph_verify=False), runtime(cuda_graph_draft=False)
    assert speculative_host_us(HOST, eager_verify, 10) == 80.0
    assert around_drafts(HOST, eager_verify, None, 10)["verify_inputs"] == (4, 40.0)
    assert speculative_host_us(HOST, eager_draft, 10) == 50.0
    assert around_drafts(HOST, eager_draft, None, 10)["verify_inputs"] == (6, 60.0)
    # every size captured (no list) or sizes counted in tokens (vLLM's padding, not these buffers): none
    for rt in (runtime(speculative_graph_batch_sizes=None), runtime(speculative_graph_pads="tokens")):
        assert speculative_host_us(HOST, rt, 10) == 50.0 and around_drafts(HOST, rt, None, 10)["verify_inputs"][0] == 4


def test_the_profile_counts_the_release_code():
    """SGLang 0.4.4.post2: EAGLEDraftCudaGraphRunner.replay's seq_lens.fill_, out_cache_loc.zero_, positions.zero_;
    CudaGraphRunner.replay_prepare's seq_lens.fill_, out_cache_loc.zero_."""
    with open(os.path.join(ROOT, "engines", "sglang", "0.4.4.post2.yaml"), encoding="utf-8") as handle:
        work = yaml.safe_load(handle)["speculative_host"]["default"]
    assert (work["eager_ops_padded_draft"]["value"], work["verify_input_ops_padded"]["value"]) == (3, 2)
    assert {work["eager_ops_padded_draft"]["kind"], work["verify_input_ops_padded"]["kind"]} == {"counted"}


def steps(tmp_path, name: str, draft: int, verify: int, fidelity: str) -> list[dict]:
    out = tmp_path / f"{name}.csv"
    load = ["workload.requests=12", "workload.turns=1", "workload.output_tokens=30", "workload.max_running_requests=12",
            "workload.max_concurrency=12", f"runtime.speculative_host.eager_ops_padded_draft={draft}",
            f"runtime.speculative_host.verify_input_ops_padded={verify}"]
    subprocess.run([sys.executable, "-m", "simulator", CASE, "--fidelity", fidelity, "--no-baseline",
                    *[arg for item in load for arg in ("--set", item)], "--steps-log", str(out), "--format", "json"],
                   check=True, cwd=ROOT, capture_output=True)
    with open(out, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize("fidelity", ["fast", "layer", "event"])
def test_a_padded_step_of_the_70b_tree_pays_them(tmp_path, fidelity):
    """12 requests at once, then fewer as they finish: the steps at 12 (padded to 13) run 2 more ops behind the
    draft graph, which outlasts them (2 kernels at the H100's floor more drafting), and 3 more with the GPU idle
    (3 launches more host time); steps at 11, 9, 7, ... (captured) neither."""
    import simulator

    scenario = simulator.load_scenario(CASE)
    floor, launch = scenario.topology.gpu.kernel_floor_us, scenario.topology.host.eager_launch_us
    assert 12 not in scenario.spec.runtime.speculative_graph_batch_sizes
    none, verify, both = (steps(tmp_path, name, d, v, fidelity) for name, d, v in
                          (("none", 0, 0), ("verify", 0, 2), ("both", 3, 2)))
    assert len(none) == len(verify) == len(both)
    padded = [int(a["kind"] == "speculative" and a["batch_requests"] == "12") for a in none]
    assert sum(padded) > 3 and sum(a["kind"] == "speculative" for a in none) > sum(padded)
    for a, b, c, pad in zip(none, verify, both, padded):
        assert float(b["draft_us"]) - float(a["draft_us"]) == pytest.approx(2 * floor * pad, abs=0.011)
        assert float(b["other_us"]) == float(a["other_us"])
        assert float(c["other_us"]) - float(b["other_us"]) == pytest.approx(3 * launch * pad, abs=0.011)
