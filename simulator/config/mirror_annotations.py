"""A configuration field's annotation as the mirror's checker expression (config/mirror_checks.py's classes, as
text for config/mirror.py): ints and floats with their bounds, strings with their lengths and pattern, booleans,
literals, lists, dicts, fixed tuples, unions whose members take values of different Python types, tagged unions and
nested models. Anything else is an error (config/mirror_gen.py writes the module)."""
from __future__ import annotations

import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from .base import Strict


class Checks:
    """Checker expressions of the models named in `names` (model -> its mirror class's name)."""

    def __init__(self, names: dict[type, str]):
        self.names = names

    def check(self, annotation: Any, metadata: list) -> str:
        origin = get_origin(annotation)
        if origin is typing.Annotated:
            inner, *extra = get_args(annotation)
            more, disc = [], None
            for item in extra:
                if isinstance(item, FieldInfo):
                    more += item.metadata
                    disc = item.discriminator or disc
                else:
                    more.append(item)
            if disc is not None:
                if metadata or more:
                    raise ValueError(f"constraints on a tagged union: {annotation}")
                return self.tagged(inner, disc)
            return self.check(inner, more + metadata)
        if origin in (Union, types.UnionType):
            members = get_args(annotation)
            if type(None) in members and metadata:  # Optional[X] with constraints: they are X's
                rest = [m for m in members if m is not type(None)]
                inner = rest[0] if len(rest) == 1 else Union[tuple(rest)]
                return f"Either(NoneOnly(), {self.check(inner, metadata)})"
            if metadata:
                raise ValueError(f"constraints on a union: {annotation}")
            self.disjoint(members)
            return "Either(" + ", ".join(self.check(m, []) for m in members) + ")"
        bounds, lengths, pattern, lax = {}, {}, None, False
        for item in metadata:
            if isinstance(item, (at.Ge, at.Gt, at.Le, at.Lt)):
                key = type(item).__name__.lower()
                bounds[key] = getattr(item, key)
            elif isinstance(item, at.MinLen):
                lengths["min_length"] = item.min_length
            elif isinstance(item, at.MaxLen):
                lengths["max_length"] = item.max_length
            elif type(item).__name__ == "_PydanticGeneralMetadata" and set(vars(item)) == {"pattern"}:
                pattern = item.pattern
            elif type(item).__name__ == "Strict" and item.strict is False:
                lax = True
            else:
                raise ValueError(f"the mirror does not know the constraint {item!r}")
        if bounds and annotation not in (int, float):
            raise ValueError(f"bounds on {annotation}")
        if lengths and annotation is not str and origin not in (list, dict):
            raise ValueError(f"lengths on {annotation}")
        if pattern is not None and annotation is not str:
            raise ValueError(f"a pattern on {annotation}")
        if lax and origin is not tuple:
            raise ValueError(f"lax {annotation}")
        if annotation is int:
            return f"Int({_kw(bounds)})"
        if annotation is float:
            return f"Float({_kw(bounds)})"
        if annotation is str:
            return f"Str({_kw({**lengths, **({'pattern': pattern} if pattern is not None else {})})})"
        if annotation is bool:
            return "Bool()"
        if annotation is type(None):
            return "NoneOnly()"
        if annotation is Any:
            return "AnyJSON()"
        if origin is Literal:
            return "Lit(" + ", ".join(repr(c) for c in get_args(annotation)) + ")"
        if origin is list:
            (item,) = get_args(annotation)
            return f"List({self.check(item, [])}{_kw(lengths, lead=True)})"
        if origin is dict:
            key, item = get_args(annotation)
            return f"Dict({self.check(key, [])}, {self.check(item, [])}{_kw(lengths, lead=True)})"
        if origin is tuple:
            items = get_args(annotation)
            if Ellipsis in items:
                raise ValueError(f"variable tuple {annotation}")
            return f"Tuple([{', '.join(self.check(i, []) for i in items)}], lax={lax})"
        if isinstance(annotation, type) and issubclass(annotation, Strict):
            return f"Model({self.names[annotation]!r}, NS)"
        raise ValueError(f"the mirror does not know the annotation {annotation!r}")

    def field_check(self, info: FieldInfo) -> str:
        """A field's checker: its annotation with its metadata, a discriminator given on the field included."""
        if info.discriminator is None:
            return self.check(info.annotation, list(info.metadata))
        if not isinstance(info.discriminator, str) or info.metadata:
            raise ValueError(f"a discriminator the mirror does not know: {info}")
        annotation = info.annotation
        members = get_args(annotation)
        if get_origin(annotation) in (Union, types.UnionType) and type(None) in members:  # Optional[tagged union]
            rest = [m for m in members if m is not type(None)]
            return f"Either(NoneOnly(), {self.tagged(Union[tuple(rest)], info.discriminator)})"
        return self.tagged(annotation, info.discriminator)

    def tagged(self, union: Any, field: str) -> str:
        members = {}
        for member in get_args(union):
            if not (isinstance(member, type) and issubclass(member, Strict)):
                raise ValueError(f"a tagged union of {member}")
            tags = get_args(member.model_fields[field].annotation)
            for tag in tags:
                if tag in members:
                    raise ValueError(f"tag {tag} twice")
                members[tag] = self.names[member]
        return f"Tagged({field!r}, {members!r}, NS)"

    @staticmethod
    def disjoint(members) -> None:
        """Union members the mirror tries in turn must take values of different Python types."""
        def kinds(a):
            while get_origin(a) is typing.Annotated:
                a = get_args(a)[0]
            o = get_origin(a)
            if o in (Union, types.UnionType):
                return set().union(*(kinds(m) for m in get_args(a)))
            if o is Literal or a is str:
                return {"str"}
            if a in (int, float):
                return {"number"}
            if a is bool:
                return {"bool"}
            if a is type(None):
                return {"none"}
            if o is list:
                return {"list"}
            if o is dict or (isinstance(a, type) and issubclass(a, BaseModel)):
                return {"dict"}
            raise ValueError(f"union member {a}")
        seen: set = set()
        for m in members:
            k = kinds(m)
            if k & seen:
                raise ValueError(f"union members overlap: {members}")
            seen |= k


def _kw(values: dict, lead: bool = False) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in values.items())
    return (", " + text) if lead and text else text
