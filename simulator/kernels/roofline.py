"""A roofline that knows shapes: for GPUs (or shapes) no measured database covers.

Per kernel family f, with compute = FLOPs / (peak x compute_efficiency_f), memory = bytes / (bandwidth x
memory_efficiency_f) and waves x wave_us_f, time = max(compute, memory, waves) + overhead_us_f for a GEMM and
compute + memory + waves + overhead_us_f for the multi-stage kernels (attention, MLA, fused MoE), where a wave is
one work tile (a CTA) per SM, so many small tiles (a large decode batch over short caches) cost their scheduling
even when neither FLOPs nor bytes bind. The compute side is quantised the way tensor-core kernels tile work:
- GEMM (m x n x k): output tiles of TILE_M x TILE_N; the GPU runs ceil(tiles / SMs) waves of full tiles, so a
  decode GEMM (m = 1) computes a whole 64-row tile and a GEMM one tile past a wave pays a whole extra wave; with
  fewer tiles than SMs the reduction is split over the idle SMs (split-K).
- Attention (batch, q new tokens over kv cached): reads each request's KV once; the query rows that share a KV
  head (q x heads / kv_heads, FlashAttention's packed-GQA layout) are padded to a 64-row tile; causal work
  q (kv + (q + 1) / 2) keys per query row. MLA the same over its latent cache (FlashMLA pads q x heads to 64).
- MoE (fused experts, tokens routed top-k over E experts): touches E (1 - (1 - k/E)^tokens) experts' weights; each
  touched expert computes its tokens padded to a 16-row block (Triton fused_moe's smallest BLOCK_M). int4 / fp4
  experts stream a fixed 2/32 bytes of group metadata per weight, whatever the card's quant_group_size,
  quant_scale_dtype and quant_zero_point (the GEMM reads them, Gemm.scale_bytes): the fit (fit.py) times the measured
  int4 / fp4 MoE rows with the same 2/32, and it is the shipped formats' own figure (Kimi's int4, a bf16 scale per 32:
  2/32; NVFP4, an fp8 scale per 16: 1/16). An MoE card with another format is costed with this one.
- Small kernels: the overhead_us floor.
The four parameters per family are fitted per GPU family to the measured database (fit.py); without a fit the
GPU spec's memory_efficiency, compute_efficiency and kernel_floor_us stand for every family.
"""
from __future__ import annotations

import math
from ..config.names import ROOFLINE_SETS

from .shapes import Attention, Gemm, KernelShape, MLABmm, MLAttention, MoE, moe_rank_load

BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5, "fp4": 0.5}
TILE_M, TILE_N = 64, 128  # Hopper/Blackwell tensor-core GEMM tile (wgmma M = 64; CUTLASS's common 64 x 128)
ATTENTION_TILE = 64  # query rows per attention tile (FlashAttention-3 / FlashMLA)
MOE_BLOCK_M = 16  # smallest token block of a fused-MoE expert GEMM (Triton fused_moe)
MLA_LATENT, MLA_ROPE, MLA_NOPE = 512, 64, 128  # DeepSeek-V3 / Kimi-K2 latent dims (the MLA tables' shapes)
FAMILIES = ("gemm", "attention", "mla", "mla_bmm", "moe")
# Group-scaled weight-only GEMMs (int4, dequantised into bf16) have no fitted parameter set (the spec's efficiencies
# time them): their group metadata (scales, zeros) is counted as bytes streamed with the weights. The natively
# computed formats' sets (fp8 block-scaled, nvfp4) were fitted to tables measured in those formats, so their
# efficiencies already absorb the block scales.
GROUP_SCALED = ("int4",)
# the fitted parameter sets: GEMMs, fused MoE and MLA's bmm per weight dtype (an fp8 block-scaled or int4 kernel
# reaches a different share of peak than a bf16 one); attention and MLA split into decode-like passes (a few query
# tokens per request, per KV-cache dtype) and prefill (another kernel)
PREFILL_QUERY = 16  # more query tokens per request than this: a prefill kernel
PARAMETER_SETS = ROOFLINE_SETS


def parameter_set(shape: KernelShape) -> str:
    """Which fitted parameters time this shape."""
    if shape.family in ("gemm", "moe", "mla_bmm"):
        dtype = {"fp16": "bf16", "int8": "fp8"}.get(shape.dtype, shape.dtype)
        return f"{shape.family}_{dtype}"
    if shape.q_len > PREFILL_QUERY:
        return f"{shape.family}_prefill"
    return f"{shape.family}_decode_{'fp8' if shape.kv_dtype == 'fp8' else 'bf16'}"


def _compute_dtype(dtype: str) -> str:
    """Weight-only formats compute in bf16."""
    return dtype if dtype in ("fp8", "fp4", "bf16", "fp16") else "bf16"


class ShapeRoofline:
    """Shape-aware roofline times (us) on one GPU spec, with per-family efficiencies."""

    def __init__(self, spec, params: dict | None = None):
        self.spec = spec
        self.num_sms = getattr(spec, "num_sms", None) or 0
        default = (spec.memory_efficiency, spec.compute_efficiency, spec.kernel_floor_us, 0.0)
        fitted = params if params is not None else _spec_params(spec)
        self.default = default
        self.params = {f: tuple(fitted[f]) for f in fitted}

    def peak_flops_per_us(self, dtype: str) -> float:
        peaks = self.spec.peak_TFLOPS
        dtype = _compute_dtype(dtype)
        for name in (dtype, "bf16", "fp16", "fp8"):
            if name in peaks:
                return peaks[name] * 1e6
        return min(peaks.values()) * 1e6

    def _parts(self, shape: KernelShape) -> tuple[float, float, float, float]:
        flops, nbytes, dtype, tiles = _work(shape, self.num_sms)
        memory_eff, compute_eff, overhead, wave_us = self.params.get(parameter_set(shape), self.default)
        compute = flops / (self.peak_flops_per_us(dtype) * compute_eff)
        memory = nbytes / (self.spec.memory_bandwidth_GBps * 1e3 * memory_eff)
        waves = math.ceil(tiles / self.num_sms) if self.num_sms else tiles / 100.0
        return compute, memory, waves * wave_us, overhead

    def time_us(self, shape: KernelShape) -> float:
        """A GEMM overlaps its loads with its math (a pipelined tensor-core kernel): the larger bound wins. The
        other families are chains of dependent stages (split-KV attention and its combine; the fused-MoE call's
        align, two grouped GEMMs, activation and sum), so their bounds add."""
        compute, memory, waves, overhead = self._parts(shape)
        overhead *= getattr(shape, "share", 1.0)  # a fused MoE call split between its kernels shares its overhead
        if shape.family == "gemm":
            return max(compute, memory, waves) + overhead
        return compute + memory + waves + overhead

    def is_compute_bound(self, shape: KernelShape) -> bool:
        compute, memory, waves, _ = self._parts(shape)
        return compute > memory


def _spec_params(spec) -> dict:
    fitted = getattr(spec, "roofline", None) or {}
    return {f: (p.memory_efficiency, p.compute_efficiency, p.overhead_us, p.wave_us) for f, p in fitted.items()}


def _waves(tiles: int, num_sms: int) -> float:
    """Tiles rounded up to whole waves over the SMs (no quantisation when the SM count is unknown)."""
    return math.ceil(tiles / num_sms) * num_sms if num_sms else tiles


def _split_k(tiles: int, k: float, num_sms: int) -> int:
    """Split-K: a GEMM with fewer output tiles than SMs splits its reduction over the idle SMs (down to 256-deep
    slices), as cuBLAS / CUTLASS do for decode-sized GEMMs."""
    if not num_sms or tiles >= num_sms:
        return 1
    return max(1, min(num_sms // tiles, int(k // 256)))


def _gemm_flops(m: float, n: float, k: float, num_sms: int) -> float:
    tiles = math.ceil(m / TILE_M) * math.ceil(n / TILE_N)
    split = _split_k(tiles, k, num_sms)
    return 2.0 * _waves(tiles * split, num_sms) * TILE_M * TILE_N * k / split


def _work(shape: KernelShape, num_sms: int) -> tuple[float, float, str, int]:
    """(FLOPs after tile and wave quantisation, bytes moved, compute dtype, work tiles) of one kernel."""
    if isinstance(shape, Gemm):
        w, act = BYTES.get(shape.dtype, 2.0), 2.0
        if shape.dtype in GROUP_SCALED:
            w += shape.scale_bytes
        nbytes = shape.n * shape.k * w + shape.m * (shape.n + shape.k) * act
        tiles = math.ceil(shape.m / TILE_M) * math.ceil(shape.n / TILE_N)
        tiles *= _split_k(tiles, shape.k, num_sms)
        return _gemm_flops(shape.m, shape.n, shape.k, num_sms), nbytes, shape.dtype, tiles
    if isinstance(shape, Attention):
        kv = BYTES.get(shape.kv_dtype, 2.0)
        keys = shape.kv_len + (shape.q_len + 1) / 2
        rows = shape.q_len * shape.heads / shape.kv_heads  # query rows per KV head
        padded = math.ceil(rows / ATTENTION_TILE) * ATTENTION_TILE
        flops = 4.0 * shape.batch * shape.kv_heads * padded * keys * shape.head_dim
        nbytes = shape.batch * (shape.kv_len + shape.q_len) * shape.kv_heads * shape.head_dim * 2 * kv
        nbytes += 2 * shape.batch * shape.q_len * shape.heads * shape.head_dim * 2.0  # queries in, output out
        return flops, nbytes, "bf16", shape.batch * shape.kv_heads * padded // ATTENTION_TILE
    if isinstance(shape, MLAttention):
        kv = BYTES.get(shape.kv_dtype, 2.0)
        keys = shape.kv_len + (shape.q_len + 1) / 2
        if shape.q_len > PREFILL_QUERY:  # prefill runs un-absorbed multi-head attention: q.k over 192, p.v over 128
            padded = math.ceil(shape.q_len / ATTENTION_TILE) * ATTENTION_TILE * shape.heads
            # (tiles: one per head and 64 query rows)
            flops = 2.0 * shape.batch * padded * keys * (MLA_NOPE + MLA_ROPE + MLA_NOPE)
        else:  # decode / verify: absorbed, every query row against the latent cache
            padded = math.ceil(shape.q_len * shape.heads / ATTENTION_TILE) * ATTENTION_TILE
            flops = 2.0 * shape.batch * padded * keys * (2 * MLA_LATENT + MLA_ROPE)
        nbytes = shape.batch * (shape.kv_len + shape.q_len) * (MLA_LATENT + MLA_ROPE) * kv
        nbytes += 2 * shape.batch * shape.q_len * shape.heads * (MLA_LATENT + MLA_ROPE) * 2.0
        return flops, nbytes, "bf16", shape.batch * padded // ATTENTION_TILE
    if isinstance(shape, MLABmm):
        n, k = (MLA_LATENT, MLA_NOPE) if shape.which == "pre" else (MLA_NOPE, MLA_LATENT)
        w = BYTES.get(shape.dtype, 2.0)
        flops = shape.heads * _gemm_flops(shape.tokens, n, k, 0)
        nbytes = shape.heads * (n * k * w + shape.tokens * (n + k) * 2.0)
        return flops, nbytes, shape.dtype, shape.heads * math.ceil(shape.tokens / TILE_M) * math.ceil(n / TILE_N)
    if isinstance(shape, MoE):
        w = BYTES.get(shape.dtype, 2.0) + (2.0 / 32 if shape.dtype in ("int4", "fp4") else 0.0)
        inter = shape.inter / shape.tp
        touched, routed = moe_rank_load(shape)  # the busiest expert rank's distinct experts and routed tokens
        per_expert = routed / max(touched, 1e-9)
        padded = math.ceil(per_expert / MOE_BLOCK_M) * MOE_BLOCK_M
        flops = 2.0 * touched * padded * shape.hidden * 3 * inter
        nbytes = touched * 3 * shape.hidden * inter * w + routed * (shape.hidden + 3 * inter) * 2.0
        tiles = math.ceil(touched * padded / MOE_BLOCK_M) * math.ceil(2 * inter / TILE_N)
        return flops * shape.share, nbytes * shape.share, _compute_dtype(shape.dtype), math.ceil(tiles * shape.share)
    raise TypeError(f"no roofline for {shape!r}")
