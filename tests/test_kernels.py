"""Kernel costs: the measured database (lookups, interpolation, fallback, per-family report) and its use in passes."""
from __future__ import annotations

import math
import pathlib

import numpy as np
import pytest

from simulator.config import load_scenario
from simulator.timing.machine import Machine
from simulator.kernels import measured
from simulator.kernels.grid import Grid
from simulator.kernels.shapes import Attention, Gemm, MoE
from simulator.kernels.timer import KernelTimer

ROOT = pathlib.Path(__file__).resolve().parent.parent
needs_data = pytest.mark.skipif(measured.data_root() is None, reason="aiconfigurator-core not installed")


def test_grid_interpolates_log_and_linear_axes_and_refuses_outside():
    grid = Grid([np.array([1.0, 4.0]), np.array([10.0, 20.0])], np.array([[1.0, 3.0], [5.0, 7.0]]), (True, False))
    assert grid((1.0, 10.0)) == 1.0 and grid((4.0, 20.0)) == 7.0  # grid points exactly
    # m = 2 is halfway between 1 and 4 in log-space; n = 15 halfway linearly
    assert grid((2.0, 15.0)) == pytest.approx(0.5 * (1 + 3) / 2 + 0.5 * (5 + 7) / 2)
    assert grid((8.0, 15.0)) is None and grid((2.0, 25.0)) is None


def test_grid_refuses_a_cell_with_a_missing_corner():
    grid = Grid([np.array([1.0, 2.0]), np.array([1.0, 2.0])], np.array([[1.0, np.nan], [1.0, 1.0]]), (False, False))
    assert grid((1.5, 1.5)) is None
    assert grid((2.0, 1.5)) == 1.0  # the edge cell's weight on the missing corner is zero


def test_a_padded_axis_is_fitted_non_decreasing_by_pooling_what_falls():
    """Along GEMM rows a point measured slower than the sizes above it is pooled with them (their mean), not replaced
    by the fastest of them; holes stay holes, and a line that never falls is kept as measured."""
    from simulator.kernels.grid import monotone
    line = np.array([24.0, 20.0, np.nan, 22.0, 30.0, 26.0, 40.0])
    # 24 > 20: pooled to 22, and 22 <= 22 stays; 30 > 26: pooled to 28; 40 stays
    assert monotone(line)[[0, 1, 3, 4, 5, 6]].tolist() == [22.0, 22.0, 22.0, 28.0, 28.0, 40.0]
    assert np.isnan(monotone(line)[2])
    assert monotone(np.array([1.0, 2.0, 2.0, 5.0])).tolist() == [1.0, 2.0, 2.0, 5.0]
    # 24 > 20 > 19: all three pooled (21), then 21 <= 22
    assert monotone(np.array([24.0, 20.0, 19.0, 22.0])).tolist() == [21.0, 21.0, 21.0, 22.0]


def test_the_smallest_size_is_held_out_where_a_sign_test_finds_it_slower_beyond_noise():
    """100 lines: the first size above the second on 66 (16 over a fair count's 50, more than 3 x sqrt(100) / 2 = 15):
    held out of the fit, kept as measured; on 65 (15): pooled. Lines where the two read the same are dropped."""
    from simulator.kernels.grid import held_out
    def lines(above: int, ties: int = 0) -> np.ndarray:
        first = np.array([3.0] * above + [2.0] * ties + [1.0] * (100 - above - ties))
        return np.vstack([first, np.full(100, 2.0), np.full(100, 4.0)])
    assert held_out(lines(66)) and not held_out(lines(65))
    assert held_out(lines(60, ties=10))  # 60 of 90: 15 over 45 > 3 x sqrt(90) / 2 = 14.2
    grid = Grid.from_frame(_frame(lines(66)), ["m", "line"], (True, False), padded_axis=0)
    assert grid.values[0].tolist() == lines(66)[0].tolist()  # kept as measured, 3.0 above m = 2's 2.0
    grid = Grid.from_frame(_frame(lines(65)), ["m", "line"], (True, False), padded_axis=0)
    assert grid.values[0].tolist() == [2.5] * 65 + [1.0] * 35  # 3.0 pooled with 2.0


def test_a_collection_is_kept_as_measured_where_others_repeat_its_scatter_about_the_fit():
    """The rule (grid.repeats), exact on hand-made residuals: the slope of the others' residuals on ours, 3 standard
    errors above 1/2. x alternates +-1; y = 0.6 x + c e, e orthogonal to x: slope 0.6, standard error c / sqrt(3)
    (4 c^2 / 3 / 4, square-rooted), kept for c < 0.1 / sqrt(3) = 0.0577."""
    from simulator.kernels.grid import repeats
    x = np.array([1.0, -1.0, 1.0, -1.0])
    e = np.array([1.0, 1.0, -1.0, -1.0])
    assert repeats(x, [0.6 * x + 0.05 * e]) and not repeats(x, [0.6 * x + 0.06 * e])
    assert not repeats(x, [0.5 * x]) and repeats(x, [0.51 * x])  # no noise: the slope alone
    assert not repeats(x, [np.full(4, np.nan)]) and not repeats(x, []) and not repeats(np.zeros(4), [x])
    # pooled over witnesses: slopes 1.0 and 0.0 pool to 0.5 (not above it); 1.0 and 0.6 to 0.8, each point 0.2 off:
    # standard error sqrt(8 x 0.04 / 7 / 8) = 0.076, 0.8 - 3 x 0.076 = 0.57
    assert not repeats(x, [x, np.zeros(4)]) and repeats(x, [x, 0.6 * x])


def test_a_grid_keeps_its_rows_where_a_witness_repeats_their_dip_and_fits_them_where_none_does():
    """Four lines at m = 1, 2, 4 measured 10, 8, 12 (the fit pools m = 1 and 2 to 9). A witness measuring the same dip
    on lines 0-1 (and a line of its own, 7: not ours, not counted) repeats our residuals exactly: kept as measured.
    A witness monotone there (8, 10, 12: residuals 0) does not: the fit. Residuals log(10/9), log(8/9), 0."""
    import pandas as pd
    def table(lines, first, second):
        return pd.DataFrame([(m, n, t) for n in lines for m, t in ((1, first), (2, second), (4, 12.0))],
                            columns=["m", "line", "latency"])
    own = table([0, 1, 2, 3], 10.0, 8.0)
    same_dip = (table([0, 1, 7], 10.0, 8.0),)
    kept = Grid.from_frame(own, ["m", "line"], (True, False), padded_axis=0, witnesses=same_dip)
    assert kept.values[:, 0].tolist() == [10.0, 8.0, 12.0] and kept.values[:, 3].tolist() == [10.0, 8.0, 12.0]
    no_dip = (table([0, 1, 7], 8.0, 10.0),)
    fit = Grid.from_frame(own, ["m", "line"], (True, False), padded_axis=0, witnesses=no_dip)
    assert fit.values[:, 0].tolist() == [9.0, 9.0, 12.0]
    alone = Grid.from_frame(own, ["m", "line"], (True, False), padded_axis=0)
    assert alone.values.tolist() == fit.values.tolist()


def test_a_table_standing_in_for_another_kernel_reads_the_fit_alone():
    """smooth (runtime.kernel_database.stands_in): the m = 1 rows a sign test holds out (66 of 100 lines slower at
    m = 1) are pooled like the rest, 3.0 with m = 2's 2.0 to 2.5; a witness repeating the dip (10, 8, 12) is not asked:
    m = 1 and 2 pooled to 9, the grid with no witness."""
    import pandas as pd
    slower = np.vstack([np.array([3.0] * 66 + [1.0] * 34), np.full(100, 2.0), np.full(100, 4.0)])
    smooth = Grid.from_frame(_frame(slower), ["m", "line"], (True, False), padded_axis=0, smooth=True)
    assert smooth.values[0].tolist() == [2.5] * 66 + [1.0] * 34 and smooth.values[1].tolist() == [2.5] * 66 + [2.0] * 34
    held = Grid.from_frame(_frame(slower), ["m", "line"], (True, False), padded_axis=0)
    assert held.values[0].tolist() == slower[0].tolist()  # without the flag: held out, as measured
    def table(lines, first, second):
        return pd.DataFrame([(m, n, t) for n in lines for m, t in ((1, first), (2, second), (4, 12.0))],
                            columns=["m", "line", "latency"])
    same_dip = (table([0, 1, 7], 10.0, 8.0),)
    own = table([0, 1, 2, 3], 10.0, 8.0)
    smooth = Grid.from_frame(own, ["m", "line"], (True, False), padded_axis=0, witnesses=same_dip, smooth=True)
    assert smooth.values[:, 0].tolist() == [9.0, 9.0, 12.0] and smooth.values[:, 3].tolist() == [9.0, 9.0, 12.0]
    kept = Grid.from_frame(own, ["m", "line"], (True, False), padded_axis=0, witnesses=same_dip)
    assert kept.values[:, 0].tolist() == [10.0, 8.0, 12.0]


def _frame(values: np.ndarray):
    """A table of values[m index, line] at m = 1, 2, 4."""
    import pandas as pd
    m, line = np.meshgrid([1, 2, 4], np.arange(values.shape[1]), indexing="ij")
    return pd.DataFrame({"m": m.ravel(), "line": line.ravel(), "latency": values.ravel()})


@needs_data
def test_on_grid_points_are_the_table_rows_fitted_non_decreasing_in_m():
    from conftest import monotone_fit
    h200 = measured.MeasuredKernels("h200_sxm")
    frame = measured.read_table("h200_sxm", "gemm", "gemm_perf")
    rows = frame[(frame.gemm_dtype == "fp8_block") & (frame.n == 7168) & (frame.k == 2048)]
    by_m = rows.groupby("m").latency.mean()
    largest = int(by_m.index.max())
    for m in (1, 64, 4096, largest):
        assert h200.time_us(Gemm(m, 7168, 2048, "fp8")) == pytest.approx(1e3 * monotone_fit(by_m, m))
    # between the fastest measurement at m = 1 or above (the envelope before) and the slowest
    assert 1e3 * by_m.min() <= h200.time_us(Gemm(1, 7168, 2048, "fp8")) <= 1e3 * by_m[by_m.index <= 64].max()


@needs_data
def test_a_gemv_measured_slower_than_at_two_rows_is_pooled_with_the_rows_above():
    """SGLang 0.5.14's H100 bf16 6,144 x 4,096 GEMM (Llama-3.1-8B's QKV): the rows read 24.519 us at m = 1 and
    20.645 us at m = 2, 20.8-24.1 us at m = 3-14; vLLM 0.24.0's F.linear at the same shape reads 19.90 and 20.09 us
    (no m = 1 excess). The fit at m = 1 is the least mean of the rows from m = 1 up: above m = 2's row, below
    m = 1's."""
    sglang = measured.MeasuredKernels("h100_sxm")
    frame = measured.read_table("h100_sxm", "gemm", "gemm_perf")
    rows = frame[(frame.gemm_dtype == "bfloat16") & (frame.n == 6144) & (frame.k == 4096)]
    by_m = rows.groupby("m").latency.mean()
    assert (round(1e3 * by_m[1], 3), round(1e3 * by_m[2], 3)) == (24.519, 20.645)
    runs = [by_m.sort_index().iloc[:b].mean() for b in range(1, len(by_m) + 1)]
    assert sglang.time_us(Gemm(1, 6144, 4096, "bf16")) == pytest.approx(1e3 * min(runs))
    assert 20.645 < sglang.time_us(Gemm(1, 6144, 4096, "bf16")) < 24.519


@needs_data
def test_a_table_slower_at_one_row_than_at_two_on_most_lines_keeps_its_one_row_rows():
    """Counted from the Parquet rows (lines where m = 1 and m = 2 read the same dropped): the m = 1 row above the m = 2
    row on 187 of 246 lines of TensorRT-LLM 1.0.0's A100 int4 weight-only GEMMs, 445 of 483 of vLLM 0.24.0's B200
    CUTLASS fp8 ones (more than 1/2 + 3 standard deviations of a fair count: 146.5, 274.5): m = 1 is timed as
    measured; 197 of 483 of SGLang 0.5.14's H100 bf16 ones: m = 1 is pooled (the test above)."""
    counts = {}
    cutlass = "CutlassFP8ScaledMMLinearKernel"
    for system, engine, version, dtype, source in (("a100_sxm", "trtllm", None, "int4_wo", None),
                                                   ("b200_sxm", "vllm", "0.24.0", "fp8", cutlass),
                                                   ("h100_sxm", "sglang", None, "bfloat16", None)):
        frame = measured.read_table(system, "gemm", "gemm_perf", engine, version)
        rows = frame[(frame.gemm_dtype == dtype) & ((frame.kernel_source == source) if source else True)]
        by_m = rows.groupby(["m", "n", "k"]).latency.mean().unstack(0)
        both = by_m[1].notna() & by_m[2].notna() & (by_m[1] != by_m[2])
        counts[system] = (int(both.sum()), int((by_m[1] > by_m[2])[both].sum()))
        if system != "h100_sxm":  # the slice's grid (an fp8 GEMM on vLLM's B200 reads the block-scaled lane first)
            one = rows[(rows.m == 1) & (rows.n == 4096) & (rows.k == 4096)].latency.mean()
            where = (("kernel_source", source),) if source else ()
            grid = measured.grid_of_table(system, "gemm", "gemm_perf", where + (("gemm_dtype", dtype),),
                                          ("m", "n", "k"), (True, False, False), 0, engine, version)
            assert grid((1, 4096, 4096)) == pytest.approx(one)
    assert counts == {"a100_sxm": (246, 187), "b200_sxm": (483, 445), "h100_sxm": (483, 197)}


@needs_data
def test_gemm_interpolates_in_log_tokens():
    h200 = measured.MeasuredKernels("h200_sxm")
    # the m grid has 33 and 48 as neighbours (the database measures m and m + 1 at tile boundaries)
    low, high = h200.time_us(Gemm(33, 4096, 4096, "bf16")), h200.time_us(Gemm(48, 4096, 4096, "bf16"))
    w = math.log(40 / 33) / math.log(48 / 33)
    assert h200.time_us(Gemm(40, 4096, 4096, "bf16")) == pytest.approx(low + w * (high - low))


@needs_data
def test_uncovered_shapes_fall_back():
    h200 = measured.MeasuredKernels("h200_sxm")
    assert h200.time_us(Gemm(1, 4096, 100_000, "bf16")) is None  # k beyond the measured grid
    assert h200.time_us(Gemm(1, 4096, 4096, "int4")) is None  # no weight-only int4 GEMM table
    assert h200.time_us(MoE(1, 7168, 2048, 8, 123, 8, "fp8")) is None  # no such expert count


@needs_data
def test_gemm_beyond_the_grid_is_costed_in_pieces():
    h200 = measured.MeasuredKernels("h200_sxm")
    # a 128,256-token lm_head at tp 1: two pieces of 64,128 columns (the grid ends at 65,536)
    assert h200.time_us(Gemm(1, 128256, 4096, "bf16")) == pytest.approx(2 * h200.time_us(Gemm(1, 64128, 4096, "bf16")))


@needs_data
def test_verify_attention_reads_the_cache_once():
    """A verify of q tokens is decode attention with q x the query heads: while the q x heads query rows fit one
    tile it costs about one decode (within the data's noise), far less than q decode passes."""
    h200 = measured.MeasuredKernels("h200_sxm")
    one = h200.time_us(Attention(8, 1, 4000, 4, 1, 128, "bf16"))
    four = h200.time_us(Attention(8, 4, 4000, 4, 1, 128, "bf16"))
    assert 0.8 * one < four < 2 * one


@needs_data
def test_moe_grows_with_tokens_and_locality_counts_fewer():
    h200 = measured.MeasuredKernels("h200_sxm")
    t = [h200.time_us(MoE(n, 7168, 2048, 8, 256, 8, "fp8")) for n in (1, 4, 16, 64)]
    assert t == sorted(t) and t[-1] > 2 * t[0]


def _scenario(tmp_path, model: str, topology: str = "nvlink8_h200", tp: int = 8, extra: str = ""):
    path = tmp_path / "s.yaml"
    path.write_text(f"name: t\ntopology: {ROOT}/topologies/{topology}.yaml\nmodel: {ROOT}/scenarios/models/{model}.yaml\n"
                    f"parallelism: {{tp: {tp}}}\nworkload: {{requests: 1, prompt_tokens: 1000, output_tokens: 32}}\n{extra}")
    return str(path)


@needs_data
@pytest.mark.parametrize("model, reference_ms", [
    # aiconfigurator-core 0.12.0's own estimator, SGLang 0.5.14, H200 TP8, decode batch 1, isl 1000:
    # EngineHandle.compile(model, "h200_sxm", "sglang", tp_size=8[, moe_tp_size=8]).decode_step_latency(1, 1000, 2)
    ("llama_3_1_70b", 7.834),
    ("deepseek_v3", 7.861),
])
def test_plain_decode_within_15_percent_of_what_the_database_implies(tmp_path, model, reference_ms):
    import simulator
    result = simulator.run(_scenario(tmp_path, model))
    decode_ms = result.step_ms["decode"]["mean"]
    assert abs(decode_ms / reference_ms - 1) <= 0.15, decode_ms
    assert result.extra["kernels"]["source"].startswith("measured")


@needs_data
def test_report_names_the_source_per_family(tmp_path):
    machine = Machine(load_scenario(_scenario(tmp_path, "llama_3_1_8b", "nvlink8_h100", 1)))
    from simulator.model.cost import Kernel
    report = machine.kernels.report([Kernel("x", 1.0, 1.0, "bf16", Gemm(1, 4096, 100_000, "bf16")),
                                     Kernel("y", 1.0, 1.0, "bf16", Gemm(1, 4096, 4096, "bf16"))])
    assert report["families"]["gemm"] == "measured, shape-aware roofline for 1 of 2 shapes (outside the measured data)"
    assert report["families"]["elementwise"].startswith("roofline")


def test_roofline_choice_and_missing_package_time_every_kernel_by_the_roofline(tmp_path, monkeypatch):
    from simulator.model.cost import PassShape
    scenario = load_scenario(_scenario(tmp_path, "llama_3_1_8b", "nvlink8_h100", 1, "runtime: {kernels: roofline}"))
    timer = KernelTimer(Machine(scenario).gpu, "roofline")
    assert timer.source is None and "runtime.kernels: roofline" in timer.note
    monkeypatch.setattr(measured, "data_root", lambda: None)
    # a process without the package has no plans stored by an equal machine that had it (an earlier test's)
    from simulator.cache import Store, held

    with held(Store()):
        default = load_scenario(_scenario(tmp_path, "llama_3_1_8b", "nvlink8_h100", 1))  # kernels: measured
        machine = Machine(default)
        assert machine.kernels.source is None and "not installed" in machine.kernels.report([])["source"]
        roofline = Machine(scenario).plan("target", PassShape(1, 1, 1024), True)
        assert np.allclose(machine.plan("target", PassShape(1, 1, 1024), True).gpu_us, roofline.gpu_us)


# -- the shape-aware roofline ---------------------------------------------------------------------------------------

def _gpu(name: str):
    from simulator.config.loader import read_yaml
    from simulator.config.topology import Topology
    return Topology.model_validate(read_yaml(str(ROOT / "topologies" / f"{name}.yaml"))).gpu


def test_gemm_pays_whole_waves_of_tiles():
    """Compute-bound GEMMs: one output tile past a full wave over the SMs costs a whole extra wave."""
    from simulator.kernels.roofline import TILE_M, TILE_N, ShapeRoofline
    spec = _gpu("nvlink8_h100")
    roofline = ShapeRoofline(spec, {"gemm_bf16": (1.0, 1.0, 0.0, 0.0)})
    assert spec.num_sms == 132
    # 12 x 11 tiles of 64 x 128 fill the 132 SMs once; one column more makes 144 tiles: two waves
    full = roofline.time_us(Gemm(12 * TILE_M, 11 * TILE_N, 8192, "bf16"))
    one_more = roofline.time_us(Gemm(12 * TILE_M, 11 * TILE_N + 1, 8192, "bf16"))
    assert roofline.is_compute_bound(Gemm(12 * TILE_M, 11 * TILE_N, 8192, "bf16"))
    assert one_more == pytest.approx(2 * full)
    # a decode GEMM computes a whole 64-row tile: m = 1 and m = 64 cost the same compute
    assert roofline._parts(Gemm(1, 8192, 8192, "bf16"))[0] == roofline._parts(Gemm(TILE_M, 8192, 8192, "bf16"))[0]


def test_int4_gemm_roofline_streams_its_group_metadata():
    """A weight-only int4 GEMV (no fitted set: the spec's efficiencies) reads its group scales and zeros with the
    weights: gpt-fast's group-32 bf16 scale + zero (4/32 bytes per weight) make 8192 x 8192 weights 0.625 bytes each."""
    from simulator.kernels.roofline import ShapeRoofline
    spec = _gpu("nvlink8_h100")
    roofline = ShapeRoofline(spec, {})  # the spec's memory efficiency for every family, no overhead split
    plain, grouped = Gemm(1, 8192, 8192, "int4"), Gemm(1, 8192, 8192, "int4", 4 / 32)
    activations = 2.0 * (8192 + 8192)
    bandwidth = spec.memory_bandwidth_GBps * 1e3 * spec.memory_efficiency  # bytes per us
    assert roofline._parts(plain)[1] == pytest.approx((8192 * 8192 * 0.5 + activations) / bandwidth)
    assert roofline._parts(grouped)[1] == pytest.approx((8192 * 8192 * 0.625 + activations) / bandwidth)
    # fp4 / fp8 sets were fitted to tables measured in those formats, block scales included: not counted again
    assert roofline._parts(Gemm(1, 8192, 8192, "fp4", 1 / 16))[1] == roofline._parts(Gemm(1, 8192, 8192, "fp4"))[1]


def test_attention_roofline_reads_the_cache_once_per_request():
    from simulator.kernels.roofline import ShapeRoofline
    roofline = ShapeRoofline(_gpu("nvlink8_h200"), {"attention_decode_bf16": (1.0, 1.0, 0.0, 0.0)})
    decode = roofline._parts(Attention(8, 1, 8000, 8, 1, 128, "bf16"))
    verify = roofline._parts(Attention(8, 4, 8000, 8, 1, 128, "bf16"))
    assert decode[1] < verify[1] < 1.01 * decode[1]  # memory: the same cache (3 more tokens, 4x the queries)
    assert verify[0] == pytest.approx(decode[0] * (8000 + 2.5) / (8000 + 1))  # compute: 32 rows fit one 64-row tile


@needs_data
@pytest.mark.parametrize("system, topology", [("h100_sxm", "nvlink8_h100"), ("h200_sxm", "nvlink8_h200")])
def test_fitted_roofline_median_error_per_family_is_at_most_15_percent(system, topology):
    from simulator.kernels import fit
    from simulator.kernels.roofline import FAMILIES
    spec = _gpu(topology)
    for family in FAMILIES:
        pairs = fit.samples(system, family)
        assert len(pairs) >= 300, family
        median = float(np.median(fit.errors(spec, None, pairs)))
        assert median <= 0.15, (family, median)


@needs_data
def test_b200_bf16_experts_cost_what_the_database_measures_over_nvfp4():
    """B200's database holds no bf16 fused-MoE rows at DeepSeek's hidden 7168 (what a bf16 MTP module runs): the
    moe_bf16 set is fitted to its nearest expert shape, 6144 x 2048, top-8 of 256 (fit.nearest_moe_samples). There,
    for one token, what bf16 experts cost over nvfp4 ones (measured: 61 / 34 / 16 / 9 us at TP 1 / 2 / 4 / 8) is
    what the shipped roofline gives within 25% (the set's median error on its rows: 13%)."""
    from simulator.kernels import fit, measured
    from simulator.kernels.roofline import ShapeRoofline
    from simulator.kernels.shapes import MoE
    table = measured.read_table("b200_sxm", "moe", "moe_perf")
    table = table[(table.distribution == "balanced") & (table.moe_ep_size == 1) & (table.hidden_size == 6144) &
                  (table.inter_size == 2048) & (table.topk == 8) & (table.num_experts == 256) & (table.num_tokens == 1)]
    us = {(r.moe_dtype, r.moe_tp_size): 1e3 * r.latency for r in table.itertuples()}
    roofline = ShapeRoofline(_gpu("nvlink8_b200"))
    for tp in (1, 2, 4, 8):
        extra = us[("bfloat16", tp)] - us[("nvfp4", tp)]
        simulated = (roofline.time_us(MoE(1.0, 6144, 2048, 8, 256, tp, "bf16", balanced=True))
                     - roofline.time_us(MoE(1.0, 6144, 2048, 8, 256, tp, "fp4", balanced=True)))
        assert abs(simulated / extra - 1) <= 0.25, (tp, simulated, extra)
    assert {s.hidden for s, _ in fit.nearest_moe_samples("b200_sxm")} == {6144}


# -- speculation under load ------------------------------------------------------------------------------------------

@needs_data
def test_speculative_speedup_falls_with_batch_because_verify_and_draft_grow():
    """Dense 8B on one H100, EAGLE-3 chain of 3: verify (4 tokens per request) and drafting at batch b cost more
    relative to a plain decode step as b grows, so the speedup falls (EAGLE-3 paper, SGLang on H100: 2.36x at
    batch 1 to 1.38x at 64; a validation figure, not fitted)."""
    import simulator
    rows = []
    for batch in (1, 8, 64):
        r = simulator.run(str(ROOT / "scenarios" / "nvlink8_h100_llama8b_eagle3.yaml"),
                          workload__concurrency=batch, workload__requests=max(4, 2 * batch))
        rows.append((r.speedup, r.step_ms["verify"]["mean"] + r.step_ms["draft"]["mean"],
                     r.step_ms["baseline_decode"]["mean"]))
    speedups = [s for s, _, _ in rows]
    assert speedups[0] > speedups[1] > speedups[2]
    ratios = [spec / plain for _, spec, plain in rows]
    assert ratios[0] < ratios[1] < ratios[2]


@needs_data
def test_weight_only_gemm_filled_from_another_engine_with_group_scales_streamed():
    """SGLang's A100 tables have no weight-only GEMMs: TensorRT-LLM's per-channel rows of the same GPU stand in (the
    4096 x 4096 int4 GEMV: 18-20 us), and int4 group-32 scales (2/32 bytes per weight beside 0.5)
    cost their bytes at the kernel's own rate."""
    from simulator.kernels.measured import MeasuredKernels
    from simulator.kernels.shapes import Gemm

    from simulator.kernels.measured import read_table

    rows = read_table("a100_sxm", "gemm", "gemm_perf", "trtllm")
    rows = rows[(rows.gemm_dtype == "int4_wo") & (rows.n == 4096) & (rows.k == 4096)]
    a100 = MeasuredKernels("a100_sxm")
    per_channel = a100.time_us(Gemm(1, 4096, 4096, "int4"))
    assert per_channel == pytest.approx(1e3 * rows[rows.m == 1].latency.mean())  # m = 1 held out of the fit (above)
    assert a100.time_us(Gemm(1, 4096, 4096, "int4", 2 / 32)) == pytest.approx(per_channel * (1 + (2 / 32) / 0.5))
    assert a100.time_us(Gemm(1, 4096, 4096, "int8")) < a100.time_us(Gemm(1, 4096, 4096, "bf16"))


@needs_data
def test_report_names_the_engine_whose_table_stood_in(tmp_path):
    """gpt-fast's A100 int4 decode: the int4 GEMMs are timed from TensorRT-LLM's table (SGLang's has none on the
    A100), and the result says so for the gemm family."""
    from simulator.model.cost import Kernel
    machine = Machine(load_scenario(_scenario(tmp_path, "llama_3_1_8b", "nvlink8_a100", 1)))
    report = machine.kernels.report([Kernel("x", 1.0, 1.0, "bf16", Gemm(1, 4096, 4096, "int4", 4 / 32)),
                                     Kernel("y", 1.0, 1.0, "bf16", Gemm(1, 4096, 4096, "bf16"))])
    assert report["families"]["gemm"] == ("measured; 1 of 2 shapes from trtllm 1.0.0 int4_wo (SGLang's tables lack "
                                          "that dtype on this GPU)")


@needs_data
def test_a_what_if_gpu_scales_the_measured_times_by_the_roofline(tmp_path):
    """A GPU whose bandwidth is set away from its topology file's keeps the measured times of the GPU as loaded, each
    times the roofline's ratio between the two GPUs (exactly); at the loaded value nothing changes, and the report
    says it."""
    from simulator.model.cost import Kernel

    path = _scenario(tmp_path, "llama_3_1_8b", "nvlink8_h100", 1)
    base = load_scenario(path)
    bw = base.topology.gpu.memory_bandwidth_GBps
    assert base.with_overrides({"topology.gpu.memory_bandwidth_GBps": bw}).gpu_as_loaded is None
    what_if = base.with_overrides({"topology.gpu.memory_bandwidth_GBps": 2 * bw})
    assert what_if.gpu_as_loaded == base.topology.gpu
    assert load_scenario(path, [("topology.gpu.memory_bandwidth_GBps", 2 * bw)]) == what_if  # --set: the same
    gemv = Kernel("gemv", 2 * 4096 * 4096, 2 * 4096 * 4096, "bf16", Gemm(1, 4096, 4096, "bf16"))
    loaded, doubled = Machine(base).kernels, Machine(what_if).kernels
    t0, t2 = loaded.kernel_us(gemv)[0], doubled.kernel_us(gemv)[0]
    ratio = doubled.roofline.time_us(gemv.shape) / loaded.roofline.time_us(gemv.shape)
    assert t2 == pytest.approx(t0 * ratio, rel=1e-12) and 0.5 < ratio < 1.0  # memory-bound: faster, not 2x
    assert "what-if GPU: memory_bandwidth_GBps" in doubled.report([gemv])["source"]
    # the same GPU loaded as such (its file saying 2x): its own measured times, and another machine key (plans and
    # samples are memoised by the key)
    from dataclasses import replace
    as_loaded = replace(what_if, gpu_as_loaded=None)
    assert Machine(as_loaded).kernels.kernel_us(gemv)[0] == t0 and Machine(as_loaded).key != Machine(what_if).key


GPT_FAST_CASE = ROOT / "scenarios" / "validation" / "cases" / "a100_llama2_decode.yaml"
INT8 = [("model.weights.attention", "int8"), ("model.weights.dense_mlp", "int8"), ("model.weights.lm_head", "int8")]


def _gemv_pair(m: int):
    """An int8 weight-only GEMM of m rows and the bf16 one of the same shape (Llama-2-7B's fused qkv)."""
    from simulator.model.cost import Kernel
    n, k = 12288, 4096
    int8 = Kernel("qkv", 2.0 * m * n * k, n * k + 2.0 * m * (n + k), "bf16", Gemm(m, n, k, "int8"))
    bf16 = Kernel("qkv", 2.0 * m * n * k, 2.0 * n * k + 2.0 * m * (n + k), "bf16", Gemm(m, n, k, "bf16"))
    return int8, bf16


def test_gpt_fast_profile_states_the_int8_gemv_share_from_pytorchs_micro_benchmark():
    """gpt-fast's profile: its int8 linear at one row is Inductor's fused dequantise + GEMV, streaming at the share of
    the bf16 GEMV's rate that PyTorch's benchmarks/gpt_fast run_gemv publishes for the A100 (int8 870 GB/s of int8
    weights, bf16 990 GB/s: 870 / 990), at one row only (decomposition.py mm: shape[0] == 1)."""
    scenario = load_scenario(str(GPT_FAST_CASE), INT8)
    rule = scenario.spec.runtime.weight_only_gemv
    assert (rule.dtypes, rule.max_tokens) == (["int8"], 1)
    assert rule.bandwidth_vs_bf16 == round(870 / 990, 3) == 0.879
    other = load_scenario(str(GPT_FAST_CASE), INT8 + [("engine", {"name": "sglang", "version": "0.5.9"})])
    assert other.spec.runtime.weight_only_gemv is None  # an engine without its own kernel: the measured table


@pytest.mark.parametrize("kernels", ["roofline", pytest.param("measured", marks=needs_data)])
def test_gpt_fast_int8_gemv_takes_the_bf16_gemvs_time_at_the_published_share(kernels):
    """One row: the int8 GEMV streams half the bf16 GEMV's bytes at 0.879 of its rate, t = t_bf16 x (1 / 2) / 0.879,
    exactly, whichever source times the bf16 GEMV (and the what-if board's 1,700 GB/s scaling with it); two rows: the
    timer without the engine's kernel (the measured weight-only table, or the roofline)."""
    overrides = INT8 + [("runtime.kernels", kernels), ("topology.gpu.read_bandwidth_GBps", 1700)]
    machine = Machine(load_scenario(str(GPT_FAST_CASE), overrides))
    from simulator.hardware.gpu import GPU
    timer, loaded = machine.kernels, machine.scenario.gpu_as_loaded
    plain = KernelTimer(timer.gpu, kernels, GPU(loaded) if loaded is not None else None)  # without the engine's kernel
    int8, bf16 = _gemv_pair(1)
    assert timer.kernel_us(int8)[0] == pytest.approx(plain.kernel_us(bf16)[0] * 1.0 / 2.0 / 0.879, rel=1e-12)
    int8_2, _ = _gemv_pair(2)
    assert timer.kernel_us(int8_2)[0] == plain.kernel_us(int8_2)[0]
    if kernels == "measured":
        assert timer.kernel_us(int8)[0] != plain.kernel_us(int8)[0]  # no longer TensorRT-LLM's kernel
        report = timer.report([int8, bf16])["families"]["gemm"]
        assert report == ("measured; 1 of 2 shapes the engine's weight-only GEMV (the bf16 GEMV's time, weights at "
                          "0.879 of its rate)")


@pytest.mark.parametrize("lower, higher", [("1.3.0rc20", "1.3.0"), ("1.3.0rc20", "1.3.0rc23"), ("1.2.0rc5", "1.3.0rc10"),
                                           ("0.5.6", "0.5.6.post2"), ("0.5.6.post2", "0.5.9"), ("0.5.9", "0.5.10"),
                                           ("0.1.dev19262", "0.1"), ("2.27", "2.27.3"), ("0.14.0", "0.24.0")])
def test_table_versions_order_as_pep_440_does(lower, higher):
    """The database's version folders: a release candidate comes before its release (asking TensorRT-LLM 1.3.0 must
    not skip 1.3.0rc20's tables for older ones), a post-release after it, numbers by value."""
    from simulator.kernels.tables import _version_key

    assert _version_key(lower) < _version_key(higher)
    assert _version_key("2.27") == _version_key("2.27.0")
