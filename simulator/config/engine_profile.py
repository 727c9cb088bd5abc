"""An engine profile: every engine-side input of one engine at one release, each with its source.

A profile is a data file, engines/<name>/<version>.yaml (shipped in the package as simulator.data.engines). Every
input is a mapping {value, kind, source}: kind `counted` (read from the engine's code at that release: the source
names the file and function), `fitted` (a calibrated parameter: the source names the calibration figure in
scenarios/measured/), `measured` (timed by a script in this repository, named with the machine it ran on) or
`estimated` (none of these: the source says what the estimate rests on). `runtime_defaults`
turns a profile and the scenario's engine flags into the runtime keys the simulator reads; a value the scenario
sets itself under `runtime:` wins over both (a what-if, never in a validation case; a mapping merges key by key,
config/overlay.py); so does a policy it sets over
the profile's speculative_policy (the draft-length schedule the engine's own code runs).
"""

import os

from ..compiled import dataclass
from .errors import ConfigError
from .mirror_base import validate
from .names import DEFAULT_ENGINE


def __getattr__(name: str):
    """The profile's pydantic types (EngineProfile, Sourced), read from here, imported when first asked for."""
    if name in ("EngineProfile", "Sourced"):
        from . import engine_schema

        return getattr(engine_schema, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def flags_of(engine) -> dict:
    """The flags a scenario set on its engine (name and version aside): what the profile's defaults give way to."""
    return engine.model_dump(exclude_none=True, exclude={"name", "version"})


def _with_ngram_host(spec, profile) -> tuple:
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


def _with_draft_cap(spec, profile) -> tuple:
    """The spec with its draft tokens capped at the most a step of this engine verifies (the profile's
    max_draft_tokens), and the key taken where the cap binds."""
    cap = profile.max_draft_tokens
    if cap is None or spec.speculation.draft_tokens <= cap.value:
        return spec, ()
    speculation = spec.speculation.model_copy(update={"draft_tokens": cap.value})
    return spec.model_copy(update={"speculation": speculation}), ("speculation.draft_tokens",)


def _with_policy(spec, profile, code: str) -> tuple:
    """The spec with the draft-length schedule the engine's code for this drafter runs (the profile's
    speculative_policy), where the scenario sets no policy itself, and the keys taken."""
    schedules = profile.speculative_policy
    if schedules is None or spec.speculation.method == "none" or "policy" in spec.model_fields_set:
        return spec, ()
    policy = schedules.value.get(code, schedules.value.get(spec.speculation.method))
    if policy is None:
        return spec, ()
    return spec.model_copy(update={"policy": policy}), ("policy",)


def profile_path(name: str, version: str) -> str:
    from .catalog import data_dir

    return os.path.join(data_dir("engine"), name, f"{version}.yaml")


def known_versions(name: str) -> list[str]:
    from .catalog import data_dir

    folder = os.path.join(data_dir("engine"), name)
    if not os.path.isdir(folder):
        return []
    return sorted(os.path.splitext(f)[0] for f in os.listdir(folder) if f.endswith(".yaml"))


def load_profile(name: str, version: str, referrer: str = "<scenario>") -> tuple:
    """The profile of an engine release and its file; a version without one is a one-line error naming those there,
    and so is a speculative_host value outside what the runtime's SpeculativeHost allows (naming the profile)."""
    from .mirror import EngineProfile, SpeculativeHost
    from .yaml_files import read_yaml

    path = profile_path(name, version)
    if not os.path.isfile(path):
        shown = ", ".join(known_versions(name)) or "none"
        raise ConfigError(referrer, "engine.version", f"no {name} profile for version {version!r}",
                          f"one of {shown} (engines/{name}/<version>.yaml)")
    profile = validate(EngineProfile, read_yaml(path), path)
    if (profile.engine, profile.version) != (name, version):
        raise ConfigError(path, "engine", f"the file holds {profile.engine} {profile.version}, not {name} {version}")
    for code, work in profile.speculative_host.items():  # each code's host work within what the runtime allows
        validate(SpeculativeHost, {field: item.value for field, item in work.sourced().items()}, path,
                 f"speculative_host.{code}")
    return profile, path


def captured_sizes(profile, flags: dict, gpu_memory_GB: float, tp: int) -> list[int] | None:
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


def scheduler_step_us(profile, tp: int) -> float | None:
    """The scheduler's host time a step at `tp` ranks: the profile's, with its scheduler-to-worker messages where
    the workers are processes of their own (tp > 1: the SchedulerOutput's broadcast, rank 0's reply and, where the
    engine waits for every rank's, one more a rank; None: the topology's estimate stands)."""
    base = profile.scheduler_step_us.value
    if profile.executor_ipc is None or base is None or tp <= 1:
        return base
    ipc = profile.executor_ipc.value
    others = (tp - 1) * ipc.other_reply_us if ipc.replies == "all" else 0.0
    return base + ipc.broadcast_us + ipc.rank0_reply_us + others


def scheduler_per_request_us(profile, tp: int) -> float:
    """The scheduler's host time per running request a step at `tp` ranks: the profile's, with the broadcast's share
    where the workers are processes of their own (0: none)."""
    own = profile.scheduler_per_request_us.value if profile.scheduler_per_request_us is not None else 0.0
    if profile.executor_ipc is not None and tp > 1:
        own += profile.executor_ipc.value.broadcast_per_request_us
    return own


def runtime_defaults(profile, flags: dict, gpu_memory_GB: float, tp: int, method: str = "none") -> dict:
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
        "scheduler_step_us": scheduler_step_us(profile, tp),
        "fuse_allreduce_rmsnorm": bool(flags.get("enable_flashinfer_allreduce_fusion",
                                                 profile.fuse_allreduce_rmsnorm.value)),
    }
    fraction = flags.get("mem_fraction_static") or flags.get("gpu_memory_utilization") or \
        flags.get("free_gpu_memory_fraction")
    if fraction is not None:
        out["memory_fraction"] = fraction
    if flags.get("disable_custom_all_reduce") or profile.custom_allreduce.value is None:
        out["allreduce"] = "nccl"
    else:
        out["custom_allreduce"] = profile.custom_allreduce.value.model_dump()
    sizes = captured_sizes(profile, flags, gpu_memory_GB, tp)
    out["speculative_graph_batch_sizes"] = sizes
    if profile.speculative_capture_unit is not None:
        out["speculative_graph_pads"] = profile.speculative_capture_unit.value
    if profile.step_eager_ops is not None:
        out["step_eager_ops"] = profile.step_eager_ops.value
    per_request = scheduler_per_request_us(profile, tp)
    if per_request:
        out["scheduler_per_request_us"] = per_request
    if profile.speculative_verify_tokens is not None:
        out["verify_tokens"] = profile.speculative_verify_tokens.value
    if profile.eager_launch_us is not None:
        out["eager_launch_us"] = profile.eager_launch_us.value
    out["kernel_database"] = profile.kernel_database.value.model_dump()
    if profile.unmeasured_kernels is not None:
        out["unmeasured_kernels"] = dict(profile.unmeasured_kernels.value)
    if profile.weight_only_gemv is not None:
        out["weight_only_gemv"] = profile.weight_only_gemv.value.model_dump()
    if profile.piecewise_host is not None:
        out["piecewise_host"] = profile.piecewise_host.value.model_dump()
        if profile.compiled_entry is not None:
            out["piecewise_host"].update(profile.compiled_entry.value.model_dump())
    if profile.mtp_eh_proj is not None:
        out["mtp_eh_proj"] = profile.mtp_eh_proj.value
    if profile.vocab_parallel is not None:
        out["vocab_parallel"] = profile.vocab_parallel.value
    if profile.moe_backend is not None:
        out["moe_backend"] = (flags.get("moe_config") or {}).get("backend") or profile.moe_backend.value
    if profile.mtp_draft_gather is not None:
        out["mtp_draft_gather"] = profile.mtp_draft_gather.value
    if profile.replicated_embedding is not None:
        out["replicated_embedding"] = list(profile.replicated_embedding.value)
    if profile.separate_gate_up is not None:
        out["separate_gate_up"] = list(profile.separate_gate_up.value)
    if profile.eager_kernels is not None:
        counts = profile.eager_kernels.value
        decoder = counts.decoder
        if decoder is not None and code in counts.tree_attention_by_code:
            decoder = decoder.model_copy(update={"tree_attention": counts.tree_attention_by_code[code]})
        head = counts.draft_head_by_code.get(code, counts.draft_head)
        out["eager_kernels"] = {"decoder": decoder.model_dump() if decoder else None,
                                "draft_head": head.model_dump() if head else None}
    return out


@dataclass(frozen=True)
class EngineRun:
    """The engine a scenario runs under: its profile's file, whether the scenario named it, and the values the
    profile (with the flags) gave, none of which the scenario set itself: a runtime key whole by its name, a value
    inside a mapping the scenario set a part of by its dotted path (runtime.speculative_host.eager_ops), the
    speculation keys dotted (speculation.draft_tokens)."""

    name: str
    version: str
    profile_file: str
    named: bool
    keys: tuple[str, ...]

    def label(self) -> str:
        return f"{self.name} {self.version}" + ("" if self.named else " (the default: the scenario names no engine)")


def apply_engine(spec, topology, file: str, own=None):
    """(the spec with its runtime resolved under its engine's profile, EngineRun): the scenario's own runtime values
    laid over the profile's (config/overlay.py: mappings merge key by key). `own`: those values (default: what the
    spec's runtime: mapping set)."""
    from .mirror import Runtime, ScenarioSpec
    from .mirror_base import load_field
    from .overlay import key_names, overlay, own_error, set_values, taken_at

    engine, named = spec.engine, spec.engine is not None
    if engine is None:
        engine = load_field(ScenarioSpec, "engine", DEFAULT_ENGINE)
    profile, path = load_profile(engine.name, engine.version, file)
    defaults = runtime_defaults(profile, flags_of(engine), topology.gpu.memory_GB, spec.parallelism.tp,
                                spec.speculation.method)
    if own is None:
        own = set_values(spec.runtime, spec.runtime.model_dump(mode="json"))
    merged, taken = overlay(defaults, own)
    def check(values):
        return validate(Runtime, values, file, "runtime")

    try:
        runtime = check(merged)
    except ConfigError as error:  # a value the profile gave (the flags are checked to the runtime's bounds): its file's
        if taken_at(error.path, taken) is None:
            raise
        raise own_error(check, merged, taken, error) or \
            ConfigError(path, error.path, f"{error.problem}, from this engine profile", error.allowed) from None
    if runtime.moe_backend is not None and profile.moe_backend is None:  # a backend name this engine has no flag for
        raise ConfigError(file, "runtime.moe_backend", f"{engine.name} {engine.version} has no MoE backend flag (its "
                          "profile names none: TensorRT-LLM's moe_config.backend)", "null")
    spec, ngram_keys = _with_ngram_host(spec.model_copy(update={"runtime": runtime}), profile)
    spec, policy_keys = _with_policy(spec, profile, flags_of(engine).get("script") or spec.speculation.method)
    spec, cap_keys = _with_draft_cap(spec, profile)
    keys = tuple(sorted(key_names(taken))) + ngram_keys + policy_keys + cap_keys
    return spec, EngineRun(engine.name, engine.version, path, named, keys)
