"""Each figure writes a non-empty PNG (or SVG); the plots command regenerates its files into a folder."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.viz import figures as plots
from simulator.results.run import run
from simulator.cli import main as cli_main

from conftest import SHORT, scenario_path

PNG = b"\x89PNG"


def is_png(path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(4) == PNG


@pytest.fixture(scope="module")
def result():
    return run(scenario_path("pcie8_eagle3.yaml"), **SHORT)


def test_plain_data_figures(tmp_path):
    accept, verify = np.linspace(1, 4, 5), np.linspace(5, 40, 6)
    tok_s = 1e3 * accept[None, :] / (verify[:, None] + 1.0)
    paths = [
        plots.breakeven_map(accept, verify, tok_s, 80.0, point=(2.0, 30.0), title="t", path=str(tmp_path / "b.png")),
        plots.breakeven_map(accept, verify, tok_s.T, 80.0, path=str(tmp_path / "bt.png")),  # transposed grid
        plots.grouped_bars(["a", "b"], {"x": [1.0, 2.0], "y": [1.5, 0.5]}, "tok/s", "t", str(tmp_path / "g.png")),
        plots.tornado([("one", 90.0), ("two", 50.0)], 80.0, 60.0, "tok/s", "t", str(tmp_path / "t.png")),
    ]
    for path in paths:
        assert is_png(path)
    svg = plots.grouped_bars(["a"], {"x": [1.0]}, "y", "t", str(tmp_path / "g.svg"))
    assert open(svg, encoding="utf-8").read().lstrip().startswith("<?xml")


def test_figures_of_runs(tmp_path, result):
    graph = run(scenario_path("pcie8_eagle3.yaml"), runtime__cuda_graph_verify=True, **SHORT)
    tree = run(scenario_path("pcie8_tree.yaml"), **SHORT)
    hybrid = run(scenario_path("pcie8_hybrid_bursty.yaml"), **SHORT)
    paths = [
        plots.throughput_vs_accept({"eager": [result], "graph": [graph]}, path=str(tmp_path / "a.png")),
        plots.pcie_vs_nvlink({"eagle3": result}, {"eagle3": graph}, path=str(tmp_path / "p.png")),
        plots.chain_vs_tree([result, graph], [tree], path=str(tmp_path / "c.png")),
        plots.breakdown_stack(result, path=str(tmp_path / "s.png")),
        plots.hybrid_timeline(hybrid, hysteresis=0.1, path=str(tmp_path / "h.png")),
        plots.run_summary(result, path=str(tmp_path / "r.png")),
    ]
    for path in paths:
        assert is_png(path)


def test_run_plot_option(tmp_path, capsys):
    out = tmp_path / "run.png"
    code = cli_main([scenario_path("pcie8_eagle3.yaml"), "--set", "workload.requests=1", "--set",
                     "workload.output_tokens=64", "--plot", str(out)])
    assert code == 0 and is_png(out)


def test_plots_command_quick(tmp_path, capsys):
    assert cli_main(["plots", "--quick", "--out", str(tmp_path)]) == 0
    written = sorted(p.name for p in tmp_path.iterdir())
    assert "breakeven_pcie8_eagle3.png" in written and "hybrid_pcie8_bursty.png" in written
    assert len(written) >= 9
    assert all(is_png(tmp_path / name) for name in written)
    assert "figures in" in capsys.readouterr().err
