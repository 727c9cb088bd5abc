"""What a sweep point is: a hash of its resolved configuration, so a results row is reused only for the same run.

`base_id` hashes the base scenario as loaded with the sweep's `set` and fidelity: the validated scenario, topology,
model card and draft model (every file's content, defaults filled in), the bytes of every data file it names (keys
`file`: arrival and acceptance traces) and, where kernels are measured, the version of the package whose tables
they come from. A point's id hashes `base_id`, the point's own overrides and the bytes of any file those name (a
topology, model card or trace given as an axis value). A point is a function of these alone, so equal ids mean
equal runs; editing any file a point reads, an axis value, `set` or the fidelity changes the ids it affects and no
other. The code of specsim itself is not part of the identity (rows record its version in provenance columns).
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from ..config import Scenario
from ..config.errors import ConfigError

KINDS = {"topology": "topology", "model": "model", "speculation.draft_model.model": "model"}  # path -> catalog kind


def digest(value: Any) -> str:
    """16 hex digits of the SHA-1 of `value` as canonical JSON."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def file_digest(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha1(handle.read()).hexdigest()[:16]


def base_id(base: Scenario) -> str:
    """The identity of everything a sweep's points share: the base scenario as loaded and the files it reads."""
    spec = base.spec.model_dump(mode="json")
    files = {path: _digest_of(os.path.join(base.base_dir, name)) for path, name in _file_keys(spec)}
    parts = {"spec": spec, "topology": base.topology.model_dump(mode="json"),
             "model": base.model.model_dump(mode="json"), "files": files,
             "draft": base.draft_model.model_dump(mode="json") if base.draft_model is not None else None}
    if base.spec.runtime.kernels == "measured":
        from ..kernels.measured import package_version

        parts["kernel_tables"] = package_version()
    return digest(parts)


def point_id(base: str, values: dict[str, Any], base_dir: str = ".", memo: dict | None = None) -> str:
    """A point's id: `base` (a base_id), its overrides and the content of the files they name (`memo`: the
    digests already taken, path -> digest, owned by the caller for one sweep)."""
    memo = {} if memo is None else memo
    files = {}
    for path, value in values.items():
        for where, name in _named_files(path, value):
            key = (where, name)
            if key not in memo:
                memo[key] = _named_digest(where, name, base_dir)
            files[where] = memo[key]
    return digest({"base": base, "set": values, **({"files": files} if files else {})})


def _file_keys(data: Any, prefix: str = "") -> list[tuple[str, str]]:
    """(dotted path, value) of every string under a key named `file`."""
    if isinstance(data, dict):
        return [found for key, value in data.items() for found in
                ([(prefix + str(key), value)] if key == "file" and isinstance(value, str)
                 else _file_keys(value, f"{prefix}{key}."))]
    if isinstance(data, list):
        return [found for i, value in enumerate(data) for found in _file_keys(value, f"{prefix}{i}.")]
    return []


def _named_files(path: str, value: Any) -> list[tuple[str, str]]:
    """The files an override names: a topology or model card (a path or a catalog name), or a `file` key."""
    if isinstance(value, str):
        return [(path, value)] if path in KINDS or path.rsplit(".", 1)[-1] == "file" else []
    if isinstance(value, dict):
        return [found for key, item in value.items() for found in _named_files(f"{path}.{key}", item)]
    if isinstance(value, list):
        return [found for i, item in enumerate(value) for found in _named_files(f"{path}.{i}", item)]
    return []


def _named_digest(where: str, name: str, base_dir: str) -> str | None:
    if where in KINDS:
        from ..config.catalog import locate

        try:
            return _digest_of(locate(name, KINDS[where], None, base_dir))
        except ConfigError:
            return None  # the point fails when it runs, with this error in its row
    return _digest_of(os.path.join(base_dir, name))


def _digest_of(path: str) -> str | None:
    try:
        return file_digest(os.path.normpath(path))
    except OSError:
        return None
