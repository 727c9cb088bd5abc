"""Every figure is checked for its numbers: titles, labels, bars and lines carry the figures of the run(s) drawn;
the plots command regenerates its files into a folder; PNGs carry specsim's name and the run's provenance."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.viz import figures as plots
from simulator.results.summary import BREAKDOWN
from simulator.api.run import run
from simulator.cli import main as cli_main

from conftest import SHORT, scenario_path

PNG = b"\x89PNG"


def is_png(path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(4) == PNG


@pytest.fixture
def drawn(monkeypatch):
    """The figures saved during a test, kept open for inspection (closed at the end)."""
    from simulator.viz import run_figures, style

    figures = []

    def keep(fig, path, provenance=None):
        fig.canvas.draw()  # lay out, so text positions and legends are final
        figures.append(fig)
        with open(path, "wb") as handle:
            fig.savefig(handle, format="png", metadata=style.metadata(False, provenance))
        return path

    from simulator.viz import long_accept

    for module in (plots, run_figures, long_accept):  # each imported the saver by name
        monkeypatch.setattr(module, "_save", keep)
    yield figures
    style._pyplot().close("all")


def texts(fig) -> str:
    """Every text of a figure (titles, labels, annotations, tick labels, legends) in one string."""
    from matplotlib.text import Text

    out = [t.get_text() for t in fig.findobj(Text)]
    return "\n".join(t for t in out if t)


def bar_heights(ax) -> list[float]:
    return [round(p.get_height(), 9) for p in ax.patches if hasattr(p, "get_height")]


@pytest.fixture(scope="module")
def result():
    return run(scenario_path("pcie8_eagle3.yaml"), **SHORT)


@pytest.fixture(scope="module")
def graph():
    return run(scenario_path("pcie8_eagle3.yaml"), runtime__cuda_graph_verify=True, **SHORT)


def test_breakeven_map_marks_the_point_and_the_baseline(tmp_path, drawn):
    accept, verify = np.linspace(1, 4, 5), np.linspace(5, 40, 6)
    tok_s = 1e3 * accept[None, :] / (verify[:, None] + 1.0)
    plots.breakeven_map(accept, verify, tok_s, 80.0, point=(2.0, 30.0), title="map", path=str(tmp_path / "b.png"))
    (fig,) = drawn
    ax = fig.axes[0]
    star = [line for line in ax.lines if line.get_marker() == "*"][0]
    assert (star.get_xdata()[0], star.get_ydata()[0]) == (2.0, 30.0)
    assert "(2.00, 30.0 ms)" in texts(fig) and "baseline 80 tok/s" in texts(fig) and ax.get_title() == "map"


def test_grouped_bars_values_and_long_labels_do_not_overlap(tmp_path, drawn):
    labels = ["pcie8_eagle3", "pcie8_eagle3: graph verify", "nvlink8_h200_eagle3: graph verify"]
    plots.grouped_bars(labels, {"speculative": [65.6, 126.0, 300.0], "plain decode": [81.4, 81.4, 227.0]},
                       "tok/s", "t", str(tmp_path / "g.png"))
    (fig,) = drawn
    ax = fig.axes[0]
    assert sorted(bar_heights(ax)) == sorted([65.6, 126.0, 300.0, 81.4, 81.4, 227.0])
    boxes = [t.get_window_extent() for t in ax.get_xticklabels() if t.get_text()]
    assert len(boxes) == 3 and not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_tornado_colours_by_whether_the_lever_pays(tmp_path, drawn):
    plots.tornado([("NVLink board", 68.0, False), ("CUDA-graph verify", 125.6, True), ("fused", 54.0, False)],
                  81.4, 65.6, "tok/s", "t", str(tmp_path / "t.png"))
    (fig,) = drawn
    ax = fig.axes[0]
    names = [t.get_text() for t in ax.get_yticklabels()]
    colours = {name: bar.get_facecolor()[:3] for name, bar in zip(names, ax.patches)}
    red, green = (0xc4 / 255, 0x4e / 255, 0x52 / 255), (0x55 / 255, 0xa8 / 255, 0x68 / 255)
    assert colours["NVLink board"] == pytest.approx(red)  # higher than today, but it does not pay
    assert colours["CUDA-graph verify"] == pytest.approx(green)
    ends = {name: bar.get_x() + bar.get_width() for name, bar in zip(names, ax.patches)}
    assert ends == pytest.approx({"NVLink board": 68.0, "CUDA-graph verify": 125.6, "fused": 54.0})


def test_throughput_vs_accept_draws_the_runs(tmp_path, drawn, result, graph):
    plots.throughput_vs_accept({"eager": [result], "graph": [graph]}, path=str(tmp_path / "a.png"))
    (fig,) = drawn
    ax = fig.axes[0]
    points = {(round(x, 9), round(y, 9)) for line in ax.lines for x, y in zip(line.get_xdata(), line.get_ydata())}
    assert (round(result.mean_accept_len, 9), round(result.throughput_tok_s, 9)) in points
    assert f"{result.breakeven_accept_len:.2f}" in texts(fig) and f"{graph.breakeven_accept_len:.2f}" in texts(fig)


def test_pcie_vs_nvlink_bars_are_the_runs(tmp_path, drawn, result, graph):
    plots.pcie_vs_nvlink({"eagle3": result}, {"eagle3": graph}, path=str(tmp_path / "p.png"))
    (fig,) = drawn
    left, right = fig.axes[:2]
    assert bar_heights(left) == [round(result.throughput_tok_s, 9), round(graph.throughput_tok_s, 9)]
    assert bar_heights(right) == [round(result.speedup, 9), round(graph.speedup, 9)]
    assert f"baseline {result.baseline_tok_s:.0f}" in texts(fig)


def test_chain_vs_tree_lines(tmp_path, drawn, result, graph):
    tree = run(scenario_path("pcie8_tree.yaml"), **SHORT)
    plots.chain_vs_tree([result, graph], [tree], path=str(tmp_path / "c.png"))
    (fig,) = drawn
    ax, ax2 = fig.axes[:2]
    tree_line = [line for line in ax.lines if line.get_label() == "tree"][0]
    assert list(tree_line.get_ydata()) == [tree.throughput_tok_s]
    accept = [line for line in ax2.lines if line.get_label() == "tree"][0]
    assert list(accept.get_ydata()) == [tree.mean_accept_len]


def test_breakdown_stack_totals_are_the_runs(tmp_path, drawn, result):
    plots.breakdown_stack(result, path=str(tmp_path / "s.png"))
    (fig,) = drawn
    per_token = fig.axes[-1]
    assert per_token.get_ylabel() == "ms per generated token"
    spec = result.run.spec_steps
    total = sum(float(result.run.steps[k][spec].sum()) for k in BREAKDOWN) / \
        float(result.run.steps["tokens"][spec].sum()) / 1e3
    labels = [t.get_text() for t in per_token.texts]
    assert f"{total:.2f}" in labels


def test_hybrid_title_is_the_runs_share_and_speedup(tmp_path, drawn):
    hybrid = run(scenario_path("pcie8_hybrid_bursty.yaml"), **SHORT)
    plots.hybrid_timeline(hybrid, hysteresis=0.1, path=str(tmp_path / "h.png"))
    (fig,) = drawn
    title = fig._suptitle.get_text()
    share = hybrid.extra["policy"]["speculative_share"]
    assert f"speculating {share:.0%} of steps" in title and f"({hybrid.speedup:.2f}x baseline)" in title
    assert f"break-even {hybrid.breakeven_accept_len:.2f}" in texts(fig)


def test_speedup_vs_concurrency_panels_and_legends(tmp_path, drawn):
    rows = [{"concurrency": c, "throughput_tok_s": 100.0 * c ** 0.5, "baseline_tok_s": 80.0 * c ** 0.5,
             "speedup": 1.25 - 0.01 * c, "breakeven_accept_len": 2.6 - 0.02 * c, "mean_accept_len": 2.04}
            for c in (1, 2, 4, 8, 16, 32, 64)]
    plots.speedup_vs_concurrency(rows, title="t", path=str(tmp_path / "s.png"))
    (fig,) = drawn
    throughput, speedup, accept = fig.axes[:3]
    assert "1.0" not in accept.get_ylabel() and accept.get_ylabel().startswith("accept length")
    one = [line for line in speedup.lines if line.get_label().startswith("1.0")]
    assert one and list(one[0].get_ydata()) == [1.0, 1.0]  # the 1.0 line lives with the speedups only
    assert [line.get_label() for line in accept.lines] == ["break-even", "mean"]
    for ax in (throughput, speedup, accept):  # no legend hides a data point
        box = ax.get_legend().get_window_extent()
        for line in ax.lines:
            if line.get_label().startswith("1.0"):
                continue
            xy = ax.transData.transform(np.column_stack([line.get_xdata(), line.get_ydata()]))
            assert not any(box.contains(x, y) for x, y in xy), (ax.get_ylabel(), line.get_label())


def test_run_summary_title_and_bars_are_the_runs(tmp_path, drawn, result):
    plots.run_summary(result, path=str(tmp_path / "r.png"))
    (fig,) = drawn
    ax1 = fig.axes[0]
    assert ax1.get_title() == f"throughput ({result.speedup:.2f}x)"
    assert bar_heights(ax1) == [round(result.baseline_tok_s, 9), round(result.throughput_tok_s, 9)]


def test_accept_over_length_lines_are_the_windows_and_the_break_even(tmp_path, drawn):
    from simulator.viz.long_accept import accept_over_length

    r = run(scenario_path("pcie8_ngram_long.yaml"), workload__output_tokens=1024)
    accept_over_length({"n-gram, chat": r}, 256, "t", str(tmp_path / "a.png"))
    chat = drawn[0].axes[0]
    lengths, positions = r.run.accept_lengths, r.run.accept_positions
    means = [float(np.mean(lengths[positions // 256 == k])) for k in range(int(positions.max()) // 256 + 1)]
    assert np.allclose(chat.lines[0].get_ydata(), means)
    assert chat.lines[1].get_ydata()[0] == pytest.approx(r.breakeven_accept_len)
    assert "break-even" in texts(drawn[0]) and not drawn[0].axes[1].lines  # no code run drawn


def test_png_carries_version_and_provenance(tmp_path, result):
    path = plots.run_summary(result, path=str(tmp_path / "r.png"))
    data = open(path, "rb").read()
    assert is_png(path) and b"Software" in data and b"specsim" in data and b"kernel_source" in data
    svg = plots.grouped_bars(["a"], {"x": [1.0]}, "y", "t", str(tmp_path / "g.svg"))
    assert open(svg, encoding="utf-8").read().lstrip().startswith("<?xml")


def test_run_plot_option(tmp_path, capsys):
    out = tmp_path / "run.png"
    code = cli_main([scenario_path("pcie8_eagle3.yaml"), "--set", "workload.requests=1", "--set",
                     "workload.output_tokens=64", "--plot", str(out)])
    assert code == 0 and is_png(out)


def test_plots_command_quick(tmp_path, capsys):
    # three recipes end to end (the drawing functions have their own tests above; every recipe runs in `plots`):
    # a sweep figure, a served-workload figure and a deployment question with its CSV rows
    argv = ["plots", "--quick", "--out", str(tmp_path), "--only", "breakeven", "--only", "hybrid",
            "--only", "deploy_llama70b_2node"]
    assert cli_main(argv) == 0
    written = sorted(p.name for p in tmp_path.iterdir())
    assert "breakeven_pcie8_eagle3.png" in written and "hybrid_pcie8_bursty.png" in written
    assert all(is_png(tmp_path / name) for name in written if not name.endswith(".csv"))
    assert "deploy_llama70b_2node.png" in written and "deploy_llama70b_2node.csv" in written
    assert "3 figures in" in capsys.readouterr().err


def test_plots_lists_every_recipe_and_refuses_an_unknown_one(tmp_path, capsys):
    from simulator.viz.recipes import Figures

    names = [name for name, _ in Figures(str(tmp_path), True).all()]
    assert len(names) >= 15 and len(set(names)) == len(names)
    assert cli_main(["plots", "--out", str(tmp_path), "--only", "no_such_figure"]) == 2
    assert "--only" in capsys.readouterr().err
