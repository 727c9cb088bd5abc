"""A fuzzer over scenario documents: random mutations of the shipped scenarios (types, ranges, keys, duplicates,
aliases, non-finite values) must give exit 0 with finite JSON, or exit 2 with one line; never exit 1, never more
than 30 s or 1 GB. A fixed, derandomised budget keeps it fast and repeatable in CI (issue 13)."""
from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import resource
import signal
import time

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.cli import main as cli_main

from conftest import SCENARIOS

SHIPPED = ["pcie8_eagle3.yaml", "pcie8_ngram.yaml", "pcie8_tree.yaml", "pcie8_hybrid_bursty.yaml",
           "nvlink8_h100_llama8b_eagle3.yaml", "pcie8_kv_pressure.yaml"]
SHORT = {"requests": 1, "output_tokens": 32, "prompt_tokens": 64}
EXAMPLE_LIMIT_S = 30
MEMORY_LIMIT_KB = 1 << 20  # 1 GB of growth in peak RSS
WORK_LIMIT = "20000"  # a mutated workload above this is refused (exit 2) instead of run at length

NUMBERS = [0, -1, 1, 2, 3, 7, 64, 1.5, 0.5, -0.5, 1e-300, 1e300, -1e300, 2**63, 10**18, float("nan"), float("inf"),
           float("-inf")]
ODD_VALUES = ["", "abc", True, False, None, [], {}, [1, 2], {"kind": "weird"}, {"kind": "fixed", "value": -1}, "1e3"]


def base_document(name: str) -> dict:
    """A shipped scenario with absolute paths and a short workload."""
    path = os.path.join(SCENARIOS, name)
    with open(path) as handle:
        doc = yaml.safe_load(handle)
    for key in ("topology", "model"):
        if isinstance(doc.get(key), str):
            doc[key] = os.path.normpath(os.path.join(SCENARIOS, doc[key]))
    draft = (doc.get("speculation") or {}).get("draft_model") or {}
    if isinstance(draft.get("model"), str):
        draft["model"] = os.path.normpath(os.path.join(SCENARIOS, draft["model"]))
    workload = doc.setdefault("workload", {})
    workload.update(SHORT)
    if isinstance(workload.get("arrival"), dict) and workload["arrival"].get("kind") == "trace":
        workload["arrival"] = {"kind": "all_at_once"}
    return doc


def paths_of(node, prefix=()) -> list[tuple]:
    """Every key path in a document (mappings and lists), the root's children first."""
    out = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, value in items:
        out.append(prefix + (key,))
        out.extend(paths_of(value, prefix + (key,)))
    return out


def mutate(doc: dict, path: tuple, how: str, value) -> None:
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    if how == "delete" and isinstance(parent, dict):
        del parent[last]
    elif how == "unknown key" and isinstance(parent, dict):
        parent[f"{last}_typo"] = value
    else:
        parent[last] = value


@st.composite
def documents(draw) -> str:
    doc = base_document(draw(st.sampled_from(SHIPPED)))
    for _ in range(draw(st.sampled_from([0, 1, 1, 1, 2, 3]))):
        paths = paths_of(doc)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        how = draw(st.sampled_from(["number", "number", "odd", "delete", "unknown key"]))
        value = copy.deepcopy(draw(st.sampled_from(NUMBERS if how == "number" else ODD_VALUES)))
        mutate(doc, path, how, value)
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    extra = draw(st.sampled_from([""] * 8 + ["duplicate", "alias", "recursive", "bomb"]))
    if extra == "duplicate":
        text += f"seed: {draw(st.integers(0, 9))}\n"
    elif extra == "alias":
        text = text.replace("\nworkload:\n", "\nworkload: &shared\n", 1) + "workload_copy: *shared\n"
    elif extra == "recursive":
        text += "loop: &loop [1, *loop]\n"
    elif extra == "bomb":
        text += "b0: &b0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"b{i}: &b{i} [{', '.join([f'*b{i - 1}'] * 10)}]\n" for i in range(1, 8))
    return text


def _finite(constant: str):
    raise ValueError(f"non-finite number {constant} in the JSON output")


class _TooSlow(Exception):
    pass


def _alarm(signum, frame):
    raise _TooSlow(f"an example ran longer than {EXAMPLE_LIMIT_S} s")


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs POSIX interval timers")
@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(text=documents())
def test_mutated_scenarios_exit_0_with_finite_json_or_2_with_one_line(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("fuzz") / "scenario.yaml"
    path.write_text(text)
    out, err = io.StringIO(), io.StringIO()
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, EXAMPLE_LIMIT_S)
    started = time.monotonic()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = cli_main([str(path), "--format", "json", "--max-work", WORK_LIMIT])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - started < EXAMPLE_LIMIT_S
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before < MEMORY_LIMIT_KB
    assert status in (0, 2), f"exit {status}: {err.getvalue()}\n--- document:\n{text}"
    if status == 0:
        result = json.loads(out.getvalue(), parse_constant=_finite)
        assert math.isfinite(result["throughput_tok_s"])
    else:
        lines = err.getvalue().strip().splitlines()
        assert len(lines) == 1 and out.getvalue() == "", f"{err.getvalue()}\n--- document:\n{text}"
