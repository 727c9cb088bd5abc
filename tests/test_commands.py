"""Every command runs on every shipped scenario (and collective on every shipped topology), through the CLI entry
point, on a short workload so the whole sweep stays fast."""
from __future__ import annotations

import glob
import json
import os

import pytest
import yaml

from conftest import SCENARIOS, TOPOLOGIES, scenario_path

SHIPPED = sorted(p for p in glob.glob(os.path.join(SCENARIOS, "*.yaml"))
                 if "scenario" not in yaml.safe_load(open(p)))  # sweep files name a base scenario; skip them
TOPOLOGY_FILES = sorted(glob.glob(os.path.join(TOPOLOGIES, "*.yaml")))
# a short workload: every command still runs its whole path (prefill, decode, speculation, baseline, analysis)
SHORT = ["--set", "workload.requests=1", "--set", "workload.output_tokens=32", "--set", "workload.prompt_tokens=64",
         "--set", "workload.concurrency=1"]
IDS = [os.path.basename(p) for p in SHIPPED]


def cli(capsys, *argv) -> str:
    from simulator.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, f"{' '.join(map(str, argv))} exited {code}: {err.strip()}"
    return out


def test_there_is_something_to_run():
    assert len(SHIPPED) >= 10 and len(TOPOLOGY_FILES) >= 4


@pytest.mark.parametrize("path", SHIPPED, ids=IDS)
def test_run(path, capsys):
    result = json.loads(cli(capsys, path, "--format", "json", *SHORT))
    assert result["tokens"] > 0 and result["throughput_tok_s"] > 0


@pytest.mark.parametrize("path", SHIPPED, ids=IDS)
def test_breakeven(path, capsys):
    out = json.loads(cli(capsys, "breakeven", path, "--format", "json", *SHORT))
    assert out["rows"]


@pytest.mark.parametrize("path", SHIPPED, ids=IDS)
def test_plan(path, capsys):
    out = json.loads(cli(capsys, "plan", path, "--format", "json", *SHORT))
    assert out


@pytest.mark.parametrize("path", SHIPPED, ids=IDS)
def test_compare_with_the_reference(path, capsys):
    assert cli(capsys, "compare", scenario_path("pcie8_eagle3.yaml"), path, *SHORT)


@pytest.mark.parametrize("path", TOPOLOGY_FILES, ids=[os.path.basename(p) for p in TOPOLOGY_FILES])
def test_collective(path, capsys):
    """Over one machine's GPUs (eight, or all of a smaller machine such as the imported 4x L40S; collectives
    between machines are refused until NCCL's inter-node model is in)."""
    gpus = sum(1 for node in yaml.safe_load(open(path))["fabric"]["nodes"] if node.get("kind") == "gpu")
    assert cli(capsys, "collective", path, "--bytes", "14336", "--ranks", str(min(8, gpus)))


def test_tree(capsys):
    assert cli(capsys, "tree", "--accept", "0.6,0.2,0.1", "--size", "9")


def test_breakeven_with_a_length_distribution(capsys):
    """The typical context of a distribution is its mean (this crashed when lengths were added as ints)."""
    out = json.loads(cli(capsys, "breakeven", scenario_path("pcie8_eagle3.yaml"), "--format", "json",
                         "--set", "workload.prompt_tokens={kind: uniform, low: 500, high: 1500}"))
    assert out["context"] == 1000 + 2048 // 2  # mean prompt + half the output, at concurrency 1
    fixed = json.loads(cli(capsys, "breakeven", scenario_path("pcie8_eagle3.yaml"), "--format", "json"))
    assert out["rows"] == fixed["rows"]  # the same typical context as the fixed 1,000-token prompt


