"""A validation case states only what its source states (issue: "a validation set that cannot hide a knob"): no file
under scenarios/validation/ sets a key other than the hardware, the model, the engine (name, version, flags), the
parallelism, the workload, the speculation the engine ran and a published accept length."""
from __future__ import annotations

import os
import shutil

from conftest import SCENARIOS
from simulator.analysis.validation_keys import problems

VALIDATION = os.path.join(SCENARIOS, "validation")


def test_no_validation_file_sets_a_disallowed_key():
    assert problems(VALIDATION) == []


def test_the_eagle3_batch_case_names_only_its_engine():
    import yaml

    case = yaml.safe_load(open(os.path.join(VALIDATION, "cases", "h100_llama8b_eagle3_mtbench.yaml")))
    assert "runtime" not in case and case["engine"] == {"name": "sglang", "version": "0.4.4.post2"}


def test_the_check_fails_on_a_knob(tmp_path):
    """The check can fail: a copy of the set with host costs in case files, and a graph list set by a case."""
    folder = tmp_path / "validation"
    shutil.copytree(VALIDATION, folder)
    path = folder / "cases" / "h100_llama8b_eagle3_mtbench.yaml"
    path.write_text(path.read_text() + "runtime:\n  speculative_host: {eager_ops: 82, syncs: 13}\n")
    source = folder / "eagle3_sglang_batch.yaml"
    source.write_text(source.read_text().replace("set: {workload.max_running_requests: 2, workload.max_concurrency: 2}",
                                                 "set: {workload.max_running_requests: 2, topology.host.eager_launch_us: 5, "
                                                 "runtime.speculative_graph_batch_sizes: [1, 2]}"))
    # a model-free drafter's block holds the engine's flags (allowed) beside host costs (not)
    drafter = folder / "cases" / "h100x8_llama70b_vllm_modelfree.yaml"
    drafter.write_text(drafter.read_text().replace("suffix: {max_tree_depth: 64}",
                                                   "suffix: {max_tree_depth: 64, host_us_per_step: 10}"))
    arctic = folder / "arctic_inference_suffix.yaml"
    arctic.write_text(arctic.read_text().replace("speculation.ngram.prompt_lookup_max: 4}",
                                                 "speculation.ngram.prompt_lookup_max: 4, speculation.ngram.host_us_per_step: 1}", 1))
    found = problems(str(folder))
    assert "cases/h100x8_llama70b_vllm_modelfree.yaml: speculation.suffix.host_us_per_step" in found
    assert "arctic_inference_suffix.yaml: cases[3]: set.speculation.ngram.host_us_per_step" in found
    assert "cases/h100_llama8b_eagle3_mtbench.yaml: runtime" in found
    assert "eagle3_sglang_batch.yaml: cases[0]: set.runtime.speculative_graph_batch_sizes" in found
    assert "eagle3_sglang_batch.yaml: cases[0]: set.topology.host.eager_launch_us" in found  # a launch cost
    assert len(found) == 5
