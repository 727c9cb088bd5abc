"""Dotted key paths into nested mappings and lists: 'fabric.links[8].latency_us' or 'fabric.links.8.latency_us'.

One reading of a path for every part that takes one (--set overrides, calibration parameters and metrics, planning
levers): `split_path` turns it into keys, `get_path` follows them, `parent_of` stops one key short so a caller can
replace the value, `set_path` sets it (an override, with one-line errors).
"""
from __future__ import annotations

from typing import Any

from .errors import ConfigError


class PathNotFound(KeyError):
    """The path leaves the data at `at` (the keys followed so far, dotted)."""

    def __init__(self, path: str, at: str):
        super().__init__(path)
        self.path, self.at = path, at


def split_path(path: str) -> list[str]:
    """'fabric.links[8].latency_us' -> ['fabric', 'links', '8', 'latency_us'] (also accepts 'links.8')."""
    keys: list[str] = []
    for part in path.split("."):
        while "[" in part and part.endswith("]"):
            head, _, rest = part.partition("[")
            if head:
                keys.append(head)
            index, _, tail = rest.partition("]")
            keys.append(index)
            part = tail
        if part:
            keys.append(part)
    return keys


def _step(node: Any, key: str, lists: bool) -> Any:
    if isinstance(node, dict) and key in node:
        return node[key]
    if lists and isinstance(node, list) and key.isdigit() and int(key) < len(node):
        return node[int(key)]
    raise LookupError(key)


def get_path(data: Any, path: str, lists: bool = True) -> Any:
    """The value at `path` (list elements by index when `lists`); PathNotFound where the path leaves the data."""
    node = data
    keys = split_path(path)
    for i, key in enumerate(keys):
        try:
            node = _step(node, key, lists)
        except LookupError:
            raise PathNotFound(path, ".".join(keys[:i + 1])) from None
    return node


def parent_of(data: Any, path: str) -> tuple[Any, str]:
    """The container holding the last key of `path`, and that key (for replacing the value in place)."""
    keys = split_path(path)
    head = ".".join(keys[:-1])
    return (get_path(data, head) if head else data), keys[-1]


def _index(node: list, key: str, file: str, where: str) -> int:
    """A list index from a path: a non-negative integer below the list's length (no negative indices)."""
    if not key.isdigit() or int(key) >= len(node):
        raise ConfigError(file, where, f"no list element {key!r} (from --set)",
                          f"an index 0..{len(node) - 1}" if node else "the list is empty")
    return int(key)


def set_path(data: dict, path: str, value: Any, file: str) -> None:
    keys = split_path(path)
    if not keys:
        raise ConfigError(file, path or "<root>", "empty key path (from --set)", "dotted.path=value")
    node: Any = data
    for i, key in enumerate(keys[:-1]):
        if isinstance(node, list):
            node = node[_index(node, key, file, ".".join(keys[: i + 1]))]
            continue
        if not isinstance(node, dict):
            raise ConfigError(file, ".".join(keys[:i]), "is not a mapping, cannot set a key inside it (from --set)")
        if not isinstance(node.get(key), (dict, list)):
            node[key] = {}
        node = node[key]
    last = keys[-1]
    if isinstance(node, list):
        node[_index(node, last, file, path)] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ConfigError(file, ".".join(keys[:-1]), "is not a mapping (from --set)")
