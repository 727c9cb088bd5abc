"""The engines' custom all-reduce as measured (aiconfigurator-core's custom_allreduce_perf tables): at a measured
size the figure is the table's row, between sizes a log-log interpolation, both launch modes apart, and `collective`
prints them beside the model's figure, naming the table it read."""
from __future__ import annotations

import pytest

from conftest import topology_path
from simulator.kernels import measured

needs_data = pytest.mark.skipif(measured.data_root() is None, reason="aiconfigurator-core not installed")


def table_row(system, engine, version, ranks, elements, mode):
    import pandas as pd

    frame = pd.read_parquet(measured.data_root() / system / "comm" / engine / version / "custom_allreduce_perf.parquet")
    row = frame[(frame.num_gpus == ranks) & (frame.message_size == elements) & frame.kernel_source.str.endswith(mode)]
    assert len(row) == 1
    return 1e3 * float(row.latency.iloc[0])


@needs_data
def test_a_measured_size_is_the_tables_row_in_both_modes():
    from simulator.kernels.custom_allreduce import measured as custom

    row = custom("rtx_pro_6000_server", "sglang", "0.5.9", 8, 16384)  # 16 KiB = 8192 bf16 elements
    assert row.version == "0.5.14"  # 0.5.10 measured two GPUs only; no 8-GPU table at or below 0.5.9
    assert row.graph_us == pytest.approx(table_row("rtx_pro_6000_server", "sglang", "0.5.14", 8, 8192, "graph"))
    assert row.eager_us == pytest.approx(table_row("rtx_pro_6000_server", "sglang", "0.5.14", 8, 8192, "eager"))
    exact = custom("h200_sxm", "sglang", "0.5.9", 8, 16384)
    assert exact.version == "0.5.9" and exact.eager_us > 2 * exact.graph_us  # the eager launch is measured apart


@needs_data
def test_between_sizes_the_time_lies_between_its_neighbours():
    from simulator.kernels.custom_allreduce import measured as custom

    low, mid, high = (custom("h200_sxm", "sglang", "0.5.9", 8, b) for b in (16384, 24576, 32768))
    for mode in ("graph_us", "eager_us"):
        a, m, b = getattr(low, mode), getattr(mid, mode), getattr(high, mode)
        assert min(a, b) <= m <= max(a, b)
    assert custom("h200_sxm", "sglang", "0.5.9", 8, 64) is None  # below the smallest row: no figure, not a guess


@needs_data
def test_collective_prints_the_engines_kernel_in_both_modes(capsys):
    from simulator.cli import main

    assert main(["collective", topology_path("pcie8_rtx_pro_6000.yaml"), "--bytes", "16KB", "--algorithm", "auto",
                 "--set", "fabric.p2p_level=system"]) == 0
    out = capsys.readouterr().out
    graph = table_row("rtx_pro_6000_server", "sglang", "0.5.14", 8, 8192, "graph")
    eager = table_row("rtx_pro_6000_server", "sglang", "0.5.14", 8, 8192, "eager")
    assert f"CUDA graph {graph:.2f} us, eager {eager:.2f} us" in out
    assert "comm/sglang/0.5.14/custom_allreduce_perf" in out and "nearest 0.5.9" in out


@needs_data
def test_the_fitted_model_meets_its_table_at_the_decode_size_and_the_cli_says_which_kernel_and_rule(capsys):
    """The physical model (latency + bytes / bandwidth, per launch mode) fitted to SGLang's 8-GPU PCIe table is
    within 10% of the table's 16 KiB row in both modes; `collective` prints it, and that SGLang 0.5.9 does not run
    its kernel on more than two PCIe-only GPUs."""
    import re

    from simulator.cli import main
    from simulator.kernels.custom_allreduce_fit import fit_table

    model = fit_table("rtx_pro_6000_server", "sglang", "0.5.14", 8)
    for mode in ("graph", "eager"):
        want = table_row("rtx_pro_6000_server", "sglang", "0.5.14", 8, 8192, mode)
        assert getattr(model, mode).time_us(16384) == pytest.approx(want, rel=0.10)
    assert main(["collective", topology_path("pcie8_rtx_pro_6000.yaml"), "--bytes", "16KB", "--algorithm", "auto",
                 "--set", "fabric.p2p_level=system"]) == 0
    out = capsys.readouterr().out
    assert "not on more than 2 GPUs without NVLink between all: NCCL" in out and "SGLang_CustomAllReduce" in out
    fitted_line = re.search(r"model fitted to that table: CUDA graph ([\d.]+) us, eager ([\d.]+) us", out)
    assert fitted_line and float(fitted_line.group(1)) == pytest.approx(model.graph.time_us(16384), abs=0.006)


@needs_data
def test_the_simulation_times_the_engines_kernel_by_its_fit_where_the_engine_runs_it():
    """On 8 x H200 (NVLink between all) SGLang 0.5.9 runs its custom all-reduce: a decode-sized all-reduce costs the
    CUDA-graph fit of its measured table; with roofline kernels the physical model stands."""
    import simulator
    from conftest import scenario_path
    from simulator.kernels.custom_allreduce_fit import fit_table
    from simulator.timing.machine import Machine

    path = scenario_path("nvlink8_h200_eagle3.yaml")
    scenario = simulator.load_scenario(path)
    assert (scenario.engine.name, scenario.engine.version, scenario.spec.parallelism.tp) == ("sglang", "0.5.9", 8)
    cost = Machine(scenario).allreduce.cost(16384)
    model = fit_table("h200_sxm", "sglang", "0.5.9", 8)
    assert cost.algorithm == "one_shot" and cost.time_us == pytest.approx(model.graph.time_us(16384), rel=1e-12)
    assert cost.time_us == pytest.approx(table_row("h200_sxm", "sglang", "0.5.9", 8, 8192, "graph"), rel=0.10)
    physical = Machine(simulator.load_scenario(path, [("runtime.kernels", "roofline")])).allreduce.cost(16384)
    assert "fitted" not in physical.implementation and physical.time_us != cost.time_us
