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
        else:  # plain decode and prefill steps carry none of it
            assert extra == 0.0


def test_breakeven_charges_the_host_path_at_the_tables_batch():
    """The break-even table's speculative step carries the same host work at its batch (the concurrency)."""
    import simulator
    from simulator.analysis.breakeven import breakeven_table

    def table(host_path):
        return breakeven_table(simulator.load_scenario(CASE, [("workload.concurrency", 8),
                                                              ("runtime.speculative_host", host_path)]), (3,), ())

    host = simulator.load_scenario(CASE).topology.host
    none = table({"eager_ops": 0, "syncs": 0, "per_request_us": 0.0})
    some = table({"eager_ops": 110, "syncs": 9, "per_request_us": 12.0})
    expected_ms = (110 * host.eager_launch_us + 9 * host.sync_us + 12.0 * 8) / 1e3
    for a, b in zip(none.rows, some.rows):
        assert b.eager.other_ms - a.eager.other_ms == pytest.approx(expected_ms, rel=1e-12)
        assert b.graph.other_ms - a.graph.other_ms == pytest.approx(expected_ms, rel=1e-12)
        assert (b.eager.verify_ms, b.graph.verify_ms, b.graph.draft_ms) == (a.eager.verify_ms, a.graph.verify_ms,
                                                                              a.graph.draft_ms)
    assert none.decode_step_ms == some.decode_step_ms  # plain decode hides the scheduler and has no such path


def test_graph_passes_run_at_the_captured_batch_size():
    """A graph-captured verify and draft pass of b requests runs padded to the smallest captured size >= b, and
    eagerly at b above the largest; eager passes (the draft extend here) always run at b."""
    import simulator
    from simulator.engine.costs import speculative_passes
    from simulator.speculation.drafters import HeadDrafter
    from simulator.speculation.trees import Tree

    runtime = simulator.load_scenario(CASE).spec.runtime
    assert runtime.speculative_graph_batch_sizes[-2:] == [31, 64]
    drafter = HeadDrafter("draft_head", graph=True, extend_graph=False)
    expected = {1: 1, 8: 8, 10: 11, 31: 31, 32: 64, 48: 64, 64: 64, 65: None}
    for batch, captured in expected.items():
        verify, drafts = speculative_passes(drafter, Tree.chain(3), batch, runtime, verify_graph=True)
        *heads, extend = drafts
        assert (verify.graph, verify.shape.batch) == ((True, captured) if captured else (False, batch))
        assert all((d.graph, d.shape.batch) == ((True, captured) if captured else (False, batch)) for d in heads)
        assert len(heads) == 2 and (extend.graph, extend.shape.batch) == (False, batch)
        # an eager verify is never padded
        verify, _ = speculative_passes(drafter, Tree.chain(3), batch, runtime, verify_graph=False)
        assert (verify.graph, verify.shape.batch) == (False, batch)
