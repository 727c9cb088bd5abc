"""The engines' custom all-reduce above the one-shot bound (two-shot, up to the 8 MiB buffer) is timed by the
measured table's rows, log-log interpolated and made monotone; below it by the one-shot fit, which leaves out the
bound's own row (the kernel runs that size two-shot: custom_all_reduce.cuh's `bytes < 256 * 1024` at 8 ranks)."""
from __future__ import annotations

import math

import pytest

from simulator.kernels import measured

needs_data = pytest.mark.skipif(measured.data_root() is None, reason="aiconfigurator-core not installed")

# h100_sxm comm/sglang/0.5.9/custom_allreduce_perf.parquet, num_gpus 8, latency in ms, read with pandas
H100_GRAPH_MS = {524288: 0.017348159551620484, 1048576: 0.020899839401245117}  # message_size in bf16 elements
H100_EAGER_MS = {524288: 0.028302080631256103, 1048576: 0.027936639785766604}  # 2 MiB below 1 MiB: one run's noise
H200_GRAPH_1MIB_MS = 0.01650048017501831  # h200_sxm sglang 0.5.9, num_gpus 8, 524288 elements, graph


@needs_data
def test_above_the_bound_the_time_is_the_tables_row_and_between_rows_their_log_log_interpolation():
    from simulator.kernels.custom_allreduce_fit import fit_table

    model = fit_table("h100_sxm", "sglang", "0.5.9", 8)
    one, two = (1e3 * H100_GRAPH_MS[e] for e in (524288, 1048576))
    assert model.graph.time_us(1 << 20) == pytest.approx(one, rel=1e-12)
    assert model.graph.time_us(2 << 20) == pytest.approx(two, rel=1e-12)
    w = (math.log(1_500_000) - math.log(1 << 20)) / (math.log(2 << 20) - math.log(1 << 20))
    assert model.graph.time_us(1_500_000) == pytest.approx(one ** (1 - w) * two ** w, rel=1e-12)
    assert model.graph.algorithm(1 << 20) == "two_shot" and model.graph.algorithm((256 << 10) - 1) == "one_shot"
    # eager: the 2 MiB row (27.94 us) sits below the 1 MiB row (28.30 us); a larger message takes no less
    assert model.eager.time_us(2 << 20) == pytest.approx(1e3 * H100_EAGER_MS[524288], rel=1e-12)


@needs_data
def test_the_one_shot_fit_is_the_relative_least_squares_over_the_rows_below_the_bound():
    """Written apart with numpy: minimise sum((a + b s) / t - 1)^2 over the 8-GPU graph rows below 256 KiB (the
    256 KiB row, two-shot, left out), then once more without the outliers."""
    import numpy as np
    import pandas as pd

    from simulator.kernels.custom_allreduce_fit import fit_table

    frame = pd.read_parquet(measured.data_root() / "h100_sxm" / "comm" / "sglang" / "0.5.9" /
                            "custom_allreduce_perf.parquet")
    rows = frame[(frame.num_gpus == 8) & (frame.kernel_source == "SGLang_CustomAllReduce_graph")]
    size = 2.0 * rows.message_size.to_numpy()
    time = 1e3 * rows.latency.to_numpy()
    keep = size < 256 * 1024
    s, t = size[keep], time[keep]
    (a, b), *_ = np.linalg.lstsq(np.stack([1 / t, s / t], axis=1), np.ones_like(t), rcond=None)
    misses = np.abs((a + b * s) / t - 1)
    kept = misses <= 3 * np.median(misses)  # fitted again without the rows that miss by 3x the median miss
    assert 3 <= kept.sum() < len(t)
    s, t = s[kept], t[kept]
    (a, b), *_ = np.linalg.lstsq(np.stack([1 / t, s / t], axis=1), np.ones_like(t), rcond=None)
    model = fit_table("h100_sxm", "sglang", "0.5.9", 8).graph
    assert model.latency_us == pytest.approx(a, rel=1e-9)
    assert model.bandwidth_GBps == pytest.approx(1 / (1000 * b), rel=1e-9)


@needs_data
def test_every_tables_model_is_monotone_in_size_in_both_modes():
    from simulator.kernels.custom_allreduce import versions
    from simulator.kernels.custom_allreduce_fit import fit_table, fitted

    sizes = sorted({int(1024 * 1.07 ** k) for k in range(150)} | {(256 << 10) - 1, 256 << 10, (512 << 10) - 1,
                                                                   512 << 10, 8 << 20})
    models = [fitted(None, "sglang", "0.5.9", n, nvlink) for n in (2, 4, 8) for nvlink in (True, False)]
    for system in sorted(p.name for p in measured.data_root().iterdir() if p.is_dir()):
        for engine in ("sglang", "vllm"):
            for version in versions(system, engine):
                models += [fit_table(system, engine, version, n) for n in (2, 4, 8)]
    models = [m for m in models if m is not None]
    assert len(models) > 100
    for model in models:
        for mode in (model.graph, model.eager):
            times = [mode.time_us(s) for s in sizes]
            assert all(b >= a - 1e-9 for a, b in zip(times, times[1:])), (model.basis, model.ranks)


@needs_data
def test_the_simulation_times_a_verify_sized_all_reduce_by_the_tables_two_shot_row():
    """8 x H200, SGLang 0.5.9, TP8: 1 MiB (64 tokens x hidden 8192 x bf16) is two-shot, the table's graph row."""
    import simulator
    from conftest import scenario_path
    from simulator.timing.machine import Machine

    scenario = simulator.load_scenario(scenario_path("nvlink8_h200_eagle3.yaml"))
    cost = Machine(scenario).allreduce.cost(1 << 20)
    assert cost.algorithm == "two_shot" and "the table's rows" in cost.implementation
    assert cost.time_us == pytest.approx(1e3 * H200_GRAPH_1MIB_MS, rel=1e-12)
    assert cost.latency_us + (1 << 20) / (1000 * cost.algbw_GBps) == pytest.approx(cost.time_us, rel=1e-12)


@needs_data
def test_collective_sweep_prints_the_engines_model_in_both_modes_and_names_the_table(capsys):
    from conftest import topology_path
    from simulator.cli import main

    assert main(["collective", topology_path("nvlink8_h100.yaml"), "-b", "1M", "-e", "2M", "-f", "2",
                 "--engine", "sglang:0.4.4.post2"]) == 0
    out = capsys.readouterr().out
    first = next(line for line in out.splitlines() if line.strip().startswith("1048576"))
    graph, eager = (float(x) for x in first.split()[-2:])
    assert graph == pytest.approx(1e3 * H100_GRAPH_MS[524288], abs=0.006)
    assert eager == pytest.approx(1e3 * H100_EAGER_MS[524288], abs=0.006)
    assert "h100_sxm comm/sglang/0.5.9 (SGLang_CustomAllReduce)" in out


@needs_data
def test_only_the_engines_own_kernel_is_read_and_the_version_follows_the_preference():
    """h100_sxm comm/sglang/0.5.6.post2 holds TensorRT-LLM's rows (kernel_source "TRTLLM"): SGLang 0.4.4.post2, whose
    nearest measured version it is, reads 0.5.9's SGLang_CustomAllReduce instead."""
    import pandas as pd

    from simulator.kernels.custom_allreduce import preference
    from simulator.kernels.custom_allreduce_fit import fitted

    frame = pd.read_parquet(measured.data_root() / "h100_sxm" / "comm" / "sglang" / "0.5.6.post2" /
                            "custom_allreduce_perf.parquet")
    assert set(frame.kernel_source) == {"TRTLLM"}
    assert preference("h100_sxm", "sglang", "0.4.4.post2")[:2] == ["0.5.6.post2", "0.5.9"]
    model = fitted("h100_sxm", "sglang", "0.4.4.post2", 8, True)
    assert model.version == "0.5.9" and model.basis == "h100_sxm comm/sglang/0.5.9 (SGLang_CustomAllReduce)"
