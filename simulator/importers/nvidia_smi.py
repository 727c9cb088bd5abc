"""Read `nvidia-smi topo -m` and `nvidia-smi --query-gpu=name,memory.total --format=csv` output.

The matrix's cells name the path between two devices as NVML classifies it: X (self), PIX (at most one PCIe
bridge), PXB (several bridges, no host bridge), PHB (through a host bridge, the CPU), NODE (between host bridges
of one NUMA node), SYS (across the SMP interconnect between NUMA nodes), NV# (# bonded NVLinks). GPU rows end in
CPU Affinity, NUMA Affinity and (newer drivers) GPU NUMA ID columns; NIC rows and the legends follow.
"""
from __future__ import annotations

import csv
import io
import re
from dataclasses import field

from ..compiled import dataclass
from ..config.errors import ConfigError

LEVELS = ("X", "PIX", "PXB", "PHB", "NODE", "SYS")
AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_DEVICE = re.compile(r"^(GPU|NIC|mlx5_)\d+$")


@dataclass(frozen=True)
class TopoMatrix:
    """The matrix: device names in order (GPU0.., NIC0..), the cell between each pair, each GPU's NUMA node."""

    devices: tuple[str, ...]
    cells: dict[tuple[str, str], str]
    numa: dict[str, str] = field(default_factory=dict)  # GPU -> NUMA Affinity ('' where not given)
    cpus: dict[str, str] = field(default_factory=dict)  # GPU -> CPU Affinity
    nic_names: dict[str, str] = field(default_factory=dict)  # NIC0 -> mlx5_0 (the NIC legend)

    @property
    def gpus(self) -> list[str]:
        return [d for d in self.devices if d.startswith("GPU")]

    @property
    def nics(self) -> list[str]:
        return [d for d in self.devices if not d.startswith("GPU")]

    def cell(self, a: str, b: str) -> str:
        return self.cells[(a, b)]


def _split(line: str) -> list[str]:
    """Cells of a line: tab-separated as nvidia-smi prints it, or runs of 2+ spaces where tabs were lost."""
    parts = line.split("\t") if "\t" in line else re.split(r" {2,}", line)
    return [p.strip() for p in parts]


def parse_topo(text: str, file: str) -> TopoMatrix:
    lines = [l.rstrip("\n") for l in text.splitlines()]
    head = next((i for i, l in enumerate(lines) if "GPU0" in _split(l)), None)
    if head is None:
        raise ConfigError(file, "<header>", "no GPU0 column: not the output of `nvidia-smi topo -m`",
                          "the matrix as nvidia-smi prints it")
    columns = [c for c in _split(lines[head]) if c]
    devices = [c for c in columns if _DEVICE.match(c)]
    extra = [c for c in columns if c not in devices]
    unknown = [c for c in extra if c not in AFFINITY_COLUMNS]
    if unknown:
        raise ConfigError(file, "<header>", f"unknown column {unknown[0]!r}", "GPU#, NIC#, " + ", ".join(AFFINITY_COLUMNS))
    cells: dict[tuple[str, str], str] = {}
    numa, cpus = {}, {}
    rows = 0
    for number, line in enumerate(lines[head + 1:], start=head + 2):
        parts = _split(line)
        if not parts or not parts[0]:
            if rows:
                break
            continue
        name = parts[0]
        if name not in devices:
            if rows:
                break
            continue
        values = parts[1:]
        while values and values[-1] == "" and len(values) > len(devices):
            values.pop()
        if len(values) < len(devices):
            raise ConfigError(file, f"line {number}", f"{name}: {len(values)} cells for {len(devices)} devices",
                              "one cell per column")
        for other, value in zip(devices, values):
            if not (value in LEVELS or re.fullmatch(r"NV\d+", value)):
                raise ConfigError(file, f"line {number}", f"{name}-{other}: unknown cell {value!r}",
                                  "X, PIX, PXB, PHB, NODE, SYS, NV#")
            cells[(name, other)] = value
        tail = dict(zip(extra, values[len(devices):]))
        if name.startswith("GPU"):
            numa[name] = tail.get("NUMA Affinity", "").replace("N/A", "")
            cpus[name] = tail.get("CPU Affinity", "").replace("N/A", "")
        rows += 1
    missing = [d for d in devices if (d, d) not in cells]
    if missing:
        raise ConfigError(file, missing[0], "no row for this column", "a row per device")
    legend = dict(re.findall(r"^\s*(NIC\d+):\s*(\S+)\s*$", text, flags=re.M))
    return TopoMatrix(tuple(devices), cells, numa, cpus, legend)


def parse_query(text: str, file: str) -> list[tuple[str, float]]:
    """[(name, memory MiB)] per GPU from `--query-gpu=name,memory.total --format=csv` (header line included)."""
    rows = [r for r in csv.reader(io.StringIO(text)) if r and any(c.strip() for c in r)]
    if not rows or [c.strip() for c in rows[0]][:2] != ["name", "memory.total [MiB]"]:
        raise ConfigError(file, "<header>", "expected the header 'name, memory.total [MiB]'",
                          "nvidia-smi --query-gpu=name,memory.total --format=csv")
    out = []
    for number, row in enumerate(rows[1:], start=2):
        try:
            out.append((row[0].strip(), float(row[1].strip().split()[0])))
        except (IndexError, ValueError):
            raise ConfigError(file, f"line {number}", f"cannot read {','.join(row)!r}", "NAME, MEMORY MiB") from None
    return out
