"""The Chrome trace: valid JSON, per-rank host and GPU lanes, wait/transfer spans that add up to the step log."""
from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest

from simulator.results import trace as trace
from simulator.api.run import resolve
from simulator.cli import main as cli_main
from simulator.serving.simulate import simulate
from simulator.serving.server import KIND_SPEC
from simulator.results.summary import step_table

from conftest import scenario_path

STEPS = 4
ROUNDING_US = 1e-3  # times are written to the nanosecond
MIN_SPAN_US = trace.MIN_SPAN_US


@pytest.fixture(scope="module")
def recorded():
    scenario = resolve(scenario_path("pcie8_eagle3.yaml"), {"workload__requests": 1})
    events = trace.record(scenario, steps=STEPS)
    steps = step_table(simulate(scenario, fidelity="layer", max_steps=STEPS))
    return scenario, events, steps


def spans(events, name=None, pid=None, tid=None):
    return [e for e in events["traceEvents"] if e["ph"] == "X" and (name is None or e["name"] == name)
            and (pid is None or e["pid"] == pid) and (tid is None or e["tid"] == tid)]


def test_trace_is_json_with_named_lanes_per_rank(recorded, tmp_path):
    scenario, events, _ = recorded
    path = trace.write(events, str(tmp_path / "t.json"))
    loaded = json.loads(open(path, encoding="utf-8").read())
    assert loaded["traceEvents"]
    ranks = scenario.spec.parallelism.tp
    threads = {(e["pid"], e["args"]["name"]) for e in loaded["traceEvents"]
               if e["ph"] == "M" and e["name"] == "thread_name"}
    processes = {e["args"]["name"] for e in loaded["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    for r in range(ranks):
        assert (r + 1, "host") in threads and (r + 1, "gpu") in threads
        assert f"rank {r}" in processes
    assert (0, "step") in threads and "steps" in processes
    names = {e["name"] for e in spans(loaded)}
    assert {"head", "layer 0 attention", "layer 0 mlp", "tail", "wait", "transfer", "draft", "verify",
            "prefill"} <= names
    assert all(e["dur"] >= -1e-9 for e in spans(loaded))


def test_timestamps_non_decreasing_per_lane(recorded):
    _, events, _ = recorded
    lanes = defaultdict(list)
    for e in events["traceEvents"]:
        if e["ph"] in ("X", "C"):
            lanes[(e["pid"], e["tid"])].append(e)
    assert len(lanes) >= 2 + 2 * 8
    for lane, items in lanes.items():
        ts = [e["ts"] for e in items]
        assert ts == sorted(ts), lane
        if lane[0] > 0:  # a rank's lanes: spans never overlap
            ends = np.array([e["ts"] + e["dur"] for e in items[:-1]])
            assert (np.array(ts[1:]) >= ends - 1.5 * ROUNDING_US).all(), lane  # two roundings, float sums


def test_wait_and_transfer_match_the_step_log(recorded):
    scenario, events, steps = recorded
    ranks = scenario.spec.parallelism.tp
    spec_rows = np.flatnonzero(steps["kind"] == KIND_SPEC)
    assert spec_rows.size
    for i in spec_rows:
        begin = steps["start_at"][i] + steps["draft_us"][i]  # the verify pass follows the drafts
        end = begin + steps["pass_us"][i]

        window = [e for e in spans(events) if e["pid"] > 0 and begin - ROUNDING_US <= e["ts"] < end]
        # each span is rounded to the nanosecond (half a ns off at most) and gaps under MIN_SPAN_US are left out:
        # at most that much per span of the pass, per rank
        allowed = len(window) * (ROUNDING_US / 2 + MIN_SPAN_US) / ranks
        for name, column in (("wait", "allreduce_wait"), ("transfer", "allreduce_transfer")):
            value = sum(e["dur"] for e in window if e["name"] == name)
            assert value / ranks == pytest.approx(steps[column][i], abs=allowed)
        step_spans = [e for e in spans(events, pid=0) if e["args"].get("step") == i]
        verify = next(e for e in step_spans if e["name"] == "verify")
        assert verify["dur"] == pytest.approx(steps["pass_us"][i], abs=ROUNDING_US / 2)


def test_counters_and_bounded_steps(recorded):
    _, events, steps = recorded
    counters = [e for e in events["traceEvents"] if e["ph"] == "C"]
    assert len(counters) == len(steps["kind"]) == STEPS == events["otherData"]["steps"]
    assert [c["args"]["tokens"] for c in counters] == steps["tokens"].tolist()


def test_cli_trace_writes_the_file(tmp_path, capsys):
    out = tmp_path / "run.json"
    code = cli_main([scenario_path("pcie8_eagle3.yaml"), "--set", "workload.requests=1", "--set",
                     "workload.output_tokens=64", "--no-baseline", "--trace", str(out), "--trace-steps", "3"])
    assert code == 0
    assert str(out) in capsys.readouterr().err
    loaded = json.loads(out.read_text(encoding="utf-8"))
    assert loaded["otherData"]["steps"] == 3
    assert any(e["name"] == "transfer" for e in loaded["traceEvents"])


def test_trace_steps_are_bounded_and_gzip_is_compact(tmp_path, capsys):
    argv = [scenario_path("pcie8_eagle3.yaml"), "--set", "workload.requests=1", "--set", "workload.output_tokens=64",
            "--no-baseline"]
    assert cli_main([*argv, "--trace", str(tmp_path / "t.json"), "--trace-steps", str(trace.MAX_STEPS + 1)]) == 2
    assert "--trace-steps" in capsys.readouterr().err and not (tmp_path / "t.json").exists()
    assert cli_main([*argv, "--trace", str(tmp_path / "t.json"), "--trace-steps", "2"]) == 0
    assert cli_main([*argv, "--trace", str(tmp_path / "t.json.gz"), "--trace-steps", "2"]) == 0
    import gzip

    plain = (tmp_path / "t.json").read_bytes()
    packed = (tmp_path / "t.json.gz").read_bytes()
    assert gzip.decompress(packed) == plain and len(packed) < len(plain) / 5
    data = json.loads(plain)
    assert data["otherData"]["provenance"]["scenario"] == "pcie8_eagle3"
    assert all(e["ts"] == round(e["ts"], 3) for e in data["traceEvents"] if "ts" in e)


def test_a_scenario_only_processes_run_is_traced_at_event_fidelity():
    """A slow host (scenarios/event/) cannot run at layer fidelity: its trace is the event fidelity's, with the same
    steps as that run's log."""
    import os

    from conftest import SCENARIOS

    scenario = resolve(os.path.join(SCENARIOS, "event", "pcie8_eagle3_slow_host.yaml"), {"workload__output_tokens": 8})
    events = trace.record(scenario, steps=3)
    assert events["otherData"]["fidelity"] == "event" and events["otherData"]["steps"] == 3
    logged = step_table(simulate(scenario, max_steps=3))
    per_step = defaultdict(float)  # the steps lane's spans (draft, pass, host overhead) of each step
    for e in events["traceEvents"]:
        if e["pid"] == trace.STEPS_PID and e["ph"] == "X":
            per_step[e["args"]["step"]] += e["dur"]
    assert [per_step[i] for i in range(3)] == pytest.approx(list(logged["duration_us"]), abs=3 * ROUNDING_US)
