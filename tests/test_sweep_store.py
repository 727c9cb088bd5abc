"""Sweep store and workers (issue 25): one lock per results file whatever its spelling, rows keyed by content, lazy
points, watched workers and clusters, a checked scheduler, CRLF files, temp files of killed writes."""
from __future__ import annotations

import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
import yaml

from simulator.cli import main as cli_main
from simulator.experiments.sweep import load_sweep, points, read_results, run_sweep
from simulator.results.files import write_bytes

from conftest import ROOT, scenario_path
from test_sweep import METRICS, alive, children_of, kill_group

TINY = {"workload.requests": 1, "workload.output_tokens": 16, "workload.prompt_tokens": 64}
ENV = {**os.environ, "PYTHONPATH": ROOT}


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def sweep_file(folder, name: str, axes: dict, work: dict | None = None, scenario: str | None = None,
               **fields) -> str:
    data = {"scenario": scenario or scenario_path("pcie8_eagle3.yaml"), "mode": "grid", "axes": axes,
            "set": work or TINY, "metrics": METRICS[:3], **fields}
    path = os.path.join(folder, f"{name}.yaml")
    with open(path, "w") as handle:
        yaml.safe_dump(data, handle, sort_keys=False)
    return path


def launch_axis(values) -> dict:
    return {"topology.host.eager_launch_us": list(values), "runtime.cuda_graph_verify": [False]}


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


# -- defect 1: one lock per file, whatever the spelling -------------------------------------------------------------
def test_symlinked_hardlinked_and_relative_spellings_of_one_out_are_refused(tmp_path, capsys):
    """While a sweep writes out.csv, the same sweep to a symlink of it, a hard link of it and a path through a
    symlinked folder is refused; the first ends with one row per point and the symlink still a symlink."""
    path = sweep_file(tmp_path, "locked", launch_axis(range(6, 14)))
    out = tmp_path / "out.csv"
    first = subprocess.Popen([sys.executable, "-m", "simulator", "sweep", path, "--workers", "1", "--out", str(out)],
                             cwd=tmp_path, env=ENV, start_new_session=True, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not (out.exists() and out.read_bytes().count(b"\n") >= 2) and time.monotonic() < deadline:
            time.sleep(0.005)
        os.killpg(first.pid, signal.SIGSTOP)  # holding its locks, mid-sweep, for as long as the test needs
        assert first.poll() is None and out.read_bytes().count(b"\n") < 9, "the first sweep ended too early"
        os.symlink(out, tmp_path / "link.csv")
        os.link(out, tmp_path / "hard.csv")
        os.symlink(tmp_path, tmp_path / "here")
        for spelling in ("link.csv", "hard.csv", "here/out.csv"):
            assert cli_main(["sweep", path, "--workers", "1", "--out", spelling]) == 2
            assert f"another sweep (process {first.pid}) is writing this results file" in one_line(capsys)
        os.killpg(first.pid, signal.SIGCONT)
        _, err = first.communicate(timeout=120)
    finally:
        kill_group(first)
    assert first.returncode == 0, err.decode()
    rows = read_results(str(out))
    assert len(rows) == 8 and {r["point_id"] for r in rows} == {p.id for p in points(load_sweep(path))}
    assert os.path.islink(tmp_path / "link.csv") and read_results(str(tmp_path / "link.csv")) == rows


# -- defect 2: rows keyed by the resolved configuration --------------------------------------------------------------
def test_only_points_whose_configuration_changed_are_rerun(tmp_path):
    """A topology file edited, an axis value changed, another fidelity: exactly the affected points rerun, and the
    file holds one row per point of the current sweep; the others are in OUT.rejected with the reason."""
    topology = tmp_path / "topo.yaml"
    shutil.copy(os.path.join(ROOT, "topologies", "pcie8_rtx_pro_6000.yaml"), topology)
    with open(scenario_path("pcie8_eagle3.yaml")) as handle:
        base = yaml.safe_load(handle)
    base.update(topology="topo.yaml", model=os.path.join(ROOT, "scenarios", "models", "kimi_k2_5.yaml"))
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    path = sweep_file(tmp_path, "edits", launch_axis([6, 7, 8]), scenario="base.yaml")
    out = str(tmp_path / "edits.results.csv")

    def rerun(**kwargs) -> tuple[int, int]:
        report = run_sweep(path, workers=1, progress=False, **kwargs)
        rows = read_results(out)
        fixed = {**TINY, **({"fidelity": kwargs["fidelity"]} if kwargs else {})}
        assert sorted(r["point_id"] for r in rows) == sorted(p.id for p in points(load_sweep(path), fixed))
        assert [int(r["point"]) for r in rows] == [0, 1, 2] and {r["status"] for r in rows} == {"ok"}
        return report.num_skipped, report.num_ok

    assert rerun() == (0, 3)
    assert rerun() == (3, 0)
    sweep_file(tmp_path, "edits", launch_axis([5, 6, 8]), scenario="base.yaml")  # 7 -> 5: one new point, first
    assert rerun() == (2, 1)
    topology.write_text(topology.read_text().replace("graph_launch_us: 20.0", "graph_launch_us: 21.0"))
    assert rerun() == (0, 3)  # the file's content changed, not its name
    assert rerun(fidelity="layer") == (0, 3)
    rejected = open(out + ".rejected").read()
    assert rejected.count("not a point of this sweep (an axis or its values changed)") == 1
    assert rejected.count("its base_id is") == 3 and rejected.count("its provenance.fidelity is fast") == 3


def test_an_axis_naming_a_file_hashes_its_content(tmp_path):
    topology = tmp_path / "topo.yaml"
    shutil.copy(os.path.join(ROOT, "topologies", "pcie8_rtx_pro_6000.yaml"), topology)
    sweep = load_sweep(sweep_file(tmp_path, "files", {"topology": [str(topology)]}))
    before = points(sweep)
    topology.write_text(topology.read_text().replace("graph_launch_us: 20.0", "graph_launch_us: 21.0"))
    assert points(sweep)[0].id != before[0].id


def test_an_earlier_results_file_is_set_aside_and_rerun(tmp_path):
    path = sweep_file(tmp_path, "older", launch_axis([6]))
    report = run_sweep(path, workers=1, progress=False)
    text = open(report.out).read().splitlines()
    header = text[0].split(",")
    header.remove("base_id")
    open(report.out, "w").write(",".join(header) + "\nx,0,6,false\n")
    again = run_sweep(path, workers=1, progress=False)
    assert (again.num_skipped, again.num_ok, again.num_rejected) == (0, 1, 1)
    assert "earlier specsim" in open(report.out + ".rejected").read()


# -- defect 4 (--max-points): lazy points, finite positive limits ----------------------------------------------------
HUGE = {"topology.host.eager_launch_us": [6 + i / 1e3 for i in range(250)],  # 1.25 x 10^7 points
        "topology.fabric.shm_hop_latency_us": [i / 1e2 for i in range(250)],
        "topology.host.graph_launch_us": [10 + i / 1e2 for i in range(200)]}


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1"])
def test_max_points_takes_finite_positive_values_only(tmp_path, capsys, value):
    """On the command line and in the API, before any work (no results file)."""
    from simulator.config.errors import ConfigError

    path = sweep_file(tmp_path, "limits", launch_axis([6]))
    assert cli_main(["sweep", path, f"--max-points={value}"]) == 2
    assert "--max-points" in one_line(capsys)
    with pytest.raises(ConfigError, match="--max-points: .* a finite number above 0"):
        run_sweep(path, max_points=float(value))
    assert not (tmp_path / "limits.results.csv").exists()


def test_points_of_a_huge_grid_are_made_lazily(tmp_path):
    import tracemalloc
    from simulator.experiments.sweepfile import iter_points

    made = iter_points(load_sweep(sweep_file(tmp_path, "huge", HUGE)))
    tracemalloc.start()
    first = [next(made) for _ in range(1000)]
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert [p.index for p in first] == list(range(1000)) and len({p.id for p in first}) == 1000
    assert peak < 20e6  # bytes: a list of the 1.25 x 10^7 points would be ~1.7 GB


def test_a_huge_grid_with_a_raised_limit_writes_rows_at_once(tmp_path):
    path = sweep_file(tmp_path, "raised", HUGE)
    out = tmp_path / "raised.results.csv"
    proc = subprocess.Popen([sys.executable, "-m", "simulator", "sweep", path, "--workers", "1", "--max-points",
                             "1e8"], cwd=tmp_path, env=ENV, start_new_session=True, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None and not (
                out.exists() and out.read_bytes().count(b"\n") >= 3):
            time.sleep(0.05)
        assert out.exists() and out.read_bytes().count(b"\n") >= 3, "no rows within 30 s"
        with open(f"/proc/{proc.pid}/status") as handle:
            rss_kB = next(int(x.split()[1]) for x in handle if x.startswith("VmHWM"))
        assert rss_kB < 600_000
    finally:
        kill_group(proc)
        proc.stderr.close()


# -- defect 5: watched workers and clusters --------------------------------------------------------------------------
def test_a_stopped_worker_is_killed_and_its_point_rerun(tmp_path):
    """kill -STOP of one of two workers: the sweep finishes, every point ok, within the point deadline + 10 s."""
    path = sweep_file(tmp_path, "stopped", launch_axis(range(6, 16)), {**TINY, "workload.requests": 4})
    out = tmp_path / "stopped.results.csv"
    timeout_s = 3.0
    proc = subprocess.Popen([sys.executable, "-m", "simulator", "sweep", path, "--workers", "2", "--chunk", "1",
                             "--point-timeout", str(timeout_s)], cwd=tmp_path, env=ENV, start_new_session=True,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None and not (
                out.exists() and out.read_bytes().count(b"\n") >= 2):
            time.sleep(0.01)
        workers = children_of(proc.pid)
        assert proc.poll() is None and len(workers) == 2
        os.kill(workers[0], signal.SIGSTOP)
        stopped_at = time.monotonic()
        _, err = proc.communicate(timeout=timeout_s + 30)
        took_s = time.monotonic() - stopped_at
    finally:
        for worker in children_of(proc.pid):
            os.kill(worker, signal.SIGCONT)
        kill_group(proc)
    assert proc.returncode == 0, err.decode()
    assert took_s < timeout_s + 10 and not alive(workers[0])
    rows = read_results(str(out))
    assert len(rows) == 10 and {r["status"] for r in rows} == {"ok"}


def test_a_point_past_its_deadline_twice_is_an_error_row(tmp_path, monkeypatch):
    import simulator.api.run

    real_run = simulator.api.run.run_figures

    def stuck(scenario, names):  # forked workers inherit this patch
        if scenario.topology.host.eager_launch_us == 7:
            time.sleep(60)
        return real_run(scenario, names)

    monkeypatch.setattr(simulator.api.run, "run_figures", stuck)
    started = time.monotonic()
    report = run_sweep(sweep_file(tmp_path, "stuck", launch_axis([6, 7, 8])), workers=2, progress=False,
                       point_timeout_s=1.0)
    assert time.monotonic() - started < 20
    rows = {r["topology.host.eager_launch_us"]: r for r in read_results(report.out)}
    assert (report.num_ok, report.num_failed) == (2, 1) and rows["7"]["status"] == "error"
    assert rows["7"]["error"] == "the worker running this point died 2 times (ran past its deadline of 1 s, killed)"


def test_a_dask_cluster_without_workers_ends_the_sweep_resumably(tmp_path, capsys):
    distributed = pytest.importorskip("dask.distributed")
    path = sweep_file(tmp_path, "lonely", launch_axis([6, 7]))
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster:
        started = time.monotonic()
        status = cli_main(["sweep", path, "--dask", cluster.scheduler_address, "--no-worker-timeout", "1"])
        took_s = time.monotonic() - started
    assert status == 1 and took_s < 15
    assert "no live worker for 1 s" in one_line(capsys)
    report = run_sweep(path, workers=1, progress=False)  # the file it left resumes
    assert (report.num_skipped, report.num_ok) == (0, 2)


def test_a_dask_address_that_is_not_a_scheduler_is_one_line(tmp_path, capsys):
    """A peer that greets with an SSH banner (read by distributed as an exabyte-long frame) or says nothing."""
    path = sweep_file(tmp_path, "wrong", launch_axis([6]))
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def greet():
        with server:
            while True:
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
                conn.close()

    threading.Thread(target=greet, daemon=True).start()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        assert cli_main(["sweep", path, "--dask", f"tcp://127.0.0.1:{server.getsockname()[1]}"]) == 2
    finally:
        server.close()
    assert "not a Dask scheduler" in one_line(capsys)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # kB
    assert cli_main(["sweep", path, "--dask", ""]) == 2  # not a silent local run
    assert "--dask: an empty address" in one_line(capsys) and not (tmp_path / "wrong.results.csv").exists()


# -- defect 8: CRLF results files, temp files of killed writes --------------------------------------------------------
def test_a_results_file_saved_with_crlf_is_accepted(tmp_path):
    path = sweep_file(tmp_path, "crlf", launch_axis([6, 7]))
    report = run_sweep(path, workers=1, progress=False)
    lf = open(report.out, "rb").read()
    open(report.out, "wb").write(lf.replace(b"\n", b"\r\n"))
    assert len(read_results(report.out)) == 2
    again = run_sweep(path, workers=1, progress=False)
    assert (again.num_skipped, again.num_ok, again.num_rejected) == (2, 0, 0)
    assert open(report.out, "rb").read() == lf


def test_the_temp_file_of_a_killed_write_is_removed_by_the_next_write(tmp_path):
    target = tmp_path / "out.json"
    code = ("import os, signal\nfrom simulator.results.files import atomic_write\n"
            f"with atomic_write({str(target)!r}) as handle:\n    handle.write('x' * 100)\n    handle.flush()\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n")
    subprocess.run([sys.executable, "-c", code], env=ENV, check=False)
    left = [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    assert len(left) == 1 and left[0].startswith(".out.json.")
    live = tmp_path / f".out.json.{os.getpid()}.abcdefgh.tmp"  # a writer still running keeps its file
    live.write_text("")
    write_bytes(str(target), b"{}")
    assert sorted(os.listdir(tmp_path)) == [live.name, "out.json"] and target.read_bytes() == b"{}"


def test_a_dask_sweep_whose_only_worker_leaves_ends_with_its_rows_kept(tmp_path, capsys):
    distributed = pytest.importorskip("dask.distributed")
    path = sweep_file(tmp_path, "orphaned", launch_axis(range(6, 46)), {**TINY, "workload.requests": 4})
    out = tmp_path / "orphaned.results.csv"
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        def leave():  # the worker goes once a row is on disk
            while not (out.exists() and out.read_bytes().count(b"\n") >= 2):
                time.sleep(0.01)
            cluster.scale(0)

        threading.Thread(target=leave, daemon=True).start()
        status = cli_main(["sweep", path, "--dask", cluster.scheduler_address, "--no-worker-timeout", "1"])
    assert status == 1 and "no live worker for 1 s" in one_line(capsys)
    kept = read_results(str(out))
    assert 1 <= len([r for r in kept if r["status"] == "ok"]) < 40
