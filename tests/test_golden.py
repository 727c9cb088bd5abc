"""Behaviour pinned: every shipped scenario's JSON (wall time aside) equals its stored golden result.

A deliberate change of a figure regenerates the files (SPECSIM_REGEN_GOLDEN=1 python -m pytest tests/test_golden.py)
and the commit says which figures changed and why. Keys added since the golden file was written are allowed;
keys in the golden file must still be there with the same values (floats to 1e-9 relative: the runs are
deterministic, the tolerance only absorbs libm differences between machines).
"""
from __future__ import annotations

import glob
import json
import math
import os

import pytest
import yaml

from conftest import ROOT, SCENARIOS

GOLDEN = os.path.join(ROOT, "tests", "golden")
VOLATILE = {"wall_time_s", "specsim_version"}  # the version moves with every release, not with the model
SHIPPED = sorted(p for p in glob.glob(os.path.join(SCENARIOS, "*.yaml"))
                 if "scenario" not in yaml.safe_load(open(p)))  # sweep files name a base scenario; skip them


def differences(expected, actual, path="") -> list[str]:
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{path}: expected an object, got {actual!r}"]
        out = []
        for key, value in expected.items():
            if key in VOLATILE:
                continue
            if key not in actual:
                out.append(f"{path}.{key}: missing")
            else:
                out.extend(differences(value, actual[key], f"{path}.{key}"))
        return out
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{path}: expected {expected!r}, got {actual!r}"]
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in differences(e, a, f"{path}[{i}]")]
    if isinstance(expected, float) and isinstance(actual, (int, float)) and not isinstance(actual, bool):
        if not math.isclose(expected, actual, rel_tol=1e-9, abs_tol=1e-12):
            return [f"{path}: expected {expected!r}, got {actual!r}"]
        return []
    return [] if expected == actual else [f"{path}: expected {expected!r}, got {actual!r}"]


def needs_measured_kernels(golden: dict) -> bool:
    """Whether a golden result was computed with measured kernel times (its `kernels.families` say which source
    served each family): it can only be reproduced with the `measured` extra (aiconfigurator-core) installed."""
    return any(source == "measured" for source in golden.get("kernels", {}).get("families", {}).values())


def skip_without_its_kernel_source(name: str, golden: dict) -> None:
    from simulator.kernels.measured import data_root

    if needs_measured_kernels(golden) and data_root() is None:
        pytest.skip(f"{name}: its golden figures come from measured kernels; install the measured extra "
                    "(pip install 'specsim[measured]') to check them")


@pytest.mark.parametrize("path", SHIPPED, ids=[os.path.basename(p) for p in SHIPPED])
def test_json_matches_golden(path, capsys):
    from simulator.cli import main

    name = os.path.splitext(os.path.basename(path))[0]
    golden = os.path.join(GOLDEN, f"{name}.json")
    if not os.environ.get("SPECSIM_REGEN_GOLDEN"):
        skip_without_its_kernel_source(name, json.load(open(golden)))
    assert main([path, "--format", "json"]) == 0
    actual = json.loads(capsys.readouterr().out)
    if os.environ.get("SPECSIM_REGEN_GOLDEN"):
        with open(golden, "w") as handle:
            json.dump(actual, handle, indent=2)
            handle.write("\n")
    expected = json.load(open(golden))
    problems = differences(expected, actual)
    assert not problems, f"{name}: {len(problems)} figures changed:\n" + "\n".join(problems[:20])


def test_the_comparison_can_fail():
    assert differences({"a": 1.0, "b": [1, 2]}, {"a": 1.0 + 1e-6, "b": [1, 2]}) == [".a: expected 1.0, got 1.000001"]
    assert differences({"wall_time_s": 1.0, "c": {"d": 2}}, {"wall_time_s": 9.0, "c": {}}) == [".c.d: missing"]


def test_goldens_say_which_kernel_source_they_need(monkeypatch):
    """A golden computed with measured kernels skips, rather than failing with every figure changed, where the
    measured extra is missing; a roofline golden runs either way."""
    import simulator.kernels.measured

    measured = json.load(open(os.path.join(GOLDEN, "h200_dsv3_dpattn_ep8.json")))
    roofline = json.load(open(os.path.join(GOLDEN, "pcie8_eagle3.json")))
    assert needs_measured_kernels(measured) and not needs_measured_kernels(roofline)
    monkeypatch.setattr(simulator.kernels.measured, "data_root", lambda: None)
    with pytest.raises(pytest.skip.Exception, match="measured extra"):
        skip_without_its_kernel_source("h200_dsv3_dpattn_ep8", measured)
    skip_without_its_kernel_source("pcie8_eagle3", roofline)  # no skip


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(GOLDEN, "*.json"))), ids=os.path.basename)
def test_every_golden_that_read_the_measured_database_skips_without_it(path):
    """All goldens: one whose figures came from the measured database (its kernel source names aiconfigurator-core,
    the package the extra installs) is one that skips without the extra; the others name the roofline and why."""
    golden = json.load(open(path))
    source = golden["kernels"]["source"]
    assert needs_measured_kernels(golden) == ("aiconfigurator-core" in json.dumps(golden)) == \
        source.startswith("measured"), source
    assert source.startswith(("measured (aiconfigurator-core", "roofline (")), source
