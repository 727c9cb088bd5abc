"""A scenario: which machine, which model, how it is run, what it serves, and how it speculates."""

from typing import Any, Literal, Optional, Union

from pydantic import Field, NonNegativeInt, PositiveInt, field_validator

from .base import Strict
from .deployment import Deployment
from .engine import Engine
from .parallelism import Parallelism
from .policy import Policy, StaticPolicy
from .speculation import Speculation
from .surface import CustomAllReduceSurface
from .topology import Dtype
from .workload import Workload

from .names import ALLREDUCE_CHOICES, EP_BACKENDS, MOE_BACKENDS


class SpeculativeHost(Strict):
    """The engine's host work around a speculative step outside its passes and their launches, on the critical path:
    eager PyTorch ops issued after a device sync (the GPU idle), the syncs, and Python loops over the batch's
    requests, their draft tokens and their accepted tokens. Counted from an engine version's code (the profile says
    which functions); all zero (the default) for an engine whose speculative step has none."""

    eager_ops: NonNegativeInt = Field(0, description="Eager ops/kernel launches per speculative step issued while the GPU is idle (each costs topology host.eager_launch_us)")
    eager_ops_per_draft_step: NonNegativeInt = Field(0, description=(
        "Further eager ops per draft step after the first (the draft graph's per-step attention metadata), each at "
        "host.eager_launch_us"))
    eager_ops_per_draft_token: NonNegativeInt = Field(0, description=(
        "Further eager ops per draft token of each request (a Python loop over the tree's tokens calling PyTorch on "
        "the host), each at host.eager_launch_us"))
    eager_ops_per_accepted_token: NonNegativeInt = Field(0, description=(
        "Further eager ops per accepted draft token of each request, the bonus token excluded (copying its KV "
        "entries into place), each at host.eager_launch_us"))
    eager_ops_behind_draft_graph: NonNegativeInt = Field(0, description=(
        "The drafter's eager ops issued after its draft graph's replay and before the step's next sync (its draft "
        "tokens chosen from its top-k), each at host.eager_launch_us, while the GPU runs the draft graph: their "
        "kernels run after it at the kernel floor each, their host time shows where it outlasts the graphed draft "
        "passes"))
    verify_input_ops: NonNegativeInt = Field(0, description=(
        "Eager ops that build the verify's inputs from the drafts up to the step's next sync (the tree's mask, "
        "positions and retrieve indices, the verify batch, its graph's inputs and attention metadata), each at "
        "host.eager_launch_us: behind the draft graph as eager_ops_behind_draft_graph where the drafter runs on the "
        "target's GPUs; on the target's, their GPUs idle, before the verify where it has its own "
        "(runtime.draft_on_own_gpus), as the tree mask's bytes"))
    eager_ops_padded_draft: NonNegativeInt = Field(0, description=(
        "Further eager ops, the GPU idle, in a step whose batch of requests is not itself a captured size, so its "
        "graphed draft passes replay padded to the next one (speculative_graph_batch_sizes; the draft graph's input "
        "buffers reset before its inputs are copied in), each at host.eager_launch_us"))
    verify_input_ops_padded: NonNegativeInt = Field(0, description=(
        "Further verify-input ops (as verify_input_ops) in a step whose graphed verify replays padded to a larger "
        "captured size (its graph's input buffers reset), each at host.eager_launch_us"))
    tree_mask_bytes_per_entry: float = Field(0.0, ge=0, le=64, description=(
        "Device bytes moved per entry of the verify's tree mask (each request's draft tokens x (context + draft "
        "tokens) booleans) by the kernels that fill, pack and copy it, at the GPU's achievable bandwidth: on the GPUs "
        "that build the verify's inputs (verify_input_ops)"))
    syncs: NonNegativeInt = Field(0, description="Device-to-host synchronisations per speculative step beyond the end-of-step one (each costs topology host.sync_us)")
    syncs_per_draft_step: NonNegativeInt = Field(0, description=(
        "Further syncs per draft step after the first (a draft step's attention plan copied to the host), each at "
        "host.sync_us"))
    syncs_per_accepted_token: NonNegativeInt = Field(0, description=(
        "Further syncs per accepted draft token of each request, the bonus token excluded (a Python loop over the "
        "output that reads each token on the host), each at host.sync_us"))
    step_host_us: float = Field(0.0, ge=0, le=1e4, description=(
        "Host time a speculative step spends beyond its ops' launches and syncs in code whose work does not grow with "
        "the batch (an attention library's plan: its Python and CPU-tensor work)"))
    per_request_us: float = Field(0.0, ge=0, le=1e4, description="Host (Python) time per running request per speculative step: result processing, stop checks, streaming")
    per_draft_token_us: float = Field(0.0, ge=0, le=1e3, description=(
        "Host time per draft token of each request (the verify's per-token tensors turned into Python lists)"))
    per_accepted_token_us: float = Field(0.0, ge=0, le=1e3, description=(
        "Host (Python) time per emitted token of each request, bonus included (the accept loop: append, finish check)"))
    stop_check_us: float = Field(0.0, ge=0, le=1e3, description=(
        "Host time of one finish check of a request that carries stop strings (the tail of its output decoded to "
        "text); the engine checks once per emitted token and once per request a step"))


class PiecewiseHost(Strict):
    """The host work of a forward in piecewise CUDA graphs (vLLM V1's torch.compile split at every attention call):
    per layer one graph piece's replay and one eager attention call under Python, each its Python plus its launches
    at host.eager_launch_us. The GPU waits only where the host falls behind its kernels (timing.piecewise)."""

    piece_us: float = Field(ge=0, le=1e4, description="Python of one piece's replay, its launch apart")
    piece_launches: NonNegativeInt = Field(1, le=64, description="Launches of one piece's replay (the graph launch)")
    attention_us: float = Field(ge=0, le=1e4, description="Python of one eager attention call, its launches apart")
    attention_launches: NonNegativeInt = Field(le=64, description="Kernel launches of one attention call")
    entry_us: float = Field(0.0, ge=0, le=1e4, description=(
        "Python of entering the compiled forward before its first piece (the dispatcher, the bytecode feeding the "
        "graph its arguments), a pass"))
    entry_per_layer_us: float = Field(0.0, ge=0, le=1e3, description="The same entry's time per layer's arguments")


class WeightOnlyGemv(Strict):
    """The engine's own kernel for a weight-only linear layer at few rows (gpt-fast's torch.compile'd dequantise and
    GEMV): it streams the quantised weights at a share of the rate the bf16 GEMV of the same shape streams its own,
    so its time is that GEMV's times the weights' bytes over bf16's, over the share. Where none is given, the measured
    weight-only table (TensorRT-LLM's WeightOnlyQuantMatmul on the A100) times it."""

    dtypes: list[Literal["int8", "int4"]] = Field(min_length=1, description="Weight dtypes whose linear layers run it")
    max_tokens: PositiveInt = Field(le=4096, description="GEMM rows up to which it runs (above: the measured table)")
    bandwidth_vs_bf16: float = Field(gt=0, le=2, description=(
        "Bytes per second it streams, as a share of the bf16 GEMV's of the same shape"))


class CustomAllReduce(CustomAllReduceSurface, Strict):
    """When the engine runs its own all-reduce kernel instead of NCCL's, and which of the kernel's two algorithms
    (one-shot: every rank reads every peer's whole buffer; two-shot: reduce-scatter then all-gather), as the engine's
    should_custom_ar and the kernel's own switch have it (the engine profile's custom_allreduce)."""

    kernel: str = Field(min_length=1, max_length=200, description="Which kernel (one-shot / two-shot P2P, ...)")
    two_shot_from_bytes: dict[PositiveInt, NonNegativeInt] = Field(min_length=1, max_length=16, description=(
        "Up to this many GPUs (the key) -> the message size from which the kernel runs two-shot (0: one-shot at every "
        "size); a GPU count takes the entry of the smallest key at or above it"))
    max_bytes: NonNegativeInt = Field(description="The largest all-reduce it runs (bytes); NCCL above")
    pcie_max_gpus: PositiveInt = Field(description="On a fabric without NVLink between all GPUs, at most this many")
    gpu_counts: list[PositiveInt] = Field(min_length=1, max_length=64, description=(
        "The GPU counts it runs at (the engine's supported world sizes); NCCL at any other"))


KernelFamily = Literal["gemm", "attention", "mla", "mla_bmm", "moe"]  # kernels/shapes.py's families


class KernelDatabase(Strict):
    """The measured kernel tables (aiconfigurator-core) that stand for an engine's kernels: an engine's folder and the
    version to read (that version's tables, else the newest below it; SGLang 0.5.14's where they lack a shape)."""

    engine: Literal["sglang", "vllm", "trtllm"] = Field(description="The engine whose tables (the database's folder)")
    version: str = Field(min_length=1, max_length=32, description=(
        "The version read where the GPU's tables hold it, else the newest below it"))
    stands_in: bool = Field(False, description=(
        "The tables measured kernels other than the engine's (another engine's GEMMs standing in): a GEMM table is read "
        "at its non-decreasing fit in m alone, without the m = 1 rows held out or a slice kept as measured (the measured "
        "kernel's own one-row dispatch and per-shape choices); false: the engine runs the kernels the tables measured"))


class DecoderKernels(Strict):
    """Kernels an engine's own eager model code launches per dense decoder layer and per pass (the model card's
    counts are SGLang's fused ones): counted from that code, every eager op that launches a kernel."""

    attention: int = Field(gt=0, le=4096, description="Per layer, input norm through the residual add after o_proj")
    dense_mlp: int = Field(gt=0, le=4096, description="Per layer, post-attention norm through the residual add")
    per_pass: int = Field(ge=0, le=4096, description="Embedding, masks, final norm, lm_head and the step loop's ops")
    verify_per_pass: int = Field(0, ge=0, le=4096, description="Extra per verify pass")
    tree_attention: int = Field(0, ge=0, le=4096, description=(
        "Extra per layer when the verify attention takes a tree mask (the method's own attention and KV-cache code)"))
    chain_verify_attention: int = Field(0, ge=0, le=4096, description=(
        "Extra per layer when a verify pass of a chain (no tree mask) takes an explicit causal mask (the engine's "
        "attention over a 4D mask)"))


class EngineKernels(Strict):
    """The engine's eager kernel counts for the target (and a separate draft model) and for an EAGLE-style head."""

    decoder: Optional[DecoderKernels] = Field(None, description="The target's own code (None: the model card's)")
    draft_head: Optional[DecoderKernels] = Field(None, description="An EAGLE-style head's own code (None: decoder's)")


class Runtime(Strict):
    """How the serving engine runs the passes: CUDA graphs, the all-reduce algorithm, fusions, memory share. A key
    left out takes the engine profile's value (engines/<name>/<version>.yaml), not the default shown here; a key set
    here is a what-if over the engine (never in a validation case). A mapping merges with the profile's key by key
    (speculative_host.step_host_us alone keeps the profile's other host values); a list, a scalar, null or an empty
    mapping {} replaces it whole ({}: the default shown here)."""

    cuda_graph_decode: bool = Field(True, description="Plain decode passes replay a captured CUDA graph")
    cuda_graph_verify: bool = Field(False, description="Verify passes replay a captured CUDA graph (else eager)")
    cuda_graph_draft: bool = Field(True, description="Draft-head passes replay a captured CUDA graph")
    cuda_graph_draft_extend: Optional[bool] = Field(None, description=(
        "The draft head's extend pass after a verify replays a captured CUDA graph (default: as cuda_graph_draft; "
        "SGLang ran it eagerly before v0.4.7)"))
    speculative_graph_batch_sizes: Optional[list[PositiveInt]] = Field(None, min_length=1, max_length=1024, description=(
        "Batch sizes (any order) the engine captured its speculative graphs (verify, draft) at: a speculative step of b requests "
        "runs those passes padded to the smallest captured size >= b, eagerly above the largest; default: every size"))
    speculative_graph_pads: Literal["requests", "tokens"] = Field("requests", description=(
        "What speculative_graph_batch_sizes count: requests (a step of b requests pads to the captured b', each padded "
        "request a whole verify tree of GEMM rows; SGLang, TensorRT-LLM) or tokens (the pass's b x n tokens pad to the "
        "smallest captured count, GEMM rows without attention; vLLM V1's pad_for_cudagraph)"))
    allreduce: Literal[ALLREDUCE_CHOICES] = Field(  # type: ignore[valid-type]
        "auto", description=(
            "auto: as the engine runs it (its own kernel where custom_allreduce runs it, which it tries first; NCCL's "
            "tuner otherwise); nccl: NCCL's tuner; or force one algorithm"))
    custom_allreduce: Optional[CustomAllReduce] = Field(None, description=(
        "The engine's own all-reduce kernel and when it runs instead of NCCL under allreduce auto (the engine profile's; "
        "none: NCCL for every all-reduce unless one_shot / two_shot is forced)"))
    fuse_allreduce_rmsnorm: bool = Field(False, description="All-reduce fused with the following RMSNorm: one kernel fewer per all-reduce")
    overlap_schedule: bool = Field(True, description="Scheduler host work overlaps the GPU in plain decode (SGLang's overlap scheduler)")
    scheduler_step_us: Optional[float] = Field(None, ge=0, le=1e5, description=(
        "The engine's scheduler host time per step (the engine profile's; default: the topology's host.step_overhead_us)"))
    scheduler_per_request_us: float = Field(0.0, ge=0, le=1e4, description=(
        "The scheduler's host time per running request a step, beside scheduler_step_us (the engine profile's; "
        "default none)"))
    overlap_schedule_speculative: bool = Field(False, description="Scheduler host work overlaps the GPU while speculating too (SGLang's spec v2)")
    step_eager_ops: NonNegativeInt = Field(0, le=10000, description=(
        "Device ops every step issues before its first pass kernel (input and attention-metadata uploads), each at "
        "host.eager_launch_us: serial with the GPU unless the overlap scheduler hides the scheduler's work"))
    eager_launch_us: Optional[float] = Field(None, gt=0, le=1e4, description=(
        "Host time per eagerly launched kernel under this engine's Python (the engine profile's; default: the "
        "topology's host.eager_launch_us)"))
    eager_kernels: Optional[EngineKernels] = Field(None, description=(
        "Kernels the engine's own eager model code launches (the engine profile's; default: the model cards' counts)"))
    piecewise_host: Optional[PiecewiseHost] = Field(None, description=(
        "Graph passes replay one piece per layer with eager attention between (the engine profile's; default: one "
        "graph a pass)"))
    weight_only_gemv: Optional[WeightOnlyGemv] = Field(None, description=(
        "The engine's own weight-only GEMV kernel at few rows, timed from the bf16 GEMV (the engine profile's; "
        "default: the measured weight-only table)"))
    speculative_host: SpeculativeHost = Field(SpeculativeHost(), description=(
        "Host work of the engine's speculative step outside the passes (eager ops behind syncs, syncs, per-request "
        "Python), exposed because the overlap scheduler is off while speculating"))
    verify_tokens: Literal["fixed", "proposed"] = Field("fixed", description=(
        "A model-free drafter's verify (ngram prompt lookup, suffix): fixed (the configured drafts every step) or "
        "proposed (1 + the tokens it proposed this step, the batch's mean; none proposed: a plain decode pass)"))
    kernel_database: Optional[KernelDatabase] = Field(None, description=(
        "Whose measured kernel tables time the kernels (the engine profile's kernel_database; default SGLang "
        "0.5.14's)"))
    kernels: Literal["measured", "roofline"] = Field(
        "measured", description="Kernel GPU times: measured (NVIDIA's aiconfigurator-core database, extra specsim[measured], "
        "where it covers the GPU and shape; the roofline elsewhere, said per kernel family) or roofline (every kernel)")
    ep_backend: Literal[EP_BACKENDS] = Field(  # type: ignore[valid-type]
        "auto", description="Expert parallelism's dispatch/combine all-to-all: deepep_low_latency, deepep_normal (DeepEP's "
        "kernels, NVLink inside a machine), nccl (NCCL send/recv groups); auto: SGLang's --deepep-mode auto (low-latency "
        "for decode and verify, normal for prefill) where the EP ranks share NVLink, else nccl")
    mtp_eh_proj: Literal["replicated", "row_parallel"] = Field("replicated", description=(
        "An MTP module's eh_proj (bf16, 2 x hidden -> hidden, before its decoder layer, every draft pass): replicated "
        "on every rank, or split by rows over the tp ranks with an all-reduce after it (the engine profile's; "
        "default replicated, as SGLang's deepseek_nextn.py and vLLM's deepseek_mtp.py build it)"))
    vocab_parallel: bool = Field(True, description=(
        "Under tensor parallelism the embedding and the output layer are split by vocabulary over the tp ranks (an "
        "all-reduce after the embedding, the logits all-gathered: SGLang's, vLLM's and TensorRT-LLM's vocab-parallel "
        "layers), or false: both whole on every rank, no collective (the engine profile's; gpt-fast's tp.py shards "
        "only the decoder blocks)"))
    mtp_draft_gather: Literal["logits", "top1"] = Field("logits", description=(
        "What an MTP draft pass all-gathers over the tp ranks after its vocab-split lm_head: the logits, or each "
        "rank's top-1 token and its logit (two fp32 a token), the argmax taken across them (the engine profile's; "
        "default logits, as SGLang's logits processor gathers them)"))
    replicated_embedding: list[str] = Field([], description=(
        "Model architectures (a card's architecture) whose token embedding is whole on every tp rank, no all-reduce "
        "after it, the lm_head still split by vocabulary (the engine profile's; TensorRT-LLM's DeepseekV3Model "
        "builds its Embedding without a mapping)"))
    separate_gate_up: list[Dtype] = Field([], description=(
        "Weight dtypes whose MLP gate and up projections run as two GEMMs of the intermediate width each, not one "
        "fused GEMM of twice it (the engine profile's; gpt-fast's int4 w1 and w3 are two tinygemm calls)"))
    moe_backend: Optional[Literal[MOE_BACKENDS]] = Field(None, description=(  # type: ignore[valid-type]
        "The engine's fused-MoE backend by its own name (TensorRT-LLM's moe_config.backend): whose measured rows time "
        "the routed experts (the engine profile's, or the engine flag; default none: the engine's default lanes)"))
    unmeasured_kernels: dict[KernelFamily, str] = Field({}, description=(
        "Kernel families the engine runs with kernels of its own that no measured table holds (family -> its kernel): "
        "the roofline times them, not the measured tables' kernel (the engine profile's; gpt-fast's attention is "
        "Inductor's matmul + softmax + matmul)"))
    memory_fraction: float = Field(0.9, gt=0, le=1, description="Share of device memory for weights and KV cache (SGLang mem_fraction_static, vLLM gpu_memory_utilization)")
    draft_on_own_gpus: bool = Field(False, description=(
        "The drafter runs on as many GPUs of its own after the target's, drafting the next step while the target "
        "verifies (PEARL, SwiftSpec; event fidelity only)"))
    two_batch_overlap: bool = Field(False, description=(
        "Decode and verify passes split in two micro-batches whose MoE layers interleave, one's all-to-all in flight "
        "while the other computes (SGLang --enable-two-batch-overlap; needs ep = tp; event fidelity only)"))
    host_slowdown: Optional[dict[NonNegativeInt, float]] = Field(None, description=(
        "Rank -> factor on that rank's host launch times (1.2: a host 20% slower; event fidelity only: every other "
        "fidelity runs the ranks' hosts alike)"))

    @field_validator("host_slowdown", mode="before")
    @classmethod
    def _rank_numbers(cls, value):
        """Ranks as YAML or an override gives them (an override's mapping may come with its keys as text)."""
        if isinstance(value, dict):
            return {int(k) if isinstance(k, str) and k.isdigit() else k: v for k, v in value.items()}
        return value

    @field_validator("host_slowdown")
    @classmethod
    def _positive_slowdown(cls, value):
        if value and not all(0.01 <= factor <= 100 for factor in value.values()):
            raise ValueError("every factor must be between 0.01 and 100")
        return value


class ScenarioSpec(Strict):
    name: str = Field(description="The scenario's name, used in reports and as its catalog name")
    description: str = Field("", description="Free text for the reader (results carry a description generated from the configuration)")
    topology: Union[str, dict[str, Any]] = Field(description=(
        "Path to a topology YAML (relative to this file), an inline mapping, or a generated cluster (node, nodes, network)"))
    model: Union[str, dict[str, Any]] = Field(description=(
        "Path to a model card YAML or a Hugging Face config.json (relative to this file), a card name, or an inline mapping"))
    parallelism: Parallelism
    engine: Optional[Engine] = Field(None, description=(
        "The serving engine and its flags in its own names: {name: sglang|vllm|trtllm|transformers|gpt_fast|magicdec, version, "
        "...}; its profile (engines/<name>/<version>.yaml) sets the runtime keys the scenario leaves out; none: "
        "SGLang 0.5.9, said in the report"))
    deployment: Deployment = Field(Deployment(), description="The instances' router (parallelism.dp replicas)")
    runtime: Runtime = Runtime()
    workload: Workload = Workload()
    speculation: Speculation = Speculation()
    policy: Policy = Field(StaticPolicy(kind="static"), description="When to speculate and with what: static, hybrid, adaptive_length, multi_drafter, batch_threshold, batch_table, goodput, dynamic_length, assistant_heuristic")
    seed: NonNegativeInt = Field(0, description="Seed of every random stream (acceptance, host jitter, arrivals, lengths)")
    fidelity: Literal["fast", "layer", "link", "event"] = Field("fast", description="fast: memoised pass costs; layer: every pass per rank; link: flows on the fabric's links; event: every rank's host and stream, every collective and the drafter as SimPy processes")
