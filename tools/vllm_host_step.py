"""Times, on this machine's CPython, the serial host work of one vLLM 0.8.4 (V1) decode step outside the forward pass:
the engine core's Scheduler.schedule and Scheduler.update_from_output, the model runner's
GPUModelRunner._update_states and _prepare_inputs, and (tensor parallelism, MultiprocExecutor) the messages of a step
through vLLM's shared-memory MessageQueue: the SchedulerOutput broadcast to the workers and each worker's reply. It
runs vLLM's own code (not copies), installed in a scratch environment:

    python -m venv /tmp/v && /tmp/v/bin/pip install vllm==0.8.4 transformers==4.51.3
    /tmp/v/bin/python tools/vllm_host_step.py          # CPU time: the fastest of 5 runs' medians, batch 1 to 64

Stand-ins, as no GPU or CUDA driver is needed: the platform is vLLM's CpuPlatform (the configuration only), the two
compiled FlashAttention modules the V1 backend imports are empty stubs (their kernels are not called here), the model
runner's tensors live on the CPU (its host-to-device copies become CPU copies: the 8 device ops of _prepare_inputs
are costed apart in the profile, step_eager_ops, at host.eager_launch_us; their CPU side is in the figure here too),
the device properties are an H100's SM count. The model is Llama-3.1-8B's config (no weights: the scheduler and the
runner's inputs do not read them); requests of 300 prompt tokens, greedy, decoding; one KV cache group, 16-token
blocks; log_stats on (the OpenAI server's default).

Not timed (not reachable without a GPU): the forward pass's host path (the compiled model's dispatch, the piecewise
CUDA graphs' replays and the eager attention between them), the sampler, the end-of-step .tolist() sync, the output
thread's msgpack encoding and the front-end process (both beside the engine core's loop).

Not part of the package: its figures are written into engines/vllm/0.8.4.yaml with this file named as their source
(0.8.5's profile takes them over, an estimate; its MultiprocExecutor reads rank 0's reply only).
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
import types
import json


def _stand_ins():
    """vLLM importable and configurable without CUDA: the CPU platform for the configuration, empty FlashAttention
    extension modules, an H100's SM count."""
    import torch
    import vllm.platforms as platforms
    from vllm.platforms.cpu import CpuPlatform

    platforms._current_platform = CpuPlatform()
    fa = types.ModuleType("vllm.vllm_flash_attn")
    fa.__path__ = []
    fa.flash_attn_varlen_func = fa.get_scheduler_metadata = lambda *a, **k: None
    utils = types.ModuleType("vllm.vllm_flash_attn.fa_utils")
    utils.flash_attn_supports_fp8 = lambda *a, **k: False
    utils.get_flash_attn_version = lambda *a, **k: 3
    sys.modules.update({"vllm.vllm_flash_attn": fa, "vllm.vllm_flash_attn.fa_utils": utils})
    torch.cuda.get_device_properties = lambda device: types.SimpleNamespace(multi_processor_count=132)
    import vllm.v1.worker.gpu_model_runner as runner_module
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend

    runner_module.get_attn_backend = lambda *a, **k: FlashAttentionBackend  # V1 on Hopper (platforms/cuda.py)
    return runner_module


LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
            "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
            "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
            "torch_dtype": "bfloat16", "bos_token_id": 128000, "eos_token_id": 128009, "tie_word_embeddings": False}


def build(batch: int):
    """A scheduler and a model runner of vLLM 0.8.4 with `batch` requests admitted and prefilled."""
    import torch
    from vllm.config import CacheConfig, DeviceConfig, LoadConfig, ModelConfig, ParallelConfig, SchedulerConfig, VllmConfig
    from vllm.sampling_params import SamplingParams
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, KVCacheTensor
    from vllm.v1.request import Request
    from vllm.v1.structured_output import StructuredOutputManager

    runner_module = _stand_ins()
    folder = tempfile.mkdtemp(prefix="llama8b_config_")
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(LLAMA_8B, f)
    model = ModelConfig(model=folder, task="generate", tokenizer=folder, tokenizer_mode="auto", trust_remote_code=False,
                        dtype="bfloat16", seed=0, max_model_len=8192, skip_tokenizer_init=True)
    config = VllmConfig(model_config=model, cache_config=CacheConfig(block_size=16, gpu_memory_utilization=0.9,
                                                                      swap_space=0, cache_dtype="auto"),
                        scheduler_config=SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=8192,
                                                         max_model_len=8192),
                        parallel_config=ParallelConfig(), load_config=LoadConfig(), device_config=DeviceConfig("cpu"))
    runner = runner_module.GPUModelRunner(config, torch.device("cpu"))
    spec = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128, dtype=torch.bfloat16, use_mla=False)
    blocks = 64 * 600
    kv = KVCacheConfig(num_blocks=blocks, tensors={"layer.0": KVCacheTensor(size=spec.page_size_bytes * blocks)},
                       kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)])
    scheduler = Scheduler(scheduler_config=config.scheduler_config, model_config=model,
                          cache_config=config.cache_config, lora_config=None, kv_cache_config=kv,
                          structured_output_manager=StructuredOutputManager(config), log_stats=True)
    for i in range(batch):
        scheduler.add_request(Request(
            request_id=f"r{i}", prompt=None, prompt_token_ids=list(range(1000, 1300)), multi_modal_inputs=None,
            multi_modal_hashes=None, multi_modal_placeholders=None,
            sampling_params=SamplingParams(temperature=0.0, max_tokens=7000), eos_token_id=128009,
            arrival_time=time.time(), lora_request=None))
    return scheduler, runner


def output_of(runner):
    """The step's ModelRunnerOutput, as execute_model builds it after the sync (one sampled token a request)."""
    from vllm.v1.outputs import ModelRunnerOutput

    ids = runner.input_batch.req_ids
    return ModelRunnerOutput(req_ids=ids, req_id_to_index=runner.input_batch.req_id_to_index,
                             sampled_token_ids=[[5000] for _ in ids], spec_token_ids=None, logprobs=None,
                             prompt_logprobs_dict={})


PARTS = ("schedule", "_update_states", "_prepare_inputs", "update_from_output")


def step_times(scheduler, runner) -> tuple:
    """One decode step's parts, in us of CPU time, and the step's SchedulerOutput and ModelRunnerOutput."""
    clock = time.process_time_ns
    t0 = clock()
    so = scheduler.schedule()
    t1 = clock()
    runner._update_states(so)
    t2 = clock()
    runner._prepare_inputs(so)
    t3 = clock()
    out = output_of(runner)
    t4 = clock()
    scheduler.update_from_output(so, out)
    t5 = clock()
    return ((t1 - t0) / 1e3, (t2 - t1) / 1e3, (t3 - t2) / 1e3, (t5 - t4) / 1e3), so, out


def device_ops_us(runner, batch: int, repeats: int = 300) -> float:
    """Median CPU time, here, of _prepare_inputs' device ops on their CPU stand-ins (what the profile costs apart,
    step_eager_ops): the block table's copy_, the input_ids and positions copy_, slot_mapping's .long() and
    logits_indices' subtraction (on the CPU the three uploads' .to(device) return the tensor itself), so that they are
    not counted twice."""
    clock = time.process_time_ns
    times = []
    for _ in range(repeats):
        t0 = clock()
        runner.input_batch.block_table.commit(batch)
        runner.input_ids[:batch].copy_(runner.input_ids_cpu[:batch], non_blocking=True)
        runner.positions[:batch].copy_(runner.positions_cpu[:batch], non_blocking=True)
        runner.slot_mapping_cpu[:batch].to(runner.device, non_blocking=True).long()
        runner.query_start_loc_cpu[1:batch + 1] - 1
        times.append((clock() - t0) / 1e3)
    return statistics.median(times[repeats // 10:])


def queue_pair():
    """vLLM's shared-memory MessageQueue with one local reader, the writer and the reader in this process (the
    handshake in a thread), so a message's enqueue and dequeue can be timed one after the other."""
    from vllm.distributed.device_communicators.shm_broadcast import MessageQueue

    writer = MessageQueue(1, 1)
    holder = {}

    def connect():
        holder["reader"] = MessageQueue.create_from_handle(writer.export_handle(), 0)
        holder["reader"].wait_until_ready()

    thread = threading.Thread(target=connect)
    thread.start()
    writer.wait_until_ready()
    thread.join()
    return writer, holder["reader"]


def message_us(writer, reader, message, repeats: int = 300) -> tuple:
    """Median CPU times of one message's enqueue (pickle, shared-memory write) and dequeue (read, unpickle), in us."""
    clock = time.process_time_ns
    put, get = [], []
    for _ in range(repeats):
        t0 = clock()
        writer.enqueue(message)
        t1 = clock()
        reader.dequeue()
        put.append((t1 - t0) / 1e3)
        get.append((clock() - t1) / 1e3)
    return statistics.median(put[repeats // 10:]), statistics.median(get[repeats // 10:])


def main(batches=(1, 4, 16, 64), runs: int = 5, steps: int = 200) -> dict:
    results = {}
    for batch in batches:
        best = None
        for _ in range(runs):
            scheduler, runner = build(batch)
            step_times(scheduler, runner)  # the prefill
            rows = [step_times(scheduler, runner)[0] for _ in range(steps)]
            medians = [statistics.median(row[k] for row in rows[steps // 10:]) for k in range(len(PARTS))]
            best = medians if best is None or sum(medians) < sum(best) else best
        _, so, out = step_times(scheduler, runner)
        writer, reader = queue_pair()
        row = dict(zip(PARTS, best))
        row["device_ops"] = min(device_ops_us(runner, batch) for _ in range(runs))
        for name, message in (("broadcast", ("execute_model", (so,), {})), ("reply_none", (0, None)),
                              ("reply_output", (0, out))):
            put, get = min((message_us(writer, reader, message) for _ in range(2 * runs)), key=sum)
            row[f"{name}_enqueue"], row[f"{name}_dequeue"] = put, get
        results[batch] = row
        print(f"batch {batch:3d}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()) +
              f"  (us; step without IPC, its device ops' CPU side out: {sum(best) - row['device_ops']:.1f})", flush=True)
    fit("scheduler loop (device ops' CPU side out)",
        {b: sum(r[k] for k in PARTS) - r["device_ops"] for b, r in results.items()})
    fit("broadcast (enqueue + dequeue)", {b: r["broadcast_enqueue"] + r["broadcast_dequeue"] for b, r in results.items()})
    return results


def fit(label: str, by_batch: dict) -> tuple:
    """Least-squares line over the batches: (per step, per request) in us, printed."""
    xs, ys = list(by_batch), list(by_batch.values())
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    print(f"{label}: {my - slope * mx:.1f} us a step + {slope:.2f} us a request", flush=True)
    return my - slope * mx, slope


if __name__ == "__main__":
    import logging

    logging.disable(logging.WARNING)
    main()
