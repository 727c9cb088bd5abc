"""YAML files read safely: libyaml's safe loader, duplicate keys, alias bombs and integers beyond 64 bits refused
in one line, each file parsed once per (path, modification time, size); --set values parsed the same way."""
from __future__ import annotations

import copy
import os
import re
from typing import Any

import yaml

from ..cache import stored
from .errors import ConfigError


# libyaml's implementation of the safe loader when present (same safe subset as yaml.safe_load, ~10x faster)
class _SAFE_LOADER(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # noqa: N801
    """The safe loader, reading 1e6 and 2E-3 as numbers as YAML 1.2 does (YAML 1.1 wants a dot: 1.0e6)."""


_SAFE_LOADER.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))
MAX_FILE_BYTES = 10_000_000
MAX_VALUES = 100_000  # values a document may expand to through aliases (shipped files hold a few hundred)


class _StrictLoader(_SAFE_LOADER):  # type: ignore[misc,valid-type]
    """The safe loader, refusing a key given twice in one mapping (YAML says keys are unique; PyYAML keeps the
    last silently). Merge keys (<<) are not duplicates: explicit keys override merged ones by design."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the base constructor reports it
                continue
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first given on line {first})", key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


def safe_load(text: str, file: str = "<yaml>") -> Any:
    """yaml.safe_load through libyaml when available; duplicate keys, recursive aliases and alias bombs refused."""
    data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader: no arbitrary objects
    check_expansion(data, file)
    check_integers(data, file)
    return data


MAX_INTEGER = 2**63 - 1  # the largest integer a config value may hold (numpy's int64): no count or seed needs more


def check_integers(data: Any, file: str, path: str = "") -> None:
    """Refuse an integer beyond 64 bits anywhere in a document (a 400-digit count would overflow every float it
    meets), naming its key path. The document is bounded by check_expansion, so the walk is too."""
    stack: list[tuple[Any, str]] = [(data, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, dict):
            stack.extend((v, f"{where}.{k}" if where else str(k)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(node))
        elif isinstance(node, int) and not isinstance(node, bool) and abs(node) > MAX_INTEGER:
            digits = len(str(abs(node)))
            raise ConfigError(file, where or "<root>", f"an integer of {digits} digits, beyond 64 bits",
                              f"integers of magnitude at most {MAX_INTEGER:,} (2^63 - 1)")


def check_expansion(data: Any, file: str, limit: int = MAX_VALUES) -> None:
    """Refuse a document that refers to itself or expands, through aliases, to more than `limit` values.

    Aliases share one object, so the document is small in memory; whatever walks it value by value (a copy, a
    hash, a JSON dump) pays the expanded size. Sizes are counted once per shared object during this one walk.
    """
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        node, done = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        key = id(node)  # identity within this walk only: the document is alive throughout, nothing is cached
        children = list(node.values()) if isinstance(node, dict) else node
        if done:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes.get(id(c), 1) for c in children)
            if sizes[key] > limit:
                raise ConfigError(file, "<yaml>", f"the document expands to more than {limit:,} values through "
                                  "aliases", "a document without alias bombs")
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise ConfigError(file, "<yaml>", "a recursive alias: a value contains itself", "aliases of finished values")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children if isinstance(c, (dict, list)))


@stored
def _parsed(path: str, mtime_ns: int, size: int, name: str) -> Any:
    """A file's YAML, parsed once per (path, modification time, size)."""
    with open(path, encoding="utf-8") as handle:
        return safe_load(handle.read(), name)


def read_yaml(path: str, key_for_missing: str = "<file>", referrer: str | None = None) -> Any:
    """Parse a YAML file (cached per path and modification time; callers get their own copy)."""
    if not os.path.isfile(path):
        what = "is a directory" if os.path.isdir(path) else "is not a regular file" if os.path.exists(path) else \
            "file not found"
        raise ConfigError(referrer or path, key_for_missing, f"{what}: {path}" if what == "file not found" else
                          f"{path} {what}", "a YAML file")
    try:
        stat = os.stat(path)
        if stat.st_size > MAX_FILE_BYTES:
            raise ConfigError(path, "<file>", f"{stat.st_size:,} bytes, more than a configuration file holds",
                              f"at most {MAX_FILE_BYTES:,} bytes")
        return copy.deepcopy(_parsed(os.path.abspath(path), stat.st_mtime_ns, stat.st_size, path))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "<yaml>"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        kind = "YAML error" if isinstance(exc, yaml.constructor.ConstructorError) else "YAML syntax error"
        raise ConfigError(path, where, f"{kind}: {problem}") from None
    except RecursionError:
        raise ConfigError(path, "<yaml>", "the document is nested too deeply", "fewer levels of nesting") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, "<file>", f"cannot read file: {exc}") from None


def parse_override(text: str) -> tuple[str, Any]:
    """'a.b=value' -> ('a.b', value) with the value parsed as YAML (so numbers, booleans and lists work)."""
    if "=" not in text:
        raise ConfigError("--set", text, "expected dotted.path=value")
    path, value = text.split("=", 1)
    path = path.strip()
    if not path:
        raise ConfigError("--set", text, "empty key path")
    try:
        return path, safe_load(value, "--set")
    except yaml.YAMLError:
        return path, value
    except ConfigError as exc:  # the value's own problem (an integer beyond 64 bits), named by the key set
        inner = "" if exc.path == "<root>" else exc.path if exc.path.startswith("[") else "." + exc.path
        raise ConfigError("--set", path + inner, exc.problem, exc.allowed) from None
