"""Silicon-measured kernel times from NVIDIA's aiconfigurator-core database (optional extra `specsim[measured]`).

The package (Apache-2.0, PyPI `aiconfigurator-core`) ships Parquet tables measured on each GPU per serving engine
and version: `systems/data/<system>/<family>/<engine>/<version>/<table>.parquet`, latency in ms per call of one
layer's kernel. We read them with pyarrow only when a scenario asks for measured kernels (tables.py) and
interpolate in shape (grid.py): log-space in tokens / batch / KV length, linear in heads and in GEMM
N and K (a GEMV's time is bilinear in N x K). Along GEMM rows and MoE tokens the measurements are fitted
non-decreasing (grid.py): at the few rows of a decode or a verify a GEMM streams its weights whatever m is. Fitted
so, each of four collections of the H100's bf16 F.linear (SGLang 0.5.14 and 0.5.6.post2, vLLM 0.24.0, TensorRT-LLM
1.3.0rc20) predicts the others' rows at m <= 64 to 6.8% (mean |log ratio|, median +0.4%), where the least time at m
or above missed by 7.1%, low by 2.1%, and the rows as measured by 7.3% (tests/test_kernel_tables.py). A slice
whose scatter about the fit repeats in the GPU's other collections of the op (the kernel's own choice per shape:
grid.py `repeats`; the A100's and L40S's bf16, most Blackwell F.linear) is kept as measured; one with no second
collection is fitted.
A shape outside a table is not covered: the roofline.

Whose tables: the engine profile's `kernel_database` (engine, version), at that version or the newest below it, one
kernel per op by the engine's lanes (tables.py); a shape that engine's tables do not cover (no table for the op on
this GPU, no slice for its dtype or head size, outside the grid) is looked up in SGLang 0.5.14's (the default), and
the result names the table that answered (`answer`, `filled_from`).

What we take from which table:
- GEMM (gemm_perf): m tokens x n x k per GPU, bf16 / fp8 (block-scaled where measured, as DeepSeek-style
  checkpoints) / nvfp4; beyond the largest measured m or n, as equal pieces split along it. Weight-only int8 / int4
  GEMMs (bf16 activations) where SGLang's table has them, else from another engine's table of the same GPU
  (FILL_ENGINES). Those tables are per-channel; group metadata (int4 group 32 with a bf16 scale: 2/32 bytes per
  weight more, with a bf16 zero point too: 4/32) is streamed at the rate the kernel was measured to stream the
  weights.
- GQA attention and MLA: decode, verify and prefill chunks (kernels/measured_attention.py).
- MoE: moe_perf, the fused expert block (router and all-to-all excluded), `balanced` routing (helper.balanced_logits:
  below E / k tokens a row's n x k pairs fall on n x k distinct experts, one token each, where n uniformly routed tokens
  touch E (1 - (1 - k / E)^n)). A pass is read at the row whose measuring rank holds the pass's distinct experts, its
  further pairs at the rows' cost per pair from E / k tokens on, where the distinct experts no longer grow
  (moe_rows.read_us: weights per distinct expert, work per pair, as the grouped GEMM's per-expert tiles cost them).
  Under expert parallelism (ep > 1) TensorRT-LLM's rows only (EP_TABLES): its collector (aiconfigurator
  collector/trtllm/collect_moe.py run_moe_torch) times one rank, rank 0 of a Mapping with that moe_ep_size /
  moe_tp_size, whose distinct experts and pairs moe_rows counts from the routing; read so at the busiest rank's
  distinct experts and pairs. Other engines' moe_ep_size rows take the roofline: their collectors' rank and routing
  are not read here. The engine's MoE backend flag (runtime.moe_backend) picks the lanes (tables.MOE_BACKEND_LANES);
  TensorRT-LLM's TRTLLM backend reads the min-latency rows, routed by DeepSeek's grouped top-k, the same way (at most
  E / k rows' distinct experts: from there on the rows' experts repeat).
"""
from __future__ import annotations

import math
from functools import partial

from . import moe_rows
from .grid import Grid
from .measured_attention import ATTENTION
from .shapes import Gemm, KernelShape, MoE, moe_rank_load
from .slicegrid import _grid, grid_of_table  # noqa: F401
from .tables import (ENGINE, ENGINE_VERSION, FILL_ENGINES, LANES, MIN_LATENCY_LANE, MOE_BACKEND_LANES,  # noqa: F401
                     PACKAGE, _version_key, collection_files, covered_systems, data_root, package_version, read_table,
                     table_label, table_path, witnesses)

GEMM_DTYPES = {"bf16": ("bfloat16",), "fp16": ("bfloat16",), "fp8": ("fp8_block", "fp8"), "fp4": ("nvfp4",),
               "int8": ("int8_wo",), "int4": ("int4_wo",)}  # int8/int4 GEMMs are weight-only (bf16 activations)
WEIGHT_ONLY = {"int8_wo": 1.0, "int4_wo": 0.5}  # per-channel weight-only tables: bytes per weight
MOE_DTYPES = {"bf16": ("bfloat16",), "fp16": ("bfloat16",), "fp8": ("fp8_block",), "int4": ("int4_wo",),
              "fp4": ("nvfp4",)}
# engines whose moe_perf rows under expert parallelism are read (their collector's rank and routing: module doc)
EP_TABLES = ("trtllm",)


class MeasuredKernels:
    """Kernel times (us) on one measured GPU from one engine's tables (SGLang 0.5.14's where they lack a shape);
    `time_us(shape)` is None where no table covers the shape."""

    def __init__(self, system: str, engine: str = ENGINE, version: str = ENGINE_VERSION, moe_backend: str | None = None,
                 stands_in: bool = False):
        """moe_backend: the engine's MoE backend flag (runtime.moe_backend), whose lanes time the engine's MoE
        (tables.MOE_BACKEND_LANES); None or one without lanes of its own: the engine's default lanes. stands_in: the
        tables time kernels other than the engine's (runtime.kernel_database.stands_in): GEMMs read the fit in m alone
        (grid.Grid.from_frame smooth), without the measured kernel's held-out m = 1 or its kept per-shape scatter."""
        self.system, self.engine, self.version, self.stands_in = system, engine, version, stands_in
        default = (ENGINE, ENGINE_VERSION)
        self.tables = ((engine, version),) + (() if (engine, version) == default else (default,))
        self.moe_lanes = MOE_BACKEND_LANES.get(engine, {}).get(moe_backend)
        own = self.moe_lanes is not None and self.moe_lanes != LANES.get(engine, {}).get("moe")
        self.label = f"aiconfigurator-core {package_version()}, {system}, {engine} {version}" + \
            (f" (MoE backend {moe_backend})" if own else "") + \
            ("" if (engine, version) == default else f", else {ENGINE} {ENGINE_VERSION}") + \
            (", standing in (GEMMs read at the fit in m)" if stands_in else "")

    def time_us(self, shape: KernelShape) -> float | None:
        return self.answer(shape)[0]

    def answer(self, shape: KernelShape) -> tuple[float | None, str | None]:
        """(us or None, the table that answered: 'engine version', a fill's dtype after it)."""
        return self._lookup(shape)[:2]

    def _lookup(self, shape: KernelShape) -> tuple[float | None, str | None, bool]:
        """answer's pair and whether the engine's own tables (the first asked) gave it."""
        attention = ATTENTION.get(type(shape))  # GQA, MLA, MLA's projections: kernels/measured_attention.py
        lookup = partial(attention, self.system) if attention else {Gemm: self._gemm, MoE: self._moe}.get(type(shape))
        if lookup is None:
            return None, None, False
        chain = self.tables + (tuple((e, None) for e in FILL_ENGINES) if isinstance(shape, Gemm) else ())
        for position, (engine, version) in enumerate(chain):
            found = lookup(shape, engine, version)
            if found is not None:
                return 1e3 * found[0], found[1], position == 0
        return None, None, False

    def filled_from(self, shape: KernelShape) -> str | None:
        """Which other table timed this shape and why ('sglang 0.5.14 (vllm 0.24.0's tables lack ...)'), or None
        where the engine's own tables did (those of its kernel_database version, else the newest below it)."""
        _, table, own_tables = self._lookup(shape)
        if table is None or own_tables:
            return None
        if len(table.split()) > 2:  # a weight-only dtype from another engine's (or a newer release's) GEMMs
            own = "SGLang's tables" if self.engine == ENGINE else f"{self.engine} {self.version}'s and SGLang's tables"
            return f"{table} ({own} lack that dtype on this GPU)"
        return f"{table} ({self.engine} {self.version}'s tables lack that shape on this GPU)"

    # -- per family: (ms, the table that answered) or None ---------------------------------------------------------
    def _gemm(self, s: Gemm, engine: str, version: str | None) -> tuple[float, str] | None:
        """Beyond the grid's largest m or n (a 128K-vocabulary lm_head, a long prefill) the GEMM is costed as the
        equal pieces, split along that dimension, that fit the grid."""
        for dtype in GEMM_DTYPES.get(s.dtype, ()):
            grid = _lane_grid(self.system, "gemm", "gemm_perf", (("gemm_dtype", dtype),), ("m", "n", "k"),
                              (True, False, False), 0, engine, version, self.stands_in)
            if grid is None:
                continue
            pieces_m = math.ceil(s.m / grid.axes[0][-1])
            pieces_n = math.ceil(s.n / grid.axes[1][-1])
            t = grid((s.m / pieces_m, s.n / pieces_n, s.k))
            if t is None:
                return None
            fill = f" {dtype}" if version is None and engine != ENGINE else ""
            return (t * pieces_m * pieces_n * _group_scales(s, dtype),
                    table_label(self.system, "gemm", "gemm_perf", engine, version) + fill)
        return None

    def _moe(self, s: MoE, engine: str, version: str | None) -> tuple[float, str] | None:
        if s.ep > 1 and engine not in EP_TABLES:  # the roofline times it (module doc)
            return None
        lanes = self.moe_lanes if engine == self.engine and self.moe_lanes is not None else \
            LANES.get(engine, {}).get("moe", (None,))
        for dtype in MOE_DTYPES.get(s.dtype, ()):
            where = (("moe_dtype", dtype), ("hidden_size", s.hidden), ("inter_size", s.inter), ("topk", s.topk),
                     ("num_experts", s.experts), ("moe_tp_size", s.tp), ("moe_ep_size", s.ep),
                     ("distribution", "balanced"))
            for lane in lanes:
                grid = _grid(self.system, "moe", "moe_perf", ((("kernel_source", lane),) if lane else ()) + where,
                             ("num_tokens",), (True,), 0, engine, version)
                if grid is None:
                    continue
                distinct, pairs = moe_rank_load(s)  # the busiest rank's, read from rank 0's rows (moe_rows)
                t = moe_rows.read_us(lambda n: grid((n,)), grid.axes[0], distinct, pairs, s.experts, s.topk, s.ep,
                                     lane == MIN_LATENCY_LANE)
                return None if t is None else (t * s.share,
                                               table_label(self.system, "moe", "moe_perf", engine, version))
        return None


def _lane_grid(system: str, family: str, table: str, where: tuple, axes: tuple, log_axes: tuple, padded_axis: int,
               engine: str, version: str | None, smooth: bool = False) -> Grid | None:
    """The grid of the engine's first lane (LANES) that holds the slice; every row where the op names no lanes."""
    for source in LANES.get(engine, {}).get(family, (None,)):
        lane = (("kernel_source", source),) if source else ()
        grid = _grid(system, family, table, lane + where, axes, log_axes, padded_axis, engine, version, smooth)
        if grid is not None:
            return grid
    return None


def _group_scales(s: Gemm, measured_dtype: str) -> float:
    """A weight-only kernel measured per-channel (int8_wo / int4_wo: one scale per output column), standing for weights
    with group scales: the kernel streams the scales' bytes too, at the rate it was measured to stream the weights."""
    if measured_dtype not in WEIGHT_ONLY or s.scale_bytes <= 0:
        return 1.0
    return 1.0 + s.scale_bytes / WEIGHT_ONLY[measured_dtype]
