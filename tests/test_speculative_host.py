"""The engine's host work around a speculative step (runtime.speculative_host) is charged exactly, on speculative
steps only: eager ops at the host's launch cost, syncs at its sync cost, and Python work per running request."""
from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = os.path.join(ROOT, "scenarios", "validation", "cases", "h100_llama8b_eagle3_mtbench.yaml")
# small: 12 requests of 40 output tokens at concurrency 4, so batches of 1-4 appear
SMALL = ["--set", "workload.requests=12", "--set", "workload.output_tokens=40", "--set", "workload.concurrency=4"]


def steps(tmp_path, name: str, host_path: str) -> list[dict]:
    out = tmp_path / f"{name}.csv"
    subprocess.run([sys.executable, "-m", "simulator", CASE, *SMALL, "--set",
                    f"runtime.speculative_host={host_path}", "--steps-log", str(out), "--format", "json"],
                   check=True, cwd=ROOT, capture_output=True)
    with open(out, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_speculative_host_work_is_charged_exactly_on_speculative_steps(tmp_path):
    import simulator

    host = simulator.load_scenario(CASE).topology.host
    none = steps(tmp_path, "none", "{eager_ops: 0, syncs: 0, per_request_us: 0.0}")
    some = steps(tmp_path, "some", "{eager_ops: 110, syncs: 9, per_request_us: 12.0}")
    speculative = [(a, b) for a, b in zip(none, some) if a["kind"] == "speculative"]
    assert len(speculative) > 10 and {int(a["batch_requests"]) for a, _ in speculative} >= {2, 3, 4}
    for a, b in zip(none, some):
        assert a["kind"] == b["kind"] and a["batch_requests"] == b["batch_requests"]
        extra = float(b["other_us"]) - float(a["other_us"])
        if a["kind"] == "speculative":
            expected = 110 * host.eager_launch_us + 9 * host.sync_us + 12.0 * int(a["batch_requests"])
            assert extra == pytest.approx(expected, abs=0.011)  # the log rounds to 0.01 us
            # serial with the GPU: the step is its drafting, its verify pass and this host work, end to end
            parts = float(b["draft_us"]) + float(b["pass_us"]) + float(b["other_us"])
            assert float(b["duration_us"]) == pytest.approx(parts, abs=0.02)
        else:  # plain decode and prefill steps carry none of it
            assert extra == 0.0
