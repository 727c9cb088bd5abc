"""What a stored value is keyed by and what it weighs: a computation's inputs by value, its result in bytes.

key_of turns an input into a hashable value that two inputs share exactly when they are equal as values: numbers,
strings, tuples and dicts of them as they are; a frozen pydantic model by its JSON (every field, in declared order);
a frozen dataclass of hashable fields as itself (its equality and hash are its fields'), another dataclass by its
fields; an array by its dtype, shape and a digest of its bytes; an object that is not a value
(a Machine, an acceptance model) by its `value_key` (the digest of everything it computes from). Anything else is
refused: a key by identity would hand one run's result to another object that merely lives at the same address.
"""
from __future__ import annotations

import dataclasses
import enum
import hashlib
import sys
from typing import Any

import numpy as np

_PLAIN = (str, int, float, bool, bytes, type(None))


def key_of(value: Any) -> Any:
    """`value` as a hashable key, equal for equal values (see the module's docstring); TypeError for a value that
    has none."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    params = getattr(kind, "__dataclass_params__", None)
    if params is not None and params.frozen and params.eq:
        try:
            hash(value)  # every field hashable: the value itself is its key (fields compared, with their type)
            return (kind.__qualname__, value)
        except TypeError:
            pass
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, *(key_of(v) for v in value))
    if isinstance(value, dict):
        return ("dict", *sorted((key_of(k), key_of(v)) for k, v in value.items()))
    if isinstance(value, (set, frozenset)):
        return ("set", *sorted(key_of(v) for v in value))
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value)
        return ("ndarray", data.dtype.str, data.shape, hashlib.sha1(data.view(np.uint8).reshape(-1)).digest())
    if isinstance(value, np.generic):
        return (value.dtype.str, value.item())
    if isinstance(value, enum.Enum):
        return (type(value).__qualname__, value.value)
    own = getattr(value, "value_key", None)
    if own is not None:
        return (type(value).__qualname__, own)
    dump = getattr(value, "model_dump_json", None)  # a pydantic model
    if dump is not None:
        return (type(value).__qualname__, hashlib.sha1(dump().encode()).digest())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__qualname__, *(key_of(getattr(value, f.name)) for f in dataclasses.fields(value)))
    raise TypeError(f"{type(value).__qualname__} has no value to key a stored result by: give it a value_key "
                    "(a digest of what it computes from) or pass the values it reads")


# A configuration model's JSON by the model object, the object held so that no other takes its address while the
# entry lives: a deployment's replicas share one scenario, and a generated cluster's topology is thousands of objects
# whose JSON costs ~10 ms to write (it was written twice per replica, and the spec's once more). Models are frozen.
_JSON: dict[tuple, tuple[Any, str]] = {}
_JSON_MAX = 256


def json_of(model: Any, exclude: frozenset | None = None) -> str:
    """model.model_dump_json(exclude=exclude), written once per model object (and exclude) while it is remembered."""
    key = (id(model), exclude)
    entry = _JSON.get(key)
    if entry is not None and entry[0] is model:
        return entry[1]
    text = model.model_dump_json(exclude=set(exclude)) if exclude else model.model_dump_json()
    if len(_JSON) >= _JSON_MAX:
        _JSON.pop(next(iter(_JSON)))
    _JSON[key] = (model, text)
    return text


def freeze_and_weigh(value: Any, held: Any = ()) -> int:
    """The bytes `value` holds (arrays by their buffers, frames by their columns, other objects by sys.getsizeof,
    each object once; configuration models not counted), making every numpy array in it read-only on the way: a stored value is only read. Objects
    whose id is in `held` (other stored values, weighed when they were stored) are neither weighed nor walked again.
    Numbers, strings and the built-in containers are taken by their exact type first (most of what a layout or a
    plan holds), the same as the general checks below would take them."""
    seen: set[int] = {id(value)}
    total = 0
    stack = [value]
    first = True
    getsizeof = sys.getsizeof
    while stack:
        v = stack.pop()
        kind = type(v)
        if kind in _UNWEIGHED or isinstance(v, (bool, int, float)):
            continue
        if first:
            first = False
        elif id(v) in seen or id(v) in held:
            continue
        seen.add(id(v))
        if kind is str or kind is bytes:
            total += getsizeof(v)
            continue
        if kind is tuple or kind is list:
            total += getsizeof(v)
            stack.extend(v)
            continue
        if isinstance(v, np.ndarray):
            if v.flags.writeable:
                v.setflags(write=False)
            total += v.nbytes  # a view: the bytes it shows (an estimate)
            continue
        if getattr(kind, "model_dump_json", None) is not None:  # a configuration model: the scenario's, not
            continue  # the stored value's (a generated cluster's topology is thousands of objects, walked per put)
        usage = getattr(v, "memory_usage", None)  # a pandas frame: its columns' buffers
        if usage is not None and callable(usage) and hasattr(v, "columns"):
            total += int(usage(index=True, deep=False).sum())
            continue
        total += getsizeof(v)
        if isinstance(v, (str, bytes, type)) or callable(v) and not hasattr(v, "__dict__"):
            continue
        if isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, (tuple, list, set, frozenset)):
            stack.extend(v)
        else:
            if hasattr(v, "__dict__"):
                stack.extend(vars(v).values())
            for slot in getattr(kind, "__slots__", ()):
                stack.append(getattr(v, slot, None))
    return total


_UNWEIGHED = frozenset({bool, int, float, type(None)})  # by exact type; their subclasses by isinstance
