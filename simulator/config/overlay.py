"""A scenario's own runtime values laid over its engine profile's: mappings merge key by key (recursively), a list, a
scalar or null replaces, and an empty mapping `{}` replaces too (the key takes the schema's default, not the
profile's: `speculative_host: {}` is an engine with no host work). A key the scenario leaves out keeps the profile's
value, so `--set runtime.speculative_host.step_host_us=85` changes that value alone.

The profile's share is recorded as paths: a runtime key it gave whole by its name (`speculative_host`), a value
inside a mapping both set by its full dotted path (`runtime.speculative_host.eager_ops`), as EngineRun.keys holds
the profile's speculation keys (`speculation.draft_tokens`).
"""
from __future__ import annotations

import copy
from typing import Any

from .errors import ConfigError

RUNTIME = "runtime"


def set_values(model: Any, dumped: dict) -> dict:
    """The values of a validated model that its document set (`dumped`: its JSON dump), a nested model's by its own
    set keys: what the scenario (file or overrides) wrote, nothing the schema filled in."""
    out = {}
    for name in model.model_fields_set:
        value = getattr(model, name)
        is_model = hasattr(value, "model_fields_set") and isinstance(dumped.get(name), dict)
        out[name] = set_values(value, dumped[name]) if is_model else dumped[name]
    return out


def overlay(profile: dict, own: dict, at: tuple = ()) -> tuple[dict, list[tuple]]:
    """(profile's values with `own`'s laid over them, the key paths whose values are the profile's)."""
    merged, taken = dict(profile), []
    own = {_as_profile_key(profile, key): value for key, value in own.items()}
    for key, value in own.items():
        base = profile.get(key)
        if isinstance(value, dict) and value and isinstance(base, dict):
            merged[key], inner = overlay(base, value, at + (key,))
            taken += inner
        else:
            merged[key] = value
    taken += [at + (key,) for key in profile if key not in own]
    return merged, taken


def _as_profile_key(profile: dict, key: Any) -> Any:
    """`key` as the profile's mapping spells it: a digit string ('8', as a dotted --set path or a JSON dump writes
    it) is the integer key of a mapping keyed by integers (custom_allreduce.two_shot_from_bytes: GPUs -> bytes)."""
    ints = bool(profile) and all(isinstance(k, int) and not isinstance(k, bool) for k in profile)
    return int(key) if ints and isinstance(key, str) and key.isdigit() else key


def key_names(taken: list[tuple]) -> tuple[str, ...]:
    """EngineRun.keys' names of the profile's runtime paths: a whole key by its name, a nested one dotted from the
    spec's root (an integer key as its digits)."""
    return tuple(str(path[0]) if len(path) == 1 else ".".join(map(str, (RUNTIME,) + path)) for path in taken)


def taken_at(error_path: str, taken: list[tuple]) -> tuple | None:
    """The profile's value an error's path (runtime.<key>...) falls in; None: the scenario's own values."""
    parts = tuple(error_path.split("."))
    if parts[:1] != (RUNTIME,):
        return None
    paths = {tuple(map(str, path)) for path in taken}
    return next((parts[1:i] for i in range(2, len(parts) + 1) if parts[1:i] in paths), None)


def own_error(check, merged: dict, taken: list[tuple], error: ConfigError) -> ConfigError | None:
    """The scenario's own first mistake where `check` (the runtime's validation) failed at a value of the profile's
    (`error`): found with each failing profile value left out in turn (the schema's default standing for it); None
    where the scenario's own values pass."""
    merged, dropped = copy.deepcopy(merged), set()
    while (at := taken_at(error.path, taken)) is not None and at not in dropped:
        dropped.add(at)
        node = merged
        for key in at[:-1]:
            node = node[_as_profile_key(node, key)]
        node.pop(_as_profile_key(node, at[-1]), None)
        try:
            check(merged)
            return None
        except ConfigError as later:
            error = later
    return error if taken_at(error.path, taken) is None else None


def own_runtime(runtime: Any, keys) -> dict:
    """The runtime values a resolved scenario's own document set (its runtime's set values, the profile's `keys`
    taken out): what an override's rebuild lays over the profile again, not the schema's defaults."""
    own = {RUNTIME: set_values(runtime, runtime.model_dump(mode="json"))}
    drop_taken(own, keys)
    return own[RUNTIME]


def drop_taken(raw: dict, keys) -> None:
    """Remove from a scenario's dump, in place, the values its engine profile gave (EngineRun.keys): what is left
    is the scenario's own, to be resolved again."""
    for key in keys:
        *parents, leaf = key.split(".") if "." in key else (RUNTIME, key)
        node = raw
        for part in parents:
            node = node.get(part) or {}
        node.pop(leaf, None)
