"""Sweeps: grid/zip/random points, local processes and a Dask cluster, failed points, kill and resume, bad files."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from simulator.cli import main as cli_main
from simulator.config.errors import ConfigError
from simulator.experiments.sweep import load_sweep, point_id, points, read_results, run_sweep

from conftest import ROOT, scenario_path

SHORT = {"workload.requests": 1, "workload.output_tokens": 256}
GRID = {
    "topology.fabric.shm_hop_latency_us": [0, 1.58],
    "topology.host.eager_launch_us": [6, 12.8],
    "runtime.cuda_graph_verify": [False, True],
}
METRICS = ["throughput_tok_s", "baseline_tok_s", "speedup", "mean_accept_len", "step_ms.verify.mean",
           "breakeven_accept_len"]


def write_sweep(directory, name="grid", **fields) -> str:
    """A sweep file in `directory` whose base scenario is named relative to it, as users write them."""
    data = {"scenario": os.path.relpath(scenario_path("pcie8_eagle3.yaml"), directory), "mode": "grid",
            "axes": GRID, "set": SHORT, "metrics": METRICS, **fields}
    path = os.path.join(directory, f"{name}.yaml")
    with open(path, "w") as handle:
        yaml.safe_dump(data, handle, sort_keys=False)
    return str(path)


def ok_rows(path: str) -> dict[str, dict]:
    return {r["point_id"]: r for r in read_results(path) if r["status"] == "ok"}


def test_grid_sweep_on_two_workers_matches_single_runs(tmp_path):
    from simulator.results.run import run

    path = write_sweep(tmp_path)
    report = run_sweep(path, workers=2, progress=False, chunk_size=2)
    out = tmp_path / "grid.results.csv"  # default: next to the sweep file, named after it
    assert report.out == str(out) and (report.num_points, report.num_ok, report.num_failed) == (8, 8, 0)
    rows = read_results(str(out))
    assert list(rows[0]) == ["point_id", *GRID, *METRICS, "status", "error"]
    assert len({r["point_id"] for r in rows}) == 8 and {r["status"] for r in rows} == {"ok"}
    combos = {(r["topology.fabric.shm_hop_latency_us"], r["topology.host.eager_launch_us"],
               r["runtime.cuda_graph_verify"]) for r in rows}
    assert combos == {(a, b, c) for a in ("0", "1.58") for b in ("6", "12.8") for c in ("false", "true")}
    row = next(r for r in rows if r["topology.fabric.shm_hop_latency_us"] == "0"
               and r["topology.host.eager_launch_us"] == "12.8" and r["runtime.cuda_graph_verify"] == "false")
    single = run(scenario_path("pcie8_eagle3.yaml"), set_args=[f"{k}={v}" for k, v in SHORT.items()],
                 topology__fabric__shm_hop_latency_us=0, topology__host__eager_launch_us=12.8,
                 runtime__cuda_graph_verify=False).to_dict()
    assert float(row["throughput_tok_s"]) == pytest.approx(single["throughput_tok_s"], rel=1e-9)
    assert float(row["step_ms.verify.mean"]) == pytest.approx(single["step_ms"]["verify"]["mean"], rel=1e-9)
    again = run_sweep(path, workers=2, progress=False)  # nothing left to do
    assert (again.num_skipped, again.num_ok) == (8, 0) and len(read_results(str(out))) == 8


def test_same_sweep_on_a_dask_cluster(tmp_path):
    distributed = pytest.importorskip("dask.distributed")
    path = write_sweep(tmp_path)
    run_sweep(path, workers=1, out=str(tmp_path / "local.csv"), progress=False)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        status = cli_main(["sweep", path, "--dask", cluster.scheduler_address, "--out", str(tmp_path / "dask.csv"),
                           "--no-progress"])
    assert status == 0
    local, on_dask = ok_rows(str(tmp_path / "local.csv")), ok_rows(str(tmp_path / "dask.csv"))
    assert len(on_dask) == 8 and set(on_dask) == set(local)
    for pid, row in on_dask.items():
        assert float(row["speedup"]) == pytest.approx(float(local[pid]["speedup"]), rel=1e-9)


def test_killed_sweep_resumes_with_only_the_missing_points(tmp_path):
    axes = {"topology.fabric.shm_hop_latency_us": [0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 3],
            "topology.host.eager_launch_us": [6, 9, 12.8], "runtime.cuda_graph_verify": [False, True]}
    path = write_sweep(tmp_path, "kill", axes=axes, set={"workload.requests": 1, "workload.output_tokens": 512})
    out = tmp_path / "kill.results.csv"
    proc = subprocess.Popen([sys.executable, "-m", "simulator", "sweep", path, "--workers", "2", "--chunk", "1"],
                            cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if out.exists() and out.read_bytes().count(b"\n") >= 5:  # header and 4 rows
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the sweep ended before it could be killed: " + proc.stderr.read().decode()
    os.killpg(proc.pid, signal.SIGKILL)  # the sweep and its workers: the session we started
    proc.wait()
    proc.stderr.close()
    with open(out, "ab") as handle:  # what a write cut short would leave: no newline
        handle.write(b"0123456789abcdef,0.5,6")
    before = ok_rows(str(out))
    assert 4 <= len(before) < 60

    report = run_sweep(path, workers=2, progress=False)
    assert (report.num_skipped, report.num_ok, report.num_failed) == (len(before), 60 - len(before), 0)
    rows = read_results(str(out))
    assert len(rows) == 60 and [r["status"] for r in rows].count("ok") == 60
    assert {r["point_id"] for r in rows} == {p.id for p in points(load_sweep(path))}
    assert out.read_bytes().endswith(b"\n") and b"0123456789abcdef" not in out.read_bytes()


def test_a_failing_point_is_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch):
    axes = {"runtime.cuda_graph_verify": [False, "maybe"], "topology.host.eager_launch_us": [6, 7]}
    path = write_sweep(tmp_path, "fail", axes=axes)
    report = run_sweep(path, workers=1, progress=False)
    assert (report.num_ok, report.num_failed) == (2, 2)
    failed = [r for r in read_results(report.out) if r["status"] == "error"]
    assert {r["runtime.cuda_graph_verify"] for r in failed} == {"maybe"}
    assert all("runtime.cuda_graph_verify" in r["error"] and r["throughput_tok_s"] == "" for r in failed)

    import simulator.results.run

    real_run = simulator.results.run.run

    def flaky(scenario, **kwargs):
        if scenario.topology.host.eager_launch_us == 7:
            raise RuntimeError("boom\nsecond line")
        return real_run(scenario, **kwargs)

    monkeypatch.setattr(simulator.results.run, "run", flaky)
    again = run_sweep(path, workers=1, progress=False, out=str(tmp_path / "flaky.csv"))
    errors = sorted(r["error"] for r in read_results(again.out) if r["status"] == "error")
    assert (again.num_ok, again.num_failed) == (1, 3) and errors.count("RuntimeError: boom second line") == 1


def test_zip_mode_pairs_values(tmp_path):
    axes = {"topology.fabric.shm_hop_latency_us": [0, 3], "topology.host.eager_launch_us": [6, 12.8]}
    path = write_sweep(tmp_path, "zipped", mode="zip", axes=axes)
    assert [p.values for p in points(load_sweep(path))] == [
        {"topology.fabric.shm_hop_latency_us": 0, "topology.host.eager_launch_us": 6},
        {"topology.fabric.shm_hop_latency_us": 3, "topology.host.eager_launch_us": 12.8}]
    report = run_sweep(path, workers=1, progress=False)
    assert (report.num_points, report.num_ok) == (2, 2)


def test_random_mode_is_seeded_and_in_range(tmp_path):
    axes = {"topology.fabric.shm_hop_latency_us": {"low": 0, "high": 3},
            "topology.host.eager_launch_us": {"low": 4, "high": 16, "log": True},
            "speculation.acceptance.probs.0": {"choices": [0.6, 0.75, 0.9]}}
    path = write_sweep(tmp_path, "sampled", mode="random", samples=5, seed=3, axes=axes)
    drawn = points(load_sweep(path))
    assert len(drawn) == 5 and drawn == points(load_sweep(path))
    assert all(0 <= p.values["topology.fabric.shm_hop_latency_us"] <= 3 for p in drawn)
    assert all(4 <= p.values["topology.host.eager_launch_us"] <= 16 for p in drawn)
    assert {p.values["speculation.acceptance.probs.0"] for p in drawn} <= {0.6, 0.75, 0.9}
    other = write_sweep(tmp_path, "reseeded", mode="random", samples=5, seed=4, axes=axes)
    assert not {p.id for p in drawn} & {p.id for p in points(load_sweep(other))}
    report = run_sweep(path, workers=1, progress=False)
    assert (report.num_ok, report.num_failed, report.empty_metrics) == (5, 0, ())


def test_point_id_is_a_stable_hash_of_the_overrides():
    a = point_id("base.yaml", {"x.y": 1, "z": [0.5, 0.25]})
    assert a == point_id("base.yaml", {"z": [0.5, 0.25], "x.y": 1}) and len(a) == 16
    assert a != point_id("base.yaml", {"x.y": 2, "z": [0.5, 0.25]}) != point_id("other.yaml", {"x.y": 1})


def test_the_shipped_example_sweep_loads():
    sweep = load_sweep(os.path.join(ROOT, "scenarios", "sweep_link.yaml"))
    assert sweep.scenario_path == scenario_path("pcie8_eagle3.yaml") and len(points(sweep)) == 16
    assert sweep.default_out == os.path.join(ROOT, "scenarios", "sweep_link.results.csv")


@pytest.mark.parametrize("fields, where", [
    ({"axis": GRID}, "axis"),
    ({"mode": "zip", "axes": {"topology.host.eager_launch_us": [6, 7], "runtime.cuda_graph_verify": [True]}}, "axes"),
    ({"mode": "random", "axes": {"topology.host.eager_launch_us": {"low": 4, "high": 8}}}, "samples"),
    ({"mode": "random", "samples": 3, "axes": {"topology.host.eager_launch_us": {"low": 4, "choices": [1]}}},
     "axes.topology.host.eager_launch_us"),
    ({"axes": {"topology.host.eager_launch": [6, 7]}}, "axes.topology.host.eager_launch"),
    ({"axes": {"runtime.cuda_graph_verify": True}}, "axes.runtime.cuda_graph_verify"),
    ({"metrics": ["speedup", "speedup"]}, "metrics"),
    ({"scenario": "missing.yaml"}, "scenario"),
])
def test_sweep_file_mistakes_are_one_line_config_errors(tmp_path, capsys, fields, where):
    path = write_sweep(tmp_path, "bad", **fields)
    assert cli_main(["sweep", path, "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"{path}: {where}")
    assert not (tmp_path / "bad.results.csv").exists() or where != "axis"


def test_malformed_sweep_file_exits_2_with_one_line(tmp_path):
    path = write_sweep(tmp_path, "bad", mode="diagonal")
    proc = subprocess.run([sys.executable, "-m", "simulator", "sweep", path], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(f"{path}: mode") and "grid" in proc.stderr


def test_results_of_another_sweep_are_not_mixed_in(tmp_path):
    path = write_sweep(tmp_path, "grid")
    (tmp_path / "grid.results.csv").write_text("point_id,something_else,status,error\n")
    with pytest.raises(ConfigError, match="other columns"):
        run_sweep(path, workers=1, progress=False)
