"""The deployment questions' recipe (viz/deployments.py): rows carry the runs' planner figures, a deployment that
cannot be simulated is a row with its one-line reason, the table and the figure show what the rows hold."""
from __future__ import annotations

import csv

import pytest

from simulator.api.run import run
from simulator.viz import deployments, style
from simulator.viz.deployments import Question, markdown_table, run_question, write_rows

from conftest import scenario_path

QUESTION = Question("q", "Llama-3.1-8B on H100", "nvlink8_h100_llama8b_eagle3",
                    {"TP1": {"parallelism": {"tp": 1}}, "TP2": {"parallelism": {"tp": 2}},
                     "2 x TP1": {"parallelism": {"tp": 1, "dp": 2}}},
                    {"1 user": {"workload__concurrency": 1, "workload__requests": 1},
                     "4 users": {"workload__concurrency": 4, "workload__requests": 4}},
                    {"workload__prompt_tokens": 128})


@pytest.fixture(scope="module")
def rows():
    return run_question(QUESTION, quick=True)


def test_rows_are_the_runs_figures(rows):
    assert [(r["deployment"], r["load"]) for r in rows] == [(d, load) for d in QUESTION.deployments
                                                             for load in QUESTION.loads]
    direct = run(scenario_path("nvlink8_h100_llama8b_eagle3.yaml"), parallelism={"tp": 2}, workload__concurrency=4,
                 workload__requests=4, workload__prompt_tokens=128, workload__output_tokens=32)
    tp2 = next(r for r in rows if r["deployment"] == "TP2" and r["load"] == "4 users")
    assert tp2["gpus"] == 2 and tp2["tok_s_per_gpu"] == direct.planner["throughput_tok_s_per_gpu"]
    assert tp2["usd_per_mtok"] == direct.planner["usd_per_mtok"] and not tp2["error"]


def test_a_deployment_that_cannot_run_says_why(rows, tmp_path):
    missing = [r for r in rows if r["deployment"] == "2 x TP1"]
    simulated = [r for r in rows if r["deployment"] != "2 x TP1"]
    table = markdown_table(rows, "p90")
    if all(r["error"] for r in missing):  # until replicas are simulated
        assert all("dp" in r["error"] for r in missing) and "| 2 x TP1 | any | | n/a: " in table
    assert all(not r["error"] and r["tok_s_per_gpu"] > 0 for r in simulated)
    assert f"| TP1 | 1 user | 1 | {simulated[0]['tok_s_per_gpu']:,.1f} |" in table
    path = write_rows(rows, str(tmp_path / "q.csv"))
    assert [r["deployment"] for r in csv.DictReader(open(path))] == [r["deployment"] for r in rows]


def test_figure_bars_are_the_rows(rows, tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(style, "_save", lambda fig, path, provenance=None: drawn.append(fig) or path)
    deployments.deployment_bars(QUESTION, rows, str(tmp_path / "q.png"))
    (fig,) = drawn
    per_gpu, goodput = fig.axes[:2]
    shown = [d for d in QUESTION.deployments if any(r["deployment"] == d and not r["error"] for r in rows)]
    expected = [r["tok_s_per_gpu"] for d in shown for r in rows if r["deployment"] == d]
    assert [round(p.get_height(), 9) for p in per_gpu.patches] == [round(v, 9) for v in expected]
    assert len(goodput.patches) == len(expected)
    if len(shown) < len(QUESTION.deployments):
        assert "not simulated: 2 x TP1" in fig._suptitle.get_text()
    style._pyplot().close("all")


def test_kv_transfer_is_the_prompts_cache_on_every_rank(rows):
    # Llama-3.1-8B: 32 layers x 8 KV heads x 128 x (K and V) x 2 bytes = 128 KiB per token however it is split
    # (TP2: 4 heads on each of 2 ranks); a 128-token prompt leaves 16.777216 MB
    for r in rows:
        if not r["error"]:
            assert r["kv_MB_per_request"] == pytest.approx(131072 * 128 / 1e6, rel=1e-12)
            assert r["kv_GBps_at_prefill_rate"] > 0
    table = markdown_table(rows, "p90", kv=True)
    assert " 17 | " in table and table.splitlines()[1].count("---") == 9


@pytest.mark.parametrize("question", deployments.QUESTIONS, ids=[q.name for q in deployments.QUESTIONS])
def test_each_shipped_deployment_table_names_its_kernel_source(question):
    """Every shipped plots/deploy_*.csv has today's columns and, on each row with figures, the kernel source that
    made it: the one its base scenario's golden result was made with (a table regenerated without the measured
    kernels, or one older than the column, fails here)."""
    import json
    import os

    from conftest import ROOT

    path = os.path.join(ROOT, "plots", f"{question.name}.csv")
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
    assert tuple(reader.fieldnames) == deployments.COLUMNS
    golden = json.load(open(os.path.join(ROOT, "tests", "golden", f"{question.scenario}.json")))
    simulated = [r for r in rows if not r["error"]]
    assert simulated and {r["kernel_source"] for r in simulated} == {golden["provenance"]["kernel_source"]}
