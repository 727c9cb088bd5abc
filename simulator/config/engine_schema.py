"""The engine profile's file format: every input a mapping {value, kind, source}, validated (config/engine_profile.py
says what the kinds mean and resolves a profile into a scenario's runtime keys)."""
from typing import Generic, Literal, Optional, TypeVar

from pydantic import Field, NonNegativeInt, PositiveInt, model_validator

from . import rules
from .base import Strict
from .surface import EngineProfileSurface, HostWorkSurface
from .policy import AssistantHeuristicPolicy
from .scenario import CustomAllReduce, DecoderKernels, KernelDatabase, KernelFamily, PiecewiseHost, SpeculativeHost, WeightOnlyGemv
from .topology import Dtype

T = TypeVar("T")
from .names import MOE_BACKENDS, SOURCE_KINDS


class Sourced(Strict, Generic[T]):
    """One engine-side input and where it comes from."""

    value: T
    kind: Literal[SOURCE_KINDS]  # type: ignore[valid-type]
    source: str = Field(min_length=8, description="file and function at that release, or the calibration figure")


class CapturedPasses(Strict):
    """Which passes the engine replays from CUDA graphs (its graph runners), absent flags that turn them off."""

    decode: bool
    target_verify: bool
    draft: bool
    draft_extend: bool


class MaxBatchTier(Strict):
    """The largest captured batch where the GPU's memory is below a bound and the TP degree below another (the
    first tier that matches wins; a tier without bounds matches every machine)."""

    gpu_memory_below_GB: Optional[float] = Field(None, gt=0)
    tp_below: Optional[PositiveInt] = None
    max_bs: PositiveInt


class BatchRange(Strict):
    """Captured batch sizes start, start + step, ... up to stop (inclusive), as the engine's list comprehension."""

    start: PositiveInt
    stop: PositiveInt
    step: PositiveInt = 1


class HostWork(HostWorkSurface, Strict):
    """One drafter code's host work around a speculative step (SpeculativeHost's fields), each input with its
    source; a field left out is zero."""

    eager_ops: Optional[Sourced[NonNegativeInt]] = None
    eager_ops_per_draft_step: Optional[Sourced[NonNegativeInt]] = None
    eager_ops_per_draft_token: Optional[Sourced[NonNegativeInt]] = None
    eager_ops_per_accepted_token: Optional[Sourced[NonNegativeInt]] = None
    eager_ops_behind_draft_graph: Optional[Sourced[NonNegativeInt]] = None
    verify_input_ops: Optional[Sourced[NonNegativeInt]] = None
    eager_ops_padded_draft: Optional[Sourced[NonNegativeInt]] = None
    verify_input_ops_padded: Optional[Sourced[NonNegativeInt]] = None
    tree_mask_bytes_per_entry: Optional[Sourced[float]] = None
    syncs: Optional[Sourced[NonNegativeInt]] = None
    syncs_per_draft_step: Optional[Sourced[NonNegativeInt]] = None
    syncs_per_accepted_token: Optional[Sourced[NonNegativeInt]] = None
    step_host_us: Optional[Sourced[float]] = None
    per_request_us: Optional[Sourced[float]] = None
    per_draft_token_us: Optional[Sourced[float]] = None
    per_accepted_token_us: Optional[Sourced[float]] = None
    stop_check_us: Optional[Sourced[float]] = None


class ExecutorIpc(Strict):
    """A step's messages between the engine's scheduler process and its tensor-parallel worker processes, serial with
    the GPU where the engine does not overlap its scheduling: the scheduler output's broadcast (written once, read by
    every worker at once), rank 0's reply (the step's output) and, where the engine waits for them, the other ranks'
    (read one after another)."""

    broadcast_us: float = Field(ge=0, description="the scheduler output's write and one worker's read")
    broadcast_per_request_us: float = Field(0.0, ge=0, description="the broadcast's more a running request")
    rank0_reply_us: float = Field(ge=0, description="rank 0's reply: its write and the scheduler's read")
    other_reply_us: float = Field(ge=0, description="each other rank's reply the scheduler reads (its write overlaps)")
    replies: Literal["all", "rank0"] = Field(description="whose replies the scheduler waits for")



class NgramHost(Strict):
    """The n-gram drafter's host time (speculation.ngram's keys of the same names), as this engine computes it."""

    host_us_per_step: float = Field(ge=0)
    host_us_per_request: float = Field(ge=0)
    host_us_per_node: float = Field(ge=0)


NGRAM_HOST_KEYS = tuple(f"speculation.ngram.{name}" for name in NgramHost.model_fields)


class QuantisedGemm(Strict):
    """The kernels one linear layer of quantised weights runs: its GEMM and the activation quantisation before it."""

    gemm: str = Field(min_length=1, description="the GEMM kernel (and its backend choice)")
    activation_quant: Optional[str] = Field(description="the kernel quantising the activations first (null: none, "
                                            "weight-only or not supported)")
    activation_quant_kernels: NonNegativeInt = Field(description="its launches per linear layer")


class CompiledEntry(Strict):
    """The host's time entering a compiled forward before its first graph piece (vLLM V1: support_torch_compile's
    dispatch and Dynamo's bytecode feeding the graph every parameter)."""

    entry_us: float = Field(ge=0, le=1e4, description="a pass")
    entry_per_layer_us: float = Field(ge=0, le=1e3, description="per layer, for its parameter arguments")


class ProfileKernels(Strict):
    """The kernels an engine's own eager model code launches (its Python model, not SGLang's fused kernels)."""

    decoder: Optional[DecoderKernels] = Field(None, description=(
        "the target's own eager layers; None: the model card's (an engine whose target runs in graphs it compiles)"))
    draft_head: Optional[DecoderKernels] = None
    draft_head_by_code: dict[str, DecoderKernels] = Field(default_factory=dict, description=(
        "the method's code (speculation method, or the engine's script flag) -> its head's counts where they differ"))
    tree_attention_by_code: dict[str, int] = Field(default_factory=dict, description=(
        "the method's code -> its verify's extra kernels per layer where its own model code differs from the "
        "decoder's tree_attention"))


class EngineProfile(EngineProfileSurface, Strict):
    """Every engine-side input of one engine release."""

    engine: Literal["sglang", "vllm", "trtllm", "transformers", "gpt_fast", "magicdec"]
    version: str
    released: str = Field(description="release date (YYYY-MM-DD) and where the code was read")
    scheduler_step_us: Sourced[Optional[float]] = Field(description=(
        "the scheduler loop's host time per step; null: the topology's host.step_overhead_us"))
    overlap_schedule: Sourced[bool] = Field(description="the scheduler's host work hidden behind the GPU in plain decode")
    overlap_schedule_speculative: Sourced[bool] = Field(description="the same while speculating")
    cuda_graphs: Sourced[CapturedPasses]
    cuda_graph_max_bs: Sourced[list[MaxBatchTier]] = Field(description="the largest captured batch by machine")
    speculative_capture_bs: Sourced[list[BatchRange]] = Field(description="speculative graphs' batch sizes (padded up)")
    speculative_capture_unit: Optional[Sourced[Literal["requests", "tokens"]]] = Field(None, description=(
        "what the captured sizes count, a speculative pass padded up in it: requests (each padded request a whole "
        "verify tree of rows) or tokens (the pass's token count); absent: requests"))
    speculative_host: dict[str, HostWork] = Field(description=(
        "the drafter's code (the engine's script flag, else the speculation method) -> the host work of its step; "
        "`default`: every model drafter without an entry of its own"))
    scheduler_per_request_us: Optional[Sourced[float]] = Field(None, description=(
        "the scheduler loop's host time per running request a step, beside scheduler_step_us; absent: none"))
    executor_ipc: Optional[Sourced[ExecutorIpc]] = Field(None, description=(
        "a step's scheduler-to-worker messages with tensor parallelism, added to scheduler_step_us; absent: none"))
    step_eager_ops: Optional[Sourced[NonNegativeInt]] = Field(None, description=(
        "device ops every step issues before its first pass kernel (input uploads); absent: none counted"))
    speculative_verify_tokens: Optional[Sourced[Literal["fixed", "proposed"]]] = Field(None, description=(
        "a model-free drafter's verify: its configured drafts (fixed) or what it proposed (proposed); absent: fixed"))
    custom_allreduce: Sourced[Optional[CustomAllReduce]] = Field(description="null: NCCL for every all-reduce")
    fuse_allreduce_rmsnorm: Sourced[bool]
    attention_backend: Sourced[dict[str, str]] = Field(description="GPU architecture (sm90, sm100, sm120, ...) -> backend")
    quantised_gemm: Sourced[dict[Literal["fp8", "fp8_block", "fp4", "int8", "int4"], QuantisedGemm]] = Field(
        description="weights' dtype -> the GEMM and activation-quantisation kernels the engine runs for it")
    weight_only_gemv: Optional[Sourced[WeightOnlyGemv]] = Field(None, description=(
        "the engine's own kernel for weight-only linear layers at few rows, timed from the bf16 GEMV's rate; absent: "
        "the measured weight-only table"))
    kernel_database: Sourced[KernelDatabase]
    unmeasured_kernels: Optional[Sourced[dict[KernelFamily, str]]] = Field(None, description=(
        "kernel families the engine runs with kernels of its own that kernel_database's tables do not measure (family "
        "-> its kernel), timed by the roofline; absent: none (the tables' kernel stands for the engine's)"))
    speculative_policy: Optional[Sourced[dict[str, AssistantHeuristicPolicy]]] = Field(None, description=(
        "the drafter's code (the engine's script flag, else the speculation method) -> the draft-length schedule the "
        "engine's own code runs; absent, or no entry: the scenario's policy (a policy the scenario sets wins)"))
    ngram_host: Optional[Sourced[NgramHost]] = Field(None, description=(
        "the n-gram drafter's host time; absent: speculation.ngram's own (SGLang's trie costs)"))
    eager_launch_us: Optional[Sourced[float]] = Field(None, description=(
        "host time per eagerly launched kernel under the engine's Python; absent: the topology's host.eager_launch_us"))
    compiled_entry: Optional[Sourced[CompiledEntry]] = Field(None, description=(
        "the compiled forward's entry before its first piece, with piecewise_host; absent: none"))
    piecewise_host: Optional[Sourced[PiecewiseHost]] = Field(None, description=(
        "the host work of a graph pass captured piecewise (a piece per layer, eager attention between); absent: "
        "one graph a pass"))
    eager_kernels: Optional[Sourced[ProfileKernels]] = Field(None, description=(
        "the engine's own eager kernel counts; absent: the model cards' (SGLang's)"))
    mtp_eh_proj: Optional[Sourced[Literal["replicated", "row_parallel"]]] = Field(None, description=(
        "how an MTP module's eh_proj is split over the tp ranks; absent: replicated"))
    vocab_parallel: Optional[Sourced[bool]] = Field(None, description=(
        "the embedding and output layer split by vocabulary over the tp ranks (true) or whole on every rank (false); "
        "absent: true"))
    mtp_draft_gather: Optional[Sourced[Literal["logits", "top1"]]] = Field(None, description=(
        "what an MTP draft pass all-gathers after its vocab-split lm_head: the logits or each rank's top-1; absent: "
        "logits"))
    replicated_embedding: Optional[Sourced[list[str]]] = Field(None, description=(
        "model architectures (a card's architecture) whose token embedding the engine's model code keeps whole on "
        "every tp rank, with no all-reduce after it, while the lm_head stays split by vocabulary; absent: none"))
    separate_gate_up: Optional[Sourced[list[Dtype]]] = Field(None, description=(
        "weight dtypes whose MLP gate and up projections are two GEMMs; absent: one fused gate_up GEMM"))
    moe_backend: Optional[Sourced[Literal[MOE_BACKENDS]]] = Field(None, description=(  # type: ignore[valid-type]
        "the fused-MoE backend by the engine's own name when its flag is not set (TensorRT-LLM's moe_config.backend); "
        "absent: the engine's default lanes"))
    max_draft_tokens: Optional[Sourced[int]] = Field(None, description=(
        "the most draft tokens a request's step verifies (a scenario's speculation.draft_tokens above it runs at it); "
        "absent: no cap"))

    _has_default = model_validator(mode="after")(rules.engine_profile_default)
