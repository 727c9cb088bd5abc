"""Which of aiconfigurator-core's tables a lookup reads (systems/data/<system>/<family>/<engine>/<version>/*.parquet).

Whose tables: the engine profile's `kernel_database` (engine, version; runtime.kernel_database), read at that version
where the GPU's folder holds the table, else the newest version below it (the database's own backward fill: vLLM
0.24.0 asked on the A100 reads 0.14.0, TensorRT-LLM 1.3.0rc20 reads 1.0.0 there). Where one engine measured several
kernels for one op, its lane order (LANES: the engine's default dispatch) picks the first that holds the slice.
Tables are read with pyarrow (optional extra `specsim[measured]`) and kept in the run's store.
"""
from __future__ import annotations

import importlib.util
import pathlib
import re

import numpy as np

from ..cache import stored

ENGINE = "sglang"
ENGINE_VERSION = "0.5.14"  # aiconfigurator-core 0.12's default SGLang version (systems/query_versions.yaml)
# A GEMM dtype SGLang's tables do not hold on a GPU (weight-only int8 / int4 on the A100) is taken from another
# engine's table of the same GPU, as aiconfigurator's own database fills missing data from sibling backends
# (sdk/perf_database.py, "cross-backend fallback siblings"): TensorRT-LLM's WeightOnlyQuantMatmul plugin.
FILL_ENGINES = ("trtllm", "vllm")
PACKAGE = "aiconfigurator_core"
# Per engine and op, the tables' kernel_source labels in the order the engine's default dispatch would run them
# (the first that holds the slice is read; attention's decode and prefill each walk them on their own:
# measured_attention.gqa_attention); an op not named here reads every row (one kernel measured per dtype).
LANES = {
    # SGLang's preference where several were measured. flash_attention: its FlashAttentionBackend (the fa3 backend)
    # as the older collectors label it (aiconfigurator collector/kernel_source_backends.yaml; the only attention the
    # A100's 0.5.10 tables hold, run there on sm80, where SGLang's own default is FlashInfer: a stand-in for it).
    # Not listed: trtllm_mha, SGLang 0.5.14's default on sm100 (its place depends on the GPU, which lanes do not)
    "sglang": {"attention": ("fa3", "flash_attention", "flashinfer", "triton")},
    # vLLM V1: FLASH_ATTN (vllm_flash_attn: FA3 on Hopper, FA2 elsewhere, labelled vllm_flash_attn on the A100 and
    # vllm_flash_attn_fa2 on Ada / sm120; engines/vllm/*.yaml attention_backend), then FlashInfer (its own kernels:
    # fiprefill / fidecode; TensorRT-LLM's under it on Blackwell: trtllmprefill / trtllmdecode, prefill first as
    # aiconfigurator's own lane map lists them), then Triton; vllm_flash_attn_fa4 (not in vLLM 0.8) is not read.
    # Fused MoE: its Triton fused_moe (vLLM 0.8's unquantised / fp8 path); fp8-block GEMM: Triton (0.8's
    # w8a8_block_fp8_matmul) where measured, else CUTLASS, else DeepGEMM
    "vllm": {"attention": ("vllm_flash_attn_fa3", "vllm_flash_attn", "vllm_flash_attn_fa2", "vllm_flashinfer",
                           "vllm_flashinfer_fiprefill", "vllm_flashinfer_fidecode", "vllm_flashinfer_trtllmprefill",
                           "vllm_flashinfer_trtllmdecode", "vllm_triton_attn"),
             "moe": ("vllm_unquantizedfusedmoe_triton_tritonexperts", "vllm_fp8moe_triton_tritonexperts",
                     "vllm_modeloptfp8moe_triton_tritonexperts", "vllm_fused_moe",
                     "vllm_modeloptfp8moe_flashinfer_cutlass_flashinferexperts",
                     "vllm_fp8moe_flashinfer_cutlass_flashinferexperts",
                     "vllm_unquantizedfusedmoe_flashinfer_trtllm_trtllmbf16experts",
                     "vllm_modeloptfp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic",
                     "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic",
                     "vllm_compressedtensorsw4a4nvfp4moe_flashinfer_trtllm_trtllmnvfp4expertsmonolithic",
                     "vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts", "vllm_marlin_int4_moe"),
             "gemm": ("torch.nn.functional.linear", "vllm_default", "CutlassFP8ScaledMMLinearKernel",
                      "TritonFp8BlockScaledMMKernel", "CutlassFp8BlockScaledMMKernel", "DeepGemmFp8BlockScaledMMKernel",
                      "FlashInferCuteDslNvFp4LinearKernel")},
    # TensorRT-LLM's PyTorch flow: its TRTLLM attention backend; the gated (SwiGLU) fused MoE outside min-latency
    # mode (moe_torch_flow_nongated is the ReLU^2 MoE, moe_torch_flow_min_latency its low-latency twin)
    "trtllm": {"attention": ("torch_flow", "torch_flow_flashinfer"),
               "moe": ("moe_torch_flow", "moe_torch_flow_cutlass", "deepgemm")},
}
# The MoE lanes an engine's own backend flag selects (runtime.moe_backend; absent: LANES). TensorRT-LLM's
# moe_config.backend (_torch/modules/fused_moe/create_moe.py get_moe_cls): CUTLASS its CutlassFusedMoE, the default
# lanes; TRTLLM its TRTLLMGenFusedMoE, whose decode-time kernel the tables measure as moe_torch_flow_min_latency
# (min_latency_mode: nvfp4 on SM100, <= 256 experts), else the default lanes (get_moe_cls falls back to CUTLASS for
# weights the TRTLLM kernels do not take, bf16 among them; for fp8_block they stand in); DEEPGEMM its
# DeepGemmFusedMoE, the deepgemm rows first. moe_rows.py says how the min-latency rows are read.
MOE_BACKEND_LANES = {
    "trtllm": {"CUTLASS": LANES["trtllm"]["moe"],
               "TRTLLM": ("moe_torch_flow_min_latency",) + LANES["trtllm"]["moe"],
               "DEEPGEMM": ("deepgemm", "moe_torch_flow", "moe_torch_flow_cutlass")},
}
MIN_LATENCY_LANE = "moe_torch_flow_min_latency"


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


_STAGES = {"dev": -4, "a": -3, "b": -2, "rc": -1, "": 0, "post": 1}  # PEP 440's order around a release


def _version_key(text: str) -> tuple:
    """A folder's version as PEP 440 orders it: release numbers (zero-padded, 2.27 == 2.27.0), then a pre-release
    before the release it leads to (1.3.0rc20 < 1.3.0) and a post-release after it (0.5.6.post2 > 0.5.6)."""
    match = re.fullmatch(r"(\d+(?:\.\d+)*)\.?(dev|a|b|rc|post|)(\d*)", text)
    if match is None:  # not a version: below every one
        return ((-1,),)
    release = tuple(int(p) for p in match.group(1).split("."))
    release += (0,) * (4 - len(release))
    return release, _STAGES[match.group(2)], int(match.group(3) or 0)


@stored
def table_path(system: str, family: str, table: str, engine: str = ENGINE,
               version: str | None = None) -> pathlib.Path | None:
    """The newest version <= `version` of the engine that holds this table (the database fills a version's missing
    tables from older ones the same way); version None: ENGINE_VERSION for SGLang, another engine's newest (a fill)."""
    if version is None and engine == ENGINE:
        version = ENGINE_VERSION
    root = data_root()
    if root is None:
        return None
    folder = root / system / family / engine
    if not folder.is_dir():
        return None
    versions = sorted((p for p in folder.iterdir() if (p / f"{table}.parquet").is_file()),
                      key=lambda p: _version_key(p.name), reverse=True)
    for path in versions:
        if version is None or _version_key(path.name) <= _version_key(version):
            return path / f"{table}.parquet"
    return None


def table_label(system: str, family: str, table: str, engine: str, version: str | None) -> str:
    """'engine version' of the table file read (the version the lookup resolved to)."""
    return f"{engine} {table_path(system, family, table, engine, version).parent.name}"


def read_table(system: str, family: str, table: str, engine: str = ENGINE, version: str | None = None):
    """The table as a pandas frame (read_file's, in the run's store), or None where this GPU has none."""
    path = table_path(system, family, table, engine, version)
    return None if path is None else read_file(str(path), table)


@stored
def read_file(path: str, table: str):
    """The file of `table` at `path` as a pandas frame (in the run's store by its path: one frame a file, whatever
    version a lookup asked for)."""
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


def matching(frame, where: tuple):
    """The rows of `frame` whose columns hold `where`'s (column, value) pairs; None where a column is missing."""
    mask = np.ones(len(frame), dtype=bool)
    for column, value in where:
        if column not in frame:
            return None
        mask &= (frame[column] == value).to_numpy()
    return frame[mask]


def collection_files(system: str, family: str, table: str) -> tuple:
    """Every engine's and release's `table` file for this GPU: the collections `witnesses` reads."""
    root = data_root()
    return () if root is None else tuple(sorted((root / system / family).glob(f"*/*/{table}.parquet")))


def witnesses(system: str, family: str, table: str, where: tuple, own: pathlib.Path) -> tuple:
    """The other collections of a slice's op on this GPU (kernels/grid.py `repeats`): the rows matching `where` but
    its kernel lane, per kernel_source, of every engine's and release's `table` for this GPU but the slice's own
    (the file `own`, in its lane; every lane of it where `where` names none)."""
    lane = dict(where).get("kernel_source")
    rest = tuple((column, value) for column, value in where if column != "kernel_source")
    found = []
    for path in collection_files(system, family, table):
        rows = matching(read_file(str(path), table), rest)
        if rows is None:
            continue
        groups = rows.groupby("kernel_source") if "kernel_source" in rows else ((None, rows),)
        found += [group for source, group in groups
                  if len(group) and not (path == own and (lane is None or source == lane))]
    return tuple(found)
