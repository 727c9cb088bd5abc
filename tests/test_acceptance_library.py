"""The acceptance library (scenarios/acceptance/library.yaml): an entry loaded by name is the positional model whose
chains expect the published accept lengths; the arithmetic below is worked by hand from the published figures."""
from __future__ import annotations

import math
import os

import pytest

from conftest import SCENARIOS
from simulator.config.acceptance_library import entries, positional_probs, resolve
from simulator.config.errors import ConfigError

EAGLE3 = os.path.join(SCENARIOS, "nvlink8_h100_llama8b_eagle3.yaml")


def chain_length(probs: list[float], drafts: int) -> float:
    """1 + p1 + p1 p2 + ... over `drafts` positions (the test's own arithmetic, not the simulator's)."""
    total, prefix = 1.0, 1.0
    for p in probs[:drafts]:
        prefix *= p
        total += prefix
    return total


def test_deepseek_v3_mtp_is_the_reports_second_token_acceptance():
    """The report: 85-90% of second tokens accepted; the entry is the midpoint, one draft: 1 + 0.875 = 1.875."""
    acceptance = resolve({"library": "deepseek_v3_mtp"})
    assert acceptance == {"kind": "positional", "probs": [0.875], "sibling_decay": 0.0}
    assert chain_length(acceptance["probs"], 1) == 1.875


def test_a_full_series_of_chains_fixes_every_depth():
    """TensorRT-LLM blog 1: 1.92, 2.58, 2.82 for 1, 2, 3 MTP drafts. p1 = 0.92; p1 p2 = 2.58 - 1.92 = 0.66;
    p1 p2 p3 = 2.82 - 2.58 = 0.24, so a chain of 3 keeps 1 + 0.92 + 0.66 + 0.24 = 2.82 tokens."""
    probs = resolve({"library": "deepseek_r1_mtp_trtllm_b200"})["probs"]
    assert probs[0] == pytest.approx(0.92, abs=1e-12)
    assert probs[1] == pytest.approx(0.66 / 0.92, abs=1e-12)
    assert probs[2] == pytest.approx(0.24 / 0.66, abs=1e-12)
    assert chain_length(probs, 3) == pytest.approx(1 + 0.92 + 0.66 + 0.24, abs=1e-12)


def test_a_range_of_depths_gets_one_probability():
    """vLLM #20780: 2.36 tokens for 2 drafts, no chain of 1. With p1 = p2 = p: p + p^2 = 1.36, p = (-1 + sqrt(6.44)) / 2
    (0.7689); then p3 = (2.79 - 2.36) / p^2 and p4 = (3.08 - 2.79) / (2.79 - 2.36)."""
    probs = resolve({"library": "eagle3_llama31_8b_mtbench"})["probs"]
    p = (-1 + math.sqrt(1 + 4 * 1.36)) / 2
    assert probs[:2] == pytest.approx([p, p], abs=1e-12)
    assert probs[2] == pytest.approx(0.43 / p ** 2, abs=1e-9)
    assert probs[3] == pytest.approx(0.29 / 0.43, abs=1e-9)


@pytest.mark.parametrize("name", sorted(entries()))
def test_every_entry_expects_its_published_lengths(name):
    entry = entries()[name]
    probs = resolve({"library": name})["probs"]
    assert len(probs) == max(entry.accept_lengths)
    assert all(0.0 <= p <= 1.0 for p in probs)
    for drafts, published in entry.accept_lengths.items():
        assert chain_length(probs, drafts) == pytest.approx(published, abs=1e-9)


def test_a_scenario_selects_an_entry_by_name():
    from simulator.api.run import resolve as resolve_scenario

    scenario = resolve_scenario(EAGLE3, {"speculation__acceptance": {"library": "eagle3_vicuna13b_specbench"}})
    acceptance = scenario.spec.speculation.acceptance
    assert acceptance.kind == "positional" and acceptance.sibling_decay == 0.0
    assert chain_length(acceptance.probs, 6) == pytest.approx(5.71, abs=1e-9)  # Spec-Bench, 13B, EAGLE-3


def test_a_bad_name_is_one_line_listing_the_names(capsys):
    from simulator.cli import main

    assert main([EAGLE3, "--set", "speculation.acceptance={library: eagle3_llama8b}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "speculation.acceptance" in err and "'eagle3_llama8b'" in err
    assert all(name in err for name in entries())


def test_published_lengths_that_cannot_be_chains_are_refused():
    with pytest.raises(ConfigError, match="accept_lengths.2"):
        positional_probs({1: 1.5, 2: 1.4})  # a longer chain keeps fewer tokens
    with pytest.raises(ConfigError, match="accept_lengths.3"):
        positional_probs({1: 1.5, 3: 2.6})  # depths 2-3 would each need p > 1 (0.5 + 0.5 at most)
