"""YAML -> validated Scenario: safe_load only, paths relative to the file, --set overrides, one-line errors."""
from __future__ import annotations

import copy
import os
from dataclasses import field, replace
from typing import Any, Iterable, Mapping

from ..compiled import dataclass
from .catalog import read_kind
from .errors import ConfigError
from .paths import set_path, split_path  # noqa: F401  (re-exported: the one reading of a dotted path)
from .mirror_base import validate  # the plain-class mirror where it takes the document, else pydantic (config/mirror.py)
from .rules import OLD_NAMES, renamed_concurrency
from .checks import check
from .engine_profile import EngineRun, apply_engine
from .overlay import drop_taken, own_runtime
from .gpus import board_gpu, gpu_of, what_if_gpu
from .mirror import GPUSpec, ModelCard, ScenarioSpec, Topology
from .yaml_files import parse_override, read_yaml  # noqa: F401  (re-exported: read_yaml is read from here by tests)


@dataclass(frozen=True)
class Scenario:
    """A validated scenario with its topology and model card loaded."""

    spec: ScenarioSpec
    topology: Topology
    model: ModelCard
    source: str = "<inline>"
    draft_model: ModelCard | None = None
    # provenance, not configuration (two scenarios that run the same are equal whatever files they came from):
    files: Mapping[str, str] = field(default_factory=dict, compare=False)  # topology / model -> the file read
    overrides: tuple[tuple[str, Any], ...] = field(default=(), compare=False)  # every override applied, in order
    # the GPU as its topology file has it, where overrides set a physical field away from it (a what-if GPU: measured
    # kernel data are of this one); None when the topology's GPU is the loaded one
    gpu_as_loaded: GPUSpec | None = None
    engine: EngineRun | None = field(default=None, compare=False)  # the engine profile the runtime was resolved under

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def host(self):
        """The host the scenario's passes are launched from: the topology's, at its engine's eager launch cost where
        the engine profile (runtime.eager_launch_us) has one."""
        host, own = self.topology.host, self.spec.runtime.eager_launch_us
        return host if own is None else host.model_copy(update={"eager_launch_us": own})

    @property
    def base_dir(self) -> str:
        """The folder paths in the scenario are relative to."""
        return os.path.dirname(os.path.abspath(self.source)) if os.path.isfile(self.source) else "."

    def with_overrides(self, overrides: Mapping[str, Any]) -> "Scenario":
        """A new scenario with dotted-path overrides applied (topology.* and model.* reach into those files)."""
        keys = [split_path(path) for path in overrides]
        if overrides and all(len(k) > 1 and k[0] in _PARTS for k in keys):  # a key inside a part, not a whole part
            return self._with_part_overrides(overrides, [part for part in _PARTS if any(k[0] == part for k in keys)])
        raw = {
            **self.spec.model_dump(mode="json"),
            "topology": self.topology.model_dump(mode="json"),
            "model": self.model.model_dump(mode="json"),
        }
        if self.draft_model is not None:
            raw["speculation"]["draft_model"]["model"] = self.draft_model.model_dump(mode="json")
        # the scenario's own values, the engine profile's resolved again (an override may change the engine): a key
        # neither set is left to the new profile, not held at the schema's default
        taken = self.engine.keys if self.engine is not None else ()
        raw["runtime"] = own_runtime(self.spec.runtime, taken)
        drop_taken(raw, taken)
        if "policy" not in self.spec.model_fields_set:
            raw.pop("policy", None)
        # build() applies the overrides as --set does: a part replaced by a file, then a key inside it, reaches into
        # the new file (a sweep with a topology axis and a topology.gpu.* axis)
        rebuilt = build(raw, self.source, os.path.dirname(self.source) if os.path.isfile(self.source) else ".",
                        list(overrides.items()), owned=True)  # raw is this call's own dump
        files = {**self.files, **{k: v for k, v in rebuilt.files.items() if not v.startswith(self.source)}}
        # a topology replaced whole (a sweep over topology files) is loaded as such, as build() has it: not a what-if
        # of the GPU it replaces
        replaced = any(key == ["topology"] for key in keys)
        return replace(rebuilt, files=files, overrides=self.overrides + tuple(overrides.items()),
                       gpu_as_loaded=rebuilt.gpu_as_loaded if replaced else self._loaded_gpu(rebuilt.topology))

    def _with_part_overrides(self, overrides: Mapping[str, Any], parts: list[str]) -> "Scenario":
        """with_overrides where every path reaches into the topology or the model card (a sweep over machines):
        those parts alone are validated again, in build()'s order (the same first error), the rest is this
        scenario's (the same values build() gives)."""
        raw = {part: getattr(self, part).model_dump(mode="json") for part in parts}
        for path, value in overrides.items():
            set_path(raw, path, value, self.source)
        new = {part: validate(_PARTS[part], raw[part], f"{self.source} ({part})") for part in parts}
        if "topology" in new:  # a board's measured read stated away from this one's (board_gpu)
            new["topology"] = _on_board(self.topology.gpu, new["topology"])
        # the spec holds each part as build() leaves it: the validated part's dump
        spec = self.spec.model_copy(update={part: new[part].model_dump(mode="json") for part in parts})
        engine = self.engine
        if engine is not None and "topology" in parts:  # the profile's graph sizes depend on the GPU's memory
            # the profile's speculation keys, kept (the spec holds their values)
            previous = tuple(key for key in engine.keys if "." in key and not key.startswith("runtime."))
            spec, engine = apply_engine(spec, new["topology"], self.source, own_runtime(spec.runtime, engine.keys))
            engine = replace(engine, keys=tuple(sorted(set(engine.keys) | set(previous))))
        scenario = replace(self, **new, spec=spec, engine=engine, overrides=self.overrides + tuple(overrides.items()),
                           gpu_as_loaded=self._loaded_gpu(new.get("topology", self.topology)))
        check(scenario)
        return scenario

    def _loaded_gpu(self, topology: Topology) -> GPUSpec | None:
        """gpu_as_loaded of a scenario derived from this one with `topology`: this one's loaded GPU, if it differs."""
        return what_if_gpu(self.gpu_as_loaded or self.topology.gpu, topology.gpu)


def _on_board(loaded: GPUSpec | None, topology: Topology) -> Topology:
    """The topology with its GPU as its board runs (topology.board_gpu: a stated read bandwidth scales the peak)."""
    gpu = board_gpu(loaded, topology.gpu)
    return topology if gpu is topology.gpu else topology.model_copy(update={"gpu": gpu})


_PARTS = {"topology": Topology, "model": ModelCard}  # a scenario's parts loaded from their own files


def _load_part(value: Any, key: str, scenario_file: str, base_dir: str) -> tuple[Any, str]:
    """A referenced file's content (or an inline mapping) and the name to report errors against."""
    if isinstance(value, str) and key != "topology" and value.endswith(".json"):  # a Hugging Face config.json
        from ..importers.hf_model import load_card

        path = os.path.normpath(os.path.join(base_dir, os.path.expanduser(value)))
        return load_card(path, referrer=scenario_file), path
    if isinstance(value, str):
        path, data = read_kind(value, "topology" if key == "topology" else "model", scenario_file, base_dir)
        return data, path
    if isinstance(value, dict):
        return value, f"{scenario_file} ({key})"
    raise ConfigError(scenario_file, key, "expected a file path or a mapping", "a YAML path relative to the scenario file")


def _is_cluster(data: Any) -> bool:
    """Whether a topology mapping names a machine to copy (`node:`) instead of a fabric (config/cluster.py)."""
    return isinstance(data, dict) and "node" in data and "fabric" not in data


def _generated_cluster(data: dict, file: str, base_dir: str) -> tuple[dict, str]:
    """A generated cluster's topology mapping, and the name to report its errors against."""
    from .cluster import generate  # only scenarios that generate a cluster build its classes
    from .mirror import Cluster

    cluster = validate(Cluster, data, file, "topology")
    try:
        path, machine = read_kind(cluster.node, "topology", file, base_dir)
    except ConfigError as exc:
        raise ConfigError(exc.file, "topology.node", exc.problem, exc.allowed) from None
    return generate(cluster, machine, file), f"{file} (topology generated from {path})"


# dotted paths renamed, old -> new: an override or sweep axis of the old name sets the new key
RENAMED_PATHS = {f"workload.{old}": f"workload.{new}" for old, new in OLD_NAMES.items()}


def build(raw: Any, file: str, base_dir: str, overrides: Iterable[tuple[str, Any]] = (), owned: bool = False
          ) -> Scenario:
    """The Scenario of a raw document (with dotted overrides); owned: the caller hands `raw` over (a fresh dump
    nobody else holds), so it is changed in place instead of copied first."""
    overrides = list(overrides)
    if not isinstance(raw, dict):
        raise ConfigError(file, "<root>", "expected a mapping of scenario keys", "name, topology, model, parallelism, ...")
    if not owned:
        raw = copy.deepcopy(raw)
    part_overrides: dict[str, list[tuple[str, Any]]] = {"topology": [], "model": []}
    # the GPU before the overrides (where one reaches into the topology): a what-if GPU keeps it (gpu_as_loaded)
    touched = any(path.startswith("topology.") for path, _ in overrides)
    loaded_gpu = copy.deepcopy(raw["topology"].get("gpu")) if touched and isinstance(raw.get("topology"), dict) else None
    if isinstance(raw.get("workload"), dict):
        try:
            raw["workload"] = renamed_concurrency(raw["workload"], "workload")
        except ValueError as exc:
            raise ConfigError(file, "workload", str(exc)) from None
    for path, value in overrides:
        path = RENAMED_PATHS.get(path, path)
        head = path.split(".", 1)[0]
        if head in part_overrides and "." in path and isinstance(raw.get(head), str):
            part_overrides[head].append((path.split(".", 1)[1], value))
        else:
            set_path(raw, path, value, file)
    for key in ("topology", "model"):
        if key not in raw:
            raise ConfigError(file, key, "required key is missing")
    parts, files = {}, {}
    for key, model in (("topology", Topology), ("model", ModelCard)):
        data, name = _load_part(raw[key], key, file, base_dir)
        if key == "topology" and _is_cluster(data):
            data, name = _generated_cluster(data, file, base_dir)
        files[key] = name
        if not isinstance(data, dict):
            raise ConfigError(name, "<root>", f"expected a mapping for the {key}")
        # data is the run's own: a file's parse is a fresh copy (read_yaml), an inline mapping is part of raw's copy
        if key == "topology" and part_overrides[key]:
            loaded_gpu = copy.deepcopy(data.get("gpu"))
        for sub, value in part_overrides[key]:
            set_path(data, sub, value, name)
        parts[key] = validate(model, data, name)
        if key == "topology" and loaded_gpu is not None:  # a board's measured read stated away from the file's
            parts[key] = _on_board(gpu_of(loaded_gpu), parts[key])
        raw[key] = parts[key].model_dump(mode="json")
    draft_card = None
    draft_cfg = (raw.get("speculation") or {}).get("draft_model") if isinstance(raw.get("speculation"), dict) else None
    if isinstance(draft_cfg, dict) and draft_cfg.get("model") is not None:
        data, name = _load_part(draft_cfg["model"], "speculation.draft_model.model", file, base_dir)
        if not isinstance(data, dict):
            raise ConfigError(name, "<root>", "expected a mapping for the draft model card")
        draft_card = validate(ModelCard, data, name)
        draft_cfg["model"] = name if isinstance(draft_cfg["model"], str) else "<inline>"
    # the runtime: mapping is laid over the engine profile's before it is validated (a part of a mapping stands)
    own = raw.pop("runtime") if isinstance(raw.get("runtime"), dict) else {}
    spec, engine = apply_engine(validate(ScenarioSpec, raw, file), parts["topology"], file, own)
    scenario = Scenario(spec=spec, topology=parts["topology"], model=parts["model"], source=file, engine=engine,
                        draft_model=draft_card, files=files, overrides=tuple(overrides),
                        gpu_as_loaded=what_if_gpu(gpu_of(loaded_gpu), parts["topology"].gpu))
    check(scenario)
    return scenario


def load_scenario(path: str, overrides: Iterable[str | tuple[str, Any]] = ()) -> Scenario:
    parsed = [parse_override(o) if isinstance(o, str) else o for o in overrides]
    path, raw = read_kind(str(path), "scenario")  # a path, or the name of a shipped or user scenario
    return build(raw, path, os.path.dirname(os.path.abspath(path)), parsed, owned=True)  # read_yaml's own copy
