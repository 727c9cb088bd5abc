"""The transformers profile's eager host model: at batch 1 a plain decode step is host-bound, every counted PyTorch
call costing the fitted eager_launch_us; the engine's `script` flag picks whose step code is costed."""
import os

import yaml

import simulator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = os.path.join(ROOT, "scenarios", "validation", "cases", "a100_vicuna7b_specbench.yaml")
PROFILE = os.path.join(ROOT, "engines", "transformers", "4.37.1.yaml")


def test_a_plain_decode_step_is_the_counted_calls_times_the_fitted_call_time():
    profile = yaml.safe_load(open(PROFILE))
    k = profile["eager_kernels"]["value"]["decoder"]
    calls = 32 * (k["attention"] + k["dense_mlp"]) + k["per_pass"]  # Llama-2-7B's 32 layers
    host_ms = calls * profile["eager_launch_us"]["value"] / 1e3
    result = simulator.run(CASE, speculation__method="none", workload__output_tokens=16).to_dict()
    decode = result["step_ms"]["baseline_decode"]["mean"]
    # host-bound: the GPU's ~8 ms of weight reads hide under the launches; the end-of-step sync and launch jitter
    # are the rest (a few per cent)
    assert host_ms <= decode <= 1.05 * host_ms


def test_the_script_flag_selects_the_methods_own_step_code():
    spec_eagle = simulator.load_scenario(CASE, [("engine.script", "inference_eagle")]).spec.runtime
    spec_eagle2 = simulator.load_scenario(CASE, [("engine.script", "inference_eagle2")]).spec.runtime
    profile = yaml.safe_load(open(PROFILE))["speculative_host"]
    assert spec_eagle.speculative_host.eager_ops == profile["inference_eagle"]["eager_ops"]["value"]
    assert spec_eagle2.speculative_host.per_draft_token_us == profile["inference_eagle2"]["per_draft_token_us"]["value"]

