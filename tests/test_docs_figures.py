"""The figures README.md and docs/deployments.md print for shipped runs are the runs' figures now: each is read back
at the precision printed and compared with the scenario's golden result (tests/golden) or the shipped plots/deploy_*.csv.

No scenario runs here: test_golden.py holds the goldens to the model, this holds the documents to the goldens, so a
change that moves a golden fails until the prose that quotes it moves too.
"""
from __future__ import annotations

import csv
import json
import os
import re

import pytest

from conftest import ROOT

GOLDEN = os.path.join(ROOT, "tests", "golden")
README = open(os.path.join(ROOT, "README.md")).read()
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def golden(name: str) -> dict:
    return json.load(open(os.path.join(GOLDEN, f"{name}.json")))


def printed(text: str) -> tuple[float, int]:
    """A printed figure and its decimals ('4,122' -> (4122.0, 0), '0.71' -> (0.71, 2))."""
    text = text.replace(",", "")
    return float(text), len(text.split(".")[1]) if "." in text else 0


def assert_as_printed(shown: str, value: float, what: str) -> None:
    figure, decimals = printed(shown)
    assert abs(figure - value) <= 0.5 * 10 ** -decimals + 1e-9, f"{what}: printed {shown}, the golden gives {value!r}"


def table_rows(text: str, header: str) -> list[list[str]]:
    """The cells of each body row of the markdown table whose header line starts with `header`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def method_rows() -> list[list[str]]:
    """README's speculation-methods rows that name a shipped scenario as it ships (not a variant of it)."""
    rows = []
    for row in table_rows(README, "| method | scenario |"):
        match = re.fullmatch(r"`(\w+)`(?: \(.*\))?", row[1])
        if match and os.path.exists(os.path.join(GOLDEN, f"{match.group(1)}.json")):
            rows.append([match.group(1)] + row)
    return rows


def test_the_methods_table_names_shipped_scenarios():
    assert len(method_rows()) >= 6


@pytest.mark.parametrize("row", method_rows(), ids=lambda row: row[0])
def test_readme_methods_row_is_its_golden(row):
    from simulator.analysis.validate import decode_speedup

    name, _, _, accept, rate, speedup = row
    result = golden(name)
    assert_as_printed(accept, result["mean_accept_len"], f"{name} accept")
    assert speedup.endswith("x")
    assert_as_printed(speedup[:-1], result["speedup"], f"{name} speedup")
    steps = re.fullmatch(r"decode steps ([\d.]+)x", rate)
    if steps:
        assert_as_printed(steps.group(1), decode_speedup(result), f"{name} decode-step speedup")
        return
    throughput, baseline = re.fullmatch(r"([\d,.]+) \(([\d,.]+)\)", rate).groups()
    assert_as_printed(throughput, result["throughput_tok_s"], f"{name} tok/s")
    assert_as_printed(baseline, result["baseline_tok_s"], f"{name} baseline tok/s")


def test_readme_main_output_is_its_golden():
    """The report README shows under "What you get" is its scenario's golden run, figure by figure."""
    block = README.split("## What you get", 1)[1].split("```", 2)[1]
    name = re.search(r"specsim [\d.]+: (\w+)", block).group(1)
    result = golden(name)
    steps = result["step_ms"]
    expected = {
        r"throughput +([\d.,]+) tok/s": result["throughput_tok_s"],
        r"baseline ([\d.,]+) tok/s": result["baseline_tok_s"],
        r"speedup ([\d.]+)x": result["speedup"],
        r"mean accept length +([\d.]+)": result["mean_accept_len"],
        r"verify pass +([\d.]+) ms": steps["verify"]["mean"],
        r"verify pass .* p50 ([\d.]+)": steps["verify"]["p50"],
        r"verify pass .* p99 ([\d.]+)": steps["verify"]["p99"],
        r"plain decode step +([\d.]+) ms": steps["baseline_decode"]["mean"],
        r"all-reduce +(\d+) per pass": result["allreduce_per_pass"],
        r"per verify pass +([\d.]+) ms on a typical rank": result["allreduce_ms_per_pass"]["verify"]["profiled_rank"],
        r"exceeds ([\d.]+) \(": result["breakeven_accept_len"],
        r"([\d,]+) tokens, simulated": result["tokens"],
        r"simulated ([\d.]+) s": result["sim_time_s"],
    }
    for pattern, value in expected.items():
        match = re.search(pattern, block)
        assert match, f"README's {name} output has no line for {pattern!r}"
        assert_as_printed(match.group(1), value, f"README's {name} output, {pattern!r}")


# The reference table's rows of shipped runs: the row's first cell, its scenario, and the golden figures its
# "simulated" cell prints first, in order.
REFERENCE_ROWS = [
    ("plain decode, CUDA graph, one request", "pcie8_baseline", [("throughput_tok_s",)]),
    ("eager verify, EAGLE-3 chain of 3 drafts", "pcie8_eagle3", [("step_ms", "verify", "mean")]),
    ("all-reduce time per verify pass", "pcie8_eagle3",
     [("allreduce_ms_per_pass", "verify", "profiled_rank"), ("allreduce_per_pass",)]),
    ("EAGLE-3 mean accept length", "pcie8_eagle3", [("mean_accept_len",)]),
    ("break-even accept length, chain of 3", "pcie8_eagle3", [("breakeven_accept_len",)]),
    ("n-gram tree of 8 drafts: verify", "pcie8_ngram", [("step_ms", "verify", "mean")]),
    ("n-gram, 2K requests: accept / throughput", "pcie8_ngram", [("mean_accept_len",), ("throughput_tok_s",)]),
    ("n-gram, one 8K generation: throughput", "pcie8_ngram_long", [("throughput_tok_s",)]),
]


@pytest.mark.parametrize("label, name, paths", REFERENCE_ROWS, ids=[r[0] for r in REFERENCE_ROWS])
def test_readme_reference_row_is_its_golden(label, name, paths):
    row = next(r for r in table_rows(README, "| figure | simulated |") if r[0].startswith(label))
    shown = NUMBER.findall(row[1])
    result = golden(name)
    for i, path in enumerate(paths):
        value = result
        for key in path:
            value = value[key]
        assert_as_printed(shown[i], value, f"README reference row {label!r}, {'.'.join(path)}")


DEPLOY_NUMBERS = {"tok_s", "tok_s_per_gpu", "goodput_tok_s_per_gpu", "usd_per_mtok", "ttft_ms_p", "tpot_ms_p",
                  "kv_MB_per_request", "kv_GBps_at_prefill_rate"}


@pytest.mark.parametrize("name", ["deploy_reference_kimi", "deploy_dsv3_h200", "deploy_llama70b_2node",
                                  "deploy_pd_reference"])
def test_deployments_doc_prints_the_shipped_tables(name):
    """docs/deployments.md holds each question's table as `markdown_table` prints the shipped plots/<name>.csv (the
    rows `specsim plots --only deploy` writes), so regenerating the CSV without the doc, or the reverse, fails."""
    from simulator.viz.deployments import markdown_table

    with open(os.path.join(ROOT, "plots", f"{name}.csv"), newline="") as handle:
        rows = [{k: float(v) if k in DEPLOY_NUMBERS and v else v for k, v in row.items()}
                for row in csv.DictReader(handle)]
    table = markdown_table(rows, "p90", kv=name == "deploy_pd_reference")
    doc = open(os.path.join(ROOT, "docs", "deployments.md")).read()
    assert table in doc, f"docs/deployments.md does not hold plots/{name}.csv's table:\n{table}"
