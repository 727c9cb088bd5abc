"""What a new user trips on (issue 24's defects): each test failed on the main branch before its fix."""
from __future__ import annotations

import json
import os
import re

import pytest

from conftest import ROOT, scenario_path

TINY = ["--set", "workload.requests=2", "--set", "workload.output_tokens=16", "--set", "workload.prompt_tokens=64"]


def cli(capsys, *argv) -> tuple[int, str, str]:
    from simulator.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_provenance_names_the_kernel_source_that_ran(capsys, monkeypatch):
    """Defect 1: without the measured extra, provenance.kernel_source said `measured` while the roofline ran."""
    from simulator.kernels import measured

    monkeypatch.setattr(measured, "data_root", lambda: None)  # as if aiconfigurator-core were not installed
    code, out, err = cli(capsys, "run", "nvlink8_h200_eagle3", "--format", "json", *TINY)
    assert code == 0, err
    result = json.loads(out)
    assert "roofline" in result["kernels"]["source"] and "not installed" in result["kernels"]["source"]
    assert result["provenance"]["kernel_source"] == "roofline"


def test_plots_say_which_kernel_source_drew_them(capsys, monkeypatch, tmp_path):
    """Defect 4: without the measured extra, `plots` drew other figures than the README's and said nothing."""
    from simulator.kernels import measured
    from simulator.viz import deployments

    monkeypatch.setattr(measured, "data_root", lambda: None)
    code, _, err = cli(capsys, "plots", "--out", str(tmp_path), "--only", "no-such-figure")
    assert code == 2 and "aiconfigurator-core is not installed" in err
    assert "kernel_source" in deployments.COLUMNS


def test_compare_keeps_the_variants_that_run(capsys):
    """Defect 5: one variant that does not fit made `compare` exit 2 with no table."""
    code, out, err = cli(capsys, "compare", "pcie8_eagle3", "--variant", "tp2: parallelism.tp=2",
                         "--variant", "graph: runtime.cuda_graph_verify=true", *TINY)
    assert code == 0, err
    assert "tp2: not simulated:" in out and "does not fit" in out
    throughput = next(line for line in out.splitlines() if line.startswith("throughput (tok/s)")).split()[2:]
    assert throughput[1] == "-" and throughput[0] != "-" and throughput[2] != "-"


def test_compare_shows_latency_target_batch_and_kv_rows(capsys):
    """Defect 6: no p90 TTFT / TPOT, target met, batch or KV rows in `compare`."""
    code, out, err = cli(capsys, "compare", "pcie8_kv_pressure", *TINY)
    assert code == 0, err
    names = {line[:28].strip() for line in out.splitlines()}
    for row in ("p90 TTFT (ms)", "p90 TPOT (ms)", "latency target met", "mean batch", "KV cache peak (tokens)",
                "KV cache capacity (tokens)"):
        assert row in names, row


def test_a_queued_workload_says_the_ttft_is_queueing(capsys):
    """Defect 7: a first run printed a 414-second TTFT with no word that the workload queues the requests."""
    code, out, err = cli(capsys, "run", "pcie8_ngram", "--set", "workload.requests=3",
                         "--set", "workload.output_tokens=64")
    assert code == 0, err
    assert "mostly waiting in the server's queue" in out and "workload.max_concurrency" in out
    code, out, err = cli(capsys, "run", "pcie8_ngram", "--set", "workload.requests=3", "--set",
                         "workload.output_tokens=64", "--set", "workload.max_concurrency=1")
    assert code == 0, err
    assert "mostly waiting in the server's queue" not in out


def test_accept_length_windows_fit_on_one_line():
    """Defect 7: a 64K-token run printed 128 accept-length windows on one line; merged, the means keep their
    step weights."""
    from simulator.results.summary import MOST_WINDOWS, merged_windows

    windows = [{"start": 512 * i, "end": 512 * (i + 1), "mean_accept_len": 1.0 + (i % 3), "steps": 1 + i % 5}
               for i in range(128)]
    merged = merged_windows(windows)
    assert len(merged) <= MOST_WINDOWS
    assert sum(w["steps"] for w in merged) == sum(w["steps"] for w in windows)
    total = sum(w["mean_accept_len"] * w["steps"] for w in windows)
    assert sum(w["mean_accept_len"] * w["steps"] for w in merged) == pytest.approx(total)


def test_a_key_of_another_policy_kind_says_so(capsys):
    """Defect 8: `policy.estimator: unknown key` after switching the hybrid policy to static."""
    code, _, err = cli(capsys, "run", "pcie8_hybrid", "--set", "policy.kind=static")
    assert code == 2
    line = err.strip()
    assert line.count("\n") == 0 and "policy.estimator" in line and "kind hybrid" in line and "static" in line


def test_every_shipped_scenario_and_sweep_has_a_description():
    """Defect 8: three scenarios and the sweeps had no description in `specsim list`."""
    from simulator.config.catalog import entries, names

    listed = {e.name: e for e in entries("scenario")}
    assert set(listed) == set(names("scenario"))  # none skipped (an unreadable file is skipped silently)
    for name, entry in listed.items():
        assert entry.description and entry.description != name, name


def test_readme_timings_are_cpu_seconds_with_the_machine():
    """Defect 9: the README claimed wall times ("about 2 minutes", "about 15 s") measured nowhere."""
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert "about 15 s" not in text and "about 2 minutes" not in text
    claims = [line for line in text.splitlines() if re.search(r"\bCPU[- ]seconds\b|\bCPU s\b", line)]
    assert any("pytest" in line or "suite" in line for line in claims)
    assert any("plots" in line for line in claims)


def test_client_concurrency_and_the_engine_cap_are_apart():
    """Defect 10: workload.concurrency meant each instance's batch cap; the client's concurrency is its own key,
    and old files keep loading under the new name."""
    import simulator
    from simulator.api.run import run

    old = simulator.load_scenario(scenario_path("pcie8_ngram.yaml"), [("workload.concurrency", 3)])
    assert old.spec.workload.max_running_requests == 3 and old.spec.workload.max_concurrency is None
    short = {"workload__requests": 4, "workload__output_tokens": 32, "workload__max_running_requests": 2}
    engine = run(scenario_path("pcie8_ngram.yaml"), **short)
    client = run(scenario_path("pcie8_ngram.yaml"), **short, workload__max_concurrency=2)
    # the same batches (one instance), but the client holds back what the engine queued: TTFT counts from the send
    assert client.throughput_tok_s == engine.throughput_tok_s
    assert client.load["ttft_ms"]["mean"] < engine.load["ttft_ms"]["mean"]
    assert client.load["client"]["client_queue_ms"]["p99"] > 0
    code_line = "max_concurrency"
    with pytest.raises(Exception, match=code_line):
        simulator.load_scenario(scenario_path("pcie8_tp4_dp2.yaml"), [("workload.max_concurrency", 4)])


def test_old_and_new_concurrency_keys_together_are_one_line():
    import simulator
    from simulator.config.errors import ConfigError

    with pytest.raises(ConfigError, match="old name of workload.max_running_requests"):
        simulator.load_scenario(scenario_path("pcie8_ngram.yaml"), [("workload", {"concurrency": 2,
                                                                                  "max_running_requests": 2})])


def test_validate_finds_the_shipped_set_and_its_examples_exist(tmp_path, monkeypatch):
    """Defect 3: outside the checkout `validate` looked for ./scenarios/validation; its --help named a missing file."""
    from simulator.analysis import validate as v
    from simulator.cli import validate as command

    monkeypatch.chdir(tmp_path)
    assert len(v.files(v.default_dir())) >= 10
    named = re.findall(r"validate (\S+)", command.EXAMPLES)
    for name in (n for n in named if not n.startswith("-") and n != "bench.json"):  # bench.json: the user's file
        assert os.path.isfile(v.locate(name)), name
