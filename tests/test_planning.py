"""breakeven, compare and plan: the reference break-even, agreement with full runs, common random numbers, levers."""
from __future__ import annotations

import json
import os

import pytest

import simulator.api.run as simulator_api

from simulator.api.run import resolve, run
from simulator.cli import main
from simulator.cli.compare import parse_variant
from simulator.config.errors import ConfigError
from simulator.analysis.breakeven import breakeven_table
from simulator.analysis.planning import LEVERS, Lever, accept_scale_for, lever_nvlink_board, plan_levers

from conftest import scenario_path

SHORT_SET = ["workload.requests=1", "workload.output_tokens=512"]
EAGLE3 = scenario_path("pcie8_eagle3.yaml")


def _sets(args: list[str]) -> list[str]:
    return [x for s in args for x in ("--set", s)]


def test_breakeven_reference_chain_of_three():
    table = breakeven_table(resolve(EAGLE3))
    own = table.own
    assert own.label == "chain 3" and own.tree.size == 4 and not table.own_graph_verify
    assert 2.3 <= table.verify_only(own.eager) <= 2.6  # docs/reference.md: 30 ms x 82 tok/s = 2.46
    assert 2.45 <= table.with_drafting(own.eager) <= 2.75  # drafting and the scheduler's step work on top
    assert table.with_drafting(own.graph) < table.verify_only(own.eager) - 0.5  # CUDA-graph verify lowers it
    assert table.verify_only(own.graph) < table.verify_only(own.eager)
    labels = [r.label for r in table.rows]
    assert labels == [f"chain {k}" for k in range(1, 9)] + [f"tree {n}" for n in (4, 8, 16, 32)]
    assert [r.tree.num_drafts for r in table.rows[8:]] == [4, 8, 16, 32]


@pytest.mark.parametrize("name", ["pcie8_eagle3.yaml", "pcie8_tree.yaml"])
def test_breakeven_agrees_with_full_run(name):
    path = scenario_path(name)
    table = breakeven_table(resolve(path, None, SHORT_SET))
    full = run(path, set_args=SHORT_SET).breakeven_accept_len
    assert table.with_drafting(table.own_cost()) == pytest.approx(full, rel=0.03)


def test_breakeven_cli_json(capsys):
    assert main(["breakeven", EAGLE3, "--format", "json", "--trees", "4,8"]) == 0
    out = json.loads(capsys.readouterr().out)
    own = [r for r in out["rows"] if r["own"]]
    assert len(own) == 1 and own[0]["shape"] == "chain 3"
    assert 2.3 <= own[0]["eager"]["verify_only"] <= 2.6
    assert own[0]["graph"]["with_drafting"] < own[0]["eager"]["with_drafting"]
    assert [r["shape"] for r in out["rows"]][-2:] == ["tree 4", "tree 8"]


def test_parse_variant():
    assert parse_variant("nvlink: topology=../topologies/nvlink8_h200.yaml runtime.cuda_graph_verify=true") == \
        ("nvlink", ["topology=../topologies/nvlink8_h200.yaml", "runtime.cuda_graph_verify=true"])
    assert parse_variant("better: speculation.acceptance.probs=[0.8, 0.4, 0.2]; seed=3") == \
        ("better", ["speculation.acceptance.probs=[0.8, 0.4, 0.2]", "seed=3"])
    for bad in ("no label", "label only:", "a=b: c=d"):
        with pytest.raises(ConfigError):
            parse_variant(bad)


def test_compare_uses_common_random_numbers(capsys):
    """Scenarios differing only in hardware see the same acceptance draws: identical accept-length histograms."""
    nvlink = scenario_path("nvlink8_h200_eagle3.yaml")
    argv = ["compare", EAGLE3, nvlink, "--variant", "slow hop: topology.fabric.shm_hop_latency_us=5",
            "--format", "json", *_sets(SHORT_SET)]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 4
    assert all(r["accept_len_hist"] == rows[0]["accept_len_hist"] for r in rows)
    assert len({round(r["baseline_tok_s"], 3) for r in rows}) >= 3  # the hardware did change
    assert len({r["seed"] for r in rows}) == 1


def test_compare_variants_table_and_csv(capsys):
    argv = ["compare", EAGLE3, "--variant", "graph verify: runtime.cuda_graph_verify=true", *_sets(SHORT_SET)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "graph verify" in captured.out and "throughput (tok/s)" in captured.out
    assert "compare:" not in captured.err  # no progress lines where stderr is not a terminal: noise in a log
    assert main(argv + ["-v", "--format", "csv"]) == 0
    assert "compare: [2/2] graph verify" in capsys.readouterr().err  # with -v they are there
    assert main(argv + ["--format", "csv"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3 and lines[0].startswith("label,")


def test_accept_lever_bisection():
    scenario = resolve(EAGLE3)
    scale, before, after = accept_scale_for(scenario, 0.5)
    assert scale > 1 and after - before == pytest.approx(0.5, abs=1e-6)
    assert isinstance(accept_scale_for(scenario, 5.0), str)  # a chain of 3 holds at most 4 tokens


def test_plan_ranks_every_lever():
    plan = plan_levers(EAGLE3, SHORT_SET)
    names = [o.name for o in plan.ranked]
    assert set(names) == {lever.name for lever in LEVERS} and not plan.skipped
    throughputs = [o.throughput_tok_s for o in plan.ranked]
    assert throughputs == sorted(throughputs, reverse=True)
    assert not plan.today.pays
    graph = next(o for o in plan.ranked if o.name == "CUDA-graph verify")
    assert graph.pays and graph.speedup > 1.3
    nvlink = next(o for o in plan.ranked if o.name.startswith("NVLink board"))
    # the H200 board speeds up plain decode too (its shape-aware roofline, fitted to H200's measured kernels: ~1.8x)
    assert nvlink.baseline_tok_s > 1.5 * plan.today.baseline_tok_s
    accept = next(o for o in plan.ranked if o.name == "+0.5 accept length")
    # the lever raises the acceptance model's analytic expectation by exactly 0.5 ...
    from simulator.analysis.planning import accept_scale_for
    from simulator.speculation.setup import build_speculation
    scale, before, after = accept_scale_for(simulator_api.resolve(EAGLE3, set_args=SHORT_SET), 0.5)
    assert after == pytest.approx(before + 0.5, abs=1e-6)
    # ... and the run with its (rounded) probabilities accepts what they predict: 3 standard errors (seeded)
    lever_set = SHORT_SET + [f"{k}={v}" for k, v in accept.overrides.items()]
    slot = build_speculation(simulator_api.resolve(EAGLE3, set_args=lever_set)).slots[0]
    after = slot.acceptance.expected_tokens(slot.tree)
    assert after == pytest.approx(before + 0.5, abs=1e-3)
    run = simulator_api.run(EAGLE3, set_args=lever_set, baseline=False)
    lengths = run.run.accept_lengths[:-1]  # the last step is cut by the request's end
    se = lengths.std(ddof=1) / len(lengths) ** 0.5
    assert abs(lengths.mean() - after) < 3 * se
    assert "CUDA-graph verify" in plan.conclusion()


def test_plan_skips_what_does_not_apply_and_takes_new_levers():
    extra = Lever("graph verify again", "a test lever", lambda scenario, path: [{"runtime.cuda_graph_verify": True}],
                  hardware=False)
    graph = next(lever for lever in LEVERS if lever.name == "CUDA-graph verify")
    plan = plan_levers(EAGLE3, SHORT_SET + ["runtime.cuda_graph_verify=true"], levers=[graph, extra])
    assert [o.name for o in plan.skipped] == ["CUDA-graph verify"] and plan.skipped[0].note == "already on"
    assert plan.ranked[0].note == "today's setting is the best"


def test_nvlink_lever_resolves_from_any_folder(tmp_path):
    root = os.path.dirname(EAGLE3)
    text = open(EAGLE3, encoding="utf-8").read()
    text = text.replace("../topologies/", os.path.join(root, "..", "topologies") + "/")
    text = text.replace("models/", os.path.join(root, "models") + "/")
    path = tmp_path / "copy.yaml"
    path.write_text(text, encoding="utf-8")
    candidates = lever_nvlink_board(resolve(str(path)), str(path))
    assert os.path.isfile(candidates[0]["topology"])


def test_plan_cli_json_and_table(capsys):
    assert main(["plan", EAGLE3, "--format", "json", *_sets(SHORT_SET)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["levers"][0]["lever"] == "CUDA-graph verify" and out["levers"][0]["pays"]
    assert "CUDA-graph verify" in out["conclusion"]


@pytest.mark.parametrize("argv", [
    ["breakeven", "no_such.yaml"],
    ["breakeven", EAGLE3, "--trees", "x"],
    ["breakeven", EAGLE3, "--set", "runtime.bogus=1"],
    ["compare", EAGLE3, "--variant", "no label here"],
    ["compare", EAGLE3, "--variant", "x: runtime.allreduce=carrier_pigeon"],
    ["plan", EAGLE3, "--format", "yaml"],
    ["plan", EAGLE3, "--set", "workload.requests=0"],
])
def test_bad_inputs_exit_2_with_one_line(argv, capsys):
    assert main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith(("compare:", "plan:"))]
    assert len(err) == 1 and err[0]


def test_plots_are_written(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    pytest.importorskip("simulator.viz.figures")
    paths = [tmp_path / name for name in ("breakeven.png", "compare.png", "plan.png")]
    assert main(["breakeven", EAGLE3, "--plot", str(paths[0])]) == 0
    assert main(["compare", EAGLE3, "--variant", "graph: runtime.cuda_graph_verify=true", "--plot", str(paths[1]),
                 *_sets(["workload.requests=1", "workload.output_tokens=128"])]) == 0
    graph = next(lever for lever in LEVERS if lever.name == "CUDA-graph verify")
    from simulator.cli import plan as plan_cli
    plan_cli.plot(plan_levers(EAGLE3, ["workload.requests=1", "workload.output_tokens=128"], levers=[graph]),
                  str(paths[2]))
    assert all(p.is_file() and p.stat().st_size > 1000 for p in paths)
