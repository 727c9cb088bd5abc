"""Silicon-measured kernel times from NVIDIA's aiconfigurator-core database (optional extra `specsim[measured]`).

The package (Apache-2.0, PyPI `aiconfigurator-core`) ships Parquet tables measured on each GPU per serving engine
and version: `systems/data/<system>/<family>/<engine>/<version>/<table>.parquet`, latency in ms per call of one
layer's kernel. We read them with pyarrow only when a scenario asks for measured kernels, memoise every table per
process, and interpolate in shape (grid.py): log-space in tokens / batch / KV length, linear in heads and in GEMM
N and K (a GEMV's time is bilinear in N x K). Along GEMM rows and MoE tokens a kernel can always run a larger
measured size padded, so the time there is the least measured at that size or above (a monotone envelope through
the data's noise: m = 1 GEMVs are measured up to 15% slower than m = 2-16). A shape outside a table is not
covered: the caller uses the roofline.

What we take from which table (SGLang's kernels, the engine the simulator models):
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
  expert parallelism the roofline times the experts: the moe_ep_size rows (DeepSeek-V3, H200, fp8_block, EP8) fit
  no one meaning of num_tokens: 92 us at 1 token is more than one rank's share of the experts 8 tokens touch, and
  114 us at 4 tokens less than reading the ~20 experts per rank that 32 uniformly routed tokens touch allows at the
  HBM's peak bandwidth.
"""
from __future__ import annotations

import importlib.util
import math
import pathlib

from ..cache import stored
from . import gridcache
from .grid import Grid
from .shapes import Attention, Gemm, KernelShape, MLABmm, MLAttention, MoE

ENGINE = "sglang"
ENGINE_VERSION = "0.5.14"  # aiconfigurator-core 0.12's default SGLang version (systems/query_versions.yaml)
# A GEMM dtype SGLang's tables do not hold on a GPU (weight-only int8 / int4 on the A100) is taken from another
# engine's table of the same GPU, as aiconfigurator's own database fills missing data from sibling backends
# (sdk/perf_database.py, "cross-backend fallback siblings"): TensorRT-LLM's WeightOnlyQuantMatmul plugin.
FILL_ENGINES = ("trtllm", "vllm")
PACKAGE = "aiconfigurator_core"
PACKED_QUERY_MAX = 16  # verify / draft passes up to this many tokens per request use the packed decode kernel
VERIFY_QUERY_MAX = 256  # the widest verify the configuration allows (draft_tokens <= 255, plus the root): _tiled
TILE_ROWS = 128  # FA3's SM90 tile at head_dim 97-256 (hopper/tile_size.h kBlockM), flashinfer's largest (k4x1x2)

GEMM_DTYPES = {"bf16": ("bfloat16",), "fp16": ("bfloat16",), "fp8": ("fp8_block", "fp8"), "fp4": ("nvfp4",),
               "int8": ("int8_wo",), "int4": ("int4_wo",)}  # int8/int4 GEMMs are weight-only (bf16 activations)
WEIGHT_ONLY = {"int8_wo": 1.0, "int4_wo": 0.5}  # per-channel weight-only tables: bytes per weight
MOE_DTYPES = {"bf16": ("bfloat16",), "fp16": ("bfloat16",), "fp8": ("fp8_block",), "int4": ("int4_wo",),
              "fp4": ("nvfp4",)}
KV_DTYPES = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8"}
ATTENTION_KERNELS = ("fa3", "flashinfer", "triton")  # SGLang's preference where several were measured


def data_root() -> pathlib.Path | None:
    """The package's data folder, or None when aiconfigurator-core is not installed (found without importing it)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    root = pathlib.Path(list(spec.submodule_search_locations)[0]) / "systems" / "data"
    return root if root.is_dir() else None


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("aiconfigurator-core")
    except PackageNotFoundError:
        return "?"


def _version_key(text: str) -> tuple:
    parts = []
    for piece in text.replace("post", ".").replace("rc", ".").split("."):
        parts.append(int(piece) if piece.isdigit() else -1)
    return tuple(parts)


@stored
def table_path(system: str, family: str, table: str, engine: str = ENGINE) -> pathlib.Path | None:
    """The newest version <= ENGINE_VERSION of SGLang that holds this table (the database fills a version's missing
    tables from older ones the same way); for another engine (a fill), its newest version."""
    root = data_root()
    if root is None:
        return None
    folder = root / system / family / engine
    if not folder.is_dir():
        return None
    versions = sorted((p for p in folder.iterdir() if (p / f"{table}.parquet").is_file()),
                      key=lambda p: _version_key(p.name), reverse=True)
    for path in versions:
        if engine != ENGINE or _version_key(path.name) <= _version_key(ENGINE_VERSION):
            return path / f"{table}.parquet"
    return None


@stored
def read_table(system: str, family: str, table: str, engine: str = ENGINE):
    """The table as a pandas frame (memoised per process), or None where this GPU has none."""
    path = table_path(system, family, table, engine)
    if path is None:
        return None
    import pyarrow.parquet as pq
    unused = {"framework", "version", "device"} | ({"op_name"} if table != "mla_bmm_perf" else set())
    columns = [c for c in pq.read_schema(path).names if c not in unused]  # string columns cost most to convert
    frame = pq.read_table(path, columns=columns).to_pandas()
    if "window_size" in frame:
        frame = frame[frame["window_size"] == 0]
    if "step" in frame:
        frame = frame.assign(kv=frame["step"] + 1)
    return frame


@stored
def covered_systems() -> tuple[str, ...]:
    root = data_root()
    if root is None:
        return ()
    return tuple(sorted(p.name for p in root.iterdir() if table_path(p.name, "gemm", "gemm_perf") is not None))


class MeasuredKernels:
    """Kernel times (us) on one measured GPU; `time_us(shape)` is None where the data does not cover the shape."""

    def __init__(self, system: str):
        self.system = system
        self.label = f"aiconfigurator-core {package_version()}, {system}, {ENGINE} {ENGINE_VERSION}"

    def filled_from(self, shape: KernelShape) -> str | None:
        """The other engine's table that timed this shape (SGLang's lacks its dtype on this GPU), or None."""
        return self._gemm_answer(shape)[1] if isinstance(shape, Gemm) else None

    def time_us(self, shape: KernelShape) -> float | None:
        if isinstance(shape, Gemm):
            ms = self._gemm_answer(shape)[0]
        elif isinstance(shape, Attention):
            ms = self._attention(shape)
        elif isinstance(shape, MLAttention):
            ms = self._mla(shape)
        elif isinstance(shape, MLABmm):
            ms = self._mla_bmm(shape)
        elif isinstance(shape, MoE):
            ms = self._moe(shape)
        else:
            ms = None
        return None if ms is None else 1e3 * ms

    # -- per family --------------------------------------------------------------------------------------------
    def _gemm_answer(self, s: Gemm) -> tuple[float | None, str | None]:
        """(ms or None, the other engine's table that answered or None). Beyond the grid's largest m or n (a
        128K-vocabulary lm_head, a long prefill) the GEMM is costed as the equal pieces, split along that dimension,
        that fit the grid."""
        for engine in (ENGINE,) + FILL_ENGINES:
            for dtype in GEMM_DTYPES.get(s.dtype, ()):
                grid = _grid(self.system, "gemm", "gemm_perf", (("gemm_dtype", dtype),), ("m", "n", "k"),
                             (True, False, False), padded_axis=0, engine=engine)
                if grid is None:
                    continue
                pieces_m = math.ceil(s.m / grid.axes[0][-1])
                pieces_n = math.ceil(s.n / grid.axes[1][-1])
                t = grid((s.m / pieces_m, s.n / pieces_n, s.k))
                filled = None
                if t is not None and engine != ENGINE:
                    version = table_path(self.system, "gemm", "gemm_perf", engine).parent.name
                    filled = f"{engine} {version} {dtype}"
                return (None if t is None else t * pieces_m * pieces_n * _group_scales(s, dtype)), filled
        return None, None

    def _attention(self, s: Attention) -> float | None:
        kv = KV_DTYPES.get(s.kv_dtype)
        for source in ATTENTION_KERNELS:
            where = (("kernel_source", source), ("head_dim", s.head_dim), ("kv_cache_dtype", kv))
            decode = _grid(self.system, "attention", "generation_attention_perf", where,
                           ("batch_size", "num_heads", "num_key_value_heads", "kv"), (True, False, False, True))
            if decode is None:
                continue
            if s.q_len == 1 or (s.q_len <= PACKED_QUERY_MAX and s.heads * s.q_len <= decode.axes[1][-1]):
                t = _packed(self.system, where, decode, s.batch, s.heads * s.q_len, s.kv_heads, s.kv_len + s.q_len)
                if t is not None or s.q_len == 1:
                    return t
            if s.q_len <= VERIFY_QUERY_MAX and s.q_len <= s.kv_len:
                t = _tiled(self.system, where, s)
                if t is not None:
                    return t
            prefill = _grid(self.system, "attention", "context_attention_perf", where + (("step", 0),),
                            ("batch_size", "isl", "num_heads", "num_key_value_heads"), (True, True, False, False))
            if prefill is None:
                return None
            chunk = _chunk(lambda n: prefill((s.batch, n, s.heads, s.kv_heads)), s.kv_len, s.q_len)
            return _read_once(chunk, _packed(self.system, where, decode, s.batch, s.heads, s.kv_heads,
                                             s.kv_len + s.q_len))
        return None

    def _mla(self, s: MLAttention) -> float | None:
        kv = KV_DTYPES.get(s.kv_dtype)
        decode = _grid(self.system, "mla", "generation_mla_perf", (("kv_cache_dtype", kv), ("mla_dtype", "bfloat16")),
                       ("batch_size", "num_heads", "kv"), (True, False, True))
        if decode is None:
            return None
        if s.q_len == 1 or (s.q_len <= PACKED_QUERY_MAX and s.heads * s.q_len <= decode.axes[1][-1]):
            return decode((s.batch, s.heads * s.q_len, s.kv_len + s.q_len))
        if s.q_len <= VERIFY_QUERY_MAX and s.q_len <= s.kv_len:  # one latent head: rows are q x the heads (_tiled)
            tiles = math.ceil(s.heads * s.q_len / TILE_ROWS)
            t = decode((s.batch * tiles, s.heads * s.q_len / tiles, s.kv_len + s.q_len))
            if t is not None:
                return t
        prefill = _grid(self.system, "mla", "context_mla_perf", (("kv_cache_dtype", kv), ("mla_dtype", "bfloat16")),
                        ("batch_size", "isl", "num_heads"), (True, True, False))
        if prefill is None:
            return None
        chunk = _chunk(lambda n: prefill((s.batch, n, s.heads)), s.kv_len, s.q_len)
        return _read_once(chunk, decode((s.batch, s.heads, s.kv_len + s.q_len)))

    def _mla_bmm(self, s: MLABmm) -> float | None:
        dtype = {"fp8": "fp8"}.get(s.dtype, "bfloat16")
        grid = _grid(self.system, "mla_bmm", "mla_bmm_perf", (("op_name", f"mla_gen_{s.which}"), ("bmm_dtype", dtype)),
                     ("num_tokens", "num_heads"), (True, False))
        return None if grid is None else grid((s.tokens, s.heads))

    def _moe(self, s: MoE) -> float | None:
        if s.ep > 1:  # the roofline times it: the tables' moe_ep_size rows fit no one token semantics (module doc)
            return None
        for dtype in MOE_DTYPES.get(s.dtype, ()):
            where = (("moe_dtype", dtype), ("hidden_size", s.hidden), ("inter_size", s.inter), ("topk", s.topk),
                     ("num_experts", s.experts), ("moe_tp_size", s.tp), ("moe_ep_size", 1),
                     ("distribution", "balanced"))
            grid = _grid(self.system, "moe", "moe_perf", where, ("num_tokens",), (True,), padded_axis=0)
            if grid is not None:
                t = grid((max(1.0, s.tokens),))
                return None if t is None else t * s.share
        return None


def _group_scales(s: Gemm, measured_dtype: str) -> float:
    """A weight-only kernel measured per-channel (int8_wo / int4_wo: one scale per output column), standing for weights
    with group scales: the kernel streams the scales' bytes too, at the rate it was measured to stream the weights."""
    if measured_dtype not in WEIGHT_ONLY or s.scale_bytes <= 0:
        return 1.0
    return 1.0 + s.scale_bytes / WEIGHT_ONLY[measured_dtype]


def _packed(system: str, where: tuple, across: Grid, batch: int, rows: int, kv_heads: int, kv: int) -> float | None:
    """Decode with `rows` query heads over `kv_heads` (a verify: q x the heads) from the points measured at that
    KV-head count: across counts the heads axis holds others' values (24 with 8 KV heads), holes at 1 KV head."""
    own = _grid(system, "attention", "generation_attention_perf", where + (("num_key_value_heads", kv_heads),),
                ("batch_size", "num_heads", "kv"), (True, False, True))
    if own is not None:
        return own((batch, rows, kv))
    return across((batch, rows, kv_heads, kv))


def _tiled(system: str, where: tuple, s: Attention) -> float | None:
    """A verify wider than the table at its KV-head count: the kernel packs each KV head's q x group query rows into
    tiles of TILE_ROWS, each reading that head's cache once: decode of batch x KV heads x tiles requests of 1 KV head,
    rows / tiles query heads each. Assumed: b requests of K KV heads cost what b x K of 1 do (a grid of blocks per
    request, KV head and tile; the tables' pairs agree within 5%, median: tests). The causal mask among the q new tokens (at
    most a quarter of the keys charged while q <= the cached length) is not resolved."""
    one = _grid(system, "attention", "generation_attention_perf", where + (("num_key_value_heads", 1),),
                ("batch_size", "num_heads", "kv"), (True, False, True))
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


@stored
def _grid(system: str, family: str, table: str, where: tuple, axes: tuple, log_axes: tuple,
          padded_axis: int | None = None, engine: str = ENGINE) -> Grid | None:
    """The measured points of `table` matching `where` (column, value pairs) as a grid over `axes` (in the run's store, and
    kept on disk per installed version: kernels/gridcache.py)."""
    path = table_path(system, family, table, engine)
    if path is None:
        return None
    entry = gridcache.entry(package_version(), path, (system, family, table, where, axes, log_axes, padded_axis,
                                                      engine))
    grid = gridcache.load(entry)
    if grid is gridcache.MISSING:
        grid = grid_of_table(system, family, table, where, axes, log_axes, padded_axis, engine)
        gridcache.save(entry, grid)
    return grid


def grid_of_table(system: str, family: str, table: str, where: tuple, axes: tuple, log_axes: tuple,
                  padded_axis: int | None = None, engine: str = ENGINE) -> Grid | None:
    """_grid read from the table itself."""
    frame = read_table(system, family, table, engine)
    if frame is None:
        return None
    mask = None
    for column, value in where:
        if column not in frame:
            return None
        hit = frame[column] == value
        mask = hit if mask is None else mask & hit
    rows = frame[mask] if mask is not None else frame
    if rows.empty:
        return None
    return Grid.from_frame(rows, list(axes), log_axes, padded_axis=padded_axis)
