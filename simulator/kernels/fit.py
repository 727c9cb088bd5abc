"""Fit the shape-aware roofline's efficiencies to the measured database, and measure its error.

For each kernel family the database's rows (the shapes and dtypes the simulator looks up: bf16 / fp8-block / nvfp4
GEMMs, SGLang's decode and prefill attention with full windows, MLA, MLA's absorbed bmm, balanced fused MoE
without expert parallelism) are sampled deterministically, at most SAMPLES per family and GPU. The three
parameters of a family (memory efficiency, compute efficiency, overhead) are fitted per GPU family (GPUs of one
architecture share them) by least squares on log(roofline / measured); the error reported is |roofline /
measured - 1| per GPU and family, its median and 90th percentile.
"""
from __future__ import annotations

import numpy as np

from . import measured
from .roofline import FAMILIES, PARAMETER_SETS, ShapeRoofline, parameter_set
from .shapes import Attention, Gemm, MLABmm, MLAttention, MoE

SAMPLES = 1500
GPU_FAMILIES = {"h100_sxm": "hopper", "h200_sxm": "hopper", "b200_sxm": "blackwell",
                "rtx_pro_6000_server": "blackwell_rtx"}
GEMM_DTYPES = {"bfloat16": "bf16", "fp8_block": "fp8", "nvfp4": "fp4"}
MOE_DTYPES = {"bfloat16": "bf16", "fp8_block": "fp8", "int4_wo": "int4", "nvfp4": "fp4"}
KV = {"bfloat16": "bf16", "fp8": "fp8"}
MOE_HIDDEN = (7168,)  # DeepSeek-V3 / Kimi-K2 experts, the MoE models the simulator ships
MOE_EXPERTS = ((2048, 8, 256), (2048, 8, 384))  # their experts: (intermediate size, top-k, routed experts)


def _rows(system: str, family: str, table: str):
    frame = measured.read_table(system, family, table)
    return frame if frame is not None else None


def _take(frame, rng: np.random.Generator, limit: int):
    if frame is None or frame.empty:
        return []
    index = rng.choice(len(frame), size=min(limit, len(frame)), replace=False)
    return list(frame.iloc[np.sort(index)].itertuples(index=False))


def samples(system: str, family: str, limit: int = SAMPLES) -> list[tuple]:
    """(shape, measured us) pairs of one kernel family on one measured GPU (deterministic subsample)."""
    rng = np.random.default_rng(0)
    out = []
    if family == "gemm":
        frame = _rows(system, "gemm", "gemm_perf")
        if frame is not None:  # layer-sized GEMMs: both weight dimensions at least 256
            frame = frame[frame.gemm_dtype.isin(list(GEMM_DTYPES)) & (frame.n >= 256) & (frame.k >= 256)]
        out = [(Gemm(int(r.m), int(r.n), int(r.k), GEMM_DTYPES[r.gemm_dtype]), r.latency)
               for r in _take(frame, rng, limit)]
    elif family == "attention":
        for table, q in (("generation_attention_perf", None), ("context_attention_perf", "isl")):
            frame = _rows(system, "attention", table)
            if frame is None:
                continue
            frame = frame[frame.kernel_source.isin(["fa3", "flashinfer"]) & (frame.attn_dtype == "bfloat16") &
                          (frame.head_dim == 128)]
            for r in _take(frame, rng, limit // 2):
                q_len = int(r.isl) if q else 1
                out.append((Attention(int(r.batch_size), q_len, int(r.step), int(r.num_heads),
                                      int(r.num_key_value_heads), int(r.head_dim), KV[r.kv_cache_dtype]), r.latency))
    elif family == "mla":
        for table, q in (("generation_mla_perf", None), ("context_mla_perf", "isl")):
            frame = _rows(system, "mla", table)
            if frame is None:
                continue
            frame = frame[frame.mla_dtype == "bfloat16"]
            for r in _take(frame, rng, limit // 2):
                q_len = int(r.isl) if q else 1
                out.append((MLAttention(int(r.batch_size), q_len, int(r.step), int(r.num_heads), KV[r.kv_cache_dtype]),
                            r.latency))
    elif family == "mla_bmm":
        frame = _rows(system, "mla_bmm", "mla_bmm_perf")
        out = [(MLABmm("pre" if r.op_name.endswith("pre") else "post", int(r.num_tokens), int(r.num_heads),
                       "fp8" if r.bmm_dtype == "fp8" else "bf16"), r.latency) for r in _take(frame, rng, limit)]
    elif family == "moe":
        frame = _rows(system, "moe", "moe_perf")
        if frame is not None:
            frame = frame[(frame.distribution == "balanced") & (frame.moe_ep_size == 1) &
                          frame.moe_dtype.isin(list(MOE_DTYPES)) & frame.hidden_size.isin(MOE_HIDDEN)]
        out = [(MoE(float(r.num_tokens), int(r.hidden_size), int(r.inter_size), int(r.topk), int(r.num_experts),
                    int(r.moe_tp_size), MOE_DTYPES[r.moe_dtype], balanced=True), r.latency)
               for r in _take(frame, rng, limit)]
    return [(shape, 1e3 * ms) for shape, ms in out if ms > 0]


def nearest_moe_samples(system: str, limit: int = SAMPLES) -> list[tuple]:
    """(shape, measured us) pairs of the fused-MoE dtypes the database holds no rows of at the shipped hidden sizes
    (B200's bf16 experts, which a bf16 MTP module runs): their rows of a shipped model's expert shape (intermediate
    size, top-k, experts) at the hidden size nearest the shipped one (B200: 6144 x 2048, top-8 of 256), balanced and
    without expert parallelism like samples()'."""
    table = _rows(system, "moe", "moe_perf")
    if table is None:
        return []
    table = table[(table.distribution == "balanced") & (table.moe_ep_size == 1) & table.moe_dtype.isin(list(MOE_DTYPES))]
    covered = set(table[table.hidden_size.isin(MOE_HIDDEN)].moe_dtype)
    rng = np.random.default_rng(0)
    out = []
    for dtype in sorted(set(table.moe_dtype) - covered):
        rows = table[(table.moe_dtype == dtype) &
                     table[["inter_size", "topk", "num_experts"]].apply(tuple, axis=1).isin(MOE_EXPERTS)]
        if rows.empty:
            continue
        nearest = min(set(rows.hidden_size), key=lambda h: (min(abs(h - t) for t in MOE_HIDDEN), h))
        out += [(MoE(float(r.num_tokens), int(r.hidden_size), int(r.inter_size), int(r.topk), int(r.num_experts),
                     int(r.moe_tp_size), MOE_DTYPES[r.moe_dtype], balanced=True), 1e3 * r.latency)
                for r in _take(rows[rows.hidden_size == nearest], rng, limit) if r.latency > 0]
    return out


def errors(spec, params: dict | None, pairs: list[tuple]) -> np.ndarray:
    """|roofline / measured - 1| for each (shape, measured us) pair."""
    roofline = ShapeRoofline(spec, params)
    return np.array([abs(roofline.time_us(shape) / t - 1.0) for shape, t in pairs])


def fit_parameters(specs_and_pairs: list[tuple], key: str) -> tuple[float, float, float, float]:
    """(memory_efficiency, compute_efficiency, overhead_us, wave_us) of one parameter set, minimising sum log^2(roofline /
    measured) over the samples of every GPU of one GPU family."""
    from scipy.optimize import least_squares

    def residuals(x):
        params = {key: (x[0], x[1], x[2], x[3])}
        out = []
        for spec, pairs in specs_and_pairs:
            roofline = ShapeRoofline(spec, params)
            out.append(np.log([roofline.time_us(shape) / t for shape, t in pairs]))
        return np.concatenate(out)

    fit = least_squares(residuals, x0=[0.7, 0.6, 2.0, 1.0], x_scale=[0.1, 0.1, 1.0, 1.0],
                        bounds=([0.05, 0.02, 0.0, 0.0], [1.0, 1.0, 50.0, 50.0]))
    return tuple(float(round(v, 3)) for v in fit.x)


def fit_gpu_family(specs: dict, limit: int = SAMPLES) -> tuple[dict, dict]:
    """specs: measured system -> GPU spec of one GPU family. Returns (fitted parameters per parameter set, the
    samples per system and kernel family)."""
    pairs = {system: {f: samples(system, f, limit) for f in FAMILIES} for system in specs}
    for system in specs:  # a dtype with no MoE rows at the shipped hidden sizes: its nearest ones (fitted apart)
        pairs[system]["moe"] = pairs[system]["moe"] + nearest_moe_samples(system, limit)
    params = {}
    for key in PARAMETER_SETS:
        data = []
        for system, spec in specs.items():
            chosen = [(shape, t) for f in FAMILIES for shape, t in pairs[system][f] if parameter_set(shape) == key]
            if chosen:
                data.append((spec, chosen))
        if data:
            params[key] = fit_parameters(data, key)
    return params, pairs
