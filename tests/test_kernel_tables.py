"""Whose measured tables time the kernels (kernels/tables.py): the engine profile's kernel_database at its version or
the newest below it, one kernel per op by the engine's lanes, SGLang 0.5.14's where the engine's lack a shape, and
the report naming the table that stood in. Expected times are the Parquet rows themselves, read with pandas here."""
from __future__ import annotations

import math
import pathlib

import pytest

from simulator.cache import Store, held
from simulator.config import load_scenario
from simulator.kernels import measured, slicegrid
from simulator.kernels.shapes import Gemm, MLAttention, MoE
from simulator.timing.machine import Machine

if measured.data_root() is None:
    pytest.skip("aiconfigurator-core is not installed (the measured extra)", allow_module_level=True)

ROOT = pathlib.Path(__file__).resolve().parent.parent
H100_8B = str(ROOT / "scenarios" / "validation" / "cases" / "h100_llama8b_decode.yaml")


def _folder(*args) -> str | None:
    path = measured.table_path(*args)
    return None if path is None else path.parent.name


def test_a_table_is_read_at_the_version_asked_else_the_newest_below_it():
    assert _folder("h100_sxm", "gemm", "gemm_perf", "vllm", "0.24.0") == "0.24.0"
    assert _folder("a100_sxm", "gemm", "gemm_perf", "vllm", "0.24.0") == "0.14.0"  # the A100's only vLLM tables
    assert _folder("a100_sxm", "attention", "generation_attention_perf", "trtllm", "1.3.0rc20") == "1.0.0"
    assert _folder("h100_sxm", "moe", "moe_perf", "trtllm", "1.3.0rc20") == "1.3.0rc20"  # not rc23, newer
    assert _folder("h100_sxm", "gemm", "gemm_perf", "vllm", "0.8.5") is None  # nothing at or below it
    assert _folder("a100_sxm", "gemm", "gemm_perf") == "0.5.10"  # SGLang's default 0.5.14: the newest below


def _fitted_us(frame, m: int) -> float:
    """The rows' mean latency by m fitted non-decreasing in m (conftest.monotone_fit), at m, in us."""
    from conftest import monotone_fit
    return 1e3 * monotone_fit(frame.groupby("m").latency.mean(), m)


def test_the_engine_table_times_a_gemm_and_names_itself():
    vllm = measured.MeasuredKernels("h100_sxm", "vllm", "0.24.0")
    sglang = measured.MeasuredKernels("h100_sxm")
    shape = Gemm(4, 4096, 4096, "bf16")
    rows = {}
    for engine, version in (("vllm", "0.24.0"), ("sglang", None)):
        frame = measured.read_table("h100_sxm", "gemm", "gemm_perf", engine, version)
        rows[engine] = frame[(frame.gemm_dtype == "bfloat16") & (frame.n == 4096) & (frame.k == 4096)]
    assert vllm.answer(shape) == (pytest.approx(_fitted_us(rows["vllm"], 4)), "vllm 0.24.0")
    assert sglang.answer(shape) == (pytest.approx(_fitted_us(rows["sglang"], 4)), "sglang 0.5.14")
    assert vllm.time_us(shape) != sglang.time_us(shape)
    assert vllm.filled_from(shape) is None


def test_the_moe_reads_the_engines_own_kernel_lane():
    """TensorRT-LLM's B200 tables measured its NVFP4 fused MoE as CUTLASS and as the min-latency kernel (3-4x faster
    at one token) at the same shapes: the lookup reads the CUTLASS rows (the default outside min-latency mode), not
    their mean."""
    frame = measured.read_table("b200_sxm", "moe", "moe_perf", "trtllm", "1.3.0rc20")
    rows = frame[(frame.moe_dtype == "nvfp4") & (frame.distribution == "balanced") & (frame.moe_ep_size == 1)
                 & (frame.num_tokens == 1) & (frame.hidden_size == 7168) & (frame.inter_size == 2048)
                 & (frame.topk == 8) & (frame.num_experts == 256) & (frame.moe_tp_size == 8)]
    assert set(rows.kernel_source) >= {"moe_torch_flow_cutlass", "moe_torch_flow_min_latency"}
    cutlass = rows[rows.kernel_source == "moe_torch_flow_cutlass"]
    padded = frame[(frame.moe_dtype == "nvfp4") & (frame.distribution == "balanced") & (frame.moe_ep_size == 1)
                   & (frame.hidden_size == 7168) & (frame.inter_size == 2048) & (frame.topk == 8)
                   & (frame.num_experts == 256) & (frame.moe_tp_size == 8)
                   & (frame.kernel_source == "moe_torch_flow_cutlass")]
    from conftest import monotone_fit
    assert cutlass.latency.mean() == padded[padded.num_tokens == 1].latency.mean()
    expected = monotone_fit(padded.groupby("num_tokens").latency.mean(), 1)  # fitted non-decreasing in tokens
    trtllm = measured.MeasuredKernels("b200_sxm", "trtllm", "1.3.0rc20")
    t, table = trtllm.answer(MoE(1, 7168, 2048, 8, 256, 8, "fp4"))
    assert t == pytest.approx(1e3 * expected) and table == "trtllm 1.3.0rc20"
    assert t > 2 * 1e3 * rows[rows.kernel_source == "moe_torch_flow_min_latency"].latency.mean()


def _ep_rows(ep: int, tp: int) -> dict[int, float]:
    """TensorRT-LLM 1.3.0rc20's B200 CUTLASS NVFP4 MoE rows of DeepSeek's experts at one expert split, balanced routing:
    num_tokens -> what measured.py reads there, the closest non-decreasing sequence (least squares, each count's mean
    latency weighted alike) to the counts' mean latencies, in us. Counted here by the min-max formula of isotonic
    regression, fit(i) = max over j <= i of min over l >= i of mean(y[j..l]), not by the code's pool-adjacent-violators."""
    frame = measured.read_table("b200_sxm", "moe", "moe_perf", "trtllm", "1.3.0rc20")
    rows = frame[(frame.moe_dtype == "nvfp4") & (frame.distribution == "balanced") & (frame.moe_ep_size == ep)
                 & (frame.moe_tp_size == tp) & (frame.hidden_size == 7168) & (frame.inter_size == 2048)
                 & (frame.topk == 8) & (frame.num_experts == 256) & (frame.kernel_source == "moe_torch_flow_cutlass")]
    by_n = rows.groupby("num_tokens").latency.mean()
    y = list(by_n.to_numpy())
    fit = [max(min(sum(y[j:l + 1]) / (l + 1 - j) for l in range(i, len(y))) for j in range(i + 1))
           for i in range(len(y))]
    return {int(n): 1e3 * v for n, v in zip(by_n.index, fit)}


def test_trtllms_expert_parallel_rows_time_the_busiest_rank():
    """Under EP TensorRT-LLM's rows time rank 0 at num_tokens balanced tokens, below 32 tokens n x 8 / ep distinct
    experts, one token each: one token at EP4 x TP2 is the one-token row, a busiest rank with twice the mean's experts
    (and so pairs) the two-token row, and 1.5x lies between them by log-tokens."""
    rows = _ep_rows(4, 2)
    trtllm = measured.MeasuredKernels("b200_sxm", "trtllm", "1.3.0rc20")
    shape = MoE(1, 7168, 2048, 8, 256, 2, "fp4", ep=4)
    assert trtllm.answer(shape) == (pytest.approx(rows[1]), "trtllm 1.3.0rc20")
    assert trtllm.time_us(MoE(1, 7168, 2048, 8, 256, 2, "fp4", 1 / 3, ep=4)) == pytest.approx(rows[1] / 3)
    assert trtllm.time_us(MoE(1, 7168, 2048, 8, 256, 2, "fp4", ep=4, busiest=2.0, busiest_routed=2.0)) == \
        pytest.approx(rows[2])
    w = math.log(1.5) / math.log(2)
    assert trtllm.time_us(MoE(1, 7168, 2048, 8, 256, 2, "fp4", ep=4, busiest=1.5, busiest_routed=1.5)) == \
        pytest.approx(rows[1] + w * (rows[2] - rows[1]))
    assert trtllm.time_us(MoE(1, 7168, 2048, 8, 256, 4, "fp4", ep=2)) == pytest.approx(_ep_rows(2, 4)[1])
    assert trtllm.time_us(MoE(1, 7168, 2048, 8, 256, 2, "fp4", ep=4)) != trtllm.time_us(
        MoE(1, 7168, 2048, 8, 256, 8, "fp4"))  # the TP8 rows are another slice


def _at(rows: dict, n: float) -> float:
    """The rows between measured counts, linear in log-tokens."""
    low = max(m for m in rows if m <= n)
    high = min(m for m in rows if m >= n)
    return rows[low] if low == high else rows[low] + math.log(n / low) / math.log(high / low) * (rows[high] - rows[low])


def test_a_busiest_ranks_pairs_beyond_its_distinct_experts_row_cost_the_rows_slope_from_32_tokens():
    """EP4's rank 0 holds 2 n experts, one token each, below 32 tokens and all 64, 2 n pairs, from 32 on. 64 uniform
    tokens put 256 (1 - (31 / 32)^64) / 4 x busiest experts and 128 x busiest_routed pairs on the busiest rank: the
    row at half its experts, plus its further pairs at the rows' secant per pair from 32 tokens to the count whose
    pairs per expert are the pass's. Under EP16 rank 0's pairs from 32 tokens on are counted too (moe_rows), so read."""
    rows = _ep_rows(4, 2)
    trtllm = measured.MeasuredKernels("b200_sxm", "trtllm", "1.3.0rc20")
    ep4 = lambda n, busiest, routed: trtllm.time_us(MoE(n, 7168, 2048, 8, 256, 2, "fp4", ep=4, busiest=busiest,  # noqa: E731
                                                        busiest_routed=routed))
    for busiest, routed in ((1.0, 1.0), (1.1, 1.5)):
        distinct, pairs = 256 * (1 - (31 / 32) ** 64) / 4 * busiest, 128 * routed
        top = 32 * pairs / distinct
        expected = _at(rows, distinct / 2) + (pairs - distinct) * (_at(rows, top) - rows[32]) / (2 * top - 64)
        assert ep4(64, busiest, routed) == pytest.approx(expected)
        assert ep4(64, busiest, routed) < _at(rows, 64 * routed)  # the row at the pass's pairs: more experts
    ep16 = lambda n: trtllm.time_us(MoE(n, 7168, 2048, 8, 256, 1, "fp4", ep=16, busiest=1.2,  # noqa: E731
                                        busiest_routed=1.2))
    assert ep16(16) is not None and ep16(64) is not None


def test_other_engines_expert_parallel_rows_are_not_read():
    """SGLang's H200 tables hold moe_ep_size rows too; their collector's rank and routing are not read here, so an EP
    shape is not covered (the roofline times it), while the same experts under TP are."""
    frame = measured.read_table("h200_sxm", "moe", "moe_perf", "sglang", None)
    assert ((frame.moe_ep_size == 8) & (frame.hidden_size == 7168) & (frame.num_experts == 256)
            & (frame.moe_dtype == "fp8_block")).any()
    sglang = measured.MeasuredKernels("h200_sxm")
    assert sglang.time_us(MoE(1, 7168, 2048, 8, 256, 1, "fp8", ep=8)) is None
    assert sglang.time_us(MoE(1, 7168, 2048, 8, 256, 8, "fp8")) is not None


def test_an_op_the_engine_did_not_measure_is_sglangs_and_says_so():
    """vLLM's tables hold MLA only as whole modules: MLA decode comes from SGLang 0.5.14's table, the same time SGLang's
    source gives, and the report names it per family."""
    shape = MLAttention(1, 1, 4096, 16, "bf16")
    vllm = measured.MeasuredKernels("h100_sxm", "vllm", "0.24.0")
    t, table = vllm.answer(shape)
    assert table == "sglang 0.5.14" and t == measured.MeasuredKernels("h100_sxm").time_us(shape) is not None
    assert vllm.filled_from(shape) == "sglang 0.5.14 (vllm 0.24.0's tables lack that shape on this GPU)"


def test_the_profile_names_the_tables_and_the_report_and_keys_follow():
    from simulator.model.cost import Kernel

    sglang = load_scenario(H100_8B)
    vllm = load_scenario(H100_8B, ["engine.name=vllm", "engine.version=0.8.5"])
    assert sglang.spec.runtime.kernel_database.model_dump() == {"engine": "sglang", "version": "0.5.14",
                                                                "stands_in": False}
    assert vllm.spec.runtime.kernel_database.model_dump() == {"engine": "vllm", "version": "0.24.0", "stands_in": False}
    timers = Machine(sglang).kernels, Machine(vllm).kernels
    assert timers[0].value_key != timers[1].value_key  # a kernel's stored time is keyed by whose table
    gemm = Kernel("g", 1.0, 1.0, "bf16", Gemm(4, 4096, 4096, "bf16"))
    assert timers[0].kernel_us(gemm)[0] != timers[1].kernel_us(gemm)[0]
    mla = Kernel("m", 1.0, 1.0, "bf16", MLAttention(1, 1, 4096, 16, "bf16"))
    report = timers[1].report([gemm, mla])
    assert report["source"].endswith("h100_sxm, vllm 0.24.0, else sglang 0.5.14)")
    assert report["families"]["gemm"] == "measured"
    assert report["families"]["mla"] == ("measured; 1 of 1 shapes from sglang 0.5.14 (vllm 0.24.0's tables lack "
                                         "that shape on this GPU)")


def test_the_grids_on_disk_are_kept_per_engine_and_version(tmp_path, monkeypatch):
    """A warm grid folder answers each engine's lookup with its own grid: SGLang's grid is not read back for vLLM's."""
    monkeypatch.setenv("SPECSIM_CACHE_DIR", str(tmp_path))
    shape = Gemm(4, 4096, 4096, "bf16")
    with held(Store()):
        cold = [measured.MeasuredKernels("h100_sxm", *e).time_us(shape) for e in (("sglang", "0.5.14"),
                                                                                  ("vllm", "0.24.0"))]
    # where slicegrid._grid reads a table (measured.grid_of_table is a re-export: patched there, nothing calls it)
    monkeypatch.setattr(slicegrid, "grid_of_table", lambda *a: pytest.fail("read the table again"))
    with held(Store()):
        warm = [measured.MeasuredKernels("h100_sxm", *e).time_us(shape) for e in (("sglang", "0.5.14"),
                                                                                  ("vllm", "0.24.0"))]
    assert warm == cold and cold[0] != cold[1]


def test_sglangs_default_tables_standing_in_for_another_sglang_release_are_named():
    """An SGLang kernel_database older than every SGLang table on the H100: each shape is SGLang 0.5.14's, and the
    report says so (the engine's name alone does not make a table its own)."""
    shape = Gemm(4, 4096, 4096, "bf16")
    old = measured.MeasuredKernels("h100_sxm", "sglang", "0.1.0")
    assert _folder("h100_sxm", "gemm", "gemm_perf", "sglang", "0.1.0") is None
    assert old.answer(shape) == measured.MeasuredKernels("h100_sxm").answer(shape)
    assert old.filled_from(shape) == "sglang 0.5.14 (sglang 0.1.0's tables lack that shape on this GPU)"
    assert measured.MeasuredKernels("h100_sxm").filled_from(shape) is None


def test_the_blog_cases_ep4_experts_take_trtllms_rows_not_the_roofline():
    """TensorRT-LLM blog 1's case (8 x B200, TP8 attention, EP4 x TP2 experts, NVFP4): a decode pass's routed experts
    are timed by the engine's own EP4 x TP2 rows, read at one token x the busiest rank's factor, not by the roofline."""
    from simulator.timing.stepspec import PassShape

    case = str(ROOT / "scenarios" / "validation" / "cases" / "b200_deepseek_r1_mtp.yaml")
    machine = Machine(load_scenario(case, ["model.weights.experts=fp4", "speculation.method=none"]))
    layout = machine.layout("target", PassShape(1, 1, 1024), machine.split)
    experts = [k for seg in layout.segments for k in seg.kernels if k.name == "experts_gate_up"][0]
    assert (experts.shape.ep, experts.shape.tp) == (4, 2) and experts.shape.busiest > 1.5
    t = machine.kernels.kernel_us(experts)[0]
    rows = _ep_rows(4, 2)
    w = math.log(experts.shape.busiest) / math.log(2)
    assert t == pytest.approx(experts.shape.share * (rows[1] + w * (rows[2] - rows[1])))
    assert t != pytest.approx(machine.kernels.roofline.time_us(experts.shape))


def test_the_fit_in_m_predicts_another_collection_closer_than_the_least_at_m_or_above():
    """Four collections of the H100's bf16 F.linear (cuBLAS under SGLang 0.5.14's and 0.5.6.post2's, vLLM 0.24.0's and
    TensorRT-LLM 1.3.0rc20's PyTorch): each one's grid, fitted non-decreasing in m, against each other's rows as
    measured at m <= 64, the decode and verify sizes. The least time at m or above (the envelope the fit replaced)
    reads low by the fastest of the noise; the fit misses by less and is not biased."""
    import numpy as np

    lanes = {"vllm": (("kernel_source", "torch.nn.functional.linear"),)}
    grids, rows = {}, {}
    for engine, version in (("sglang", "0.5.14"), ("sglang", "0.5.6.post2"), ("vllm", "0.24.0"),
                            ("trtllm", "1.3.0rc20")):
        where = lanes.get(engine, ()) + (("gemm_dtype", "bfloat16"),)
        grids[version] = measured.grid_of_table("h100_sxm", "gemm", "gemm_perf", where, ("m", "n", "k"),
                                                (True, False, False), 0, engine, version)
        frame = measured.read_table("h100_sxm", "gemm", "gemm_perf", engine, version)
        for column, value in where:
            frame = frame[frame[column] == value]
        rows[version] = frame.groupby(["m", "n", "k"]).latency.mean()
    fit, envelope = [], []
    for x in grids:
        by_line = rows[x].unstack(0).sort_index(axis=1)
        least = by_line.iloc[:, ::-1].cummin(axis=1).iloc[:, ::-1].stack()  # the least at m or above, per (n, k)
        for y in grids:
            if y == x:
                continue
            for (m, n, k), other in rows[y].items():
                if m <= 64 and (n, k, m) in least.index:
                    fit.append(np.log(grids[x]((m, n, k)) / other))
                    envelope.append(np.log(least[(n, k, m)] / other))
    fit, envelope = np.array(fit), np.array(envelope)
    assert len(fit) > 50_000  # 84,876 points: mean |log ratio| 6.77% against 7.13%, median +0.37% against -2.12%
    assert np.abs(fit).mean() < np.abs(envelope).mean()
    assert np.median(envelope) < -0.01 and abs(np.median(fit)) < abs(np.median(envelope)) / 2


def test_rows_are_kept_as_measured_where_another_collection_repeats_their_scatter():
    """The A100's three collections of bf16 F.linear (SGLang 0.5.10, vLLM 0.14.0, TensorRT-LLM 1.0.0): each one's
    deviations from its fit in m repeat in the others' (pooled slopes 0.63-0.89), so its grid holds the rows as measured
    (the pandas means), and those predict the others' rows at m <= 64 closer than the fit (5.16% mean |log ratio|
    against 6.33%). On the H100 SGLang 0.5.14's own repeat by 0.23: fitted (test above); the A100's int4 weight-only
    GEMV has no second collection: fitted."""
    import numpy as np
    from simulator.kernels.grid import aligned, fitted, means

    kept, fit, cols = [], [], {}
    for engine, version in (("sglang", "0.5.10"), ("vllm", "0.14.0"), ("trtllm", "1.0.0")):
        frame = measured.read_table("a100_sxm", "gemm", "gemm_perf", engine, version)
        frame = frame[frame.gemm_dtype == "bfloat16"]
        grid = measured.grid_of_table("a100_sxm", "gemm", "gemm_perf", (("gemm_dtype", "bfloat16"),),
                                      ("m", "n", "k"), (True, False, False), 0, engine, version)
        by_point = frame.groupby(["m", "n", "k"]).latency.mean()
        assert [grid((m, n, k)) for (m, n, k) in by_point.index[::97]] == pytest.approx(list(by_point[::97]))
        axes, rows = means(frame, ["m", "n", "k"])
        cols[engine] = axes, rows, fitted(rows, 0), grid.values
    for x, (axes, rows, fitted_rows, values) in cols.items():
        for y, (other_axes, other, _, _) in cols.items():
            if x != y:
                there = aligned(axes, other_axes, other)
                sel = (axes[0] <= 64)[:, None, None] & np.isfinite(there) & np.isfinite(rows)
                kept.append(np.abs(np.log(values / there))[sel])
                fit.append(np.abs(np.log(fitted_rows / there))[sel])
    kept, fit = np.concatenate(kept), np.concatenate(fit)
    assert len(kept) > 20_000 and kept.mean() < fit.mean() - 0.005  # 21,120 points: 5.16% against 6.33%
    where = (("gemm_dtype", "int4_wo"),)
    own = measured.table_path("a100_sxm", "gemm", "gemm_perf", "trtllm", "1.0.0")
    assert measured.witnesses("a100_sxm", "gemm", "gemm_perf", where, own) == ()
    int4 = measured.grid_of_table("a100_sxm", "gemm", "gemm_perf", where, ("m", "n", "k"), (True, False, False), 0,
                                  "trtllm", "1.0.0")
    frame = measured.read_table("a100_sxm", "gemm", "gemm_perf", "trtllm", "1.0.0")
    _, rows = means(frame[frame.gemm_dtype == "int4_wo"], ["m", "n", "k"])
    assert not np.array_equal(int4.values, rows, equal_nan=True)  # fitted: some rows pooled


def test_an_engine_whose_tables_stand_in_reads_the_a100_int4_gemv_without_its_held_out_one_row():
    """gpt-fast's profile says SGLang's tables stand in for its kernels (kernel_database.stands_in: its int4 is tinygemm,
    16-row tiles, read from TensorRT-LLM 1.0.0's A100 weight-only GEMV): that table's m = 1 rows, held out as measured
    (slower than m = 2 on 187 of 246 lines), are pooled into the non-decreasing fit; an engine without the flag
    (SGLang's, transformers') keeps them as measured. The flag is part of the grid's key: two grids, not one."""
    import numpy as np
    from simulator.kernels import slicegrid
    from simulator.kernels.grid import means
    cases = ROOT / "scenarios" / "validation" / "cases"
    assert load_scenario(str(cases / "a100_llama2_decode.yaml")).spec.runtime.kernel_database.stands_in
    assert not load_scenario(str(cases / "a100_vicuna13b_specbench.yaml")).spec.runtime.kernel_database.stands_in
    where = (("gemm_dtype", "int4_wo"),)
    args = ("a100_sxm", "gemm", "gemm_perf", where, ("m", "n", "k"), (True, False, False), 0, "trtllm", "1.0.0")
    held, smooth = slicegrid._grid(*args), slicegrid._grid(*args, smooth=True)
    frame = measured.read_table("a100_sxm", "gemm", "gemm_perf", "trtllm", "1.0.0")
    axes, rows = means(frame[frame.gemm_dtype == "int4_wo"], ["m", "n", "k"])
    assert axes[0][0] == 1 and np.array_equal(held.values[0], rows[0], equal_nan=True)  # m = 1 as measured
    steps = np.diff(smooth.values, axis=0)
    assert (steps[np.isfinite(steps)] >= 0).all()  # the fit, m = 1 included
    slower = rows[0] > rows[1]
    assert slower.sum() > 150 and (smooth.values[0][slower] < rows[0][slower]).all()
    n, k = axes[1][int(np.argwhere(slower)[0][0])], axes[2][int(np.argwhere(slower)[0][1])]
    shape = Gemm(1, int(n), int(k), "int4")
    stand_in = measured.MeasuredKernels("a100_sxm", stands_in=True).answer(shape)
    own = measured.MeasuredKernels("a100_sxm").answer(shape)
    assert stand_in[1] == own[1] == "trtllm 1.0.0 int4_wo" and stand_in[0] < own[0]
    assert measured.MeasuredKernels("a100_sxm", stands_in=True).label.endswith("standing in (GEMMs read at the fit in m)")
