"""Engine profiles (engines/<name>/<version>.yaml): every input sourced, every shipped scenario names an engine, the
profile's inputs reach the runtime unless the scenario sets them, the engine's flags apply in its own names, and a
scenario that names none runs the stated default and says so."""
from __future__ import annotations

import glob
import os

import pytest
import yaml

import simulator
from conftest import ROOT, SCENARIOS, scenario_path
from simulator.config.engine import DEFAULT_ENGINE
from simulator.config.engine_profile import EngineProfile, Sourced, captured_sizes, load_profile

PROFILES = sorted(glob.glob(os.path.join(ROOT, "engines", "*", "*.yaml")))
CASE = os.path.join(SCENARIOS, "validation", "cases", "h100_llama8b_eagle3_mtbench.yaml")
EAGLE3 = scenario_path("pcie8_eagle3.yaml")


@pytest.mark.parametrize("path", PROFILES, ids=[os.path.relpath(p, ROOT) for p in PROFILES])
def test_every_profile_loads_and_sources_every_input(path):
    name, version = os.path.basename(os.path.dirname(path)), os.path.splitext(os.path.basename(path))[0]
    profile, _ = load_profile(name, version)
    inputs = profile.inputs()
    required = {f for f, info in EngineProfile.model_fields.items()
                if getattr(info.annotation, "__pydantic_generic_metadata__", {}).get("origin") is Sourced}
    optional = {f for f, info in EngineProfile.model_fields.items() if not info.is_required()} - required
    top = {key for key in inputs if "." not in key}
    assert required <= top <= required | optional
    assert {key.split(".")[1] for key in inputs if key.startswith("speculative_host.")} >= {"default"}
    for key, item in inputs.items():
        assert item.kind in ("counted", "measured", "fitted", "estimated"), key
        if item.kind == "measured":  # names the script in this repository that timed it
            scripts = [w.strip("(),;") for w in item.source.split() if w.strip("(),;").endswith(".py")]
            assert any(os.path.isfile(os.path.join(ROOT, w)) for w in scripts), (key, item.source)
        assert len(item.source) >= 20, (key, item.source)  # a file and function, or what the estimate rests on


def test_the_required_engines_have_a_profile():
    have = {(os.path.basename(os.path.dirname(p)), os.path.splitext(os.path.basename(p))[0]) for p in PROFILES}
    assert any(n == "sglang" and v.startswith("0.4.") for n, v in have)
    assert any(n == "sglang" and v.startswith("0.5.") for n, v in have)
    assert {"vllm", "trtllm"} <= {n for n, _ in have}
    assert (DEFAULT_ENGINE["name"], DEFAULT_ENGINE["version"]) in have


def test_every_shipped_scenario_names_an_engine():
    files = glob.glob(os.path.join(SCENARIOS, "*.yaml")) + glob.glob(os.path.join(SCENARIOS, "validation", "cases", "*.yaml"))
    scenarios = [p for p in files if "scenario" not in yaml.safe_load(open(p))]  # sweeps name a base scenario
    assert len(scenarios) > 20
    for path in scenarios:
        assert "engine" in yaml.safe_load(open(path)), path


def test_the_reference_scenarios_run_sglang_059():
    for name in ("pcie8_eagle3.yaml", "pcie8_baseline.yaml", "pcie8_ngram.yaml"):
        engine = simulator.load_scenario(scenario_path(name)).engine
        assert (engine.name, engine.version, engine.named) == ("sglang", "0.5.9", True)


def test_a_scenario_naming_no_engine_runs_the_default_and_says_so(tmp_path, capsys):
    from simulator.cli import main

    raw = yaml.safe_load(open(EAGLE3))
    raw.pop("engine")
    raw["topology"] = os.path.join(ROOT, "topologies", "pcie8_rtx_pro_6000.yaml")
    raw["model"] = os.path.join(SCENARIOS, "models", "kimi_k2_5.yaml")
    path = tmp_path / "no_engine.yaml"
    path.write_text(yaml.safe_dump(raw))
    scenario = simulator.load_scenario(str(path))
    assert (scenario.engine.name, scenario.engine.version, scenario.engine.named) == ("sglang", "0.5.9", False)
    assert scenario.spec.runtime == simulator.load_scenario(EAGLE3).spec.runtime  # the same profile as naming it
    assert main([str(path), "--set", "workload.requests=1", "--set", "workload.output_tokens=16"]) == 0
    out = capsys.readouterr().out
    assert "engine sglang 0.5.9 (the default: the scenario names no engine)" in out


def test_the_profile_sets_what_the_scenario_leaves_out():
    """The EAGLE-3 batch case sets no runtime key: its runtime is SGLang 0.4.4.post2's profile, read independently."""
    scenario = simulator.load_scenario(CASE)
    profile = yaml.safe_load(open(os.path.join(ROOT, "engines", "sglang", "0.4.4.post2.yaml")))
    runtime = scenario.spec.runtime
    graphs = profile["cuda_graphs"]["value"]
    assert (runtime.cuda_graph_decode, runtime.cuda_graph_verify, runtime.cuda_graph_draft,
            runtime.cuda_graph_draft_extend) == (graphs["decode"], graphs["target_verify"], graphs["draft"],
                                                 graphs["draft_extend"])
    assert runtime.speculative_host.model_dump() == {
        "eager_ops_per_accepted_token": 0,  # no such input in SGLang's profile: nothing per accepted token
        "syncs_per_draft_step": 0,  # nor this one: its draft steps sync no more than the first
        "syncs_per_accepted_token": 0,  # nor this one: no sync per accepted token
        "eager_ops_per_draft_token": 0,  # nor this one: no PyTorch call per draft token
        **{key: item["value"] for key, item in profile["speculative_host"]["default"].items()}}
    assert (runtime.overlap_schedule, runtime.overlap_schedule_speculative) == (True, False)
    # SGLang 0.4.4.post2's list: 1-8, odd 9-31, then 64, 96, 128, 160 (an 80 GB H100 captures up to 160)
    assert runtime.speculative_graph_batch_sizes == [*range(1, 9), *range(9, 32, 2), 64, 96, 128, 160]


def test_a_runtime_key_the_scenario_sets_wins_over_the_profile():
    scenario = simulator.load_scenario(EAGLE3)  # sets runtime.cuda_graph_verify: false; SGLang captures the verify
    assert scenario.spec.runtime.cuda_graph_verify is False
    assert "cuda_graph_verify" not in scenario.engine.keys and "speculative_host" in scenario.engine.keys


@pytest.mark.parametrize("flag, value, check", [
    ("disable_overlap_schedule", True, lambda r: r.overlap_schedule is False),
    ("disable_cuda_graph", True, lambda r: not (r.cuda_graph_decode or r.cuda_graph_draft or r.cuda_graph_draft_extend)),
    ("cuda_graph_max_bs", 12, lambda r: r.speculative_graph_batch_sizes == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12]),
    ("cuda_graph_bs", [4, 2, 16], lambda r: r.speculative_graph_batch_sizes == [2, 4, 16]),
    ("disable_cuda_graph_padding", True, lambda r: r.speculative_graph_batch_sizes == list(range(1, 513))),
    ("disable_custom_all_reduce", True, lambda r: r.allreduce == "nccl"),
    ("enable_flashinfer_allreduce_fusion", True, lambda r: r.fuse_allreduce_rmsnorm is True),
])
def test_engine_flags_apply_in_the_engines_own_names(flag, value, check):
    runtime = simulator.load_scenario(EAGLE3, [(f"engine.{flag}", value)]).spec.runtime
    assert check(runtime)
    assert not check(simulator.load_scenario(EAGLE3).spec.runtime)


def test_changing_the_engine_by_override_resolves_its_profile_again():
    base = simulator.load_scenario(CASE)
    newer = base.with_overrides({"engine.version": "0.5.9"})
    assert newer.spec.runtime == simulator.load_scenario(CASE, [("engine.version", "0.5.9")]).spec.runtime
    assert newer.spec.runtime.cuda_graph_draft_extend is True and base.spec.runtime.cuda_graph_draft_extend is False
    assert newer.spec.runtime.speculative_host != base.spec.runtime.speculative_host


NGRAM_CASE = os.path.join(SCENARIOS, "validation", "cases", "b200_llama4_scout_ngram.yaml")


def test_the_ngram_host_costs_come_from_the_engine_profile_unless_the_scenario_sets_them():
    """TensorRT-LLM 1.0.0's profile times its n-gram pool; SGLang's profiles leave speculation.ngram's own costs."""
    profile = yaml.safe_load(open(os.path.join(ROOT, "engines", "trtllm", "1.0.0.yaml")))["ngram_host"]["value"]
    trt = simulator.load_scenario(NGRAM_CASE)
    assert trt.spec.speculation.ngram.model_dump(include=set(profile)) == profile
    assert "speculation.ngram.host_us_per_request" in trt.engine.keys
    sglang = trt.with_overrides({"engine": {"name": "sglang", "version": "0.5.9"}})
    default = type(trt.spec.speculation.ngram)()
    assert sglang.spec.speculation.ngram.host_us_per_request == default.host_us_per_request != profile[
        "host_us_per_request"]
    own = simulator.load_scenario(NGRAM_CASE, [("speculation.ngram.host_us_per_request", 7.0)])
    assert own.spec.speculation.ngram.host_us_per_request == 7.0
    assert own.spec.speculation.ngram.host_us_per_step == profile["host_us_per_step"]
    moved = trt.with_overrides({"topology.gpu.memory_GB": 96})  # a machine what-if keeps the profile's keys
    assert moved.with_overrides({"engine": {"name": "sglang", "version": "0.5.9"}}).spec.speculation.ngram == \
        sglang.spec.speculation.ngram


def test_a_machine_with_less_memory_captures_fewer_graphs():
    """SGLang 0.5.9 caps the captured batch by the GPU's memory (server_args.py's tiers): a what-if GPU of 24 GB at
    TP1 captures up to 24, by override of the topology alone as by a rebuild."""
    base = simulator.load_scenario(CASE, [("engine.version", "0.5.9")])
    small = base.with_overrides({"topology.gpu.memory_GB": 24})
    assert max(small.spec.runtime.speculative_graph_batch_sizes) == 24
    assert max(base.spec.runtime.speculative_graph_batch_sizes) == 256
    rebuilt = simulator.load_scenario(CASE, [("engine.version", "0.5.9"), ("topology.gpu.memory_GB", 24)])
    assert small.spec.runtime == rebuilt.spec.runtime


def test_captured_sizes_follow_the_engines_list():
    profile, _ = load_profile("sglang", "0.5.9")
    sizes = captured_sizes(profile, {}, gpu_memory_GB=80, tp=1)
    assert sizes[:12] == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16] and sizes[-1] == 256
    assert captured_sizes(profile, {}, gpu_memory_GB=80, tp=8)[-1] == 512


MTP_CASE = os.path.join(SCENARIOS, "validation", "cases", "h200_deepseek_v3_mtp_tp8.yaml")


def test_sglang_0_4_3_post4_verifies_a_batch_of_32_in_its_own_graph():
    """SGLang v0.4.3.post4 captures the speculative graphs at every batch 1-32 and EAGLE turns padding off
    (cuda_graph_runner.py, server_args.py): a batch-32 MTP verify of 2 tokens a request carries 32 x 2 = 64 rows.
    0.4.4.post2's list (1-8, odd 9-31, 64...) runs it in the 64 graph: 32 padding rows, 64 x 2 = 128 rows."""
    from simulator.model.cost import PassShape
    from simulator.timing.stepspec import captured_batch

    scenario = simulator.load_scenario(MTP_CASE, [("workload.requests", 32), ("workload.max_running_requests", 32)])
    assert (scenario.engine.name, scenario.engine.version) == ("sglang", "0.4.3.post4")
    sizes = scenario.spec.runtime.speculative_graph_batch_sizes
    assert sizes == list(range(1, 33))
    later = scenario.with_overrides({"engine.version": "0.4.4.post2"}).spec.runtime.speculative_graph_batch_sizes
    rows = {}
    for name, listed in (("0.4.3.post4", sizes), ("0.4.4.post2", later)):
        graphed = captured_batch(listed, 32)
        rows[name] = PassShape(2, 32, padding=graphed - 32).query_tokens
    assert rows == {"0.4.3.post4": 64, "0.4.4.post2": 128}


def test_the_provenance_names_the_engine_and_its_profile():
    result = simulator.run(EAGLE3, workload__requests=1, workload__output_tokens=16)
    assert result.provenance["engine"] == "sglang 0.5.9"
    assert result.provenance["engine_profile"].endswith(os.path.join("engines", "sglang", "0.5.9.yaml"))


def profile_rows() -> list[str]:
    """The README's table rows, read from the profile files themselves."""
    rows = []
    for path in PROFILES:
        data = yaml.safe_load(open(path))
        by = {kind: [key for key, item in data.items() if isinstance(item, dict) and item.get("kind") == kind]
              for kind in ("counted", "measured", "fitted", "estimated")}
        codes: dict[int, list] = {}  # speculative_host's entries, the codes sharing one (a YAML alias) together
        for code, work in data["speculative_host"].items():
            codes.setdefault(id(work), [work]).append(code)
        for kind, keys in by.items():  # per entry: speculative_host.<code>[/<code>] (field, ...)
            for work, *names in codes.values():
                fields = [name for name, item in work.items() if item["kind"] == kind]
                if fields:
                    keys.append(f"speculative_host.{'/'.join(names)} ({', '.join(fields)})")
        rows.append(f"| {data['engine']} {data['version']} | " + " | ".join(", ".join(by[k]) or "-" for k in by) + " |")
    return rows


def test_the_readme_table_says_what_each_profile_counts_fits_and_estimates():
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    head = "| profile | counted from code | measured | fitted | estimated |\n| --- | --- | --- | --- | --- |\n"
    assert head + "\n".join(profile_rows()) + "\n" in readme


def test_a_host_drafter_takes_the_engines_host_drafter_path_not_the_model_drafters():
    """vLLM's EAGLE proposer ops (a fixed number, more a draft step) are not a host drafter's: an n-gram or suffix
    scenario gets the profile's speculative_host.suffix entry and no per-draft-step ops, however deep its drafts; an
    EAGLE one its default entry (the profile the case names, read raw)."""
    case = os.path.join(SCENARIOS, "validation", "cases", "h100x8_llama70b_vllm_modelfree.yaml")
    suffix = simulator.load_scenario(case)
    engine = yaml.safe_load(open(case))["engine"]
    raw = yaml.safe_load(open(os.path.join(ROOT, "engines", engine["name"], f"{engine['version']}.yaml")))
    assert suffix.spec.speculation.method == "suffix" and suffix.spec.speculation.draft_tokens > 8
    host = suffix.spec.runtime.speculative_host
    own = raw["speculative_host"]["suffix"]
    assert "eager_ops_per_draft_step" not in own
    assert (host.eager_ops, host.eager_ops_per_draft_step, host.syncs) == (
        own["eager_ops"]["value"], 0, own["syncs"]["value"])
    eagle = suffix.with_overrides({"speculation.method": "eagle3", "speculation.draft_tokens": 2,
                                   "speculation.acceptance": {"kind": "iid", "alpha": 0.7}})
    host = eagle.spec.runtime.speculative_host
    default = raw["speculative_host"]["default"]
    assert (host.eager_ops, host.eager_ops_per_draft_step, host.syncs) == (
        default["eager_ops"]["value"], default["eager_ops_per_draft_step"]["value"], default["syncs"]["value"])


@pytest.mark.parametrize("version", ["0.8.4", "0.8.5"])
def test_vllm_worker_messages_follow_the_ranks_that_reply(version):
    """With tensor parallelism vLLM's workers are processes: a step adds the SchedulerOutput's broadcast, rank 0's
    reply and, where the engine core reads every rank's reply (0.8.4; 0.8.5 reads rank 0's only), one more a rank;
    at TP 1 the worker runs in the engine core's process and the scheduler's time stands alone."""
    raw = yaml.safe_load(open(os.path.join(ROOT, "engines", "vllm", f"{version}.yaml")))
    base, ipc = raw["scheduler_step_us"]["value"], raw["executor_ipc"]["value"]
    case = os.path.join(SCENARIOS, "validation", "cases", "h100_llama8b_decode.yaml")
    one = simulator.load_scenario(case, [("engine", {"name": "vllm", "version": version})])
    eight = simulator.load_scenario(case, [("engine", {"name": "vllm", "version": version}), ("parallelism.tp", 8)])
    assert one.spec.runtime.scheduler_step_us == base
    others = 7 if ipc["replies"] == "all" else 0
    expected = base + ipc["broadcast_us"] + ipc["rank0_reply_us"] + others * ipc["other_reply_us"]
    assert eight.spec.runtime.scheduler_step_us == pytest.approx(expected)
    assert ipc["replies"] == {"0.8.4": "all", "0.8.5": "rank0"}[version]


TRTLLM_MTP_CASE = os.path.join(SCENARIOS, "validation", "cases", "b200_deepseek_r1_mtp.yaml")


def test_trtllms_moe_backend_is_the_profiles_default_unless_the_flag_sets_it():
    """TensorRT-LLM 1.0.0's MoeConfig.backend defaults to CUTLASS; the engine flag moe_config.backend sets the
    runtime's moe_backend in its own name, and the runtime key names it among those the profile gave."""
    base = simulator.load_scenario(TRTLLM_MTP_CASE)
    assert base.spec.runtime.moe_backend == "CUTLASS" and "moe_backend" in base.engine.keys
    flagged = simulator.load_scenario(TRTLLM_MTP_CASE, [("engine.moe_config", {"backend": "TRTLLM"})])
    assert flagged.spec.runtime.moe_backend == "TRTLLM"
    assert simulator.load_scenario(EAGLE3).spec.runtime.moe_backend is None  # SGLang's profile has no such input


def test_a_moe_backend_on_an_engine_without_that_flag_is_one_line(capsys):
    """runtime.moe_backend names TensorRT-LLM's moe_config.backend: on an engine whose profile has no such flag
    (SGLang 0.5.9) it would change nothing, so it is one line, exit 2, not a silent no-op."""
    from simulator.cli import main
    code = main(["run", EAGLE3, "--set", "runtime.moe_backend=TRTLLM", "--set", "workload.requests=1"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "runtime.moe_backend" in err and "no MoE backend flag" in err and "allowed: null" in err
    assert simulator.load_scenario(TRTLLM_MTP_CASE, ["runtime.moe_backend=DEEPGEMM"]).spec.runtime.moe_backend == "DEEPGEMM"
