"""What each SGLang / vLLM launch flag means for a scenario: the scenario key it sets, or why it is not modelled.

Flags are named as the engines' own argument parsers spell them (SGLang server_args.py, vLLM EngineArgs); a flag is
either mapped (a setter that writes scenario keys), known and without effect on the simulated figures (host, port,
logging, tokenizer), or known and not modelled (it changes the engine, but no scenario key says how); anything else
is unknown. The last three are all listed with the scenario, never dropped.
"""
from __future__ import annotations

from typing import Any, Callable

# flags that take no value (store_true in the engines' parsers)
SWITCHES = {
    "--enable-dp-attention", "--disable-cuda-graph", "--disable-overlap-schedule", "--disable-custom-all-reduce",
    "--enable-flashinfer-allreduce-fusion", "--enable-nccl-nvls", "--enable-two-batch-overlap", "--trust-remote-code",
    "--enable-torch-compile", "--enable-expert-parallel", "--enforce-eager", "--disable-radix-cache",
    "--enable-mixed-chunk", "--enable-dp-lm-head", "--enable-symm-mem", "--disable-log-requests",
    "--enable-prefix-caching", "--no-enable-prefix-caching", "--enable-chunked-prefill", "--disable-log-stats",
    "--enable-metrics", "--skip-server-warmup", "--enable-cache-report", "--disable-cuda-graph-padding", "--async-scheduling",
}
NO_EFFECT = {"--host", "--port", "--api-key", "--served-model-name", "--log-level", "--log-requests",
             "--tokenizer-path", "--tokenizer", "--trust-remote-code", "--disable-log-requests", "--disable-log-stats",
             "--enable-metrics", "--skip-server-warmup", "--enable-cache-report", "--chat-template", "--uvicorn-log-level",
             "--download-dir", "--revision", "--seed", "--random-seed", "--dist-init-addr", "--node-rank"}

Setter = Callable[[dict, Any], None]


def _set(path: str, convert=int) -> Setter:
    def apply(s: dict, value: Any) -> None:
        node = s
        keys = path.split(".")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = convert(value) if convert else value
    return apply


def _engine(key: str, convert=lambda _v: True) -> Setter:
    """A flag the scenario's engine: key holds under the engine's own name (simulator/config/engine.py)."""
    def apply(s: dict, value: Any) -> None:
        s.setdefault("_engine", {})[key] = convert(value)
    return apply


def _sizes(value: Any) -> list[int]:
    return sorted({int(v) for v in str(value).replace(",", " ").split()})


def _chunked(s: dict, value: Any) -> None:
    if int(value) > 0:  # -1 turns chunking off: a prompt is one prefill (not a scenario key)
        s.setdefault("workload", {})["max_prefill_tokens"] = int(value)


def _deepep_mode(s: dict, value: Any) -> None:
    s.setdefault("runtime", {})["ep_backend"] = {"low_latency": "deepep_low_latency", "normal": "deepep_normal",
                                                 "auto": "auto"}[str(value)]


def _a2a(s: dict, value: Any) -> None:
    if str(value) == "deepep":
        s.setdefault("runtime", {}).setdefault("ep_backend", "auto")


def _spec(key: str, convert=int) -> Setter:
    def apply(s: dict, value: Any) -> None:
        s.setdefault("_spec", {})[key] = convert(value) if convert else value
    return apply


def _vllm_tp(s: dict, value: Any) -> None:
    s.setdefault("_vllm", {})["tp"] = int(value)


def _vllm_dp(s: dict, value: Any) -> None:
    s.setdefault("_vllm", {})["dp"] = int(value)


def _vllm_ep(s: dict, _value: Any) -> None:
    s.setdefault("_vllm", {})["ep"] = True


SGLANG: dict[str, Setter] = {
    "--model-path": _spec("target", None), "--model": _spec("target", None),
    "--tp": _set("parallelism.tp"), "--tp-size": _set("parallelism.tp"), "--tensor-parallel-size": _set("parallelism.tp"),
    "--dp": _set("parallelism.dp"), "--dp-size": _set("parallelism.dp"), "--data-parallel-size": _set("parallelism.dp"),
    "--ep": _set("parallelism.ep"), "--ep-size": _set("parallelism.ep"), "--expert-parallel-size": _set("parallelism.ep"),
    "--pp": _set("parallelism.pp"), "--pp-size": _set("parallelism.pp"),
    "--enable-dp-attention": _set("parallelism.dp_attention", lambda _v: True),
    "--speculative-algorithm": _spec("algorithm", str), "--speculative-num-steps": _spec("steps"),
    "--speculative-eagle-topk": _spec("topk"), "--speculative-num-draft-tokens": _spec("draft_tokens"),
    "--speculative-draft-model-path": _spec("draft", None), "--speculative-draft": _spec("draft", None),
    "--cuda-graph-max-bs": _engine("cuda_graph_max_bs", int), "--cuda-graph-bs": _engine("cuda_graph_bs", _sizes),
    "--disable-cuda-graph": _engine("disable_cuda_graph"), "--disable-overlap-schedule": _engine("disable_overlap_schedule"),
    "--disable-cuda-graph-padding": _engine("disable_cuda_graph_padding"),
    "--disable-custom-all-reduce": _engine("disable_custom_all_reduce"),
    "--enable-flashinfer-allreduce-fusion": _engine("enable_flashinfer_allreduce_fusion"),
    "--enable-nccl-nvls": _set("runtime.allreduce", lambda _v: "nvls"),
    "--mem-fraction-static": _engine("mem_fraction_static", float),
    "--chunked-prefill-size": _chunked, "--max-running-requests": _set("workload.max_running_requests"),
    "--moe-a2a-backend": _a2a, "--deepep-mode": _deepep_mode,
}
VLLM: dict[str, Setter] = {
    "--model": _spec("target", None),
    "--tensor-parallel-size": _vllm_tp, "-tp": _vllm_tp, "--data-parallel-size": _vllm_dp, "-dp": _vllm_dp,
    "--pipeline-parallel-size": _set("parallelism.pp"), "-pp": _set("parallelism.pp"),
    "--enable-expert-parallel": _vllm_ep, "--speculative-config": _spec("vllm_config", None),
    "--enforce-eager": _engine("enforce_eager"), "--disable-custom-all-reduce": _engine("disable_custom_all_reduce"),
    "--cuda-graph-sizes": _engine("cuda_graph_sizes", _sizes), "--async-scheduling": _engine("async_scheduling"),
    "--gpu-memory-utilization": _engine("gpu_memory_utilization", float),
    "--max-num-batched-tokens": _set("workload.max_prefill_tokens"), "--max-num-seqs": _set("workload.max_running_requests"),
}
# known flags that change the engine but have no scenario key (said so, with what to do where there is one)
NOT_MODELLED = {
    "--kv-cache-dtype": "the card's kv_cache_dtype: --set model.kv_cache_dtype=fp8",
    "--quantization": "the card's weights: import the quantised checkpoint's config.json",
    "--attention-backend": "kernel times come from runtime.kernels (measured database or roofline)",
    "--enable-two-batch-overlap": "runtime.two_batch_overlap at event fidelity, by hand",
    "--enable-torch-compile": "torch.compile's fusions are not simulated",
    "--context-length": "requests' lengths come from workload", "--max-model-len": "requests' lengths come from workload",
    "--max-total-tokens": "the KV budget follows runtime.memory_fraction",
    "--nnodes": "machines come from the topology", "--schedule-policy": "the scheduler is first-come first-served",
    "--disable-radix-cache": "prefix caching is not simulated", "--enable-prefix-caching": "prefix caching is not simulated",
    "--no-enable-prefix-caching": "prefix caching is not simulated",
    "--enable-chunked-prefill": "prefill is chunked at workload.max_prefill_tokens",
    "--enable-mixed-chunk": "prefill chunks run in their own steps", "--enable-dp-lm-head": "not simulated",
    "--enable-symm-mem": "not simulated",
    "--compilation-config": "vLLM's compilation passes are not simulated",
    "--max-cudagraph-capture-size": "vLLM's capture sizes: runtime.speculative_graph_batch_sizes by hand",
    "--speculative-token-tree": "an explicit tree: speculation.tree (kind: parents) by hand",
    "--block-size": "not simulated", "--page-size": "not simulated", "--swap-space": "not simulated",
}
