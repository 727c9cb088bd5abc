"""An override inside a runtime mapping keyed by integers (custom_allreduce.two_shot_from_bytes: GPUs -> the size
from which the kernel runs two-shot) merges with the profile's entries as a string-keyed one does: --set's dotted
path writes the key as digits, a YAML mapping as an integer, and both name the profile's key."""
from __future__ import annotations

import pytest

from conftest import scenario_path
from simulator.config import load_scenario
from simulator.config.errors import ConfigError
from simulator.config.overlay import key_names, overlay

H200_SGLANG = scenario_path("nvlink8_h200_eagle3.yaml")  # SGLang 0.5.9: {2: 0, 4: 524288, 8: 262144}
SET = "runtime.custom_allreduce.two_shot_from_bytes"


@pytest.mark.parametrize("override", [f"{SET}.8=300000", f"{SET}={{8: 300000}}"])
def test_one_gpu_count_set_alone(override):
    """The 8-GPU entry changes, the 2- and 4-GPU entries stay the profile's (was: the dotted key '8' refused as
    not an integer; the mapping an internal TypeError naming the profile's keys)."""
    scenario = load_scenario(H200_SGLANG, [override])
    assert scenario.spec.runtime.custom_allreduce.two_shot_from_bytes == {2: 0, 4: 524288, 8: 300000}
    assert {f"{SET}.2", f"{SET}.4"} <= set(scenario.engine.keys)
    assert f"{SET}.8" not in scenario.engine.keys
    # a rebuild (a sweep's point) keeps the scenario's entry and takes the profile's again
    rebuilt = scenario.with_overrides({"workload.requests": 4})
    assert rebuilt.spec.runtime.custom_allreduce.two_shot_from_bytes == {2: 0, 4: 524288, 8: 300000}


def test_a_bad_entry_is_the_scenarios_one_line():
    with pytest.raises(ConfigError) as error:
        load_scenario(H200_SGLANG, [f"{SET}.8=abc"])
    assert error.value.path == f"{SET}[8]" and "scenarios/nvlink8_h200_eagle3.yaml" in str(error.value)


def test_overlay_by_integer_keys():
    merged, taken = overlay({"t": {2: 0, 8: 1}}, {"t": {"8": 5, "6": 3}})
    assert merged == {"t": {2: 0, 8: 5, 6: 3}} and taken == [("t", 2)]
    assert key_names([("t", 2), ("s",)]) == ("runtime.t.2", "s")
