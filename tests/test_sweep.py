"""Sweeps: grid/zip/random points, local processes and a Dask cluster, failed points, kill and resume, bad files."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from simulator.cli import main as cli_main
from simulator.experiments.metrics import PROVENANCE_COLUMNS
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


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """Sweeps write their default results file into the current directory: make that the test's own folder."""
    monkeypatch.chdir(tmp_path)


def test_grid_sweep_on_two_workers_matches_single_runs(tmp_path):
    from simulator.api.run import run

    path = write_sweep(tmp_path)
    report = run_sweep(path, workers=2, progress=False, chunk_size=2)
    out = tmp_path / "grid.results.csv"  # default: in the current directory, named after the sweep
    assert report.out == str(out) and (report.num_points, report.num_ok, report.num_failed) == (8, 8, 0)
    rows = read_results(str(out))
    assert list(rows[0]) == ["point_id", "point", "base_id", *GRID, *METRICS, *PROVENANCE_COLUMNS, "status", "error",
                             "check"]
    assert [int(r["point"]) for r in rows] == list(range(8))  # written in point order, whatever finished first
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
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        status = cli_main(["sweep", path, "--dask", cluster.scheduler_address, "--out", str(tmp_path / "dask.csv"),
                           "--no-progress"])
    assert status == 0
    local, on_dask = ok_rows(str(tmp_path / "local.csv")), ok_rows(str(tmp_path / "dask.csv"))
    assert len(on_dask) == 8 and set(on_dask) == set(local)
    for pid, row in on_dask.items():
        assert float(row["speedup"]) == pytest.approx(float(local[pid]["speedup"]), rel=1e-9)


def test_killed_sweep_resumes_with_only_the_missing_points(tmp_path):
    axes = {"topology.fabric.shm_hop_latency_us": [0, 0.5, 1, 1.5, 2],
            "topology.host.eager_launch_us": [6, 9, 12.8], "runtime.cuda_graph_verify": [False, True]}
    path = write_sweep(tmp_path, "kill", axes=axes, set={"workload.requests": 1, "workload.output_tokens": 512})
    out = tmp_path / "kill.results.csv"
    proc = subprocess.Popen([sys.executable, "-m", "simulator", "sweep", path, "--workers", "2", "--chunk", "1"],
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": ROOT}, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
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
    assert 4 <= len(before) < 30

    report = run_sweep(path, workers=2, progress=False)
    assert (report.num_skipped, report.num_ok, report.num_failed) == (len(before), 30 - len(before), 0)
    rows = read_results(str(out))
    assert len(rows) == 30 and [r["status"] for r in rows].count("ok") == 30
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

    import simulator.api.run

    real_run = simulator.api.run.run_figures

    def flaky(scenario, names):
        if scenario.topology.host.eager_launch_us == 7:
            raise RuntimeError("boom\nsecond line")
        return real_run(scenario, names)

    monkeypatch.setattr(simulator.api.run, "run_figures", flaky)
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
    a = point_id("0123456789abcdef", {"x.y": 1, "z": [0.5, 0.25]})
    assert a == point_id("0123456789abcdef", {"z": [0.5, 0.25], "x.y": 1}) and len(a) == 16
    assert a != point_id("0123456789abcdef", {"x.y": 2, "z": [0.5, 0.25]}) != point_id("fedcba9876543210", {"x.y": 1})


def test_the_shipped_example_sweep_loads():
    sweep = load_sweep(os.path.join(ROOT, "scenarios", "sweep_link.yaml"))
    assert sweep.scenario_path == scenario_path("pcie8_eagle3.yaml") and len(points(sweep)) == 16
    assert sweep.default_out == os.path.join(os.getcwd(), "sweep_link.results.csv")  # never inside the package


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


# -- failures: killed workers, signals, concurrent sweeps, damaged files (issue 13) ----------------------------------
LONG_AXES = {"topology.fabric.shm_hop_latency_us": [0, 0.5, 1, 1.5, 2], "topology.host.eager_launch_us": [6, 9, 12.8, 14],
             "runtime.cuda_graph_verify": [False, True]}  # 40 points
LONG_SET = {"workload.requests": 1, "workload.output_tokens": 1024}


def children_of(pid: int) -> list[int]:
    """Live (non-zombie) processes whose parent is `pid`, from the process table."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def interactive_signals() -> None:
    """In the child, SIGINT as a terminal's foreground job has it: a test runner started as a background job
    (bash without job control) ignores SIGINT, its children inherit that, and Python then keeps it ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_sweep(path: str, *extra: str) -> subprocess.Popen:
    # run in the sweep's folder: the default results file is written to the current directory
    return subprocess.Popen([sys.executable, "-m", "simulator", "sweep", path, "--workers", "2", "--chunk", "1",
                             *extra], cwd=os.path.dirname(path), env={**os.environ, "PYTHONPATH": ROOT},
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=interactive_signals)


def wait_for_rows(proc, out, rows: int, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if out.exists() and out.read_bytes().count(b"\n") >= rows + 1:
            return
        time.sleep(0.02)
    assert proc.poll() is None, "the sweep ended too early: " + proc.stderr.read().decode()
    raise AssertionError(f"no {rows} rows after {timeout_s} s")


def kill_group(proc) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@contextlib.contextmanager
def long_sweep(tmp_path, name: str, rows: int, work: dict | None = None):
    """A 40-point sweep with 2 workers in its own session, handed over once `rows` rows are written (with its two
    worker pids); its whole process group is killed afterwards. `work`: the points' workload, LONG_SET by default."""
    path = write_sweep(tmp_path, name, axes=LONG_AXES, set=work or LONG_SET)
    out = tmp_path / f"{name}.results.csv"
    proc = start_sweep(path)
    try:
        wait_for_rows(proc, out, rows)
        workers = children_of(proc.pid)
        assert len(workers) == 2
        yield path, out, proc, workers
    finally:
        kill_group(proc)


def test_a_killed_worker_is_replaced_and_its_point_retried(tmp_path):
    """kill -9 of one worker mid-sweep: the pool is rebuilt, every point ends with exactly one ok row, exit 0."""
    with long_sweep(tmp_path, "kill1", 3) as (path, out, proc, workers):
        os.kill(workers[0], signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    rows = read_results(str(out))
    assert len(rows) == 40 and {r["status"] for r in rows} == {"ok"}
    assert {r["point_id"] for r in rows} == {p.id for p in points(load_sweep(path))}
    again = run_sweep(path, workers=2, progress=False)
    assert (again.num_skipped, again.num_ok, again.num_failed) == (40, 0, 0)


def test_a_point_that_kills_its_worker_twice_is_an_error_row(tmp_path, monkeypatch):
    import simulator.api.run

    real_run = simulator.api.run.run_figures
    marker = tmp_path / "killed-once"

    def deadly(scenario, names):  # forked workers inherit this patch
        launch = scenario.topology.host.eager_launch_us
        if launch == 7 or (launch == 8 and not marker.exists()):
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return real_run(scenario, names)

    monkeypatch.setattr(simulator.api.run, "run_figures", deadly)
    axes = {"topology.host.eager_launch_us": [6, 7, 8, 9], "runtime.cuda_graph_verify": [False]}
    report = run_sweep(write_sweep(tmp_path, "deadly", axes=axes), workers=2, progress=False, chunk_size=2)
    rows = read_results(report.out)
    assert (report.num_ok, report.num_failed, len(rows)) == (3, 1, 4)
    failed = [r for r in rows if r["status"] == "error"]
    assert failed[0]["topology.host.eager_launch_us"] == "7"
    assert failed[0]["error"] == "the worker running this point died 2 times (killed by SIGKILL)"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_sweep_and_its_workers_within_2_s(tmp_path, signum):
    # heavier points (24 requests each, as in the two-sweeps test): at ~5 ms a one-request point, a loaded machine
    # that delays this process by a second after the second row let the sweep finish before the signal arrived
    with long_sweep(tmp_path, "term", 2, {**LONG_SET, "workload.requests": 96}) as (_, out, proc, workers):
        os.kill(proc.pid, signum)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=30)  # the pipes close: no worker holds them
        stopped_s = time.monotonic() - sent
    assert proc.returncode == (143 if signum == signal.SIGTERM else 130), err.decode()
    assert stopped_s < 2.0 and not [w for w in workers if alive(w)]
    assert err.decode().count("\n") == 1 and "rerun to resume" in err.decode()
    done = read_results(str(out))  # whole, checked rows only; the next run resumes from them
    assert 2 <= len(done) < 40 and len({r["point_id"] for r in done}) == len(done)
    assert out.read_bytes().count(b"\n") == len(done) + 1


def test_workers_die_with_a_killed_parent(tmp_path):
    with long_sweep(tmp_path, "orphan", 1) as (_, _, proc, workers):
        try:
            os.kill(proc.pid, signal.SIGKILL)  # the parent alone
            proc.communicate(timeout=30)  # returns once no worker holds stdout or stderr
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and [w for w in workers if alive(w)]:
                time.sleep(0.05)
            assert not [w for w in workers if alive(w)]
        finally:
            for worker in workers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker, signal.SIGKILL)


def test_two_sweeps_on_one_file_never_duplicate_a_point(tmp_path):
    # the first sweep must still be writing when the second has started up (~0.5 s of imports): at ~5 ms a point,
    # 40 one-request points were done before it, so each point here serves 24 requests in turn
    with long_sweep(tmp_path, "twice", 1, {**LONG_SET, "workload.requests": 24}) as (path, out, first, _):
        second = subprocess.run([sys.executable, "-m", "simulator", "sweep", path, "--workers", "1"], cwd=tmp_path,
                                env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2 and second.stderr.count("\n") == 1
        assert f"another sweep (process {first.pid}) is writing this results file" in second.stderr
        first.send_signal(signal.SIGINT)  # the refusal is what is tested: the first need not run to its end
        first.communicate(timeout=30)
    assert first.returncode == 130
    rows = read_results(str(out))  # only the first sweep's rows, each point once
    assert 1 <= len(rows) < 40 and len({r["point_id"] for r in rows}) == len(rows)
    assert out.read_bytes().count(b"\n") == len(rows) + 1


def error_row(raw: bytes, width: int) -> bytes:
    """A well-formed, correctly checked error row for the point of `raw`."""
    from simulator.experiments.rows import line, parse

    cells = parse(raw, width)
    return line([cells[0], *cells[1:-2], "error", "RuntimeError: flaky"]).rstrip(b"\n")


def test_a_damaged_results_file_is_repaired_on_resume(tmp_path):
    """A stray quote, a short row, a NUL line, a bad byte, a digit cut from a value, an error row and a duplicate:
    each set aside into .rejected with a note; the resume ends with exactly one valid ok row per point."""
    axes = {"topology.host.eager_launch_us": [6, 7, 8, 9, 10, 11], "runtime.cuda_graph_verify": [False]}
    path = write_sweep(tmp_path, "damaged", axes=axes)
    report = run_sweep(path, workers=1, progress=False)
    out = tmp_path / "damaged.results.csv"
    lines = out.read_bytes().split(b"\n")
    header, rows = lines[0], lines[1:7]
    damaged = [
        rows[0],
        b'"' + rows[1],  # a stray quote
        b",".join(rows[2].split(b",")[:3]),  # a short row that still ends in a newline
        b"\0" * 40,  # a line of NUL bytes
        rows[3].replace(b"false", b"f\xffalse"),  # a non-UTF-8 byte
        rows[4].replace(b".", b"", 1),  # a digit-truncated value, same field count
        error_row(rows[5], len(header.split(b","))),  # an error row: retried and replaced
        rows[0],  # a duplicate
    ]
    out.write_bytes(b"\n".join([header, *damaged]) + b"\npartial,row")
    again = run_sweep(path, workers=1, progress=False)
    assert (report.num_ok, again.num_skipped, again.num_ok, again.num_rejected) == (6, 1, 5, 8)
    valid = read_results(str(out))
    assert len(valid) == 6 and {r["status"] for r in valid} == {"ok"}
    assert {r["point_id"] for r in valid} == {p.id for p in points(load_sweep(path))}
    assert out.read_bytes().count(b"\n") == 7  # nothing else is left in the file
    rejected = (tmp_path / "damaged.results.csv.rejected").read_bytes()
    assert rejected.count(b"\n# ") + rejected.startswith(b"# ") == 8
    for reason in (b"check does not match", b"error row", b"a second row", b"cut short"):
        assert reason in rejected
    assert b"\0" * 40 in rejected and b"f\xffalse" in rejected


def test_grids_too_large_and_bad_axes_are_refused_before_any_point(tmp_path, capsys):
    huge = {f"topology.host.eager_launch_us": list(range(1000)), "runtime.cuda_graph_verify": [False, True] * 500,
            "topology.fabric.shm_hop_latency_us": list(range(1000))}
    path = write_sweep(tmp_path, "huge", axes=huge)
    assert cli_main(["sweep", path]) == 2
    assert "1e+09 points, more than the limit of 100,000" in capsys.readouterr().err
    randomly = write_sweep(tmp_path, "many", mode="random", samples=10**9,
                           axes={"topology.host.eager_launch_us": {"low": 4, "high": 8}})
    assert cli_main(["sweep", randomly]) == 2 and "--max-points" in capsys.readouterr().err
    assert not (tmp_path / "huge.results.csv").exists() and not (tmp_path / "many.results.csv").exists()


@pytest.mark.parametrize("axis, where", [({"low": float("nan"), "high": 1}, "axes.x.low"),
                                         ({"low": 0, "high": float("inf")}, "axes.x.high"),
                                         ({"low": 5, "high": 1}, "axes.x.low")])
def test_random_axes_need_finite_ordered_bounds(tmp_path, capsys, axis, where):
    path = write_sweep(tmp_path, "bad", mode="random", samples=3, axes={"x": axis})
    assert cli_main(["sweep", path]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{path}: {where}:") and err.count("\n") == 1


def test_fixed_is_not_a_key_set_is(tmp_path, capsys):
    path = write_sweep(tmp_path, "fixed", fixed={"seed": 1})
    assert cli_main(["sweep", path]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{path}: fixed: unknown key (allowed:")
    allowed = err.split("(allowed: ")[1]
    assert ", set," in allowed and "fixed" not in allowed


def test_workers_are_capped_at_points_and_cpus(tmp_path):
    from simulator.results.limits import cap_workers

    assert cap_workers(100000, 5, 2) == 2 and cap_workers(8, 3, 16) == 3 and cap_workers(None, 10, 4) == 4
    axes = {"topology.host.eager_launch_us": [6, 7], "runtime.cuda_graph_verify": [False]}
    report = run_sweep(write_sweep(tmp_path, "capped", axes=axes), workers=100000, progress=False)
    assert report.num_ok == 2


def test_sweep_gc_holds_while_points_run_and_is_undone(tmp_path, monkeypatch):
    """Inside a sweep (its point runner, one worker here) the start-up heap is frozen, young collections are rare
    and each point's cycles are freed when it ends; after the sweep the collector is as it was."""
    import gc
    import weakref

    from simulator.experiments import memory, sweep

    class Cycle:
        pass

    before = (gc.get_threshold(), gc.get_freeze_count())
    seen, freed = [], []
    real = sweep.run_chunk

    def watched(task):
        seen.append((gc.get_threshold()[0], gc.get_freeze_count() > 0))
        cycle = Cycle()
        cycle.me = cycle
        alive = weakref.ref(cycle)
        del cycle
        memory.after_point()
        freed.append(alive() is None)
        return real(task)

    monkeypatch.setattr(sweep, "run_chunk", watched)
    axes = {"topology.host.eager_launch_us": [6, 7], "runtime.cuda_graph_verify": [False]}
    assert run_sweep(write_sweep(tmp_path, "gc", axes=axes), workers=1, progress=False, chunk_size=1).num_ok == 2
    assert seen == [(memory.SWEEP_GC_YOUNG, True)] * 2 and freed == [True, True]
    assert (gc.get_threshold(), gc.get_freeze_count()) == before


def test_sweep_gc_keeps_a_callers_freeze():
    import gc

    from simulator.experiments.memory import sweep_gc

    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        with sweep_gc():
            pass
        assert gc.get_freeze_count() >= frozen  # the caller's frozen objects were not thawed
    finally:
        gc.unfreeze()


@pytest.mark.parametrize("num, capacity", [(1, 1), (7, 2), (1000, 1), (1000, 2), (100000, 16)])
def test_guided_chunks_cover_every_point_once_and_shrink_to_single_points(num, capacity):
    from simulator.experiments.sweep import MAX_CHUNK, chunk_bounds

    bounds = chunk_bounds(num, capacity)
    assert [b[0] for b in bounds] == [0] + [b[1] for b in bounds[:-1]] and bounds[-1][1] == num
    sizes = [end - start for start, end in bounds]
    assert sizes == sorted(sizes, reverse=True) and max(sizes) <= MAX_CHUNK
    assert sizes[-capacity:] == [1] * min(capacity, len(sizes))  # the last task of each worker is one point
    assert [e - s for s, e in chunk_bounds(10, 2, 4)] == [4, 4, 2]  # --chunk: as given
