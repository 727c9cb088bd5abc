"""The tool as a user meets it: names for shipped files, provenance in every result, the configuration reference,
strict types, errors in the user's words (each case with its exit code), fixed CSV columns."""
from __future__ import annotations

import csv
import io
import json
import os

import pytest

from conftest import ROOT, SCENARIOS, scenario_path
from simulator.cli import main

SHORT = ["--set", "workload.requests=1", "--set", "workload.output_tokens=64"]


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- names ---------------------------------------------------------------------------------------------------------
def test_names_resolve_from_any_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli(capsys, "run", "pcie8_eagle3", "--format", "json", "--no-baseline",
                           "--set", "topology=nvlink8_h200", *SHORT)
    assert code == 0
    prov = json.loads(out)["provenance"]
    assert prov["topology"] == "nvlink8_h200" and prov["topology_file"] == os.path.join("topologies", "nvlink8_h200.yaml")
    assert prov["scenario_file"] == os.path.join("scenarios", "pcie8_eagle3.yaml")
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_user_folders_are_searched_after_the_package(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "topologies").mkdir()
    text = open(os.path.join(ROOT, "topologies", "nvlink8_h200.yaml")).read().replace("name: nvlink8_h200", "name: mine")
    (tmp_path / "topologies" / "my_box.yaml").write_text(text)
    code, out, _ = run_cli(capsys, "run", "pcie8_eagle3", "--format", "json", "--no-baseline",
                           "--set", "topology=my_box", *SHORT)
    assert code == 0 and json.loads(out)["provenance"]["topology"] == "mine"
    code, out, _ = run_cli(capsys, "list", "topologies")
    assert code == 0 and "my_box" in out and "nvlink8_h200" in out


@pytest.mark.parametrize("what, expected", [("models", "kimi_k2_5"), ("topologies", "pcie8_rtx_pro_6000"),
                                             ("scenarios", "pcie8_ngram")])
def test_list(capsys, what, expected):
    code, out, _ = run_cli(capsys, "list", what, "--format", "json")
    assert code == 0 and expected in [e["name"] for e in json.loads(out)]


# -- provenance and descriptions ------------------------------------------------------------------------------------
def test_json_names_overrides_files_version_and_kernel_source(capsys):
    from simulator.config.version import __version__

    code, out, _ = run_cli(capsys, scenario_path("pcie8_eagle3.yaml"), "--format", "json", "--no-baseline",
                           "--set", "topology=../topologies/nvlink8_h200.yaml",
                           "--set", "runtime.cuda_graph_verify=true", "--set", "workload.requests=1")
    assert code == 0
    data = json.loads(out)
    prov = data["provenance"]
    assert prov["overrides"] == ["topology=../topologies/nvlink8_h200.yaml", "runtime.cuda_graph_verify=true",
                                 "workload.requests=1"]
    assert (prov["topology"], prov["model"], prov["specsim_version"]) == ("nvlink8_h200", "Kimi-K2.5", __version__)
    assert prov["model_file"] == os.path.join("scenarios", "models", "kimi_k2_5.yaml")
    assert prov["kernel_source"] and prov["seed"] == 0 and prov["fidelity"] == "fast"
    # the description is the resolved configuration's, not the file's "8x RTX PRO 6000 ... eager verify"
    assert "H200" in data["description"] and "CUDA-graph verify" in data["description"]
    assert "RTX PRO" not in data["description"] and "eager" not in data["description"]
    assert data["description"] == prov["description"]


def test_description_follows_the_configuration():
    from simulator.results.provenance import describe
    from simulator.api.run import resolve

    plain = describe(resolve(scenario_path("pcie8_eagle3.yaml"), {"speculation__method": "none"}))
    assert "no speculation" in plain and "EAGLE-3" not in plain
    tree = describe(resolve(scenario_path("pcie8_eagle3.yaml"), {"speculation__verify": "tree",
                                                                 "speculation__draft_tokens": 8}))
    assert "tree of 8 drafts" in tree
    loaded = describe(resolve(scenario_path("pcie8_eagle3.yaml"), {
        "workload__arrival": {"kind": "poisson", "rate_per_s": 0.5}, "workload__concurrency": 4,
        "workload__kv_overflow": "preempt"}))
    assert "poisson arrivals at 0.5/s" in loaded and "up to 4 at once" in loaded and "preemption" in loaded


def test_version(capsys):
    from simulator.config.version import __version__
    import simulator

    assert main(["--version"]) == 0 and capsys.readouterr().out.strip() == f"specsim {__version__}"
    assert simulator.__version__ == __version__


# -- the configuration reference ------------------------------------------------------------------------------------
def test_docs_config_md_is_the_schema_output(capsys):
    assert main(["schema", "--format", "markdown"]) == 0
    generated = capsys.readouterr().out
    with open(os.path.join(ROOT, "docs", "config.md"), encoding="utf-8") as handle:
        assert generated == handle.read(), "docs/config.md is stale: specsim schema > docs/config.md"


def test_schema_covers_the_keys_the_issue_names(capsys):
    assert main(["schema", "--format", "json"]) == 0
    keys = {row["key"]: row for section in json.loads(capsys.readouterr().out) for row in section["rows"]}
    for key in ("workload.arrival (kind: fixed_rate or poisson)", "workload.arrival (kind: trace)", "workload.kv_overflow",
                "workload.output_tokens (kind: lognormal)", "fabric.links[].bandwidth_GBps"):
        assert key in keys, key
    assert keys["workload.kv_overflow"]["allowed"] == "queue, preempt"
    assert keys["fabric.links[].bandwidth_GBps"]["unit"] == "GB/s"
    assert keys["runtime.cuda_graph_verify"]["default"] == "false"


# -- errors: each case with its exit code ----------------------------------------------------------------------------
EAGLE3 = scenario_path("pcie8_eagle3.yaml")
CASES = [
    # (argv, exit code, fragments of the one line)
    ([EAGLE3, "--set", 'runtime.cuda_graph_verify="yes"'], 2, ["runtime.cuda_graph_verify", "'yes'"]),
    ([EAGLE3, "--set", 'workload.prompt_tokens="1000"'], 2, ["workload.prompt_tokens", "'1000'"]),
    ([EAGLE3, "--set", "workload.output_tokens={kind: uniform, low: 100, high: 10}"], 2,
     ["workload.output_tokens: high is below low"]),
    ([EAGLE3, "--set", "runtime.cuda_graph_verfy=true"], 2, ["did you mean 'cuda_graph_verify'"]),
    ([EAGLE3, "--set", "speculation.method=eagle"], 2, ["did you mean 'eagle3'"]),
    ([EAGLE3, "--set", "workload.arrival={kind: poison, rate_per_s: 1}"], 2, ["did you mean 'poisson'"]),
    ([EAGLE3, "--set", "topology=nvlink8_h20"], 2, ["no topology named 'nvlink8_h20'", "did you mean 'nvlink8_h200'"]),
    (["collective", EAGLE3, "--bytes", "100"], 2, ["this is a scenario file, not a topology"]),
    (["run", os.path.join(ROOT, "topologies", "nvlink8_h200.yaml")], 2, ["this is a topology file, not a scenario"]),
    (["run", SCENARIOS], 2, ["is a directory, not a scenario file"]),
    (["brekeven", EAGLE3], 2, ["unknown command", "did you mean 'breakeven'"]),
    (["pcie8_eagle", "--format", "json"], 2, ["did you mean 'pcie8_eagle3'"]),
]


@pytest.mark.parametrize("argv, code, fragments", CASES, ids=[" ".join(c[0][-3:])[-50:] for c in CASES])
def test_user_mistakes_exit_2_with_one_line(capsys, argv, code, fragments):
    got, out, err = run_cli(capsys, *argv)
    assert got == code and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and "constrained" not in err, err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def test_no_pydantic_internals_in_messages(capsys):
    code, _, err = run_cli(capsys, EAGLE3, "--set", "workload.output_tokens={kind: lognormal, median: 1}")
    assert code == 2 and "constrained" not in err and "tagged-union" not in err


def test_goodput_policy_that_never_speculates_reports(capsys):
    code, out, err = run_cli(capsys, EAGLE3, "--set", "policy.kind=goodput", *SHORT)
    assert code == 0, err
    assert "no speculative step ran" in out or "verify pass" in out


# -- fixed CSV columns ----------------------------------------------------------------------------------------------
def test_run_csv_has_one_header_for_every_shipped_scenario(capsys):
    import yaml

    headers = {}
    for name in sorted(os.listdir(SCENARIOS)):
        path = os.path.join(SCENARIOS, name)
        if not name.endswith(".yaml") or "scenario" in yaml.safe_load(open(path)):
            continue
        assert main([path, "--format", "csv", *SHORT]) == 0
        rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
        assert len(rows) == 2 and len(rows[0]) == len(rows[1])
        headers[name] = tuple(rows[0])
    assert len(set(headers.values())) == 1, {k: len(v) for k, v in headers.items()}
    header = next(iter(headers.values()))
    assert "provenance.overrides" in header and not any(h.startswith("accept_len_hist") for h in header)


def test_csv_long_form_holds_the_histogram(capsys):
    assert main([EAGLE3, "--format", "csv-long", *SHORT]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    hist = {r["key"]: int(r["value"]) for r in rows if r["quantity"] == "accept_len_hist"}
    tokens = next(float(r["value"]) for r in rows if r["quantity"] == "tokens")
    assert sum(int(k) * v for k, v in hist.items()) <= tokens and hist


# -- steps.csv ------------------------------------------------------------------------------------------------------
def test_steps_csv_has_names_and_units(tmp_path, capsys):
    out = tmp_path / "steps.csv"
    assert main([EAGLE3, "--steps-log", str(out), "--format", "json", *SHORT]) == 0
    rows = list(csv.DictReader(open(out)))
    header = list(rows[0])
    from simulator.results.stepslog import STEP_COLUMNS

    assert header == [h for h, _, _ in STEP_COLUMNS] and "duration_us" in header and "kind" in header
    assert {r["kind"] for r in rows} == {"prefill", "speculative"}
    assert {r["drafter"] for r in rows if r["kind"] == "speculative"} == {"eagle3"}
    assert {r["drafter"] for r in rows if r["kind"] == "prefill"} == {"none"}
    parts = ("compute_us", "memory_us", "launch_us", "allreduce_transfer_us", "allreduce_wait_us",
             "draft_breakdown_us", "other_us")
    for r in rows:  # the breakdown sums to the step (6 significant digits written)
        assert sum(float(r[p]) for p in parts) == pytest.approx(float(r["duration_us"]), rel=1e-4)


# -- one definition per quantity ------------------------------------------------------------------------------------
def test_breakeven_command_and_run_agree(capsys):
    from simulator.analysis.breakeven import breakeven_table
    from simulator.api.run import resolve, run

    scenario = resolve(EAGLE3)
    result = run(scenario)
    table = breakeven_table(scenario)
    # the plain decode step: the same quantity (a mean over the generation's contexts) as the run's
    assert table.decode_step_ms == pytest.approx(result.step_ms["baseline_decode"]["mean"], rel=1e-3)
    assert table.with_drafting(table.own_cost()) == pytest.approx(result.breakeven_accept_len, rel=5e-3)
    assert main(["breakeven", EAGLE3, "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "baseline_tok_s" not in data and data["decode_tok_s"] == pytest.approx(1e3 / table.decode_step_ms)


def test_the_same_verify_gets_the_same_why(capsys):
    whys = {}
    for name in ("pcie8_eagle3.yaml", "pcie8_hybrid.yaml"):
        assert main([scenario_path(name)]) == 0
        whys[name] = next(line for line in capsys.readouterr().out.splitlines() if "why:" in line)
    assert all("mostly waiting" in line for line in whys.values()), whys


def test_every_key_has_a_meaning(capsys):
    assert main(["schema", "--format", "json"]) == 0
    missing = [f"{s['title']}: {r['key']}" for s in json.loads(capsys.readouterr().out) for r in s["rows"]
               if not r["meaning"]]
    assert missing == []


def test_help_and_version_import_no_numerics():
    """--help and --version stay fast: neither numpy, pydantic, simpy nor yaml is imported for them."""
    import subprocess
    import sys

    code = ("import sys, contextlib, io\nfrom simulator.cli import main\nwith contextlib.redirect_stderr(io.StringIO()), "
            "contextlib.redirect_stdout(io.StringIO()):\n    main(['--help']); main(['run', '--help']); main(['--version'])\n"
            "print(sorted(m for m in ('numpy', 'pydantic', 'simpy', 'yaml') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


# what a run on one machine at fast fidelity does not use (each imported where it is needed): issue 27's start-up
NOT_ON_THE_MAIN_PATH = ("simulator.hardware.parallel_collectives", "simulator.hardware.flows",
                        "simulator.hardware.expert_parallel", "simulator.timing.linkpass", "simulator.timing.layercosts",
                        "simulator.serving.disaggregation", "simulator.kernels.custom_allreduce_fit",
                        "simulator.serving.overlap", "simulator.speculation.regimes", "simulator.speculation.trace_file",
                        "difflib", "scipy",
                        "matplotlib", "pandas", "dask", "pydantic")  # the configuration: its plain-class mirror


def test_a_one_machine_fast_run_imports_only_what_it_uses():
    """The reference machine's n-gram run (8 PCIe GPUs, fast fidelity) imports no multi-machine collectives, flow
    network, expert-parallel all-to-all, disaggregation, custom all-reduce fit, two-batch overlap, regime or trace
    acceptance, did-you-mean matching, plotting or data-frame library, nor pydantic (config/mirror.py builds the configuration; pydantic only where the mirror declines a document)."""
    import subprocess
    import sys

    code = ("import sys, contextlib, io\nfrom simulator.cli import main\nwith contextlib.redirect_stdout(io.StringIO()):\n"
            "    main(['pcie8_ngram', '-q', '--set', 'workload.requests=1', '--set', 'workload.output_tokens=16'])\n"
            f"print([m for m in {NOT_ON_THE_MAIN_PATH!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_command_ends_with_what_it_made_frozen_and_the_collector_off():
    """simulator.__main__.main (python -m simulator, the specsim script) returns the command's code, then leaves
    every object frozen and the cycle collector off: Python's exit would otherwise walk them all (its full
    collection at exit, ~0.1 s CPU of pcie8_ngram's command). In a child, as the process's last work."""
    import subprocess
    import sys

    code = ("import gc, sys, contextlib, io\nfrom simulator.__main__ import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    rc = main(['pcie8_ngram', '-q', '--set', 'workload.requests=1', '--set', 'workload.output_tokens=16'])\n"
            "print(rc, gc.isenabled(), gc.get_freeze_count() > 1000)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 0 and out.stdout.split() == ["0", "False", "True"], out.stdout + out.stderr


# -- sweeps ---------------------------------------------------------------------------------------------------------
def write_small_sweep(folder, metrics) -> str:
    import yaml

    path = folder / "small.yaml"
    path.write_text(yaml.safe_dump({"name": "small", "scenario": EAGLE3, "mode": "grid",
                                    "axes": {"runtime.cuda_graph_verify": [False, True]},
                                    "set": {"workload.requests": 1, "workload.output_tokens": 16},
                                    "metrics": metrics}))
    return str(path)


def test_a_misspelled_sweep_metric_stops_before_any_point(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = write_small_sweep(tmp_path, ["throughput_tok_s", "speedupp"])
    code, out, err = run_cli(capsys, "sweep", path, "--workers", "1")
    assert code == 2 and "'speedupp' names no figure" in err and "did you mean 'speedup'" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "small.results.csv").exists()


def test_sweep_rows_carry_provenance(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    from simulator.config.version import __version__
    from simulator.experiments.sweep import read_results

    path = write_small_sweep(tmp_path, ["throughput_tok_s", "step_ms.verify.mean"])
    assert main(["sweep", path, "--workers", "1"]) == 0
    rows = read_results(str(tmp_path / "small.results.csv"))
    assert len(rows) == 2 and {r["provenance.specsim_version"] for r in rows} == {__version__}
    assert {r["provenance.kernel_source"] for r in rows} == {"roofline"}
