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
- GQA attention: decode and verify from generation_attention_perf. A verify of q tokens per request reads the
  request's KV once with q times the query rows per KV head, as FlashAttention's packed-GQA layout and FlashMLA do,
  so it is looked up as decode with q x the query heads at its KV-head count (the table times 1 to 128 query heads
  over one KV head alike: one read of the cache); the causal or tree mask among the q new tokens touches q^2 of
  q x kv_len scores and is not resolved. A verify wider than that grid (a tree, a chain of 5+ at 32 heads over 8) is
  decode tiled by its rows (_tiled), each tile reading the cache once; no table holds a verify's own shape (every
  generation row is one query token, every context row a prefill with no cache). Prefill from
  context_attention_perf: a chunk of q tokens after L cached ones costs ctx(L + q) - ctx(L) (causal work
  t (L + t/2)), at least a fresh ctx(q) and the decode of its cache (_read_once).
- MLA: generation_mla_perf / context_mla_perf the same way (one latent head); the absorbed per-head projections
  from mla_bmm_perf.
- MoE: moe_perf, the fused expert block (router and all-to-all excluded), `balanced` routing (uniform, as the
  simulator's routing model), at the token count that touches as many distinct experts as the pass does. Under
  expert parallelism (ep > 1) TensorRT-LLM's rows only (EP_TABLES): its collector (aiconfigurator
  collector/trtllm/collect_moe.py run_moe_torch) times one rank, rank 0 of a Mapping with that moe_ep_size /
  moe_tp_size, over num_tokens tokens routed by helper.balanced_logits (token t's i-th expert t x stride / n +
  i x stride, stride E / k), so below E / k tokens rank 0 holds n x k / ep distinct experts, one token each: the mean
  rank's load at n uniformly routed tokens, read at tokens x busiest (the busiest rank's distinct experts). From E / k
  on rank 0 holds all its E / ep experts and, where ep divides k, n x k / ep routed tokens: read at tokens x
  busiest_routed (its tokens per expert), another EP split not at all (moe_rows.plain_topk_tokens). Other engines'
  moe_ep_size rows take the roofline: their collectors' rank and routing are not read here. The engine's MoE backend flag (runtime.moe_backend) picks the lanes
  (tables.MOE_BACKEND_LANES); TensorRT-LLM's TRTLLM backend reads the min-latency rows, routed by DeepSeek's grouped
  top-k, at the count whose rank 0 holds the busiest rank's distinct experts (moe_rows.min_latency_tokens), at
  most E / k rows (from there on the rows' experts repeat).
"""
from __future__ import annotations

import math

from . import moe_rows
from .grid import Grid
from .shapes import Attention, Gemm, KernelShape, MLABmm, MLAttention, MoE
from .slicegrid import _grid, grid_of_table  # noqa: F401
from .tables import (ENGINE, ENGINE_VERSION, FILL_ENGINES, LANES, MIN_LATENCY_LANE, MOE_BACKEND_LANES,  # noqa: F401
                     PACKAGE, _version_key, collection_files, covered_systems, data_root, package_version, read_table,
                     table_path, witnesses)

PACKED_QUERY_MAX = 16  # verify / draft passes up to this many tokens per request use the packed decode kernel
VERIFY_QUERY_MAX = 256  # the widest verify the configuration allows (draft_tokens <= 255, plus the root): _tiled
TILE_ROWS = 128  # FA3's SM90 tile at head_dim 97-256 (hopper/tile_size.h kBlockM), flashinfer's largest (k4x1x2)
GEMM_DTYPES = {"bf16": ("bfloat16",), "fp16": ("bfloat16",), "fp8": ("fp8_block", "fp8"), "fp4": ("nvfp4",),
               "int8": ("int8_wo",), "int4": ("int4_wo",)}  # int8/int4 GEMMs are weight-only (bf16 activations)
WEIGHT_ONLY = {"int8_wo": 1.0, "int4_wo": 0.5}  # per-channel weight-only tables: bytes per weight
MOE_DTYPES = {"bf16": ("bfloat16",), "fp16": ("bfloat16",), "fp8": ("fp8_block",), "int4": ("int4_wo",),
              "fp4": ("nvfp4",)}
KV_DTYPES = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8"}
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
        lookup = {Gemm: self._gemm, Attention: self._attention, MLAttention: self._mla, MLABmm: self._mla_bmm,
                  MoE: self._moe}.get(type(shape))
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
            return t * pieces_m * pieces_n * _group_scales(s, dtype), _label(self.system, "gemm", "gemm_perf", engine,
                                                                              version) + fill
        return None

    def _attention(self, s: Attention, engine: str, version: str | None) -> tuple[float, str] | None:
        """Decode / verify from the first lane (LANES) whose generation table holds the slice, a prefill chunk from the
        first whose context table times it: a lane without prefill rows takes the engine's next lane before another
        engine's tables (one backend can be measured under a label per phase, vLLM's FlashInfer on Blackwell:
        trtllmdecode / trtllmprefill; aiconfigurator's own lane walk is per table alike)."""
        kv = KV_DTYPES.get(s.kv_dtype)
        tables = engine, version
        found = next(_attention_lanes(self.system, "generation_attention_perf", ("batch_size", "num_heads",
                     "num_key_value_heads", "kv"), (True, False, False, True), s, kv, tables), None)
        if found is None:
            return None
        where, decode = found
        generation = lambda t: _answer(t, self.system, "attention", "generation_attention_perf", *tables)
        if s.q_len == 1 or (s.q_len <= PACKED_QUERY_MAX and s.heads * s.q_len <= decode.axes[1][-1]):
            t = _packed(self.system, where, decode, s.batch, s.heads * s.q_len, s.kv_heads, s.kv_len + s.q_len,
                        tables)
            if t is not None or s.q_len == 1:
                return generation(t)
        if s.q_len <= VERIFY_QUERY_MAX and s.q_len <= s.kv_len:
            t = _tiled(self.system, where, s, tables)
            if t is not None:
                return generation(t)
        read = _packed(self.system, where, decode, s.batch, s.heads, s.kv_heads, s.kv_len + s.q_len, tables)
        for _, prefill in _attention_lanes(self.system, "context_attention_perf", ("batch_size", "isl", "num_heads",
                                           "num_key_value_heads"), (True, True, False, False), s, kv, tables,
                                           (("step", 0),)):
            chunk = _chunk(lambda n: prefill((s.batch, n, s.heads, s.kv_heads)), s.kv_len, s.q_len)
            if chunk is not None:
                return _answer(_read_once(chunk, read), self.system, "attention", "context_attention_perf", *tables)
        return None

    def _mla(self, s: MLAttention, engine: str, version: str | None) -> tuple[float, str] | None:
        kv = KV_DTYPES.get(s.kv_dtype)
        where = (("kv_cache_dtype", kv), ("mla_dtype", "bfloat16"))
        decode = _grid(self.system, "mla", "generation_mla_perf", where, ("batch_size", "num_heads", "kv"),
                       (True, False, True), engine=engine, version=version)
        if decode is None:
            return None
        generation = lambda t: _answer(t, self.system, "mla", "generation_mla_perf", engine, version)
        if s.q_len == 1 or (s.q_len <= PACKED_QUERY_MAX and s.heads * s.q_len <= decode.axes[1][-1]):
            return generation(decode((s.batch, s.heads * s.q_len, s.kv_len + s.q_len)))
        if s.q_len <= VERIFY_QUERY_MAX and s.q_len <= s.kv_len:  # one latent head: rows are q x the heads (_tiled)
            tiles = math.ceil(s.heads * s.q_len / TILE_ROWS)
            t = decode((s.batch * tiles, s.heads * s.q_len / tiles, s.kv_len + s.q_len))
            if t is not None:
                return generation(t)
        prefill = _grid(self.system, "mla", "context_mla_perf", where, ("batch_size", "isl", "num_heads"),
                        (True, True, False), engine=engine, version=version)
        if prefill is None:
            return None
        chunk = _chunk(lambda n: prefill((s.batch, n, s.heads)), s.kv_len, s.q_len)
        t = _read_once(chunk, decode((s.batch, s.heads, s.kv_len + s.q_len)))
        return _answer(t, self.system, "mla", "context_mla_perf", engine, version)

    def _mla_bmm(self, s: MLABmm, engine: str, version: str | None) -> tuple[float, str] | None:
        dtype = {"fp8": "fp8"}.get(s.dtype, "bfloat16")
        grid = _grid(self.system, "mla_bmm", "mla_bmm_perf", (("op_name", f"mla_gen_{s.which}"), ("bmm_dtype", dtype)),
                     ("num_tokens", "num_heads"), (True, False), engine=engine, version=version)
        return None if grid is None else _answer(grid((s.tokens, s.heads)), self.system, "mla_bmm", "mla_bmm_perf",
                                                 engine, version)

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
                if lane == MIN_LATENCY_LANE:  # rank 0's experts under the collector's grouped routing (moe_rows)
                    n = moe_rows.min_latency_tokens(s.tokens * s.topk / s.ep * s.busiest, s.experts, s.topk, s.ep)
                else:  # a row's rank 0 holds the mean rank's load at num_tokens; the busiest rank's count (moe_rows)
                    n = moe_rows.plain_topk_tokens(s.tokens, s.busiest, s.busiest_routed, s.experts, s.topk, s.ep)
                t = None if n is None else grid((n,))
                return None if t is None else (t * s.share, _label(self.system, "moe", "moe_perf", engine, version))
        return None


def _label(system: str, family: str, table: str, engine: str, version: str | None) -> str:
    """'engine version' of the table file read (the version the lookup resolved to)."""
    return f"{engine} {table_path(system, family, table, engine, version).parent.name}"


def _answer(t: float | None, system: str, family: str, table: str, engine: str, version: str | None):
    return None if t is None else (t, _label(system, family, table, engine, version))


def _lane_grid(system: str, family: str, table: str, where: tuple, axes: tuple, log_axes: tuple, padded_axis: int,
               engine: str, version: str | None, smooth: bool = False) -> Grid | None:
    """The grid of the engine's first lane (LANES) that holds the slice; every row where the op names no lanes."""
    for source in LANES.get(engine, {}).get(family, (None,)):
        lane = (("kernel_source", source),) if source else ()
        grid = _grid(system, family, table, lane + where, axes, log_axes, padded_axis, engine, version, smooth)
        if grid is not None:
            return grid
    return None


def _attention_lanes(system: str, table: str, axes: tuple, log_axes: tuple, s: Attention, kv: str | None,
                     tables: tuple, extra: tuple = ()):
    """(where, grid) of each of the engine's attention lanes whose `table` holds this head size and KV dtype, in
    lane order."""
    for source in LANES.get(tables[0], {}).get("attention", (None,)):
        where = ((("kernel_source", source),) if source else ()) + (("head_dim", s.head_dim), ("kv_cache_dtype", kv))
        grid = _grid(system, "attention", table, where + extra, axes, log_axes, None, *tables)
        if grid is not None:
            yield where, grid


def _group_scales(s: Gemm, measured_dtype: str) -> float:
    """A weight-only kernel measured per-channel (int8_wo / int4_wo: one scale per output column), standing for weights
    with group scales: the kernel streams the scales' bytes too, at the rate it was measured to stream the weights."""
    if measured_dtype not in WEIGHT_ONLY or s.scale_bytes <= 0:
        return 1.0
    return 1.0 + s.scale_bytes / WEIGHT_ONLY[measured_dtype]


def _packed(system: str, where: tuple, across: Grid, batch: int, rows: int, kv_heads: int, kv: int,
            tables: tuple) -> float | None:
    """Decode with `rows` query heads over `kv_heads` (a verify: q x the heads) from the points measured at that
    KV-head count: across counts the heads axis holds others' values (24 with 8 KV heads), holes at 1 KV head.
    tables: (engine, version) whose."""
    own = _grid(system, "attention", "generation_attention_perf", where + (("num_key_value_heads", kv_heads),),
                ("batch_size", "num_heads", "kv"), (True, False, True), None, *tables)
    if own is not None:
        return own((batch, rows, kv))
    return across((batch, rows, kv_heads, kv))


def _tiled(system: str, where: tuple, s: Attention, tables: tuple) -> float | None:
    """A verify wider than the table at its KV-head count: the kernel packs each KV head's q x group query rows into
    tiles of TILE_ROWS, each reading that head's cache once: decode of batch x KV heads x tiles requests of 1 KV head,
    rows / tiles query heads each. Assumed: b requests of K KV heads cost what b x K of 1 do (a grid of blocks per
    request, KV head and tile; the tables' pairs agree within 5%, median: tests). The causal mask among the q new
    tokens (at most a quarter of the keys charged while q <= the cached length) is not resolved."""
    one = _grid(system, "attention", "generation_attention_perf", where + (("num_key_value_heads", 1),),
                ("batch_size", "num_heads", "kv"), (True, False, True), None, *tables)
    if one is None:
        return None
    rows = s.q_len * s.heads / s.kv_heads
    tiles = math.ceil(rows / TILE_ROWS)
    return one((s.batch * s.kv_heads * tiles, rows / tiles, s.kv_len + s.q_len))


def _read_once(chunk: float | None, decode: float | None) -> float | None:
    """A chunk's time from full prefills, at least the decode of one query a request over the same cache: the
    difference ctx(L + q) - ctx(L) holds the chunk's own work, not the read of the L cached tokens' KV, which a pass
    over the cache makes at least once."""
    if chunk is None or decode is None:
        return chunk
    return max(chunk, decode)


def _chunk(full, cached: int, new: int) -> float | None:
    """Attention of `new` tokens after `cached` ones, from full causal prefills: ctx(L + q) - ctx(L), >= ctx(q)."""
    fresh = full(new)
    if fresh is None or cached <= 0:
        return fresh
    whole, before = full(cached + new), full(cached)
    if whole is None or before is None:
        return None
    return max(whole - before, fresh)
