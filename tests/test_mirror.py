"""The plain-class mirror of the configuration (config/mirror.py): generated from the pydantic models and current;
for every document pydantic validates while every shipped scenario, topology, model card and engine profile loads,
the mirror builds the same configuration (dumps, JSON text, set keys, classes); and on mutated documents it never
takes one pydantic refuses, nor builds a different one (it declines instead)."""
from __future__ import annotations

import copy
import glob
import json
import math
import os
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.config import mirror, mirror_gen
from simulator.config.base import Strict
from simulator.config.errors import ConfigError
from simulator.config.mirror_base import Decline, Plain, dumps_items, dumps_json, pydantic_float

from conftest import ROOT, SCENARIOS

from test_fuzz_scenarios import NUMBERS, ODD_VALUES, mutate, paths_of


def test_the_committed_mirror_is_what_the_generator_writes_now():
    with open(mirror_gen.OUT) as fh:
        committed = fh.read()
    assert committed == mirror_gen.Gen().source(), "stale: run python -m simulator.config.mirror_gen"


def mirror_of(model: type) -> type[Plain]:
    return mirror.BY_PYDANTIC[(model.__module__, model.__qualname__)]


def same(fast, slow, where="") -> None:
    """The mirror's object is the pydantic one's twin: class, set keys and every value, all the way down."""
    if isinstance(slow, Strict):
        assert type(fast) is mirror_of(type(slow)), where
        assert fast.model_fields_set == slow.model_fields_set, where
        for name in type(slow).model_fields:
            same(getattr(fast, name), getattr(slow, name), f"{where}.{name}")
    elif isinstance(slow, (list, tuple)):
        assert type(fast) is type(slow) and len(fast) == len(slow), where
        for i, (a, b) in enumerate(zip(fast, slow)):
            same(a, b, f"{where}[{i}]")
    elif isinstance(slow, dict):
        assert type(fast) is dict and list(fast) == list(slow), where
        for key in slow:
            same(fast[key], slow[key], f"{where}.{key}")
    else:
        assert type(fast) is type(slow) and (fast == slow or (fast != fast and slow != slow)), where


def agree(model: type, data, pydantic_result) -> None:
    fast = mirror_of(model)._load(copy.deepcopy(data))
    same(fast, pydantic_result, model.__name__)
    assert fast.model_dump(mode="json") == pydantic_result.model_dump(mode="json")
    assert fast.model_dump_json() == pydantic_result.model_dump_json()
    assert fast.model_dump() == pydantic_result.model_dump()
    assert fast.model_dump(exclude_none=True) == pydantic_result.model_dump(exclude_none=True)
    assert fast.model_dump_json(exclude_none=True) == pydantic_result.model_dump_json(exclude_none=True)
    again = mirror_of(model)._load(copy.deepcopy(data))
    assert fast == again and _hashable(fast) == _hashable(pydantic_result)
    if _hashable(fast):
        assert hash(fast) == hash(again)


def _hashable(obj) -> bool:
    try:
        hash(obj)
    except TypeError:
        return False
    return True


@pytest.fixture(scope="module")
def shipped_documents():
    """Every (model, document, pydantic's object) validated while the shipped files load."""
    from pydantic import BaseModel

    from simulator.config.base import validate
    from simulator.config.engine_schema import EngineProfile
    from simulator.config.loader import load_scenario
    from simulator.config.model_card import ModelCard
    from simulator.config.topology import Topology

    seen = []
    original = BaseModel.model_validate.__func__

    def recording(cls, data, *args, **kwargs):
        snapshot = copy.deepcopy(data)
        result = original(cls, data, *args, **kwargs)
        if cls.__module__.startswith("simulator.config."):
            seen.append((cls, snapshot, result))
        return result

    Strict.model_validate = classmethod(recording)
    try:
        for path in sorted(glob.glob(os.path.join(SCENARIOS, "**", "*.yaml"), recursive=True)):
            with open(path) as fh:
                doc = yaml.safe_load(fh)
            if isinstance(doc, dict) and "parallelism" in doc and "topology" in doc:
                load_scenario(path)
        for pattern, model in (("topologies/*.yaml", Topology), ("scenarios/models/*.yaml", ModelCard),
                               ("engines/*/*.yaml", EngineProfile)):
            for path in sorted(glob.glob(os.path.join(ROOT, pattern))):
                with open(path) as fh:
                    doc = yaml.safe_load(fh)
                if model is Topology and "node" in doc and "fabric" not in doc:
                    continue  # a generated cluster: loaded through its scenarios
                validate(model, doc, path)
    finally:
        del Strict.model_validate
    return seen


# documents with a part the mirror leaves to pydantic's validators by design (config/mirror_gen.py FIELD_VALIDATORS)
def _left_to_pydantic(data) -> bool:
    text = repr(data)
    return "'library'" in text or "'host_slowdown': {" in text


def test_every_shipped_document_builds_the_same_configuration_in_the_mirror(shipped_documents):
    kinds = {cls.__name__ for cls, _, _ in shipped_documents}
    assert {"ScenarioSpec", "Topology", "ModelCard", "EngineProfile", "Runtime"} <= kinds
    declined = 0
    for model, data, result in shipped_documents:
        try:
            agree(model, data, result)
        except Decline:
            assert _left_to_pydantic(data), f"{model.__name__} declined a shipped document: {data!r:.300}"
            declined += 1
    assert declined < len(shipped_documents) / 10


# -- mutations: decline, or agree; never accept what pydantic refuses -----------------------------------------------

def _validated(model, data):
    from simulator.config.base import validate

    try:
        return validate(model, copy.deepcopy(data), "doc.yaml")
    except ConfigError:
        return None


@st.composite
def mutated(draw, documents):
    model, data, _ = draw(st.sampled_from(documents))
    doc = copy.deepcopy(data)
    for _ in range(draw(st.sampled_from([1, 1, 2, 3]))):
        paths = paths_of(doc)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        how = draw(st.sampled_from(["number", "number", "odd", "delete", "unknown key", "swap"]))
        if how == "swap":  # a value from elsewhere in the same document (a valid value of another field)
            other = draw(st.sampled_from(paths))
            value = doc
            for key in other:
                value = value[key]
            value = copy.deepcopy(value)
        else:
            value = copy.deepcopy(draw(st.sampled_from(NUMBERS + [0.0, 1.0, 1e-5, 2.5e-7, 1 << 60, "x"]
                                                       if how == "number" else ODD_VALUES)))
        mutate(doc, path, how, value)
    return model, doc


def test_mutated_documents_are_declined_or_built_alike(shipped_documents):
    distinct = {}
    for model, data, result in shipped_documents:
        distinct.setdefault((model.__name__, repr(data)), (model, data, result))
    documents = list(distinct.values())

    @settings(max_examples=160, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(case=mutated(documents))
    def check(case):
        model, doc = case
        try:
            fast = mirror_of(model)._load(copy.deepcopy(doc))
        except Decline:
            return  # pydantic decides (its message, or its object)
        slow = _validated(model, doc)
        assert slow is not None, f"the mirror took a {model.__name__} pydantic refuses: {doc!r:.400}"
        agree(model, doc, slow)

    check()


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(x=st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([1e-5, 2.5e-5, 9.99e-6, 1e-4, 1e16,
                                                                            1e-7, -1e-5, 0.0, -0.0, 5e-324]))
def test_floats_are_written_as_pydantic_writes_them(x):
    from pydantic import TypeAdapter

    assert pydantic_float(x) == TypeAdapter(float).dump_json(x).decode()
    assert dumps_json({"a": [x, "é"], "b": {"1": True, "c": None}}) == TypeAdapter(dict).dump_json(
        {"a": [x, "é"], "b": {"1": True, "c": None}}).decode()
    assert math.isfinite(x)


_JSON_LEAVES = (st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats()
                | st.sampled_from([1e-5, 2.5e-7, -1e-4, 1e16, float("inf"), float("nan")])
                | st.text() | st.sampled_from(["e-", "Infinity", "NaN", "time-of-day", "é\u2028\"\\"]))


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(value=st.recursive(_JSON_LEAVES, lambda inner: st.lists(inner, max_size=4)
                          | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=20))
def test_the_one_pass_json_writes_what_the_item_by_item_writer_does(value):
    """dumps_json (json's C encoder, item by item where a float's repr is not pydantic's) against dumps_items on
    drawn json-mode dumps (str keys), and against pydantic's writer where every float is finite."""
    from pydantic import TypeAdapter

    assert dumps_json(value) == dumps_items(value)
    text = json.dumps(value)
    if "Infinity" not in text and "NaN" not in text:
        assert dumps_json(value) == TypeAdapter(Any).dump_json(value).decode()


# -- the whole load, fast against pydantic's alone ------------------------------------------------------------------

def _load_both(path: str):
    """(what the fast load gives, what the load gives with every document left to pydantic): a Scenario or the
    error's type and text."""
    from unittest import mock

    from simulator.config.loader import load_scenario

    def outcome():
        try:
            return load_scenario(path)
        except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
            return type(exc).__name__, str(exc)

    def refuse(cls, obj, data):
        raise Decline

    fast = outcome()
    with mock.patch.object(Plain, "_fill", classmethod(refuse)):
        slow = outcome()
    return fast, slow


def same_scenario(fast, slow) -> None:
    if isinstance(slow, tuple) or isinstance(fast, tuple):
        assert fast == slow
        return
    for part in ("spec", "topology", "model", "draft_model", "gpu_as_loaded"):
        a, b = getattr(fast, part), getattr(slow, part)
        assert (a is None) == (b is None), part
        if b is not None:
            assert a.model_dump_json() == b.model_dump_json(), part
            _same_plain(a, b, part)
    assert (fast.engine, fast.files, fast.overrides, fast.source) == (slow.engine, slow.files, slow.overrides,
                                                                      slow.source)
    assert fast == slow


def _same_plain(a, b, where) -> None:
    """Two mirror objects alike in class, set keys and values, all the way down."""
    if isinstance(b, Plain):
        assert type(a) is type(b) and a.model_fields_set == b.model_fields_set, where
        for name in b._fields:
            _same_plain(getattr(a, name), getattr(b, name), f"{where}.{name}")
    elif isinstance(b, (list, tuple, dict)):
        assert type(a) is type(b) and len(a) == len(b), where
        for key in (b if isinstance(b, dict) else range(len(b))):
            _same_plain(a[key], b[key], f"{where}[{key}]")
    else:
        assert type(a) is type(b) and a == b, where


def test_every_shipped_scenario_loads_the_same_fast_and_through_pydantic():
    paths = []
    for path in sorted(glob.glob(os.path.join(SCENARIOS, "**", "*.yaml"), recursive=True)):
        with open(path) as fh:
            doc = yaml.safe_load(fh)
        if isinstance(doc, dict) and "parallelism" in doc and "topology" in doc:
            paths.append(path)
    assert len(paths) > 40
    for path in paths:
        fast, slow = _load_both(path)
        assert not isinstance(fast, tuple), fast
        same_scenario(fast, slow)


def test_mutated_scenarios_load_the_same_fast_and_through_pydantic(tmp_path_factory):
    from test_fuzz_scenarios import documents

    @settings(max_examples=40, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(text=documents())
    def check(text):
        path = tmp_path_factory.mktemp("mirror") / "scenario.yaml"
        path.write_text(text)
        fast, slow = _load_both(str(path))
        same_scenario(fast, slow)

    check()
