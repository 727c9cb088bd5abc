"""The engines' custom all-reduce as NVIDIA measured it: aiconfigurator-core's
systems/data/<gpu>/comm/<engine>/<version>/custom_allreduce_perf.parquet (the engine's own kernel timed on the GPU,
replayed in a CUDA graph and launched eagerly, per GPU count and message size).

The tables' message_size counts bf16 elements (bytes = 2 x elements, as their NCCL tables' fp16 counts); a size
between two measured ones is interpolated linearly in log(size) and log(time). Nothing is fitted. A version is
read as asked where the database measured it at that GPU count, else the newest measured below it, else the oldest
above, and the answer says which it read.
"""
from __future__ import annotations

import math

from ..compiled import dataclass
from .measured import _version_key, data_root

TABLE = "custom_allreduce_perf"
ENGINE_DIRS = {"sglang": "sglang", "vllm": "vllm", "trtllm": "trtllm"}
# the engine's own kernel, as the tables label it (kernel_source <name>_graph / _eager); some tables under an engine
# hold another's rows (h100_sxm and h200_sxm comm/sglang/0.5.6.post2, l40s comm/sglang/0.5.9: "TRTLLM"), read as none
ENGINE_KERNELS = {"sglang": "SGLang_CustomAllReduce", "vllm": "vLLM_custom"}


@dataclass(frozen=True)
class MeasuredAllReduce:
    """One interpolated row: the engine's custom all-reduce of `nbytes` over `ranks` GPUs in both launch modes."""

    engine: str
    version: str
    system: str
    ranks: int
    nbytes: int
    graph_us: float
    eager_us: float
    kernel: str  # the table's kernel_source, e.g. SGLang_CustomAllReduce

    def label(self) -> str:
        return f"aiconfigurator-core {self.system} comm/{self.engine}/{self.version}/{TABLE} ({self.kernel})"


def versions(system: str, engine: str) -> list[str]:
    """The versions of the engine whose custom all-reduce the database measured on this GPU, oldest first."""
    root = data_root()
    folder = root / system / "comm" / ENGINE_DIRS.get(engine, engine) if root is not None else None
    if folder is None or not folder.is_dir():
        return []
    return sorted((p.name for p in folder.iterdir() if (p / f"{TABLE}.parquet").is_file()), key=_version_key)


def preference(system: str, engine: str, wanted: str) -> list[str]:
    """The measured versions in the order they stand for `wanted`: itself, the newer ones below it (newest first),
    then the ones above it (oldest first)."""
    have = versions(system, engine)
    below = [v for v in have if _version_key(v) <= _version_key(wanted)]
    return below[::-1] + [v for v in have if v not in below]


def _rows(system: str, engine: str, version: str, ranks: int) -> tuple[str, dict[str, tuple]]:
    """(kernel name, {mode: ((bytes...), (us...))}) of one table's rows for `ranks` GPUs, sorted by size."""
    import pyarrow.parquet as pq

    frame = pq.read_table(data_root() / system / "comm" / ENGINE_DIRS.get(engine, engine) / version /
                          f"{TABLE}.parquet").to_pandas()
    frame = frame[(frame.num_gpus == ranks) & (frame.op_name == "all_reduce")]
    modes = {}
    own = ENGINE_KERNELS.get(engine)
    for mode in ("graph", "eager"):
        rows = frame[frame.kernel_source == f"{own}_{mode}"].sort_values("message_size")
        modes[mode] = (tuple(2 * int(m) for m in rows.message_size), tuple(1e3 * float(t) for t in rows.latency))
    kernel = own if any(modes[m][0] for m in modes) else ""
    return kernel, modes


def _interpolate(sizes: tuple, times: tuple, nbytes: int) -> float | None:
    if not sizes or not sizes[0] <= nbytes <= sizes[-1]:
        return None
    for (s0, t0), (s1, t1) in zip(zip(sizes, times), zip(sizes[1:], times[1:])):
        if s0 <= nbytes <= s1:
            if s0 == s1:
                return t0
            w = (math.log(nbytes) - math.log(s0)) / (math.log(s1) - math.log(s0))
            return math.exp((1 - w) * math.log(t0) + w * math.log(t1))
    return None


def measured(system: str | None, engine: str, wanted: str, ranks: int, nbytes: int) -> MeasuredAllReduce | None:
    """The engine's measured custom all-reduce of nbytes over `ranks` GPUs, or None where the database has no row
    (no such GPU, engine, GPU count or size in it)."""
    if system is None or data_root() is None:
        return None
    for version in preference(system, engine, wanted):  # the first version that measured this GPU count
        kernel, modes = _rows(system, engine, version, ranks)
        if modes["graph"][0] and modes["eager"][0]:
            graph, eager = (_interpolate(*modes[m], nbytes) for m in ("graph", "eager"))
            if graph is None or eager is None:
                return None
            return MeasuredAllReduce(engine, version, system, ranks, nbytes, graph, eager, kernel)
    return None
