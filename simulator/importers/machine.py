"""A topology from nvidia-smi: the GPU from its name (`--gpu` or the query CSV), the fabric from `topo -m`."""
from __future__ import annotations

import os

from ..config.base import validate
from ..config.errors import ConfigError
from ..config.topology import Topology
from .gpus import lookup
from .nvidia_smi import parse_query, parse_topo
from .topo_build import build_fabric

MAX_BYTES = 1_000_000


def read_text(path: str, key: str) -> str:
    if not os.path.isfile(path):
        raise ConfigError("command line", key, f"file not found: {path}")
    if os.path.getsize(path) > MAX_BYTES:
        raise ConfigError(path, "<file>", "larger than nvidia-smi's output is", f"at most {MAX_BYTES:,} bytes")
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, "<file>", f"cannot read file: {exc}") from None


def import_topology(topo_file: str, gpu: str | None = None, query_file: str | None = None,
                    name: str | None = None) -> tuple[dict, list[str]]:
    """(topology mapping, header lines: where each part came from and every assumption)."""
    matrix = parse_topo(read_text(topo_file, "topo"), topo_file)
    memory_note = ""
    if gpu is None:
        if query_file is None:
            raise ConfigError("command line", "--gpu", "no GPU named", "--gpu NAME (as nvidia-smi names it) or "
                              "--query gpus.csv (nvidia-smi --query-gpu=name,memory.total --format=csv)")
        rows = parse_query(read_text(query_file, "--query"), query_file)
        names = sorted({n for n, _ in rows})
        if len(names) != 1:
            raise ConfigError(query_file, "name", f"{len(names)} GPU models ({', '.join(names)})", "one GPU model a machine")
        if len(rows) != len(matrix.gpus):
            raise ConfigError(query_file, "<rows>", f"{len(rows)} GPUs, but the matrix has {len(matrix.gpus)}",
                              "the same machine's outputs")
        gpu = names[0]
        memory_note = f"; nvidia-smi reports {rows[0][1]:.0f} MiB usable"
    entry = lookup(gpu, query_file or "--gpu")
    fabric, assumed = build_fabric(matrix, entry, topo_file)
    stem = name or os.path.splitext(os.path.basename(topo_file))[0]
    gpus, switches = len(matrix.gpus), sum(1 for n in fabric["nodes"] if n["kind"] == "pcie_switch")
    sockets = sum(1 for n in fabric["nodes"] if n["kind"] == "cpu")
    nvlink = "NVSwitch" if any(n["kind"] == "nvswitch" for n in fabric["nodes"]) else \
        "NVLink bonds" if any(l["kind"] == "nvlink" for l in fabric["links"]) else "PCIe only"
    topology = {"name": stem, "description": f"{gpus}x {entry.gpu['name']}, {nvlink}, {switches} PCIe switches, "
                f"{sockets} socket{'s' if sockets > 1 else ''} (imported from nvidia-smi topo -m)",
                "gpu": entry.gpu, "host": entry.host, "fabric": fabric}
    validate(Topology, topology, topo_file)
    header = [f"Imported by `specsim import topology` from {os.path.basename(topo_file)} (nvidia-smi topo -m)"
              + (f" and {os.path.basename(query_file)}" if query_file else "") + ".",
              f"gpu: {gpu!r} -> {entry.source} (its sources there){memory_note}.",
              f"host: taken over from {entry.host_source}: host figures depend on the CPU and software stack, "
              "not measured on this machine.", "Assumed (not in nvidia-smi's output):"]
    header += [f"  - {line}" for line in assumed]
    return topology, header
