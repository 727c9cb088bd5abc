"""Times, on this machine's CPython, the host work of entering a vLLM V1 (0.8.5) compiled forward before its first
graph piece is replayed: compilation/decorators.py support_torch_compile's __call__ (the compiled model's entry),
compilation/wrapper.py TorchCompileWrapperWithCustomDispatcher.dispatch_to_code (the forward's code object swapped
for Dynamo's transformed bytecode, guards skipped) and that bytecode itself, which gathers every parameter and buffer
of the model as an argument of the compiled graph (PyTorch 2.6's Dynamo lifts them: inline_inbuilt_nn_modules) and
calls it once. Run before the forward's first piece, with the GPU idle after the step before's sync. vLLM's own code
(not copies), installed in a scratch environment:

    python -m venv /tmp/v && /tmp/v/bin/pip install vllm==0.8.5 transformers==4.51.3
    /tmp/v/bin/python tools/vllm_dispatch_host.py     # thread CPU time: 3 fresh processes a layer count, the
                                                      # fastest of their 5 runs' medians

Stand-ins, as no GPU is needed: vllm_host_step's (the CPU platform for the configuration, empty FlashAttention
modules); the compiled graph is a stub that returns at once (vLLM's piecewise backend, compilation/backends.py
VllmBackend's split graph, is timed apart: tools/vllm_forward_host.py's pieces), so what is timed is the entry and
the bytecode that feeds the graph, the same whatever backend Dynamo hands the graph to (the compilation level is
DYNAMO_ONCE here, whose dispatch is PIECEWISE's: use_custom_dispatcher at level >= DYNAMO_ONCE). The model is
vLLM's LlamaForCausalLM's LlamaModel with Llama-3.1's layer counts (32: 8B, 80: 70B) and small hidden sizes: the
bytecode's work is per tensor argument, not per element (a Llama layer passes 6 parameter tensors at any TP degree).

Not part of the package: its figures are written into engines/vllm/0.8.5.yaml and 0.8.4.yaml
(compiled_entry) with this file named as their source.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time

from vllm_forward_host import median_us  # tools/ is the script's folder, on sys.path

SMALL_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
               "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
               "vocab_size": 1024, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
               "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                "original_max_position_embeddings": 8192, "rope_type": "llama3"},
               "torch_dtype": "bfloat16", "bos_token_id": 128000, "eos_token_id": 128009, "tie_word_embeddings": False}
ARGUMENTS = {}  # layers -> the compiled graph's placeholders (inputs, parameters, buffers, sizes)


def stub_backend(graph_module, example_inputs):
    """A compiled graph that returns at once (its outputs' number, as Dynamo's bytecode unpacks them)."""
    import torch

    output = next(n for n in graph_module.graph.nodes if n.op == "output")
    placeholders = sum(1 for n in graph_module.graph.nodes if n.op == "placeholder")
    ARGUMENTS[len(ARGUMENTS)] = placeholders
    values = tuple(torch.empty(0) for _ in output.args[0])
    return lambda *args: values


def build(layers: int):
    """vLLM 0.8.5's LlamaModel (support_torch_compile) of `layers` layers, compiled once by Dynamo (stub backend)."""
    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from vllm_host_step import _stand_ins

    _stand_ins()
    import vllm.attention.layer as attention_layer
    import vllm.platforms as platforms
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend

    platforms._current_platform.check_and_update_config = lambda config: None  # the CPU platform's own settings
    attention_layer.get_attn_backend = lambda *a, **k: FlashAttentionBackend  # V1 on Hopper (platforms/cuda.py)
    from vllm.config import (CacheConfig, CompilationConfig, CompilationLevel, DeviceConfig, LoadConfig, ModelConfig,
                             ParallelConfig, SchedulerConfig, VllmConfig, set_current_vllm_config)
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.distributed.parallel_state import model_parallel_is_initialized
    from vllm.model_executor.custom_op import CustomOp
    from vllm.model_executor.layers import activation
    from vllm.model_executor.models.llama import LlamaForCausalLM

    # SiluAndMul.__init__ looks up the compiled silu_and_mul, which forward_native (the one dispatched) never calls
    activation.SiluAndMul.__init__ = lambda self: CustomOp.__init__(self)

    if not model_parallel_is_initialized():
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method=f"file://{tempfile.mktemp()}")
        initialize_model_parallel(1, 1)
    folder = tempfile.mkdtemp(prefix="llama_config_")
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({**SMALL_LLAMA, "num_hidden_layers": layers}, f)
    model = ModelConfig(model=folder, task="generate", tokenizer=folder, tokenizer_mode="auto",
                        trust_remote_code=False, dtype="bfloat16", seed=0, max_model_len=8192,
                        skip_tokenizer_init=True)
    compilation = CompilationConfig(level=CompilationLevel.DYNAMO_ONCE, custom_ops=["none"],
                                    backend="vllm_dispatch_host.stub_backend")
    config = VllmConfig(model_config=model, cache_config=CacheConfig(block_size=16, gpu_memory_utilization=0.9,
                                                                      swap_space=0, cache_dtype="auto"),
                        scheduler_config=SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=8192,
                                                         max_model_len=8192),
                        parallel_config=ParallelConfig(), load_config=LoadConfig(), device_config=DeviceConfig("cpu"),
                        compilation_config=compilation)
    # V1's __post_init__ set PIECEWISE (custom ops off); the same dispatch at DYNAMO_ONCE, with the stub backend
    config.compilation_config.level = CompilationLevel.DYNAMO_ONCE
    config.compilation_config.backend = "vllm_dispatch_host.stub_backend"
    torch.set_default_dtype(torch.bfloat16)
    with set_current_vllm_config(config):
        causal = LlamaForCausalLM(vllm_config=config)
    ids = torch.zeros(1, dtype=torch.long)
    causal.model(ids, ids, None, None)  # Dynamo's one compilation (the stub backend's graph)
    return causal.model, ids


def measure(layers: int, runs: int = 5) -> tuple[float, int]:
    """(the fastest of `runs` medians, the graph's arguments) for a model of `layers` layers, in this process."""
    import torch

    with torch.inference_mode():  # GPUModelRunner.execute_model's decorator
        model, ids = build(layers)
        import vllm_dispatch_host as registered  # the module the backend's qualname resolved to

        placeholders = list(registered.ARGUMENTS.values())[-1]
        # the calling thread's CPU time, not the process's: gloo's threads aside
        return (min(median_us(lambda: model(ids, ids, None, None), clock=time.thread_time_ns) for _ in range(runs)),
                placeholders)


def main(layer_counts=(8, 32, 80), processes: int = 3) -> dict:
    """Each layer count in `processes` fresh processes (one model compiled a process), the fastest kept; the
    least-squares line over the layer counts."""
    import subprocess

    out = {}
    for layers in layer_counts:
        rows = [json.loads(subprocess.run([sys.executable, __file__, str(layers)], capture_output=True, text=True,
                                          check=True).stdout.strip().splitlines()[-1]) for _ in range(processes)]
        out[layers] = min(rows)
        print(f"{layers:3d} layers: {out[layers][0]:7.1f} us a forward's entry, {out[layers][1]} graph arguments "
              f"(processes: {', '.join(f'{us:.1f}' for us, _ in rows)})")
    line = statistics.linear_regression(list(out), [us for us, _ in out.values()])
    print(f"least squares: {line.intercept:.1f} us + {line.slope:.2f} us a layer")
    return out


if __name__ == "__main__":
    if len(sys.argv) > 1:
        print(json.dumps(measure(int(sys.argv[1]))))
    else:
        main()
