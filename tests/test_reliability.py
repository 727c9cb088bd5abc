"""Nothing lost, nothing hangs: atomic outputs, output paths checked before simulating, bounds with flags that raise
them, strict YAML, and user mistakes reported as one line with exit 2 (issue 13, one test per failure)."""
from __future__ import annotations

import errno
import json
import os

import pytest

import simulator.api.run
from simulator.cli import main as cli_main
from simulator.config.errors import ConfigError
from simulator.results.files import atomic_write, check_output_file

from conftest import scenario_path, topology_path

EAGLE3 = scenario_path("pcie8_eagle3.yaml")
SHORT = ["--set", "workload.output_tokens=64"]


def one_line_exit_2(capsys, argv) -> str:
    """Run the CLI in-process; it must exit 2 with exactly one line on stderr, which is returned."""
    status = cli_main(argv)
    err = capsys.readouterr().err
    assert status == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def no_simulation(monkeypatch):
    """Fail the test if anything is simulated: output checks must come first."""
    def refuse(*args, **kwargs):
        raise AssertionError("simulated before checking the outputs")

    monkeypatch.setattr(simulator.api.run, "run", refuse)
    monkeypatch.setattr(simulator.api.run, "simulate_deployment", refuse)


# -- 1. atomic outputs ---------------------------------------------------------------------------------------------
class _FullDisk:
    """A file object whose writes fail with ENOSPC after `room` bytes, as on a full disk."""

    def __init__(self, handle, room: int):
        self.handle, self.room = handle, room

    def write(self, data):
        if len(data) > self.room:
            self.handle.write(data[: self.room])
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return self.handle.write(data)

    def __getattr__(self, name):
        return getattr(self.handle, name)


def test_a_write_that_fails_on_a_full_disk_leaves_the_previous_file_intact(tmp_path):
    path = tmp_path / "steps.csv"
    path.write_text("the previous file\n")
    with pytest.raises(OSError) as raised:
        with atomic_write(str(path)) as handle:
            _FullDisk(handle, 10).write("a,b,c\n" * 100)
    assert raised.value.errno == errno.ENOSPC
    assert path.read_text() == "the previous file\n"
    assert os.listdir(tmp_path) == ["steps.csv"]  # no temporary file left behind


def test_atomic_write_replaces_and_keeps_permissions(tmp_path):
    path = tmp_path / "out.json"
    path.write_text("old")
    os.chmod(path, 0o600)
    with atomic_write(str(path)) as handle:
        handle.write("new")
    assert path.read_text() == "new" and (os.stat(path).st_mode & 0o777) == 0o600


@pytest.mark.parametrize("flag", ["--steps-log", "--trace", "--plot"])
def test_run_outputs_into_a_full_disk_keep_the_old_file(tmp_path, monkeypatch, capsys, flag):
    """The run command's outputs go through atomic_write: a failing write is exit 1 and the old file stays."""
    import simulator.results.files as files

    path = tmp_path / ("out.png" if flag == "--plot" else "out.csv")
    path.write_bytes(b"previous")
    real = files.atomic_write

    def failing(target, mode="w", **kwargs):
        with real(target, mode, **kwargs) as handle:
            _FullDisk(handle, 3).write(b"xxxxxxxx" if "b" in mode else "xxxxxxxx")
            yield handle

    import contextlib

    monkeypatch.setattr(files, "atomic_write", contextlib.contextmanager(failing))
    status = cli_main([EAGLE3, *SHORT, "--trace-steps", "2", flag, str(path)])
    assert status == 1 and "No space left" in capsys.readouterr().err
    assert path.read_bytes() == b"previous"


# -- 7 / 11. output paths checked before any simulation --------------------------------------------------------------
@pytest.mark.parametrize("flag", ["--steps-log", "--trace", "--plot"])
@pytest.mark.parametrize("case", ["missing folder", "a directory", "empty"])
def test_run_output_mistakes_exit_2_before_simulating(tmp_path, capsys, no_simulation, flag, case):
    target = {"missing folder": str(tmp_path / "nowhere" / "out.x"), "a directory": str(tmp_path),
              "empty": ""}[case]
    line = one_line_exit_2(capsys, [EAGLE3, flag, target])
    assert line.startswith(f"command line: {flag}: ")
    assert {"missing folder": "does not exist", "a directory": "is a directory", "empty": "empty path"}[case] in line


def test_unwritable_folder_is_refused(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    os.chmod(folder, 0o500)
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("running as a user who can write anywhere")
        with pytest.raises(ConfigError, match="not writable"):
            check_output_file(str(folder / "x.csv"), "--out")
    finally:
        os.chmod(folder, 0o700)


@pytest.mark.parametrize("argv", [
    ["sweep", "SWEEP", "--out", "{tmp}/missing/r.csv"],
    ["sweep", "SWEEP", "--out", "{tmp}"],
    ["plots", "--out", "{tmp}/file.txt"],
    ["breakeven", EAGLE3, "--plot", "{tmp}/missing/map.png"],
    ["plan", EAGLE3, "--plot", "{tmp}"],
    ["compare", EAGLE3, "--plot", "{tmp}/missing/bars.png"],
])
def test_other_commands_check_outputs_first(tmp_path, capsys, no_simulation, argv):
    from test_sweep import write_sweep

    (tmp_path / "file.txt").write_text("a file, not a folder")
    sweep = write_sweep(tmp_path)
    argv = [a.replace("SWEEP", sweep).replace("{tmp}", str(tmp_path)) for a in argv]
    line = one_line_exit_2(capsys, argv)
    assert "command line: --" in line


def test_plots_out_folder_is_created(tmp_path):
    from simulator.results.files import check_output_folder

    check_output_folder(str(tmp_path / "a" / "b"), "--out")
    assert (tmp_path / "a" / "b").is_dir()


# -- 6. bounds, each with the flag that raises it --------------------------------------------------------------------
def test_a_huge_workload_is_refused_with_its_estimate(capsys, no_simulation):
    line = one_line_exit_2(capsys, [EAGLE3, "--set", "workload.requests=10000000", "--set",
                                    "workload.prompt_tokens=16", "--set", "workload.output_tokens=16"])
    assert "too much work: 10,000,000 requests" in line and "--max-work" in line


def test_requests_1e18_is_refused_not_a_memory_error(capsys, no_simulation):
    line = one_line_exit_2(capsys, [EAGLE3, "--set", "workload.requests=1000000000000000000"])  # an int: types are strict
    assert "too much work" in line


def test_the_work_limit_can_be_raised(capsys):
    argv = [EAGLE3, "--format", "json", "--set", "workload.output_tokens=128", "--no-baseline"]
    line = one_line_exit_2(capsys, [*argv, "--max-work", "1000"])  # 8 requests x (128 + 1 prefill chunk + 4) > 1000
    assert "8 requests x (129 steps + 4 a request)" in line and "the limit is 1e+03" in line
    assert cli_main([*argv, "--max-work", "1100"]) == 0
    assert json.loads(capsys.readouterr().out)["tokens"] == 8 * 128


def test_tree_size_is_bounded_with_a_flag(capsys):
    line = one_line_exit_2(capsys, ["tree", "--accept", "0.6,0.2", "--size", "512"])
    assert "--size: size 512 is above the limit of 256" in line and "--max-size 512" in line
    assert len(line) < 200


# -- 7 / 11. user mistakes on the command line -----------------------------------------------------------------------
@pytest.mark.parametrize("argv, words", [
    (["bench", "--tokens", "abc"], "--tokens: not a list of token counts"),
    (["collective", topology_path("pcie8_rtx_pro_6000.yaml"), "--bytes", "1024", "--ranks", "0"], "--ranks: 0 ranks"),
    (["tree", "--accept", "nan,0.1", "--size", "4"], "--accept: not a list of numbers"),
    ([EAGLE3, "--set", "topology.fabric.links[-1].latency_us=1"], "no list element '-1'"),
    ([EAGLE3, "--set", "topology.fabric.links[99].latency_us=1"], "no list element '99'"),
    (["sweep", "x.yaml", "--workers", "0"], "--workers: 0 workers"),
])
def test_command_line_mistakes(capsys, no_simulation, argv, words):
    assert words in one_line_exit_2(capsys, argv)


# -- 8 / 12. strict YAML ---------------------------------------------------------------------------------------------
def write_scenario(tmp_path, text: str) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return str(path)


def eagle3_text() -> str:
    with open(EAGLE3) as handle:
        text = handle.read()
    return text.replace("../topologies/", os.path.dirname(EAGLE3) + "/../topologies/").replace(
        "models/", os.path.dirname(EAGLE3) + "/models/")


def test_duplicate_keys_are_refused(tmp_path, capsys):
    path = write_scenario(tmp_path, eagle3_text() + "\nseed: 0\nseed: 5\n")
    line = one_line_exit_2(capsys, [path])
    assert "duplicate key 'seed'" in line and line.startswith(path)


def test_recursive_alias_is_refused(tmp_path, capsys):
    path = write_scenario(tmp_path, "a: &a [1, *a]\n")
    assert "recursive alias" in one_line_exit_2(capsys, [path])


def test_alias_bomb_is_refused_quickly(tmp_path, capsys):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    path = write_scenario(tmp_path, "\n".join(lines))
    assert "expands to more than" in one_line_exit_2(capsys, [path])


@pytest.mark.parametrize("target, words", [("/dev/zero", "is not a regular file"), ("{tmp}", "is a directory"),
                                           ("{tmp}/none.yaml", "file not found")])
def test_special_files_are_named_for_what_they_are(tmp_path, capsys, target, words):
    assert words in one_line_exit_2(capsys, [target.replace("{tmp}", str(tmp_path))])


# -- 7 / 9 / 11 / 12. scenario mistakes: exit 2, one line, the real problem named ------------------------------------
@pytest.mark.parametrize("override, words", [
    ("workload.seed_offset=-1", "workload.seed_offset: Input should be greater than or equal to 0"),
    ("workload.output_tokens={kind: lognormal, median: 100, sigma: 1.0e+300, max: 200}",
     "workload.output_tokens.sigma: Input should be less than or equal to 10"),
    ("workload.output_tokens={kind: lognormal, median: 100, sigma: 40, max: 200}", "sigma"),
    ("workload.output_tokens={kind: uniform, low: 100, high: 10}", "workload.output_tokens: high is below low"),
    ("workload.output_tokens={kind: lognormal, median: .nan, sigma: 1, max: 200}",
     "workload.output_tokens.median: Input should be a finite number"),
    ("workload.output_tokens={kind: weird, value: 3}", "workload.output_tokens: unknown kind 'weird'"),
    ("workload.output_tokens=-3", "workload.output_tokens: Input should be greater than 0"),
    ("parallelism.tp=true", "tp: true is a boolean, not a number"),
    ("workload.arrival={kind: poisson, rate_per_s: 1.0e-300}", "arrive over 8e+300 s, more than 1e+08 s"),
    ("speculation.acceptance={kind: ngram_context, repetitiveness: 0.1, warmup_tokens: 1.0e-300, "
     "mean_copy_tokens: 10, copying: {kind: iid, alpha: 0.9}, novel: {kind: iid, alpha: 0.3}}",
     "warmup_tokens: Input should be greater than or equal to 1"),
])
def test_scenario_mistakes(capsys, no_simulation, override, words):
    line = one_line_exit_2(capsys, [EAGLE3, "--set", override])
    assert words in line and "constrained-int" not in line and "Warning" not in line


TRACE_ROWS = {"inf": b"0,16,16\ninf,16,16\n", "nan": b"0,16,16\nnan,16,16\n", "far": b"0,16,16\n1e300,16,16\n",
              "byte": b"0,16,16\n\xff,16,16\n"}


@pytest.mark.parametrize("case", TRACE_ROWS)
def test_arrival_trace_rows_must_be_finite_text(tmp_path, capsys, case):
    trace = tmp_path / "arrivals.csv"
    trace.write_bytes(b"arrival_s,prompt_tokens,output_tokens\n" + TRACE_ROWS[case])
    line = one_line_exit_2(capsys, [EAGLE3, "--set", f"workload.arrival={{kind: trace, file: {trace}}}"])
    assert line.startswith(f"{trace}: ")
    assert ("not UTF-8 text" if case == "byte" else "line 3: bad row") in line


@pytest.mark.parametrize("row", [b"nan", b"inf", b"\xff"])
def test_acceptance_trace_rows_must_be_finite_text(tmp_path, capsys, row):
    trace = tmp_path / "accept.csv"
    trace.write_bytes(b"accept_len\n2\n" + row + b"\n")
    line = one_line_exit_2(capsys, [EAGLE3, *SHORT, "--set", f"speculation.acceptance={{kind: trace, file: {trace}}}"])
    assert line.startswith(f"{trace}: ")
    assert ("not UTF-8 text" if row == b"\xff" else "is not a whole accept length") in line


def test_collective_on_a_disconnected_topology(tmp_path, capsys):
    with open(topology_path("pcie8_rtx_pro_6000.yaml")) as handle:
        text = "".join(line for line in handle if "between: [cpu0, cpu1]" not in line)
    path = tmp_path / "split.yaml"
    path.write_text(text)
    line = one_line_exit_2(capsys, ["collective", str(path), "--bytes", "1024"])
    assert line == f"{path}: fabric: no route between gpu3 and gpu4"


def test_k_ary_tree_error_is_short(capsys):
    line = one_line_exit_2(capsys, [EAGLE3, "--set", "speculation.verify=tree", "--set",
                                    "speculation.tree={kind: k_ary, k: 64, depth: 255}"])
    assert "about 10^" in line and len(line) < 300


# -- 6. long runs show progress with the time left -------------------------------------------------------------------
class _Terminal:
    """stderr as a terminal, recorded."""

    def __init__(self):
        self.text = ""

    def write(self, text):
        self.text += text

    def flush(self):
        pass

    def isatty(self):
        return True


def test_a_long_run_shows_progress_and_time_left_on_stderr(monkeypatch):
    import simulator.results.progress as progress
    from simulator.api.run import resolve, run

    terminal = _Terminal()
    monkeypatch.setattr(progress.sys, "stderr", terminal)
    monkeypatch.setattr(progress, "POLL_S", 0.01)
    scenario = resolve(EAGLE3, {"workload__requests": 1, "workload__output_tokens": 512, "fidelity": "layer"})
    plain = run(scenario, baseline=False)
    with progress.shown(scenario, runs=1, enabled=True):
        shown = run(scenario, baseline=False)
    assert "512/512" in terminal.text and "tok/s" in terminal.text and "<" in terminal.text  # done, rate, left
    assert shown.throughput_tok_s == plain.throughput_tok_s  # polling from a thread changes nothing
    assert not progress.ON_START


def test_a_long_run_without_a_terminal_gets_one_line_estimate(monkeypatch, capsys):
    import simulator.results.progress as progress
    from simulator.api.run import resolve, run

    scenario = resolve(EAGLE3, {"workload__output_tokens": 2048, "fidelity": "link"})
    with progress.shown(scenario, runs=2):
        pass  # nothing started: nothing said (a run refused at its start says its refusal alone)
    assert capsys.readouterr().err == ""
    short = resolve(EAGLE3, {"workload__requests": 2, "workload__output_tokens": 16})
    with progress.shown(short, runs=2, enabled=True):
        run(short)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "about 64 tokens to simulate, roughly" in err
