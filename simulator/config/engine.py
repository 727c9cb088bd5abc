"""The serving engine a scenario names: `engine: {name: sglang, version: "0.5.9", <flags>}`.

The flags are the engine's own launch options under their own names (SGLang's server arguments, vLLM's engine
arguments, TensorRT-LLM's LLM API options), so a launch command maps onto them one to one. Each flag left out takes
the engine's default at that version, which the engine profile (engines/<name>/<version>.yaml,
simulator.config.engine_profile) holds with its source. A scenario that names no engine runs DEFAULT_ENGINE, and
says so in its report and provenance.
"""

from typing import Annotated, Literal, Optional, Union

from pydantic import Field, PositiveInt

from .base import Strict

from .names import DEFAULT_ENGINE, ENGINE_NAMES, MOE_BACKENDS  # noqa: F401  (re-exported)
# Spec-Bench's evaluation scripts (hemingkx/Spec-Bench evaluation/inference_*.py), each a method's reference code
SPEC_BENCH_SCRIPTS = ("inference_eagle", "inference_eagle2", "inference_eagle3", "inference_medusa", "inference_hydra",
                      "inference_lookahead", "inference_pld", "inference_sps")
VERSION_PATTERN = r"^[0-9A-Za-z][0-9A-Za-z.+_-]{0,40}$"


class _EngineBase(Strict):
    version: str = Field(pattern=VERSION_PATTERN, description="The engine's release, as its package names it "
                         "(a profile engines/<name>/<version>.yaml must exist)")


class SGLangEngine(_EngineBase):
    """SGLang's server arguments (python/sglang/srt/server_args.py, `--flag-name` as flag_name)."""

    name: Literal["sglang"] = Field(description="SGLang (sgl-project/sglang)")
    disable_overlap_schedule: Optional[bool] = Field(None, description="--disable-overlap-schedule")
    disable_cuda_graph: Optional[bool] = Field(None, description="--disable-cuda-graph: every pass eager")
    cuda_graph_max_bs: Optional[PositiveInt] = Field(None, description="--cuda-graph-max-bs: the largest captured batch")
    cuda_graph_bs: Optional[list[PositiveInt]] = Field(None, min_length=1, max_length=1024,
                                                       description="--cuda-graph-bs: the captured batch sizes")
    disable_cuda_graph_padding: Optional[bool] = Field(None, description="--disable-cuda-graph-padding: capture every "
                                                       "batch size up to the largest instead of padding")
    disable_custom_all_reduce: Optional[bool] = Field(None, description="--disable-custom-all-reduce: NCCL only")
    enable_flashinfer_allreduce_fusion: Optional[bool] = Field(None, description="--enable-flashinfer-allreduce-fusion"
                                                               ": all-reduce fused with the next RMSNorm")
    mem_fraction_static: Optional[float] = Field(None, gt=0, le=1, description="--mem-fraction-static")


class VLLMEngine(_EngineBase):
    """vLLM's engine arguments (vllm/engine/arg_utils.py, `--flag-name` as flag_name)."""

    name: Literal["vllm"] = Field(description="vLLM (vllm-project/vllm)")
    enforce_eager: Optional[bool] = Field(None, description="--enforce-eager: no CUDA graphs")
    cuda_graph_sizes: Optional[list[PositiveInt]] = Field(None, min_length=1, max_length=1024,
                                                          description="--cuda-graph-sizes: the captured batch sizes")
    disable_custom_all_reduce: Optional[bool] = Field(None, description="--disable-custom-all-reduce: NCCL only")
    async_scheduling: Optional[bool] = Field(None, description="--async-scheduling: the scheduler overlaps the GPU")
    gpu_memory_utilization: Optional[float] = Field(None, gt=0, le=1, description="--gpu-memory-utilization")


class TRTLLMCudaGraphConfig(Strict):
    max_batch_size: Optional[PositiveInt] = Field(None, description="cuda_graph_config.max_batch_size")
    batch_sizes: Optional[list[PositiveInt]] = Field(None, min_length=1, max_length=1024,
                                                     description="cuda_graph_config.batch_sizes")
    enable_padding: Optional[bool] = Field(None, description="cuda_graph_config.enable_padding")


class TRTLLMMoeConfig(Strict):
    backend: Optional[Literal[MOE_BACKENDS]] = Field(None, description=(  # type: ignore[valid-type]
        "moe_config.backend: the fused-MoE backend (CUTLASS, TRTLLM, DEEPGEMM; the release's CUTEDSL, WIDEEP and "
        "VANILLA have no measured rows and are not taken)"))


class TRTLLMEngine(_EngineBase):
    """TensorRT-LLM's LLM API options (tensorrt_llm/llmapi/llm_args.py, the PyTorch backend)."""

    name: Literal["trtllm"] = Field(description="TensorRT-LLM's PyTorch backend")
    disable_overlap_scheduler: Optional[bool] = Field(None, description="disable_overlap_scheduler")
    cuda_graph_config: Optional[TRTLLMCudaGraphConfig] = Field(None, description="cuda_graph_config (null: no graphs)")
    free_gpu_memory_fraction: Optional[float] = Field(None, gt=0, le=1,
                                                      description="kv_cache_config.free_gpu_memory_fraction")
    moe_config: Optional[TRTLLMMoeConfig] = Field(None, description="moe_config (its backend)")


class TransformersEngine(_EngineBase):
    """HuggingFace transformers' generate(), eager PyTorch (the research benchmarks' harness)."""

    name: Literal["transformers"] = Field(description="HuggingFace transformers, eager")
    script: Optional[Literal[SPEC_BENCH_SCRIPTS]] = Field(None, description=(  # type: ignore[valid-type]
        "The research harness's script that runs the method's own code over transformers (Spec-Bench's "
        "evaluation/<script>.py); the profile costs that code's step (default: by the speculation method)"))


class GptFastEngine(_EngineBase):
    """pytorch-labs/gpt-fast's generate.py (torch.compile mode reduce-overhead: decode in CUDA graphs)."""

    name: Literal["gpt_fast"] = Field(description="pytorch-labs/gpt-fast")
    compile: Optional[bool] = Field(None, description="--compile (false: eager decode)")


class MagicDecEngine(_EngineBase):
    """Infini-AI-Lab/MagicDec's benchmarks (gpt-fast's model code batched, torch.compile max-autotune)."""

    name: Literal["magicdec"] = Field(description="Infini-AI-Lab/MagicDec")


Engine = Annotated[Union[SGLangEngine, VLLMEngine, TRTLLMEngine, TransformersEngine, GptFastEngine, MagicDecEngine],
                   Field(discriminator="name")]


from .engine_profile import flags_of  # noqa: E402,F401  (re-exported: read from here)
