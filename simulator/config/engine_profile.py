"""An engine profile: every engine-side input of one engine at one release, each with its source.

A profile is a data file, engines/<name>/<version>.yaml (shipped in the package as simulator.data.engines). Every
input is a mapping {value, kind, source}: kind `counted` (read from the engine's code at that release: the source
names the file and function), `fitted` (a calibrated parameter: the source names the calibration figure in
scenarios/measured/), `measured` (timed by a script in this repository, named with the machine it ran on) or
`estimated` (none of these: the source says what the estimate rests on). `runtime_defaults`
turns a profile and the scenario's engine flags into the runtime keys the simulator reads; a key the scenario
sets itself under `runtime:` wins over both (a what-if, never in a validation case).
"""

import os
from dataclasses import dataclass
from typing import Generic, Literal, Optional, TypeVar

from pydantic import Field, NonNegativeInt, PositiveInt, TypeAdapter, model_validator

from .base import Strict, validate
from .errors import ConfigError
from .scenario import DecoderKernels, SpeculativeHost

T = TypeVar("T")
SOURCE_KINDS = ("counted", "measured", "fitted", "estimated")


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


class CustomAllReduce(Strict):
    """When the engine runs its own all-reduce kernel instead of NCCL's."""

    kernel: str = Field(min_length=1, description="which kernel (one-shot / two-shot P2P, ...)")
    one_shot_max_bytes: NonNegativeInt
    max_bytes: NonNegativeInt
    pcie_max_gpus: PositiveInt = Field(description="on a fabric without NVLink between all GPUs, at most this many")


class HostWork(Strict):
    """One drafter code's host work around a speculative step (SpeculativeHost's fields), each input with its
    source; a field left out is zero."""

    eager_ops: Optional[Sourced[NonNegativeInt]] = None
    eager_ops_per_draft_step: Optional[Sourced[NonNegativeInt]] = None
    eager_ops_per_accepted_token: Optional[Sourced[NonNegativeInt]] = None
    syncs: Optional[Sourced[NonNegativeInt]] = None
    per_request_us: Optional[Sourced[float]] = None
    per_draft_token_us: Optional[Sourced[float]] = None
    per_accepted_token_us: Optional[Sourced[float]] = None
    stop_check_us: Optional[Sourced[float]] = None

    def sourced(self) -> dict[str, Sourced]:
        return {name: getattr(self, name) for name in type(self).model_fields if getattr(self, name) is not None}

    def value(self) -> SpeculativeHost:
        return SpeculativeHost(**{name: item.value for name, item in self.sourced().items()})


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


class KernelDatabase(Strict):
    """The measured kernel tables (aiconfigurator-core) that stand for this engine's kernels."""

    engine: str
    version: str


class ProfileKernels(Strict):
    """The kernels an engine's own eager model code launches (its Python model, not SGLang's fused kernels)."""

    decoder: DecoderKernels
    draft_head: Optional[DecoderKernels] = None
    draft_head_by_code: dict[str, DecoderKernels] = Field(default_factory=dict, description=(
        "the method's code (speculation method, or the engine's script flag) -> its head's counts where they differ"))
    tree_attention_by_code: dict[str, int] = Field(default_factory=dict, description=(
        "the method's code -> its verify's extra kernels per layer where its own model code differs from the "
        "decoder's tree_attention"))


class EngineProfile(Strict):
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
    speculative_host: dict[str, HostWork] = Field(description=(
        "the drafter's code (the engine's script flag, else the speculation method) -> the host work of its step; "
        "`default`: every model drafter without an entry of its own"))
    step_eager_ops: Optional[Sourced[NonNegativeInt]] = Field(None, description=(
        "device ops every step issues before its first pass kernel (input uploads); absent: none counted"))
    speculative_verify_tokens: Optional[Sourced[Literal["fixed", "proposed"]]] = Field(None, description=(
        "a model-free drafter's verify: its configured drafts (fixed) or what it proposed (proposed); absent: fixed"))
    custom_allreduce: Sourced[Optional[CustomAllReduce]] = Field(description="null: NCCL for every all-reduce")
    fuse_allreduce_rmsnorm: Sourced[bool]
    attention_backend: Sourced[dict[str, str]] = Field(description="GPU architecture (sm90, sm100, sm120, ...) -> backend")
    quantised_gemm: Sourced[dict[Literal["fp8", "fp8_block", "fp4", "int8", "int4"], QuantisedGemm]] = Field(
        description="weights' dtype -> the GEMM and activation-quantisation kernels the engine runs for it")
    kernel_database: Sourced[KernelDatabase]
    ngram_host: Optional[Sourced[NgramHost]] = Field(None, description=(
        "the n-gram drafter's host time; absent: speculation.ngram's own (SGLang's trie costs)"))
    eager_launch_us: Optional[Sourced[float]] = Field(None, description=(
        "host time per eagerly launched kernel under the engine's Python; absent: the topology's host.eager_launch_us"))
    eager_kernels: Optional[Sourced[ProfileKernels]] = Field(None, description=(
        "the engine's own eager kernel counts; absent: the model cards' (SGLang's)"))

    @model_validator(mode="after")
    def _has_default(self):
        if "default" not in self.speculative_host:
            raise ValueError("speculative_host needs a `default` entry (a model drafter's step)")
        return self

    def inputs(self) -> dict[str, Sourced]:
        """Every sourced input by name (speculative_host's as speculative_host.<code>.<field>)."""
        out = {name: getattr(self, name) for name in type(self).model_fields if isinstance(getattr(self, name), Sourced)}
        for code, work in self.speculative_host.items():
            out.update({f"speculative_host.{code}.{name}": item for name, item in work.sourced().items()})
        return out

    def host_work(self, code: str, method: str) -> SpeculativeHost:
        """The speculative step's host work of the drafter's code: its own entry, else its method's, else default."""
        table = self.speculative_host
        return table.get(code, table.get(method, table["default"])).value()


def _with_ngram_host(spec, profile: EngineProfile) -> tuple:
    """The spec with the profile's n-gram host costs where its speculation.ngram does not set them, and the keys
    taken (dotted)."""
    if profile.ngram_host is None:
        return spec, ()
    ngram = spec.speculation.ngram
    taken = {name: value for name, value in profile.ngram_host.value.model_dump().items()
             if name not in ngram.model_fields_set}
    if not taken:
        return spec, ()
    speculation = spec.speculation.model_copy(update={"ngram": ngram.model_copy(update=taken)})
    return spec.model_copy(update={"speculation": speculation}), tuple(f"speculation.ngram.{k}" for k in sorted(taken))


def profile_path(name: str, version: str) -> str:
    from .catalog import data_dir

    return os.path.join(data_dir("engine"), name, f"{version}.yaml")


def known_versions(name: str) -> list[str]:
    from .catalog import data_dir

    folder = os.path.join(data_dir("engine"), name)
    if not os.path.isdir(folder):
        return []
    return sorted(os.path.splitext(f)[0] for f in os.listdir(folder) if f.endswith(".yaml"))


def load_profile(name: str, version: str, referrer: str = "<scenario>") -> tuple[EngineProfile, str]:
    """The profile of an engine release and its file; a version without one is a one-line error naming those there."""
    from .loader import read_yaml

    path = profile_path(name, version)
    if not os.path.isfile(path):
        shown = ", ".join(known_versions(name)) or "none"
        raise ConfigError(referrer, "engine.version", f"no {name} profile for version {version!r}",
                          f"one of {shown} (engines/{name}/<version>.yaml)")
    profile = validate(EngineProfile, read_yaml(path), path)
    if (profile.engine, profile.version) != (name, version):
        raise ConfigError(path, "engine", f"the file holds {profile.engine} {profile.version}, not {name} {version}")
    return profile, path


def captured_sizes(profile: EngineProfile, flags: dict, gpu_memory_GB: float, tp: int) -> list[int] | None:
    """The batch sizes the speculative graphs are captured at on this machine (None: every size, no padding)."""
    explicit = flags.get("cuda_graph_bs") or flags.get("cuda_graph_sizes") or \
        (flags.get("cuda_graph_config") or {}).get("batch_sizes")
    if explicit:
        return sorted(set(explicit))
    max_bs = flags.get("cuda_graph_max_bs") or (flags.get("cuda_graph_config") or {}).get("max_batch_size")
    if max_bs is None:
        tier = next((t for t in profile.cuda_graph_max_bs.value
                     if (t.gpu_memory_below_GB is None or gpu_memory_GB < t.gpu_memory_below_GB)
                     and (t.tp_below is None or tp < t.tp_below)), None)
        if tier is None:
            return None
        max_bs = tier.max_bs
    if flags.get("disable_cuda_graph_padding") or (flags.get("cuda_graph_config") or {}).get("enable_padding") is False:
        return list(range(1, max_bs + 1))
    sizes = {b for r in profile.speculative_capture_bs.value for b in range(r.start, r.stop + 1, r.step)}
    return sorted(b for b in sizes if b <= max_bs) or [max_bs]


def runtime_defaults(profile: EngineProfile, flags: dict, gpu_memory_GB: float, tp: int, method: str = "none") -> dict:
    """The runtime keys this engine release runs a scenario with, its flags applied (runtime: keys set in the
    scenario itself override these). `method`: the drafter, whose path through the engine (EngineProfile.host_work) sets the
    speculative step's host work."""
    graphs = profile.cuda_graphs.value
    no_graphs = bool(flags.get("disable_cuda_graph") or flags.get("enforce_eager") or flags.get("compile") is False
                     or ("cuda_graph_config" in flags and flags["cuda_graph_config"] is None))
    overlap_off = flags.get("disable_overlap_schedule") or flags.get("disable_overlap_scheduler")
    overlap_on = flags.get("async_scheduling")
    code = flags.get("script") or method  # whose step code runs: a harness script, else the method's
    host = profile.host_work(code, method)
    out = {
        "cuda_graph_decode": graphs.decode and not no_graphs,
        "cuda_graph_verify": graphs.target_verify and not no_graphs,
        "cuda_graph_draft": graphs.draft and not no_graphs,
        "cuda_graph_draft_extend": graphs.draft_extend and not no_graphs,
        "overlap_schedule": bool(overlap_on or (profile.overlap_schedule.value and not overlap_off)),
        "overlap_schedule_speculative": bool(profile.overlap_schedule_speculative.value and not overlap_off),
        "speculative_host": host.model_dump(),
        "scheduler_step_us": profile.scheduler_step_us.value,
        "fuse_allreduce_rmsnorm": bool(flags.get("enable_flashinfer_allreduce_fusion",
                                                 profile.fuse_allreduce_rmsnorm.value)),
    }
    fraction = flags.get("mem_fraction_static") or flags.get("gpu_memory_utilization") or \
        flags.get("free_gpu_memory_fraction")
    if fraction is not None:
        out["memory_fraction"] = fraction
    if flags.get("disable_custom_all_reduce") or profile.custom_allreduce.value is None:
        out["allreduce"] = "nccl"
    sizes = captured_sizes(profile, flags, gpu_memory_GB, tp)
    out["speculative_graph_batch_sizes"] = sizes
    if profile.step_eager_ops is not None:
        out["step_eager_ops"] = profile.step_eager_ops.value
    if profile.speculative_verify_tokens is not None:
        out["verify_tokens"] = profile.speculative_verify_tokens.value
    if profile.eager_launch_us is not None:
        out["eager_launch_us"] = profile.eager_launch_us.value
    if profile.eager_kernels is not None:
        counts = profile.eager_kernels.value
        decoder = counts.decoder
        if code in counts.tree_attention_by_code:
            decoder = decoder.model_copy(update={"tree_attention": counts.tree_attention_by_code[code]})
        head = counts.draft_head_by_code.get(code, counts.draft_head)
        out["eager_kernels"] = {"decoder": decoder.model_dump(), "draft_head": head.model_dump() if head else None}
    return out


@dataclass(frozen=True)
class EngineRun:
    """The engine a scenario runs under: its profile's file, whether the scenario named it, and the runtime keys the
    profile (with the flags) gave, none of which the scenario set under runtime: itself."""

    name: str
    version: str
    profile_file: str
    named: bool
    keys: tuple[str, ...]

    def label(self) -> str:
        return f"{self.name} {self.version}" + ("" if self.named else " (the default: the scenario names no engine)")


def apply_engine(spec, topology, file: str, user_keys=None):
    """(the spec with its runtime resolved under its engine's profile, EngineRun). `user_keys`: the runtime keys the
    scenario set itself (default: those its runtime: mapping holds)."""
    from .engine import DEFAULT_ENGINE, Engine, flags_of
    from .scenario import Runtime

    engine, named = spec.engine, spec.engine is not None
    if engine is None:
        engine = TypeAdapter(Engine).validate_python(DEFAULT_ENGINE)
    profile, path = load_profile(engine.name, engine.version, file)
    defaults = runtime_defaults(profile, flags_of(engine), topology.gpu.memory_GB, spec.parallelism.tp,
                                spec.speculation.method)
    user = set(spec.runtime.model_fields_set if user_keys is None else user_keys)
    taken = {key: value for key, value in defaults.items() if key not in user}
    own = spec.runtime.model_dump(mode="json", include=user)
    runtime = validate(Runtime, {**own, **taken}, file, "runtime")
    spec, ngram_keys = _with_ngram_host(spec.model_copy(update={"runtime": runtime}), profile)
    return spec, EngineRun(engine.name, engine.version, path, named, tuple(sorted(taken)) + ngram_keys)

