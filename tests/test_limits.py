"""Every limit finite and checked first, every user mistake one line (issue 25, defects 3, 4, 6, 7 and 8).

Each case is a command with the exit status it must give, words its one stderr line must hold, and the files that
must be left as they were. Commands that must refuse before any work run under `no_simulation`: a simulation
started before the refusal fails the test.
"""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time

import pytest

import simulator
import simulator.api.run
from simulator.cli import main as cli_main
from simulator.config.errors import ConfigError
from simulator.results import limits

from conftest import ROOT, scenario_path, topology_path

EAGLE3 = scenario_path("pcie8_eagle3.yaml")
PCIE8 = topology_path("pcie8_rtx_pro_6000.yaml")
SHORT = ["--set", "workload.requests=2", "--set", "workload.output_tokens=16"]
ONE_TOKEN = ["--set", "workload.prompt_tokens=1", "--set", "workload.output_tokens=1"]
PREVIOUS = b"the previous file\n"


@pytest.fixture
def no_simulation(monkeypatch):
    """Fail the test if anything is simulated: the checks must come first."""
    def refuse(*args, **kwargs):
        raise AssertionError("simulated before the check")

    for name in ("simulate_deployment", "run"):
        monkeypatch.setattr(simulator.api.run, name, refuse)
    import simulator.serving.deployment as deployment

    monkeypatch.setattr(deployment, "simulate", refuse)


def folder(tmp_path):
    """A folder holding a file with previous content (same.out), a figure (x.png), a symlink to it, and a scenario
    whose topology has no route between its two halves."""
    (tmp_path / "same.out").write_bytes(PREVIOUS)
    (tmp_path / "x.png").write_bytes(PREVIOUS)
    os.symlink(tmp_path / "x.png", tmp_path / "link.png")
    with open(PCIE8) as handle:
        (tmp_path / "split_topology.yaml").write_text("".join(line for line in handle
                                                              if "between: [cpu0, cpu1]" not in line))
    with open(EAGLE3) as handle:
        text = handle.read().replace("../topologies/pcie8_rtx_pro_6000.yaml", str(tmp_path / "split_topology.yaml"))
    (tmp_path / "split.yaml").write_text(text.replace("models/", os.path.dirname(EAGLE3) + "/models/"))
    with open(EAGLE3) as handle:
        text = handle.read().replace("../topologies/", os.path.dirname(EAGLE3) + "/../topologies/")
    (tmp_path / "huge_int.yaml").write_text(text.replace("models/", os.path.dirname(EAGLE3) + "/models/")
                                            .replace("requests: 8", "requests: " + "9" * 400))
    (tmp_path / "mapping.yaml").write_text(f"scenario: {EAGLE3}\nset: {{workload.requests: 1, "
                                           "workload.output_tokens: 16}\nmeasurements:\n"
                                           "  - {name: verify, metric: step_ms.verify, value: 30, sigma: 1}\n")
    (tmp_path / "tiny_sigma.yaml").write_text(f"scenario: {EAGLE3}\nset: {{workload.requests: 1, "
                                              "workload.output_tokens: 16}\nmeasurements:\n"
                                              "  - {name: verify, metric: step_ms.verify.mean, value: 30, "
                                              "sigma: 1.0e-300}\n")
    return tmp_path


BIG_PROMPT = ["--set", "workload.prompt_tokens=1000000000"]
KV_REFUSAL = "tokens of KV cache (1,000,000,000 prompt + 2,048 output + 4 lookahead), more than the"

# (case, argv, exit status, words in the one stderr line, files that must be intact); {tmp} is the case's folder.
# Every case but those in AFTER_A_RUN must refuse before anything is simulated.
AFTER_A_RUN = {"calibrate: a metric that is a mapping"}  # known only once a result holds the metric
CASES = [
    # defect 3: two outputs naming one file, a path ending in a separator, an unsupported figure format
    ("steps-log and trace one file", [EAGLE3, "--steps-log", "{tmp}/same.out", "--trace", "{tmp}/same.out"], 2,
     "--steps-log and --trace: both name the file", ["same.out"]),
    ("trace and plot one file", [EAGLE3, "--trace", "{tmp}/x.png", "--plot", "{tmp}/x.png"], 2,
     "--trace and --plot: both name the file", ["x.png"]),
    ("one file through a symlink", [EAGLE3, "--trace", "{tmp}/x.png", "--plot", "{tmp}/link.png"], 2,
     "both name the file", ["x.png"]),
    ("one file, two spellings", [EAGLE3, "--steps-log", "{tmp}/same.out", "--trace", "{tmp}/./same.out"], 2,
     "both name the file", ["same.out"]),
    ("a path ending in a separator", [EAGLE3, "--steps-log", "{tmp}/newdir/"], 2, "ends in a separator", []),
    ("a figure format not written", [EAGLE3, "--plot", "{tmp}/x.bmp"], 2, "unsupported figure format .bmp", []),
    ("compare's figure format", ["compare", EAGLE3, "--plot", "{tmp}/bars.jpg"], 2, "unsupported figure format", []),
    # defect 4: every limit finite and above 0, checked first, with an estimate
    ("--max-work nan", [EAGLE3, "--max-work", "nan"], 2, "--max-work: nan is not a usable limit", []),
    ("--max-work inf", [EAGLE3, "--max-work", "inf"], 2, "--max-work: inf is not a usable limit", []),
    ("--max-work -1", [EAGLE3, "--max-work", "-1"], 2, "--max-work: -1.0 is not a usable limit", []),
    ("--max-work 0", [EAGLE3, "--max-work", "0"], 2, "--max-work: 0.0 is not a usable limit", []),
    ("--max-memory-GB nan", [EAGLE3, "--max-memory-GB", "nan"], 2, "--max-memory-GB: nan is not", []),
    ("one-token requests past the memory bound", [EAGLE3, *ONE_TOKEN, "--set", "workload.requests=1000000"], 2,
     "too much memory: 1,000,000 requests", []),
    ("--max-work nan with 10^8 requests", [EAGLE3, "--set", "workload.requests=100000000", "--max-work", "nan"], 2,
     "--max-work: nan", []),
    ("a collective sweep of 10^7 sizes", ["collective", PCIE8, "-b", "8", "-e", "1G", "-f", "1.0000001"], 2,
     "sizes, more than the limit of 10,000", []),
    ("bench --repeat 10^8", ["bench", "pcie8_eagle3", "--repeat", "100000000"], 2, "--repeat: too much work", []),
    ("bench at link fidelity, 10^5 tokens", ["bench", "pcie8_eagle3", "--fidelity", "link", "--tokens", "100000"], 2,
     "too much work", []),
    ("bench --max-work nan", ["bench", "--max-work", "nan"], 2, "--max-work: nan", []),
    ("bench --startup 0", ["bench", "--startup", "0"], 2, "--startup: 0 pairs", []),
    # defect 6: breakeven refuses the context whose KV cache run refuses
    ("breakeven past the KV cache", ["breakeven", EAGLE3, *BIG_PROMPT], 2, KV_REFUSAL, []),
    ("run past the KV cache (the same line)", [EAGLE3, *BIG_PROMPT], 2, KV_REFUSAL, []),
    # defect 7: user mistakes are exit 2, not internal errors
    ("a 400-digit integer in a file", ["{tmp}/huge_int.yaml"], 2, "workload.requests: an integer of 400 digits", []),
    ("a 400-digit integer in --set", [EAGLE3, "--set", "seed=" + "1" * 400], 2, "seed: an integer of 400 digits", []),
    ("calibrate: a metric that is a mapping", ["calibrate", EAGLE3, "--measured", "{tmp}/mapping.yaml", "--fit",
                                               "topology.host.eager_launch_us"], 2,
     "metric step_ms.verify: a group of figures, not one number (allowed: step_ms.verify.mean", []),
    ("calibrate --fit ''", ["calibrate", EAGLE3, "--measured", "{tmp}/mapping.yaml", "--fit", ""], 2,
     "--fit: no parameter named", []),
    # defect 8: found before the work, one line
    ("compare: no run has a route", ["compare", "{tmp}/split.yaml", "--variant", "a: seed=1"], 2,
     "no run could be simulated: ", []),
    ("collective --bytes with -b / -e", ["collective", PCIE8, "--bytes", "8", "-b", "8", "-e", "1K"], 2,
     "--bytes: given with -b / -e", []),
]


@pytest.mark.parametrize("case, argv, status, words, intact", CASES, ids=[c[0] for c in CASES])
def test_mistakes_and_limits_refused_first(tmp_path, capsys, request, case, argv, status, words, intact):
    if case not in AFTER_A_RUN:
        request.getfixturevalue("no_simulation")
    tmp = folder(tmp_path)
    before = {name: (tmp / name).read_bytes() for name in intact}
    started = time.perf_counter()
    assert cli_main([a.replace("{tmp}", str(tmp)) for a in argv]) == status
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
    assert "internal error" not in err[0] and "Warning" not in err[0]
    assert time.perf_counter() - started < 20  # refused, not worked through (collective's 10^7 sizes: a minute)
    assert {name: (tmp / name).read_bytes() for name in intact} == before
    assert not (tmp / "newdir").exists() and not (tmp / "x.bmp").exists()


def test_calibrate_with_a_tiny_sigma_is_one_line_without_numpy_warnings(tmp_path):
    """Today's main prints six RuntimeWarnings (overflow in scipy's least squares) before its answer; the warnings
    filter of a user's shell is the default one, so run it as the user does: a subprocess."""
    tmp = folder(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "simulator", "calibrate", EAGLE3, "--measured",
                           str(tmp / "tiny_sigma.yaml"), "--fit", "topology.host.eager_launch_us"],
                          capture_output=True, text=True, cwd=tmp, env={**os.environ, "PYTHONPATH": ROOT}, timeout=120)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1, proc.stderr
    assert "measurements[0].sigma" in err[0] and "Warning" not in proc.stderr


# -- the full disk: one line, exit 1, naming the file; the old file survives ----------------------------------------
@pytest.mark.parametrize("flag, name", [("--steps-log", "steps.csv"), ("--plot", "x.png")])
def test_a_full_disk_is_one_line_naming_the_file(tmp_path, monkeypatch, capsys, flag, name):
    """The disk fills as the output is flushed to it (fsync: where delayed allocation reports ENOSPC)."""
    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    target = tmp_path / name
    target.write_bytes(PREVIOUS)
    assert cli_main([EAGLE3, *SHORT, flag, str(target)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"specsim: cannot write {target}: No space left on device (the previous file is unchanged)"]
    assert target.read_bytes() == PREVIOUS and os.listdir(tmp_path) == [name]


# -- compare: a variant's seed wins; no progress noise off a terminal ----------------------------------------------
def test_a_variants_seed_wins_over_the_common_seed(capsys):
    assert cli_main(["compare", EAGLE3, *SHORT, "--variant", "a: seed=7", "--format", "json"]) == 0
    captured = capsys.readouterr()
    rows = json.loads(captured.out)
    assert [r["seed"] for r in rows] == [0, 7]
    assert rows[1]["provenance"]["overrides"] == ["workload.requests=2", "workload.output_tokens=16", "seed=7"]
    assert captured.err == ""  # stderr is not a terminal here: no progress lines


def test_a_refusal_at_the_start_of_a_long_run_is_its_only_line(capsys):
    """A run long enough for the estimate line (link fidelity) refused by its KV cache says the refusal alone."""
    argv = [EAGLE3, "--fidelity", "link", "--set", "workload.prompt_tokens=150000", "--set",
            "workload.output_tokens=4096", "--set", "workload.requests=1"]
    scenario = simulator.api.run.resolve(argv[0], None, argv[4::2] + ["fidelity=link"])
    assert limits.estimated_seconds(limits.estimate_work(scenario)) > limits.PROGRESS_AFTER_S  # long: a line is due
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tokens of KV cache" in err[0], err


def test_compare_finds_a_machine_without_a_route_before_simulating_the_first(tmp_path, monkeypatch, capsys):
    """The run without a route is named (a warning, its row says why) before the first run is simulated."""
    tmp = folder(tmp_path)
    said_first = []
    real = simulator.api.run.run

    def run(scenario, **kwargs):
        said_first.append("no route between gpu3 and gpu4" in capsys.readouterr().err)
        return real(scenario, **kwargs)

    monkeypatch.setattr(simulator.api.run, "run", run)
    assert cli_main(["compare", EAGLE3, str(tmp / "split.yaml"), *SHORT, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert said_first == [True] and rows[1]["result" if "result" in rows[1] else "error"]
    assert "no route" in rows[1]["error"] and rows[0]["throughput_tok_s"] > 0


# -- the Python API: the same limits and checks --------------------------------------------------------------------
def test_the_api_refuses_1e8_requests_in_under_a_second():
    simulator.run(EAGLE3, workload__requests=1, workload__output_tokens=4)  # imports and caches warm
    started = time.perf_counter()
    with pytest.raises(ConfigError, match=r"too much work: 100,000,000 requests.*raise the limit with max_work="):
        simulator.run(EAGLE3, workload__requests=10**8)
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize("kwargs, words", [
    ({"max_work": float("nan")}, "simulator.run: max_work: nan is not a usable limit"),
    ({"max_work": float("inf")}, "max_work: inf"), ({"max_work": -1}, "max_work: -1"), ({"max_work": 0}, "max_work: 0"),
    ({"max_memory_GB": float("nan")}, "max_memory_GB: nan"),
    ({"seed__": 1}, "simulator.run: seed__: an override keyword with an empty part"),
    ({"workload____requests": 1}, "empty part"),
    ({"set_args": 5}, "set_args: 5 is not a list"),
    ({"workload__requests": 450_000, "workload__prompt_tokens": 1, "workload__output_tokens": 1},
     "too much memory: 450,000 requests x (2 steps + 4 a request) at fast fidelity, 2 run(s) kept = about 1.05 GB"),
])
def test_api_mistakes(monkeypatch, kwargs, words):
    def refuse(*args, **kwargs):
        raise AssertionError("simulated before the check")

    monkeypatch.setattr(simulator.api.run, "Parts", refuse)
    with pytest.raises(ConfigError) as raised:
        simulator.run(EAGLE3, **kwargs)
    assert words in str(raised.value)


def test_run_and_breakeven_refuse_one_context_in_the_same_words(capsys, no_simulation):
    lines = []
    for argv in ([EAGLE3, *BIG_PROMPT], ["breakeven", EAGLE3, *BIG_PROMPT]):
        assert cli_main(argv) == 2
        lines.append(capsys.readouterr().err)
    assert lines[0] == lines[1] and lines[0].count("\n") == 1


def test_api_set_args_string_is_one_override():
    result = simulator.run(EAGLE3, set_args="seed=1", workload__requests=1, workload__output_tokens=8)
    assert result.seed == 1


# -- the memory bound: a run the default limit admits stays under 1 GB peak RSS ------------------------------------
MEASURE = """
import sys
import simulator
from simulator.results.limits import estimate_memory_GB
from simulator.api.run import resolve


def high_water() -> int:  # peak RSS of this process image, bytes (ru_maxrss would carry the forking parent's)
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmHWM:"))


n = int(sys.argv[1])
scenario = resolve(sys.argv[2], {"workload__requests": n, "workload__prompt_tokens": 1, "workload__output_tokens": 1})
simulator.run(scenario, workload__requests=1)  # imports, tables and caches: the base the estimate allows for
before = high_water()
simulator.run(scenario)
print(before, high_water(), estimate_memory_GB(scenario))
"""


def one_token_requests_at_the_limit() -> int:
    """The most one-token requests (concurrency 1: a step each for the prefill and the token, the most records
    per token) that the default limits admit."""
    return int((limits.MAX_MEMORY_GB - limits.BASE_MEMORY_GB) * 1e9 / (2 * 2 * limits.STEP_BYTES["fast"]))


def measured_rss(n: int) -> tuple[float, float, float]:
    if not os.path.exists("/proc/self/status"):
        pytest.skip("peak RSS is read from /proc (Linux)")
    proc = subprocess.run([sys.executable, "-c", MEASURE, str(n), EAGLE3], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    before, peak, estimate = proc.stdout.split()
    return float(before), float(peak), float(estimate)


def test_the_memory_estimate_bounds_a_measured_run_and_the_default_limit_stays_under_1GB():
    """A run of 15,000 one-token requests (concurrency 1) in a subprocess: its peak RSS growth is within the
    estimate's per-step bytes, and growing at the measured rate up to the requests the default limit admits it
    stays under 1 GB (the run at the limit itself: test_a_run_at_the_default_limit_stays_under_1GB)."""
    n = 15_000
    before, peak, estimate = measured_rss(n)
    assert peak < estimate * 1e9
    per_request = (peak - before) / n  # both runs' records of one request
    assert 0 < per_request <= 2 * 2 * limits.STEP_BYTES["fast"], (before, peak)
    admitted = one_token_requests_at_the_limit()
    with pytest.raises(ConfigError, match="too much memory"):
        limits.check_work(simulator.api.run.resolve(EAGLE3, {
            "workload__requests": admitted + 1000, "workload__prompt_tokens": 1, "workload__output_tokens": 1}))
    assert before + per_request * admitted < 1e9


@pytest.mark.benchmark
def test_a_run_at_the_default_limit_stays_under_1GB():
    """The run itself (~1 minute): one-token requests, as many as the default limits admit."""
    n = one_token_requests_at_the_limit()
    limits.check_work(simulator.api.run.resolve(EAGLE3, {"workload__requests": n, "workload__prompt_tokens": 1,
                                                             "workload__output_tokens": 1}))
    before, peak, estimate = measured_rss(n)
    assert peak < 1e9 and peak < estimate * 1e9
