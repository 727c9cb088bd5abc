"""A scenario's runtime values laid over its engine profile's (config/overlay.py): a mapping merges key by key, so a
key set in the scenario file or by --set changes that value alone; a list, a scalar, null or an empty mapping
replaces; rebuilds (a sweep's with_overrides) resolve as --set does."""
from __future__ import annotations

import os

import pytest
import yaml

from conftest import scenario_path
from simulator.config import load_scenario
from simulator.config.errors import ConfigError
from simulator.results.provenance import provenance

SGLANG_70B = scenario_path("validation/cases/h100x8_llama70b_sglang_mtbench.yaml")  # SGLang 0.4.4.post2
LLAMA7B = scenario_path("validation/cases/a100_llama2_decode.yaml")  # gpt-fast 2023-11
LLAMA8B = scenario_path("validation/cases/h100_llama8b_decode.yaml")
VICUNA7B = scenario_path("validation/cases/a100_vicuna7b_specbench.yaml")  # transformers 4.37.1


def test_a_set_host_value_changes_that_value_alone():
    """--set runtime.speculative_host.step_host_us: the profile's other host values stand (57 eager ops, 15 syncs,
    8.5 us a request: SGLang 0.4.4.post2's EAGLE tree step); the report still names the override as given."""
    base = load_scenario(SGLANG_70B)
    changed = load_scenario(SGLANG_70B, ["runtime.speculative_host.step_host_us=86"])
    host = changed.spec.runtime.speculative_host
    assert (host.eager_ops, host.syncs, host.per_request_us, host.step_host_us) == (57, 15, 8.5, 86.0)
    assert host.model_dump() == {**base.spec.runtime.speculative_host.model_dump(), "step_host_us": 86.0}
    # the profile's share: every host value but the one set, each by its path; the rest of the runtime as before
    own = {f"runtime.speculative_host.{name}" for name in host.model_dump()} - {"runtime.speculative_host.step_host_us"}
    assert set(changed.engine.keys) == (set(base.engine.keys) - {"speculative_host"}) | own
    assert provenance(changed).overrides == ("runtime.speculative_host.step_host_us=86",)


def test_a_key_beside_a_required_one_keeps_the_profiles():
    """kernel_database.stands_in alone: the profile's engine and version stand (no 'required key is missing')."""
    base = load_scenario(SGLANG_70B).spec.runtime.kernel_database
    tables = load_scenario(SGLANG_70B, ["runtime.kernel_database.stands_in=true"]).spec.runtime.kernel_database
    assert tables.model_dump() == {"engine": base.engine, "version": base.version, "stands_in": True}
    assert not base.stands_in


def test_the_scenario_files_own_mapping_merges_as_set_does(tmp_path):
    """A runtime: mapping in the scenario file is laid over the profile's key by key, as --set's."""
    with open(SGLANG_70B, encoding="utf-8") as handle:
        raw = yaml.safe_load(handle)
    folder = os.path.dirname(SGLANG_70B)
    raw.update(topology=os.path.join(folder, raw["topology"]), model=os.path.join(folder, raw["model"]),
               runtime={"speculative_host": {"per_request_us": 3.0}, "kernel_database": {"stands_in": True}})
    path = tmp_path / "partial.yaml"
    path.write_text(yaml.safe_dump(raw))
    from_file = load_scenario(str(path)).spec.runtime
    by_set = load_scenario(SGLANG_70B, [("runtime.speculative_host.per_request_us", 3.0),
                                        ("runtime.kernel_database.stands_in", True)]).spec.runtime
    assert from_file == by_set
    assert (from_file.speculative_host.eager_ops, from_file.speculative_host.per_request_us) == (57, 3.0)


def test_a_free_keyed_mapping_merges_and_an_empty_one_replaces():
    """gpt-fast's unmeasured_kernels {attention: ...}: a family set beside it adds to it; `{}` empties it (the
    schema's default, not the profile's), as `speculative_host: {}` is an engine with no host work; a list
    replaces whole."""
    profile = load_scenario(LLAMA7B).spec.runtime.unmeasured_kernels
    assert set(profile) == {"attention"}
    added = load_scenario(LLAMA7B, [("runtime.unmeasured_kernels.gemm", "tinygemm")]).spec.runtime
    assert added.unmeasured_kernels == {**profile, "gemm": "tinygemm"}
    assert load_scenario(LLAMA7B, [("runtime.unmeasured_kernels", {})]).spec.runtime.unmeasured_kernels == {}
    none = load_scenario(SGLANG_70B, [("runtime.speculative_host", {})]).spec.runtime.speculative_host
    assert set(none.model_dump().values()) == {0}
    sizes = load_scenario(SGLANG_70B, [("runtime.speculative_graph_batch_sizes", [4, 2])]).spec.runtime
    assert sizes.speculative_graph_batch_sizes == [4, 2]


def test_an_empty_mapping_missing_a_required_key_is_the_scenarios_mistake():
    with pytest.raises(ConfigError) as caught:
        load_scenario(SGLANG_70B, [("runtime.kernel_database", {})])
    assert (caught.value.file, caught.value.path) == (SGLANG_70B, "runtime.kernel_database.engine")


def test_a_rebuild_keeps_the_merge_and_resolves_a_new_engine_as_set_does():
    """with_overrides (a sweep's point) of a scenario with a host value set keeps it and the profile's others, for
    a whole-document and a topology-only rebuild; one that changes the engine takes every runtime key the new
    profile gives (vLLM 0.8.5's piecewise graphs, transformers' draft-length schedule), as --set does, not the
    schema's defaults the first resolution left."""
    changed = load_scenario(SGLANG_70B, ["runtime.speculative_host.step_host_us=86"])
    for point in ({"workload.requests": 3}, {"topology.gpu.memory_GB": 40.0}):
        swept = changed.with_overrides(point)
        assert swept.spec.runtime.speculative_host == changed.spec.runtime.speculative_host
        assert swept.engine.keys == changed.engine.keys
    vllm = {"engine": {"name": "vllm", "version": "0.8.5"}}
    swept = load_scenario(LLAMA8B).with_overrides(vllm)
    assert swept.spec == load_scenario(LLAMA8B, list(vllm.items())).spec
    assert swept.spec.runtime.piecewise_host is not None
    sps = {"speculation.method": "draft_model", "speculation.draft_tokens": 5, "speculation.verify": "chain",
           "speculation.draft_model": {"model": "vicuna_68m"}}
    swept = load_scenario(VICUNA7B).with_overrides(sps)
    assert swept.spec == load_scenario(VICUNA7B, list(sps.items())).spec
    assert swept.spec.policy.kind == "assistant_heuristic"
