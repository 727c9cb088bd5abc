"""The configuration reference, generated from the pydantic models themselves: every key with its type, unit,
default, allowed values and one-line meaning. `specsim schema` prints it; docs/config.md is its markdown, checked
in CI to be current (so the reference cannot drift from the code).

Units are read from the key's suffix, the project's naming rule (latency_us, bandwidth_GBps, memory_GB).
"""
from __future__ import annotations

import typing
from dataclasses import asdict
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from ..compiled import dataclass

UNITS = (("_per_s", "1/s"), ("_GBps", "GB/s"), ("_TFLOPS", "TFLOP/s"), ("_GB", "GB"), ("_us", "us"), ("_ms", "ms"),
         ("_s", "s"), ("_tokens", "tokens"), ("_bytes", "bytes"), ("_cv", "ratio"), ("_fraction", "ratio"))
CONSTRAINTS = (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="), ("min_length", "length >="),
               ("max_length", "length <="))


@dataclass(frozen=True)
class Row:
    key: str
    type: str
    unit: str
    default: str
    allowed: str
    meaning: str


def unit_of(name: str) -> str:
    for suffix, unit in UNITS:
        if name.endswith(suffix):
            return unit
    return ""


def _strip(annotation: Any) -> tuple[Any, list]:
    """(the bare type, constraint metadata) of an Annotated / Optional annotation."""
    metadata: list = []
    while get_origin(annotation) is typing.Annotated:
        args = get_args(annotation)
        annotation, metadata = args[0], metadata + list(args[1:])
    return annotation, metadata


def _union_members(annotation: Any) -> list:
    annotation, _ = _strip(annotation)
    if get_origin(annotation) in (Union, getattr(__import__("types"), "UnionType", Union)):
        out = []
        for arg in get_args(annotation):
            out.extend(_union_members(arg))
        return out
    return [annotation]


def type_name(annotation: Any) -> str:
    members = [m for m in _union_members(annotation) if m is not type(None)]
    optional = len(members) < len(_union_members(annotation))
    names = []
    for member in members:
        origin = get_origin(member)
        if origin is Literal:
            names.append("choice")
        elif isinstance(member, type) and issubclass(member, BaseModel):
            names.append("mapping")
        elif origin in (list, tuple):
            inner = ", ".join(type_name(a) for a in get_args(member) if a is not Ellipsis)
            names.append(f"list of {inner}" if inner else "list")
        elif origin is dict:
            names.append(f"mapping of {type_name(get_args(member)[1])}")
        elif member is Any:
            names.append("any")
        else:
            names.append(getattr(member, "__name__", str(member)).replace("NoneType", "null"))
    text = " or ".join(dict.fromkeys(names))
    return f"{text} (optional)" if optional else text


def _allowed(annotation: Any, field) -> str:
    parts = []
    for member in _union_members(annotation):
        if get_origin(member) is Literal:
            parts.append(", ".join(str(a) for a in get_args(member)))
    bare, metadata = _strip(annotation)
    for member in _union_members(annotation):
        metadata += _strip(member)[1] if get_origin(member) is typing.Annotated else []
    metadata += list(field.metadata)
    for key, word in CONSTRAINTS:
        for item in metadata:
            value = getattr(item, key, None)
            if value is not None:
                parts.append(f"{word} {value:g}" if isinstance(value, float) else f"{word} {value}")
    return "; ".join(dict.fromkeys(parts))


def _default(field) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        kind = getattr(value, "kind", None)
        return f"kind: {kind}" if kind is not None else "(defaults below)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:g}" if isinstance(value, float) else str(value)


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (directly, in a union, or as list / dict items)."""
    out = []
    for member in _union_members(annotation):
        origin = get_origin(member)
        if isinstance(member, type) and issubclass(member, BaseModel):
            out.append(member)
        elif origin in (list, tuple, dict):
            for arg in get_args(member):
                out.extend(_models(arg))
    return out


def _kind(model: type[BaseModel]) -> str | None:
    field = model.model_fields.get("kind")
    args = get_args(_strip(field.annotation)[0]) if field is not None else ()
    return " or ".join(args) if args else None


def _doc(model: type[BaseModel]) -> str:
    doc = (model.__doc__ or "").strip()
    return " ".join(doc.split("\n\n")[0].split()) if doc and "A base class" not in doc else ""


def rows(model: type[BaseModel], prefix: str = "") -> list[Row]:
    """Every key of `model`, nested models flattened into dotted paths (list items as `key[]`)."""
    out: list[Row] = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{field.alias or name}"
        annotation = field.annotation
        models = _models(annotation)
        container = any(get_origin(_strip(m)[0]) in (list, tuple) for m in _union_members(annotation))
        meaning = " ".join((field.description or "").split())
        if models and not meaning and len(models) == 1:
            meaning = _doc(models[0])
        out.append(Row(key, type_name(annotation), unit_of(name), _default(field), _allowed(annotation, field),
                       meaning))
        inner = f"{key}[]." if container else f"{key}."
        kinds = [_kind(m) for m in models]
        for member, kind in zip(models, kinds):
            variant = len(models) > 1 and kind
            if variant:
                out.append(Row(f"{key} (kind: {kind})", "mapping", "", "", "", _doc(member)))
            out.extend(r for r in rows(member, inner) if not (variant and r.key == f"{inner}kind"))
    return out


def sections(roots: list[tuple[str, str, type[BaseModel]]]) -> list[dict]:
    """[{title, about, rows}] for each (title, about, root model)."""
    return [{"title": title, "about": about, "rows": [asdict(r) for r in rows(model)]}
            for title, about, model in roots]


def _cell(text: str) -> str:
    return text.replace("|", "\\|") if text else ""


def markdown(roots: list[tuple[str, str, type[BaseModel]]], header: str) -> str:
    lines = [header.rstrip(), ""]
    for section in sections(roots):
        lines += [f"## {section['title']}", "", section["about"], "",
                  "| key | type | unit | default | allowed | meaning |", "| --- | --- | --- | --- | --- | --- |"]
        for r in section["rows"]:
            lines.append("| " + " | ".join(_cell(str(r[k])) for k in ("key", "type", "unit", "default", "allowed",
                                                                         "meaning")) + " |")
        lines.append("")
    return "\n".join(lines)
