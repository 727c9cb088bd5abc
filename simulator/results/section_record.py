"""The frozen record every section of a Result is (results/sections.py, collective_sections.py): fields read by
attribute and by key alike, a read-only Mapping equal to any mapping with the same items, and `json_of`, a section
(nested ones too) as its JSON object."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import FrozenInstanceError
from types import MappingProxyType
from typing import Any


class Section(Mapping):
    """A frozen record read by key as well (its fields, in order); equal to any mapping with the same items. A
    subclass's fields are its annotated names, in order, a class value their default (as a dataclass's would be);
    one __init__, __setattr__ and __repr__ here serve every section, where dataclass() compiled three methods per
    class at import (~0.5 ms each class, 29 classes: issue 27's start-up). A field named in `_optional` is no key
    while it is None (a figure the section has only sometimes: absent, not null, in JSON)."""

    _optional: tuple[str, ...] = ()
    _fields: tuple[str, ...] = ()
    _defaults: Mapping[str, Any] = MappingProxyType({})  # read-only: a class's defaults, its bases' with them

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        own = tuple(name for name in cls.__dict__.get("__annotations__", {}) if not name.startswith("_"))
        cls._fields = (*cls._fields, *(name for name in own if name not in cls._fields))
        own_defaults = {name: cls.__dict__[name] for name in own if name in cls.__dict__}
        cls._defaults = MappingProxyType({**cls._defaults, **own_defaults})
        required = [name for name in cls._fields if name not in cls._defaults]
        if required and cls._fields.index(required[-1]) >= len(required):
            raise TypeError(f"{cls.__name__}: a field without a default follows one with a default")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        names = self._fields
        if len(args) > len(names):
            raise TypeError(f"{type(self).__name__}() takes {len(names)} fields, {len(args)} given")
        values = dict(zip(names, args))
        for name, value in kwargs.items():
            if name in values or name not in names:
                raise TypeError(f"{type(self).__name__}() got {'a second' if name in values else 'no field'} {name!r}")
            values[name] = value
        missing = [name for name in names if name not in values and name not in self._defaults]
        if missing:
            raise TypeError(f"{type(self).__name__}() missing {', '.join(map(repr, missing))}")
        self.__dict__.update({name: values.get(name, self._defaults.get(name)) for name in names})

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __getitem__(self, key: str) -> Any:
        if key not in self._present():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self):
        return iter(self._present())

    def __len__(self) -> int:
        return len(self._present())

    @classmethod
    def _keys(cls) -> tuple[str, ...]:
        return cls._fields

    def _present(self) -> tuple[str, ...]:
        """The keys this record has: its fields, less the optional ones that are None."""
        if not self._optional:
            return self._fields
        return tuple(k for k in self._fields if not (k in self._optional and getattr(self, k) is None))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={getattr(self, k)!r}' for k in self._fields)})"


def json_of(value: Any) -> Any:
    """The value with every Section (at any depth, in dicts, lists and tuples) as a plain dict."""
    if isinstance(value, Section):
        return {key: json_of(getattr(value, key)) for key in value._present()}
    if isinstance(value, dict):
        return {key: json_of(v) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_of(v) for v in value]
    return value
