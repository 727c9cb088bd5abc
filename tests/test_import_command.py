"""`specsim import command`: an SGLang or vLLM launch line becomes a scenario `run` accepts; every flag it does not
map is listed (stderr and the scenario's header), never dropped."""
from __future__ import annotations

import json

import pytest

from simulator.cli import main
from simulator.config.loader import load_scenario

SGLANG = ["python", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-V3", "--tp", "8",
          "--trust-remote-code", "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
          "lmsys/DeepSeek-V3-EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
          "--speculative-num-draft-tokens", "4", "--cuda-graph-max-bs", "16", "--mem-fraction-static", "0.85",
          "--chunked-prefill-size", "4096", "--enable-flashinfer-allreduce-fusion", "--disable-overlap-schedule",
          "--attention-backend", "fa3", "--port", "30000", "--kv-cache-dtype", "fp8_e4m3", "--frobnicate", "7"]
VLLM = ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size", "4", "--speculative-config",
        json.dumps({"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3,
                    "draft_tensor_parallel_size": 1}), "--gpu-memory-utilization", "0.9", "--max-num-seqs", "64",
        "--max-model-len", "8192"]
SHORT = ["--set", "workload.requests=1", "--set", "workload.output_tokens=32", "-q", "--no-baseline"]


def imported(capsys, tmp_path, topology, argv):
    out = tmp_path / "scenario.yaml"
    code = main(["import", "command", "--topology", topology, "-o", str(out), "--", *argv])
    err = capsys.readouterr().err
    assert code == 0, err
    return out, err


def test_an_sglang_eagle3_launch_line_becomes_a_scenario_that_runs(capsys, tmp_path):
    path, err = imported(capsys, tmp_path, "nvlink8_h200", SGLANG)
    spec = load_scenario(str(path)).spec
    assert (spec.parallelism.tp, spec.speculation.method, spec.speculation.draft_tokens) == (8, "eagle3", 3)
    assert spec.speculation.verify == "chain" and spec.runtime.memory_fraction == 0.85
    assert (spec.runtime.fuse_allreduce_rmsnorm, spec.runtime.overlap_schedule) == (True, False)
    assert spec.workload.max_prefill_tokens == 4096
    # the engine flags under the engine's own names (docs/engines.md), resolved by its profile:
    assert (spec.engine.name, spec.engine.version, spec.engine.cuda_graph_max_bs) == ("sglang", "0.5.9", 16)
    # SGLang's speculative capture list (1..8, 10..32 step 2, ...) cut at --cuda-graph-max-bs 16
    assert spec.runtime.speculative_graph_batch_sizes == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16]
    for flag in ("--attention-backend fa3", "--port 30000", "--kv-cache-dtype fp8_e4m3", "--frobnicate 7"):
        assert flag in err and flag in path.read_text()  # listed on stderr and in the scenario's header
    assert main(["run", str(path), *SHORT]) == 0


def test_a_vllm_speculative_config_becomes_a_scenario_that_runs(capsys, tmp_path):
    path, err = imported(capsys, tmp_path, "nvlink8_h100", VLLM)
    spec = load_scenario(str(path)).spec
    assert (spec.parallelism.tp, spec.speculation.method, spec.speculation.draft_tokens) == (4, "eagle3", 3)
    assert (spec.workload.max_running_requests, spec.runtime.memory_fraction) == (64, 0.9)
    assert (spec.engine.name, spec.engine.gpu_memory_utilization) == ("vllm", 0.9)
    assert "draft_tensor_parallel_size=1" in err and "--max-model-len 8192" in err
    assert main(["run", str(path), *SHORT]) == 0


def test_tree_flags_and_vllm_data_parallel_moe(capsys, tmp_path):
    tree, _ = imported(capsys, tmp_path, "nvlink8_h200", [
        "python", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-V3", "--tp", "8",
        "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
        "--speculative-num-draft-tokens", "8"])
    spec = load_scenario(str(tree)).spec.speculation
    # EAGLE without a draft model on DeepSeek-V3 runs its MTP module (SGLang's NEXTN); 8 verified = root + 7 drafts
    assert (spec.method, spec.verify, spec.draft_tokens, spec.tree.kind, spec.tree.k, spec.tree.depth) == \
        ("mtp", "tree", 7, "topk", 4, 3)
    dp, _ = imported(capsys, tmp_path, "nvlink8_h200", [
        "vllm", "serve", "deepseek-ai/DeepSeek-V3", "--tensor-parallel-size", "1", "--data-parallel-size", "8",
        "--enable-expert-parallel"])
    par = load_scenario(str(dp)).spec.parallelism
    assert (par.tp, par.dp, par.dp_attention, par.ep) == (8, 8, True, 8)


@pytest.mark.parametrize("argv, where", [
    (["--engine-version", "9.9", "--", "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"], "--engine-version"),
    (["python", "-m", "something.else", "--tp", "2"], "command"),
    (["vllm", "serve", "nobody/NoSuchModel-7B"], "--model"),
    (["python", "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-8B-Instruct",
      "--speculative-algorithm", "MEDUSA"], "--speculative-algorithm"),
])
def test_command_mistakes_are_one_line(capsys, argv, where):
    code = main(["import", "command", *([] if "--" in argv else ["--"]), *argv])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert f": {where}: " in captured.err
