"""Attention's kernel times from the measured tables (kernels/measured.py asks; tables.py finds the files): GQA
attention by the engine's lanes (tables.LANES), MLA and its absorbed projections, each (ms, the table that answered)
or None where no table covers the shape.

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
"""
from __future__ import annotations

import math

from .grid import Grid
from .shapes import Attention, MLABmm, MLAttention
from .slicegrid import _grid
from .tables import LANES, table_label

PACKED_QUERY_MAX = 16  # verify / draft passes up to this many tokens per request use the packed decode kernel
VERIFY_QUERY_MAX = 256  # the widest verify the configuration allows (draft_tokens <= 255, plus the root): _tiled
TILE_ROWS = 128  # FA3's SM90 tile at head_dim 97-256 (hopper/tile_size.h kBlockM), flashinfer's largest (k4x1x2)
KV_DTYPES = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8"}


def gqa_attention(system: str, s: Attention, engine: str, version: str | None) -> tuple[float, str] | None:
    """Decode / verify from the first lane (LANES) whose generation table holds the slice, a prefill chunk from the
    first whose context table times it: a lane without prefill rows takes the engine's next lane before another
    engine's tables (one backend can be measured under a label per phase, vLLM's FlashInfer on Blackwell:
    trtllmdecode / trtllmprefill; aiconfigurator's own lane walk is per table alike)."""
    kv = KV_DTYPES.get(s.kv_dtype)
    tables = engine, version
    found = next(_attention_lanes(system, "generation_attention_perf", ("batch_size", "num_heads",
                 "num_key_value_heads", "kv"), (True, False, False, True), s, kv, tables), None)
    if found is None:
        return None
    where, decode = found
    generation = lambda t: _answer(t, system, "attention", "generation_attention_perf", *tables)
    if s.q_len == 1 or (s.q_len <= PACKED_QUERY_MAX and s.heads * s.q_len <= decode.axes[1][-1]):
        t = _packed(system, where, decode, s.batch, s.heads * s.q_len, s.kv_heads, s.kv_len + s.q_len,
                    tables)
        if t is not None or s.q_len == 1:
            return generation(t)
    if s.q_len <= VERIFY_QUERY_MAX and s.q_len <= s.kv_len:
        t = _tiled(system, where, s, tables)
        if t is not None:
            return generation(t)
    read = _packed(system, where, decode, s.batch, s.heads, s.kv_heads, s.kv_len + s.q_len, tables)
    for _, prefill in _attention_lanes(system, "context_attention_perf", ("batch_size", "isl", "num_heads",
                                       "num_key_value_heads"), (True, True, False, False), s, kv, tables,
                                       (("step", 0),)):
        chunk = _chunk(lambda n: prefill((s.batch, n, s.heads, s.kv_heads)), s.kv_len, s.q_len)
        if chunk is not None:
            return _answer(_read_once(chunk, read), system, "attention", "context_attention_perf", *tables)
    return None


def mla_attention(system: str, s: MLAttention, engine: str, version: str | None) -> tuple[float, str] | None:
    kv = KV_DTYPES.get(s.kv_dtype)
    where = (("kv_cache_dtype", kv), ("mla_dtype", "bfloat16"))
    decode = _grid(system, "mla", "generation_mla_perf", where, ("batch_size", "num_heads", "kv"),
                   (True, False, True), engine=engine, version=version)
    if decode is None:
        return None
    generation = lambda t: _answer(t, system, "mla", "generation_mla_perf", engine, version)
    if s.q_len == 1 or (s.q_len <= PACKED_QUERY_MAX and s.heads * s.q_len <= decode.axes[1][-1]):
        return generation(decode((s.batch, s.heads * s.q_len, s.kv_len + s.q_len)))
    if s.q_len <= VERIFY_QUERY_MAX and s.q_len <= s.kv_len:  # one latent head: rows are q x the heads (_tiled)
        tiles = math.ceil(s.heads * s.q_len / TILE_ROWS)
        t = decode((s.batch * tiles, s.heads * s.q_len / tiles, s.kv_len + s.q_len))
        if t is not None:
            return generation(t)
    prefill = _grid(system, "mla", "context_mla_perf", where, ("batch_size", "isl", "num_heads"),
                    (True, True, False), engine=engine, version=version)
    if prefill is None:
        return None
    chunk = _chunk(lambda n: prefill((s.batch, n, s.heads)), s.kv_len, s.q_len)
    t = _read_once(chunk, decode((s.batch, s.heads, s.kv_len + s.q_len)))
    return _answer(t, system, "mla", "context_mla_perf", engine, version)


def mla_bmm(system: str, s: MLABmm, engine: str, version: str | None) -> tuple[float, str] | None:
    dtype = {"fp8": "fp8"}.get(s.dtype, "bfloat16")
    grid = _grid(system, "mla_bmm", "mla_bmm_perf", (("op_name", f"mla_gen_{s.which}"), ("bmm_dtype", dtype)),
                 ("num_tokens", "num_heads"), (True, False), engine=engine, version=version)
    return None if grid is None else _answer(grid((s.tokens, s.heads)), system, "mla_bmm", "mla_bmm_perf",
                                             engine, version)


def _answer(t: float | None, system: str, family: str, table: str, engine: str, version: str | None):
    return None if t is None else (t, table_label(system, family, table, engine, version))


def _attention_lanes(system: str, table: str, axes: tuple, log_axes: tuple, s: Attention, kv: str | None,
                     tables: tuple, extra: tuple = ()):
    """(where, grid) of each of the engine's attention lanes whose `table` holds this head size and KV dtype, in
    lane order."""
    for source in LANES.get(tables[0], {}).get("attention", (None,)):
        where = ((("kernel_source", source),) if source else ()) + (("head_dim", s.head_dim), ("kv_cache_dtype", kv))
        grid = _grid(system, "attention", table, where + extra, axes, log_axes, None, *tables)
        if grid is not None:
            yield where, grid


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


# each shape's lookup: (system, shape, engine, version) -> (ms, the table that answered) or None
ATTENTION = {Attention: gqa_attention, MLAttention: mla_attention, MLABmm: mla_bmm}
