"""The plain-class mirror's checkers (config/mirror.py uses them per field): each takes a value and returns it as
the strict pydantic model stores it, or raises Decline for anything it does not know, so that pydantic reports the
error. No pydantic import here."""
from __future__ import annotations

import math
import re

from .mirror_base import Decline


# -- checkers: each takes a value and returns it as the strict model stores it, or raises Decline -------------------

class Check:
    numeric = False

    def __call__(self, value):  # pragma: no cover - every checker overrides it
        raise Decline


def _bounds(value, ge, gt, le, lt):
    if ge is not None and not value >= ge:
        raise Decline
    if gt is not None and not value > gt:
        raise Decline
    if le is not None and not value <= le:
        raise Decline
    if lt is not None and not value < lt:
        raise Decline
    return value


class Int(Check):
    numeric = True

    def __init__(self, ge=None, gt=None, le=None, lt=None):
        self.bounds = (ge, gt, le, lt)

    def __call__(self, value):
        if type(value) is not int:
            raise Decline
        return _bounds(value, *self.bounds)


class Float(Check):
    numeric = True

    def __init__(self, ge=None, gt=None, le=None, lt=None):
        self.bounds = (ge, gt, le, lt)

    def __call__(self, value):
        kind = type(value)
        if kind is int:
            if abs(value) > 2 ** 53:
                raise Decline  # pydantic's own rounding of a huge int is its call
            value = float(value)
        elif kind is not float:
            raise Decline
        if not math.isfinite(value):
            raise Decline
        return _bounds(value, *self.bounds)


class Str(Check):
    def __init__(self, min_length=None, max_length=None, pattern=None):
        self.min_length, self.max_length = min_length, max_length
        self.pattern = re.compile(pattern) if pattern is not None else None

    def __call__(self, value):
        if type(value) is not str:
            raise Decline
        if self.min_length is not None and len(value) < self.min_length:
            raise Decline
        if self.max_length is not None and len(value) > self.max_length:
            raise Decline
        if self.pattern is not None and ("\n" in value or not self.pattern.search(value)):
            raise Decline  # Python's `$` also matches before a final newline; the Rust regex does not
        return value


class Bool(Check):
    def __call__(self, value):
        if type(value) is not bool:
            raise Decline
        return value


class NoneOnly(Check):
    def __call__(self, value):
        if value is not None:
            raise Decline
        return value


class Lit(Check):
    def __init__(self, *choices):
        if not all(type(c) is str for c in choices):
            raise ValueError("the mirror knows string literals only")
        self.choices = frozenset(choices)

    def __call__(self, value):
        if type(value) is not str or value not in self.choices:
            raise Decline
        return value


class AnyJSON(Check):
    """typing.Any: kept as given, where it is plain YAML data (strings, finite numbers, booleans, lists, mappings)."""

    def __call__(self, value):
        _plain_data(value)
        return value


def _plain_data(value):
    kind = type(value)
    if value is None or kind in (str, int, bool):
        return
    if kind is float:
        if not math.isfinite(value):
            raise Decline
        return
    if kind is list:
        for v in value:
            _plain_data(v)
        return
    if kind is dict:
        for k, v in value.items():
            if type(k) is not str:
                raise Decline
            _plain_data(v)
        return
    raise Decline


def _length(value, min_length, max_length):
    if min_length is not None and len(value) < min_length:
        raise Decline
    if max_length is not None and len(value) > max_length:
        raise Decline


class List(Check):
    def __init__(self, item, min_length=None, max_length=None):
        self.item, self.min_length, self.max_length = item, min_length, max_length

    def __call__(self, value):
        if type(value) is not list:
            raise Decline
        _length(value, self.min_length, self.max_length)
        item = self.item
        if item.numeric and any(type(v) is bool for v in value):
            raise Decline
        return [item(v) for v in value]


class Tuple(Check):
    """A fixed-length tuple; lax: a list is taken too (strict mode takes a tuple only, which YAML never gives)."""

    def __init__(self, items, lax=False):
        self.items, self.lax = tuple(items), lax

    def __call__(self, value):
        if not (type(value) is tuple or (self.lax and type(value) is list)) or len(value) != len(self.items):
            raise Decline
        if any(type(v) is bool and c.numeric for v, c in zip(value, self.items)):
            raise Decline
        return tuple(c(v) for c, v in zip(self.items, value))


class Dict(Check):
    def __init__(self, key, item, min_length=None, max_length=None):
        self.key, self.item, self.min_length, self.max_length = key, item, min_length, max_length

    def __call__(self, value):
        if type(value) is not dict:
            raise Decline
        _length(value, self.min_length, self.max_length)
        key, item = self.key, self.item
        out = {}
        for k, v in value.items():
            if (type(k) is bool and key.numeric) or (type(v) is bool and item.numeric):
                raise Decline
            out[key(k)] = item(v)
        return out


class Model(Check):
    def __init__(self, name: str, namespace: dict):
        self.name, self.namespace = name, namespace

    def __call__(self, value):
        return self.namespace[self.name]._load(value)


class Tagged(Check):
    """A discriminated union: the member whose tag field's literal is the mapping's tag."""

    def __init__(self, field: str, members: dict[str, str], namespace: dict):
        self.field, self.members, self.namespace = field, members, namespace

    def __call__(self, value):
        if type(value) is not dict:
            raise Decline
        tag = value.get(self.field)
        if type(tag) is not str or tag not in self.members:
            raise Decline
        return self.namespace[self.members[tag]]._load(value)


class Either(Check):
    """A union of members no value can satisfy two of (the generator checks they are disjoint by type): the one that
    takes it, as pydantic's smart mode picks the strict match."""

    def __init__(self, *members):
        self.members = members
        self.numeric = any(m.numeric for m in members)

    def __call__(self, value):
        for member in self.members:
            try:
                return member(value)
            except Decline:
                continue
        raise Decline


class NoLibrary(Check):
    """Speculation.acceptance: a {library: name} mapping is resolved by pydantic's validator (declined here)."""

    def __init__(self, check):
        self.check = check

    def __call__(self, value):
        if isinstance(value, dict) and "library" in value:
            raise Decline
        return self.check(value)
