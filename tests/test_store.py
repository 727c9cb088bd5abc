"""The one store (simulator.cache): keyed by value, bounded in bytes, read-only, owned by whoever holds it; a sweep
worker's store lives across its points, so a fabric's routes are found once for every point on it."""
from __future__ import annotations

import contextvars
from dataclasses import dataclass

import numpy as np
import pytest

from conftest import scenario_path
from simulator.cache import Store, current, held, key_of, stored
from simulator.config.loader import read_yaml
from simulator.config.topology import Topology


@dataclass(frozen=True)
class Shape:
    tokens: int
    context: int


def test_keys_are_values():
    a = Topology.model_validate(read_yaml("topologies/pcie8_rtx_pro_6000.yaml"))
    b = Topology.model_validate(read_yaml("topologies/pcie8_rtx_pro_6000.yaml"))
    assert a is not b and key_of(a) == key_of(b)
    assert key_of(a) != key_of(a.model_copy(update={"name": "other"}))
    assert key_of(Shape(1, 2)) == key_of(Shape(1, 2)) != key_of(Shape(2, 1))
    x = np.arange(6.0)
    assert key_of(x) == key_of(x.copy()) != key_of(x.reshape(2, 3)) != key_of(x.astype(np.float32))
    assert key_of([1, 2]) != key_of((1, 2))
    with pytest.raises(TypeError, match="value_key"):
        key_of(object())  # never by identity


def test_bounded_in_bytes_least_recently_used_first():
    store = Store(max_bytes=3 * 8_000 + 2_000)  # three 8 KB arrays and their headers
    for i in range(3):
        store.get(("a", i), lambda: np.zeros(1000))
    store.get(("a", 0), pytest.fail)  # a hit: 0 is now the most recently used
    store.get(("a", 3), lambda: np.zeros(1000))  # 1, the least recently used, goes
    assert store.peek(("a", 1)) is None and all(store.peek(("a", i)) is not None for i in (0, 2, 3))
    assert store.nbytes <= store.max_bytes and store.computed["a"] == 4
    store.get(("big",), lambda: np.zeros(10_000))  # larger than the bound: returned, not kept
    assert store.peek(("big",)) is None and len(store) == 3


def test_a_computation_above_its_bound_is_forgotten_alone():
    store = Store()
    for i in range(4):
        store.put(("big", i), np.zeros(1000))  # 8,000 bytes each
    store.put(("small", 0), np.zeros(10))
    assert not store.forget_above("big", 4 * 8000) and store.count("big") == 4  # at the bound: kept
    assert store.forget_above("big", 4 * 8000 - 1) and store.count("big") == 0
    assert store.count("small") == 1 and store.nbytes == store.nbytes_of("small") == 80


def test_counts_and_bytes_by_name_follow_puts_replacements_evictions_and_clears():
    """count, nbytes_of and clear keep a tally per computation: after every kind of change it equals what walking
    the entries finds (the keys peek sees, the sizes each put weighed)."""
    rng = np.random.default_rng(3)
    store = Store(max_bytes=40_000)
    names = ("a", "b", "c")
    for step in range(300):
        name, i = names[rng.integers(3)], int(rng.integers(6))
        action = rng.integers(10)
        if action < 7:
            store.put((name, i), np.zeros(int(rng.integers(1, 1200))))  # replacements and LRU evictions
        elif action < 9:
            store.get((name, i), lambda: np.zeros(50))
        else:
            store.clear(*rng.choice(names, size=int(rng.integers(1, 3))))  # a name may come twice
        for n in names:
            held_keys = [(n, j) for j in range(6) if store.peek((n, j)) is not None]
            assert store.count(n) == len(held_keys), (step, n)
            walked = sum(size for key, (_, size) in store._entries.items() if key[0] == n)  # the sizes put weighed
            assert store.nbytes_of(n) == walked >= sum(store.peek(k).nbytes for k in held_keys), (step, n)
        assert sum(store.nbytes_of(n) for n in names) == store.nbytes <= store.max_bytes
    store.clear()
    assert len(store) == store.nbytes == 0 and all(store.count(n) == store.nbytes_of(n) == 0 for n in names)


def test_stored_arrays_are_read_only():
    store = Store()
    value = store.get(("t",), lambda: (np.ones(3), {"x": np.zeros(2)}))
    with pytest.raises(ValueError):
        value[0][0] = 2.0
    with pytest.raises(ValueError):
        value[1]["x"][0] = 2.0


def test_a_value_weighs_its_objects_once_numbers_nothing_subclasses_as_their_kind():
    """freeze_and_weigh's sum, worked out by hand: sys.getsizeof of each distinct object that is not a number, an
    array's nbytes; numbers (and their subclasses: bool, an IntEnum) nothing; an object met twice counted once."""
    import enum
    import sys
    from collections import namedtuple

    from simulator.cache.keys import freeze_and_weigh

    class Level(enum.IntEnum):
        LOW = 1

    class Name(str):
        pass

    Pair = namedtuple("Pair", "a b")

    class Slotted:
        __slots__ = ("x",)

        def __init__(self, x):
            self.x = x

    shared, word, name, pair = [1.5, 2], "tokens", Name("ranks"), Pair(3, True)
    array, slotted = np.arange(4.0), Slotted((Level.LOW, None))
    value = {word: shared, "other": (shared, name, pair), 7: [array, slotted, frozenset({9})]}
    objects = [value, word, shared, "other", value["other"], name, pair, value[7], slotted, slotted.x,
               value[7][2]]
    expected = sum(sys.getsizeof(o) for o in objects) + array.nbytes
    assert freeze_and_weigh(value) == expected
    assert not array.flags.writeable
    assert freeze_and_weigh(value, held={id(shared)}) == expected - sys.getsizeof(shared)


def test_a_run_uses_the_store_its_caller_holds_and_keeps_nothing_without_one():
    calls = []

    @stored
    def square(x: int) -> int:
        calls.append(x)
        return x * x

    with held(Store()) as outer:
        with held() as inner:  # a run inside a sweep worker: the worker's store
            assert inner is outer and square(3) == 9
        assert square(3) == 9 and calls == [3]

    def outside() -> None:  # no store held (a bare context, not the test session's)
        assert current() is not current() and square(4) == square(4) and calls == [3, 4, 4]
    contextvars.Context().run(outside)


def test_sweep_points_on_one_fabric_find_its_routes_once(tmp_path, monkeypatch):
    """Issue 27: routes once per fabric graph, shared by every replica and every sweep point on that graph."""
    from simulator.experiments.sweep import run_sweep
    from simulator.hardware import routes

    calls = []
    real = routes.shortest_paths
    monkeypatch.setattr(routes, "shortest_paths", lambda *a: calls.append(1) or real(*a))
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"name: routes_once\nscenario: {scenario_path('pcie8_eagle3.yaml')}\n"
                     "set: {workload.requests: 1, workload.output_tokens: 16}\n"
                     "axes: {speculation.draft_tokens: [1, 2, 3]}\nmetrics: [throughput_tok_s]\n")
    with held(Store()):  # a cold store for the sweep (not the test session's)
        report = run_sweep(str(sweep), workers=1, out=str(tmp_path / "out.csv"), progress=False)
    assert report.num_ok == 3 and len(calls) == 1
