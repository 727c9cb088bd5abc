"""`specsim pareto`: every reported point is a real simulated run, and no frontier point is dominated."""
from __future__ import annotations

import csv
import json
import math

import pytest

from conftest import scenario_path

from simulator.analysis.pareto import ParetoPoint, dominates, frontier


@pytest.fixture(scope="module")
def pareto_run(tmp_path_factory):
    import os

    from simulator.cli import main

    folder = tmp_path_factory.mktemp("pareto")
    here = os.getcwd()
    os.chdir(folder)
    try:
        code = main(["pareto", "nvlink8_h100_llama8b_eagle3", "--gpus", "2", "--users", "4", "--prompt-tokens", "128",
                     "--output-tokens", "24", "--workers", "1", "--tpot-ms", "8", "--plot", "front.svg", "-q"])
    finally:
        os.chdir(here)
    assert code == 0
    return folder


def _rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_writes_the_frontier_csv_and_figure(pareto_run):
    rows = _rows(pareto_run / "pareto_nvlink8_h100_llama8b_eagle3.csv")
    assert (pareto_run / "front.svg").read_text().lstrip().startswith("<?xml")
    on = [r for r in rows if "all" in r["frontier"].split("; ")]
    plain = [r for r in rows if "no speculation" in r["frontier"]]
    assert on and plain and all(r["speculation"] == "off" for r in plain)
    assert {r["speculation"] for r in rows} >= {"off", "eagle3 chain 1", "eagle3 chain 3", "eagle3 tree 6"}
    assert {r["split"] for r in rows} >= {"TP2", "2x TP1"}


def test_no_frontier_point_is_dominated_and_each_is_a_real_run(pareto_run):
    from simulator.api.run import resolve, run

    rows = _rows(pareto_run / "pareto_nvlink8_h100_llama8b_eagle3.csv")
    point = lambda r: ParetoPoint(r["point_id"], r["split"], r["speculation"], int(r["users"]),  # noqa: E731
                                  float(r["tok_s_per_user"]), float(r["tok_s_per_gpu"]), int(r["gpus"]), 0.0, 0.0,
                                  r["target_met"] == "True", 1.0)
    points = [point(r) for r in rows]
    for name, members in (("all", points), ("no speculation", [p for p in points if not p.speculating])):
        front = [p for p, r in zip(points, rows) if name in r["frontier"].split("; ")]
        assert front
        assert not any(dominates(q, p) for p in front for q in members), name
        # what the frontier says is what a frontier over these points is (independent of the CSV's marks)
        assert {p.point_id for p in front} == {p.point_id for p in frontier(members)}
    store = {r["point_id"]: r for r in _rows(pareto_run / "pareto_nvlink8_h100_llama8b_eagle3.results.csv")}
    fixed = {"workload.arrival": {"kind": "all_at_once"}, "workload.max_concurrency": None,
             "workload.prompt_tokens": 128, "workload.output_tokens": 24, "policy": {"kind": "static"},
             "workload.target.tpot_ms": 8.0}
    axes = ("parallelism", "speculation.method", "speculation.verify", "speculation.draft_tokens", "speculation.tree",
            "workload.requests", "workload.max_running_requests")
    for r in [r for r in rows if r["frontier"]]:
        row = store[r["point_id"]]
        values = {k: json.loads(row[k]) if k in ("parallelism", "speculation.tree") else row[k] for k in axes}
        values = {k: (int(float(v)) if k in ("speculation.draft_tokens", "workload.requests",
                                              "workload.max_running_requests") else v) for k, v in values.items()}
        result = run(resolve(scenario_path("nvlink8_h100_llama8b_eagle3.yaml"),
                             {k.replace(".", "__"): v for k, v in {**fixed, **values}.items()}))
        assert result.planner["throughput_tok_s_per_gpu"] == pytest.approx(float(r["tok_s_per_gpu"]), rel=1e-9)
        assert 1e3 / result.load["client"]["tpot_ms"]["mean"] == pytest.approx(float(r["tok_s_per_user"]), rel=1e-9)
        assert result.planner["target_met"] == (r["target_met"] == "True")


def test_the_frontier_of_known_points():
    p = lambda i, user, gpu: ParetoPoint(str(i), "", "off", 1, user, gpu, 1, 0, 0, True, 1)  # noqa: E731
    points = [p(0, 10, 100), p(1, 20, 80), p(2, 15, 70), p(3, 30, 20), p(4, 5, 100), p(5, math.nan, 500)]
    assert [q.point_id for q in frontier(points)] == ["0", "1", "3"]
