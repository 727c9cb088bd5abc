"""What a planner compares (issue 14): throughput per GPU, goodput at a latency target, cost per million tokens, and
ranking by any of them in compare, plan and sweep."""
from __future__ import annotations

import csv
import io
import json
import os

import numpy as np
import pytest
import yaml

import simulator
from simulator.cli import main
from simulator.config.workload import LatencyTarget
from simulator.analysis.planning import LEVERS, plan_levers
from simulator.results.planner import RANKINGS, per_mtok_usd, rank, target_check

from conftest import scenario_path

LLAMA = scenario_path("nvlink8_h100_llama8b_eagle3.yaml")
EAGLE3 = scenario_path("pcie8_eagle3.yaml")
SMALL = {"workload__requests": 12, "workload__concurrency": 4, "workload__output_tokens": 64,
         "workload__prompt_tokens": 256}


def test_cost_per_million_tokens_is_gpu_hours_over_tokens():
    # 8 GPUs at $2.25 for an hour hold $18 of GPU time; at 500 tok/s they make 1.8 M tokens: $10 per M
    assert per_mtok_usd(8, 2.25, 500.0) == pytest.approx(10.0, rel=1e-15)
    assert per_mtok_usd(8, None, 500.0) is None  # no price, no cost
    assert per_mtok_usd(8, 2.25, 0.0) is None  # no tokens: no finite cost


def test_planner_figures_follow_exactly_from_the_run():
    r = simulator.run(LLAMA, **SMALL, topology__price={"usd_per_gpu_hour": 3.0, "source": "test", "as_of": "2026-11-30"})
    p = r.planner
    assert p["gpus"] == 1  # tp 1: one GPU of the eight, not the machine
    assert p["throughput_tok_s_per_gpu"] == r.throughput_tok_s
    assert p["usd_per_mtok"] == 3.0 / 3600.0 / r.throughput_tok_s * 1e6
    assert p["baseline_usd_per_mtok"] == 3.0 / 3600.0 / r.baseline_tok_s * 1e6
    assert p["price"] == {"usd_per_gpu_hour": 3.0, "source": "test", "as_of": "2026-11-30"}
    # goodput recounted from the requests: output tokens of those within both targets, over the run's time
    target = r.load["target"]
    good = [q for q in r.run.requests if (q.first_token_at - q.arrived_at) / 1e3 <= target["ttft_ms"]
            and (q.completed_at - q.first_token_at) / (q.generated - 1) / 1e3 <= target["tpot_ms"]]
    assert r.load["goodput_tok_s"] == sum(q.generated for q in good) / (r.sim_time_s)
    assert p["goodput_tok_s_per_gpu"] == r.load["goodput_tok_s"]


def test_per_gpu_divides_by_the_gpus_the_split_holds():
    r = simulator.run(LLAMA, **SMALL, parallelism__tp=4)
    assert r.planner["gpus"] == 4
    assert r.planner["throughput_tok_s_per_gpu"] == r.throughput_tok_s / 4
    assert r.planner["goodput_tok_s_per_gpu"] == r.load["goodput_tok_s"] / 4


def test_goodput_falls_with_a_tighter_target_and_the_percentile_decides_met():
    loose = simulator.run(LLAMA, **SMALL, baseline=False)
    ttfts = sorted((q.first_token_at - q.arrived_at) / 1e3 for q in loose.run.requests)
    middle = (ttfts[5] + ttfts[6]) / 2  # half the 12 requests above, half below
    tight = simulator.run(LLAMA, **SMALL, baseline=False, workload__target={"ttft_ms": middle, "percentile": 50})
    assert loose.load["goodput_tok_s"] == pytest.approx(loose.throughput_tok_s, rel=1e-12)  # every request good
    assert tight.load["goodput_tok_s"] == pytest.approx(loose.throughput_tok_s / 2, rel=1e-12)  # equal lengths
    assert tight.load["target"]["ttft_ms_at_percentile"] == pytest.approx(middle)
    assert tight.load["target"]["met"]  # the median TTFT is exactly the limit
    stricter = simulator.run(LLAMA, **SMALL, baseline=False, workload__target={"ttft_ms": middle, "percentile": 90})
    assert not stricter.load["target"]["met"] and stricter.planner["target_met"] is False


def test_target_check_reads_the_stated_percentile():
    target = LatencyTarget(ttft_ms=3.0, tpot_ms=0.5, percentile=50)
    out = target_check([1e3, 2e3, 3e3, 4e3], [100.0, 200.0, 300.0, 900.0], target)
    assert out["ttft_ms_at_percentile"] == 2.5 and out["tpot_ms_at_percentile"] == 0.25 and out["met"]
    out = target_check([1e3, 2e3, 3e3, 4e3], [100.0, 200.0, 300.0, 900.0], target.model_copy(update={"percentile": 100}))
    assert out["ttft_ms_at_percentile"] == 4.0 and not out["met"]
    assert target_check([], [], target)["met"] is False  # no finished request meets nothing


def test_result_json_and_csv_carry_the_planner_figures(capsys):
    assert main([EAGLE3, "--set", "workload.output_tokens=32", "--format", "csv"]) == 0
    row = next(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert float(row["planner.usd_per_mtok"]) == pytest.approx(
        8 * 1.85 / 3600 / float(row["throughput_tok_s"]) * 1e6, rel=1e-9)  # the shipped price, 8 GPUs
    assert row["planner.price.source"].startswith("Hyperstack") and row["planner.gpus"] == "8"
    assert row["load.target.percentile"] == "90.0"
    assert main([EAGLE3, "--set", "workload.output_tokens=32", "--set", "topology.price=null", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["planner"]["usd_per_mtok"] is None and data["planner"]["price"] is None


def test_a_price_without_its_source_is_one_line(capsys):
    assert main([EAGLE3, "--set", "topology.price={usd_per_gpu_hour: 2}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "price" in err and "source" in err


def test_rank_orders_best_first_and_missing_last():
    items = [{"planner": {"usd_per_mtok": v}} for v in (3.0, None, 1.0, 2.0, float("nan"))]
    assert [i["planner"]["usd_per_mtok"] for i in rank(items, "cost")][:3] == [1.0, 2.0, 3.0]
    rows = [{"throughput_tok_s": v} for v in (1.0, 5.0, 3.0)]
    assert [r["throughput_tok_s"] for r in rank(rows, "throughput")] == [5.0, 3.0, 1.0]
    assert set(RANKINGS) >= {"throughput_per_gpu", "goodput_per_gpu", "cost"}


def test_compare_ranks_by_cost(capsys):
    args = ["compare", EAGLE3, "--set", "workload.output_tokens=32", "--format", "csv", "--rank-by", "cost",
            "--variant", "no price: topology.price=null", "--variant", "dear: topology.price.usd_per_gpu_hour=100",
            "--variant", "graph: runtime.cuda_graph_verify=true"]
    assert main(args) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["label"] for r in rows] == ["graph", "pcie8_eagle3", "dear", "no price"]
    costs = [float(r["planner.usd_per_mtok"]) for r in rows[:3]]
    assert costs == sorted(costs) and rows[3]["planner.usd_per_mtok"] == ""


def test_plan_ranks_levers_by_the_chosen_figure():
    levers = [lever for lever in LEVERS if lever.name in ("NVLink board (8x H200)", "CUDA-graph verify",
                                                         "P2P on")]
    by_cost = plan_levers(EAGLE3, ["workload.requests=1", "workload.output_tokens=64"], levers=levers, rank_by="cost")
    costs = [o.figures["planner"]["usd_per_mtok"] for o in by_cost.ranked]
    assert costs == sorted(costs) and len(costs) == 3
    by_speed = plan_levers(EAGLE3, ["workload.requests=1", "workload.output_tokens=64"], levers=levers)
    speeds = [o.throughput_tok_s for o in by_speed.ranked]
    assert speeds == sorted(speeds, reverse=True)
    # the H200 board is faster than P2P on the PCIe box but dearer per token at its price
    names = lambda plan: [o.name for o in plan.ranked]  # noqa: E731
    assert names(by_speed).index("NVLink board (8x H200)") < names(by_speed).index("P2P on")
    assert names(by_cost).index("NVLink board (8x H200)") > names(by_cost).index("P2P on")


def _sweep(tmp_path, **fields) -> str:
    data = {"scenario": os.path.relpath(LLAMA, tmp_path), "mode": "grid",
            "axes": {"workload.concurrency": [1, 4, 16]},
            "set": {"workload.requests": 16, "workload.output_tokens": 32, "workload.prompt_tokens": 128},
            "metrics": ["throughput_tok_s", "planner.throughput_tok_s_per_gpu"], **fields}
    path = tmp_path / "ranked.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_sweep_prints_its_best_points(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", _sweep(tmp_path, rank_by="throughput_per_gpu"), "--workers", "1", "--top", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("best 2 of 3 points by tok/s per GPU")
    figures = [float(line.split()[-1].replace(",", "")) for line in out[2:]]
    rows = [r for r in csv.DictReader(open(tmp_path / "ranked.results.csv"))]
    best = sorted((float(r["planner.throughput_tok_s_per_gpu"]) for r in rows), reverse=True)[:2]
    assert figures == pytest.approx(best, abs=0.006) and np.all(np.diff(figures) <= 0)


def test_sweep_ranking_by_a_figure_it_does_not_keep_is_one_line(tmp_path, capsys):
    assert main(["sweep", _sweep(tmp_path), "--rank-by", "cost"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "planner.usd_per_mtok" in err
    assert main(["sweep", _sweep(tmp_path, rank_by="fastest")]) == 2
    assert "throughput_per_gpu" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["sweep_deployments.yaml", "sweep_deployments_moe.yaml"])
def test_the_shipped_deployment_sweeps_have_200_points_and_rank_by_goodput(name):
    from simulator.experiments.sweep import load_sweep, points

    sweep = load_sweep(scenario_path(name))
    assert len(points(sweep)) == 200 and sweep.spec.rank_by == "goodput_per_gpu"


def test_the_split_lever_tries_the_same_gpus_split_other_ways():
    from simulator.analysis.planning import describe_overrides
    from simulator.analysis.split_levers import lever_split
    from simulator.api.run import resolve

    kimi = lever_split(resolve(EAGLE3), EAGLE3)
    assert [c["parallelism"] for c in kimi] == [
        {"tp": 4, "dp": 2}, {"tp": 2, "dp": 4}, {"tp": 1, "dp": 8}, {"tp": 8, "ep": 8},
        {"tp": 8, "dp": 2, "ep": 8, "dp_attention": True}, {"tp": 8, "dp": 4, "ep": 8, "dp_attention": True},
        {"tp": 8, "dp": 8, "ep": 8, "dp_attention": True}]  # every candidate holds the scenario's 8 GPUs
    assert isinstance(lever_split(resolve(LLAMA), LLAMA), str)  # one GPU: nothing to split
    assert describe_overrides(kimi[4]) == "parallelism={tp:8 dp:2 ep:8 dp_attention:true}"


def test_plan_keeps_the_best_split_by_the_ranking_and_says_what_it_rejected():
    from simulator.analysis.planning import Lever
    from simulator.analysis.split_levers import lever_split

    split = Lever("another split", "", lever_split)
    plan = plan_levers(EAGLE3, ["workload.requests=1", "workload.output_tokens=32"], levers=[split],
                       rank_by="throughput_per_gpu")
    (best,) = plan.ranked
    assert best.overrides["parallelism"]["ep"] == 8  # only the expert-parallel splits fit Kimi-K2.5 here
    assert "does not fit" in best.note and best.tried == 7
