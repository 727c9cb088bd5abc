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
