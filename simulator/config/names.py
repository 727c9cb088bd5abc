"""The configuration's fixed choices and key lists that code outside the models reads: here, without pydantic, so a
run imports them without the models (the models build their Literal types from the same tuples)."""

ROUTERS = ("round_robin", "least_loaded")
ALLREDUCE_CHOICES = ("auto", "nccl", "nccl_ring", "nccl_tree", "nvls", "one_shot", "two_shot")
EP_BACKENDS = ("auto", "deepep_low_latency", "deepep_normal", "nccl")
# TensorRT-LLM's moe_config.backend values with a measured lane (kernels/tables.py MOE_BACKEND_LANES); its others
# (CUTEDSL, WIDEEP, VANILLA) have none
MOE_BACKENDS = ("CUTLASS", "TRTLLM", "DEEPGEMM")
ENGINE_NAMES = ("sglang", "vllm", "trtllm", "transformers", "gpt_fast", "magicdec")
DEFAULT_ENGINE = {"name": "sglang", "version": "0.5.9"}  # the newest SGLang profile shipped; the reference's version
SOURCE_KINDS = ("counted", "measured", "fitted", "estimated")
# the roofline's fitted per-kernel-kind efficiency sets (topology gpu.roofline keys)
ROOFLINE_SETS = ("gemm_bf16", "gemm_fp8", "gemm_fp4", "moe_bf16", "moe_fp8", "moe_int4", "moe_fp4", "mla_bmm_bf16",
                 "mla_bmm_fp8", "attention_decode_bf16", "attention_decode_fp8", "attention_prefill",
                 "mla_decode_bf16", "mla_decode_fp8", "mla_prefill")
# the GPU's physical fields a kernel's measured time depends on: a scenario that sets one away from its topology file's
# value runs a what-if GPU, whose measured kernel times are scaled by the roofline (kernels.timer.KernelTimer)
MEASURED_GPU_FIELDS = ("memory_bandwidth_GBps", "peak_TFLOPS", "kernel_floor_us", "num_sms")
