"""The one cache: a Store owned by the run, or by whatever runs many (a sweep worker, bench, the test session).

A stored result is keyed by the name of the computation and the value of everything it reads (keys.key_of of its
arguments, derived, never listed by hand), is only read (its arrays are made read-only), and is forgotten, least
recently used first, when the store holds more than its bytes bound. Random draws are never stored: a computation
that draws stores its deterministic part and draws after.

Who owns it: `held()` sets the store of the code inside it in a context variable, which every computation reads
(current()). A run holds one for its length unless its caller holds one already; a sweep holds one before it forks
its workers, so each worker's copy lives across its points (routes, NCCL's graphs, plans and samples of one fabric
are found once per worker); bench holds one over its repetitions. A context variable rather than an argument: the
computations that share results sit in every layer (a YAML file, a kernel table, a fabric's routes, a pass's
samples), and threading a store through all of their signatures would not change who owns it. Outside any held
store, current() is a fresh store per call: nothing is kept.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
from collections import Counter, OrderedDict
from typing import Any, Callable, Iterator, TypeVar

from .keys import freeze_and_weigh, key_of

T = TypeVar("T")

# The bound of a store. Measured: the largest shipped run (pcie8_ngram, fast) keeps ~40 MB; a sweep worker's points
# of one fabric share most of theirs. A bound, not a fitted figure: a run whose results outgrow it recomputes them.
DEFAULT_MAX_BYTES = 512 << 20

_HELD: contextvars.ContextVar["Store | None"] = contextvars.ContextVar("specsim_store", default=None)


class Store:
    """Results by key, bounded in bytes (least recently used forgotten first), every array in them read-only."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES):
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._entries: OrderedDict[Any, tuple[Any, int]] = OrderedDict()  # key -> (value, its bytes)
        self.computed: Counter = Counter()  # computations run, by name (the key's first element)
        self._held: Counter = Counter()  # id of each stored value (held alive here, so no other object has it)
        # the keys and bytes held per computation (the key's first element), so that count, nbytes_of and clear of
        # a name need not walk every entry (a run asks nbytes_of once; a store holding ~80K entries took ~5 ms)
        self._keys: dict[Any, dict[Any, None]] = {}
        self._bytes: Counter = Counter()

    def get(self, key: tuple, compute: Callable[[], T]) -> T:
        """The value stored under `key` (its first element names the computation), else compute() stored."""
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            return entry[0]
        self.computed[key[0]] += 1
        return self.put(key, compute())

    def peek(self, key: tuple) -> Any:
        """The value stored under `key`, or None (nothing computed)."""
        entry = self._entries.get(key)
        return None if entry is None else entry[0]

    def put(self, key: tuple, value: T) -> T:
        """Store `value` (made read-only) under `key`, replacing what was there; returned."""
        size = freeze_and_weigh(value, self._held)  # a part stored already (a fabric's routes) weighed there
        old = self._entries.pop(key, None)
        if old is not None:
            self._forget(key, old)
        if size <= self.max_bytes:
            self._entries[key] = (value, size)
            self._held[id(value)] += 1
            self.nbytes += size
            self._keys.setdefault(key[0], {})[key] = None
            self._bytes[key[0]] += size
            while self.nbytes > self.max_bytes:
                self._forget(*self._entries.popitem(last=False))
        return value

    def _forget(self, key: tuple, entry: tuple) -> None:
        value, size = entry
        self.nbytes -= size
        self._held[id(value)] -= 1
        if not self._held[id(value)]:
            del self._held[id(value)]
        name = key[0]
        keys = self._keys[name]
        del keys[key]
        self._bytes[name] -= size
        if not keys:
            del self._keys[name], self._bytes[name]

    def count(self, name: str) -> int:
        """Entries held of the computation `name`."""
        return len(self._keys.get(name, ()))

    def nbytes_of(self, name: str) -> int:
        """Bytes held by the entries of the computation `name`."""
        return self._bytes.get(name, 0)

    def forget_above(self, name: str, keep_bytes: int) -> bool:
        """Forget the entries of `name` if they hold more than keep_bytes, and return the heap's free pages to the
        kernel (glibc's malloc_trim; elsewhere nothing more happens): many small values forgotten leave scattered
        holes that larger arrays do not fit, which would stay resident. True if they were forgotten."""
        if self.nbytes_of(name) <= keep_bytes:
            return False
        self.clear(name)
        try:
            import ctypes

            ctypes.CDLL(None).malloc_trim(0)
        except (ImportError, OSError, AttributeError, TypeError):
            pass
        return True

    def clear(self, *names: str) -> None:
        """Forget the entries of the named computations (every entry where none is named)."""
        keys = list(self._entries) if not names else \
            [key for name in dict.fromkeys(names) for key in self._keys.get(name, ())]
        for key in keys:
            self._forget(key, self._entries.pop(key))

    def __len__(self) -> int:
        return len(self._entries)


def current() -> Store:
    """The store held by the code running now (held()); outside any, a fresh one that keeps nothing past the call."""
    store = _HELD.get()
    return Store() if store is None else store


@contextlib.contextmanager
def held(store: Store | None = None) -> Iterator[Store]:
    """Hold `store` for the code inside (a new one if None and none is held; the held one if None and one is)."""
    if store is None:
        store = _HELD.get()
        if store is not None:
            yield store
            return
        store = Store()
    token = _HELD.set(store)
    try:
        yield store
    finally:
        _HELD.reset(token)


def holding(function: Callable[..., T]) -> Callable[..., T]:
    """`function` run inside held(): in the caller's store if it holds one, else in one of its own for the call."""
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        with held():
            return function(*args, **kwargs)
    return wrapper


def stored(function: Callable[..., T]) -> Callable[..., T]:
    """`function` with its results in the held store, keyed by its qualified name and its arguments' values
    (key_of): a pure function of the values it is passed, whose result is only read."""
    name = f"{function.__module__}.{function.__qualname__}"

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        key = (name, key_of(args), key_of(kwargs)) if kwargs else (name, key_of(args))
        return current().get(key, lambda: function(*args, **kwargs))

    wrapper.stored_name = name  # type: ignore[attr-defined]
    return wrapper
