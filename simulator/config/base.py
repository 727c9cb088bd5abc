"""Shared pydantic base and the translation of validation errors into one-line ConfigErrors."""
from __future__ import annotations

import typing
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from .errors import ConfigError


class Strict(BaseModel):
    """Frozen, no unknown keys, finite numbers, strict types: a typo in a YAML file is an error, not a silently
    ignored key; `"yes"` is not a boolean, `"1000"` not a number, and a boolean not a number (pydantic would read
    `tp: true` as 1); an int is still accepted where a float is expected."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, strict=True)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs):
        super().__pydantic_init_subclass__(**kwargs)
        from .mirror_base import register

        register(cls)  # an isinstance on its plain-class mirror (config/mirror.py) holds for this model's objects

    @model_validator(mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, value in data.items():
                field = cls.model_fields.get(name) if isinstance(value, bool) else None
                if field is not None and _numeric(field.annotation) and not _accepts_bool(field.annotation):
                    raise ValueError(f"{name}: {str(value).lower()} is a boolean, not a number")
        return data


def _numeric(annotation: Any) -> bool:
    if annotation in (int, float):
        return True
    return any(_numeric(a) for a in get_args(annotation))


def _accepts_bool(annotation: Any) -> bool:
    if annotation is bool:
        return True
    return any(_accepts_bool(a) for a in get_args(annotation))


INTERNAL_TAGS = ("function-", "constrained-", "tagged-union", "lax-or-strict", "json-or-python", "nullable",
                 "model-fields", "default", "union")
SCALAR_TAGS = ("int", "float", "str", "bool", "none", "list", "dict", "tuple")


def _dotted(loc: tuple, root: type[BaseModel] | None = None) -> str:  # noqa: C901
    """A pydantic error location as a user's key path (discriminator tags and validator names dropped)."""
    parts: list[str] = []
    current: Any = root
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
            continue
        text = str(item)
        if text.startswith(INTERNAL_TAGS) or text.endswith("]") or text in SCALAR_TAGS:
            continue  # pydantic's names for union branches and validators, not the user's keys
        model = _as_model(current) if current is not None else None
        if model is None and current is not None:
            tagged = [m for m in _members(current) if _tag(m) == item]
            if tagged:  # a discriminated union's tag: descend without naming it
                current = tagged[0]
                continue
        if model is not None and text not in model.model_fields:
            tagged = [m for m in _members(current) if _tag(m) == item]
            if tagged:
                current = tagged[0]
                continue
        field = model.model_fields.get(text) if model is not None else None
        current = field.annotation if field is not None else None
        parts.append(("." if parts else "") + text)
    return "".join(parts).replace(".[", "[")


def _model_at(root: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The model class that owns the last key of `loc` (to list its allowed keys)."""
    current: Any = root
    for item in loc[:-1]:
        if isinstance(item, int):
            continue
        # a discriminated-union tag: the member whose kind matches
        candidates = [m for m in _members(current) if _tag(m) == item]
        if candidates:
            current = candidates[0]
            continue
        model = _as_model(current)
        field = model.model_fields.get(str(item)) if model is not None else None
        if field is None:
            return None
        current = field.annotation
    return _as_model(current)


def _members(annotation: Any) -> list[type[BaseModel]]:
    origin = get_origin(annotation)
    if origin is typing.Annotated:
        return _members(get_args(annotation)[0])
    if origin in (Union, getattr(typing, "UnionType", Union)) or str(origin) == "<class 'types.UnionType'>":
        out = []
        for arg in get_args(annotation):
            out.extend(_members(arg))
        return out
    if origin in (list, tuple, dict):
        out = []
        for arg in get_args(annotation):
            out.extend(_members(arg))
        return out
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return []


def _kinds_with_key(root: type[BaseModel], loc: tuple, key: str) -> list[str]:
    """The kinds (other than the one at loc) of the discriminated union at loc whose members have `key`."""
    if len(loc) < 3:
        return []
    parent = _model_at(root, loc[:-2])  # the model owning the union's key (loc[-3]; loc[-2] is the tag)
    field = parent.model_fields.get(str(loc[-3])) if parent is not None else None
    members = _members(field.annotation) if field is not None else []
    return [str(_tag(m)) for m in members if key in m.model_fields and _tag(m) != loc[-2]]


def _tag(model: type[BaseModel]) -> str | None:
    field = model.model_fields.get("kind")
    if field is None:
        return None
    args = get_args(field.annotation)
    return args[0] if args else None


def _as_model(annotation: Any) -> type[BaseModel] | None:
    members = _members(annotation)
    return members[0] if len(members) == 1 else None


def _allowed(error: dict, root: type[BaseModel]) -> str | None:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind in ("model_attributes_type", "model_type", "dict_type"):
        loc = tuple(error["loc"])
        owner = _model_at(root, loc) if loc else None
        field = owner.model_fields.get(str(loc[-1])) if owner is not None and loc else None
        members = _members(field.annotation) if field is not None else []
        tags = [t for t in (_tag(m) for m in members) if t]
        if len(tags) > 1:
            return f"a mapping with kind: {', '.join(tags)}"
        if len(members) == 1:
            return f"a mapping with keys {', '.join(members[0].model_fields)}"
        return "a mapping"
    if kind == "extra_forbidden":
        model = _model_at(root, error["loc"])
        if model is not None:
            return ", ".join(model.model_fields)
        return None
    if kind in ("literal_error", "enum", "union_tag_invalid"):
        return str(ctx.get("expected") or ctx.get("expected_tags") or "")
    for key, word in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
        if key in ctx:
            return f"{word} {ctx[key]}"
    if kind.endswith("_type") or kind.endswith("_parsing"):
        return kind.replace("_type", "").replace("_parsing", "").replace("_", " ")
    return None


_TYPE_ERRORS = ("int_type", "float_type", "bool_type", "string_type", "model_attributes_type", "model_type",
                "dict_type", "list_type")


def _best_error(errors: list[dict]) -> dict:
    """The error to report: a union (a number or a {kind: ...} mapping) reports one error per member, and the
    member the user meant is the one whose type matched; its error is the real problem."""
    meant = [e for e in errors if e["type"] not in _TYPE_ERRORS]
    return meant[0] if meant else errors[0]


def _problem(error: dict, model: type[BaseModel]) -> tuple[str, str | None]:
    """(what is wrong, what is allowed) in the user's words, with the closest allowed word where one is near."""
    import difflib

    kind = error["type"]
    allowed = _allowed(error, model)
    given = error.get("input")
    if kind == "extra_forbidden":
        owner = _model_at(model, error["loc"])
        key = str(error["loc"][-1])
        close = difflib.get_close_matches(key, list(owner.model_fields) if owner else [], n=1)
        others = _kinds_with_key(model, tuple(error["loc"]), key)
        if owner is not None and _tag(owner) and others:  # the key of another kind of the same section
            return (f"unknown key for kind {_tag(owner)} ({key} is a key of kind {' and '.join(others)}: remove it, "
                    f"or set kind: {others[0]})"), allowed
        return "unknown key" + (f"; did you mean {close[0]!r}?" if close else ""), allowed
    if kind == "missing":
        return "required key is missing", allowed
    if kind in ("literal_error", "union_tag_invalid", "enum"):
        word = (error.get("ctx") or {}).get("tag") if kind == "union_tag_invalid" else given
        choices = [c.strip(" '") for c in str(allowed or "").replace(" or ", ", ").split(",")]
        close = difflib.get_close_matches(str(word), choices, n=1)
        head = f"unknown kind {word!r}" if kind == "union_tag_invalid" else f"{word!r} is not allowed"
        return head + (f"; did you mean {close[0]!r}?" if close else ""), ", ".join(c for c in choices if c)
    problem = error["msg"].removeprefix("Value error, ")
    if given is not None and not isinstance(given, (dict, list, tuple)):
        shown = repr(given)
        problem = f"{problem}, got {shown[:57] + '...' if len(shown) > 60 else shown}"
    return problem, allowed


def validate(model: type[BaseModel], data: Any, file: str | None, prefix: str = ""):
    """Validate `data` as `model`; the first problem becomes a ConfigError naming file and key path."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        error = _best_error(exc.errors(include_url=False))
        path = _dotted(error["loc"], model) or "(the whole file)"
        if prefix:
            path = f"{prefix}.{path}" if path else prefix
        problem, allowed = _problem(error, model)
        raise ConfigError(file, path, problem, allowed) from None
