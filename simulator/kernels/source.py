"""Where kernel times come from: a source answers a shape's time or says it does not cover it.

`kernel_source(choice, gpu_spec, tables)` gives the measured database (the engine's tables, runtime.kernel_database)
for `runtime.kernels: measured` when the optional package is installed and the GPU names a measured system, and says why not otherwise (the roofline then times
every kernel, and the result says so).
"""
from __future__ import annotations

from typing import Protocol

from .shapes import KernelShape


class KernelSource(Protocol):
    label: str

    def time_us(self, shape: KernelShape) -> float | None:
        """GPU time of one kernel of this shape, or None where the source does not cover it."""


def roofline_reason(choice: str, gpu_spec) -> str | None:
    """Why the roofline times every kernel ('roofline (...)'), or None where the measured database serves."""
    if choice == "roofline":
        return "roofline (runtime.kernels: roofline)"
    from . import measured
    system = gpu_spec.kernel_database
    if system is None:
        return f"roofline ({gpu_spec.name} has no measured kernel data: topology gpu.kernel_database is unset)"
    if measured.data_root() is None:
        return "roofline (aiconfigurator-core is not installed: pip install 'specsim[measured]')"
    if system not in measured.covered_systems():
        return (f"roofline (no {measured.ENGINE} GEMM data for {system!r} in aiconfigurator-core "
                f"{measured.package_version()})")
    return None


def kernel_source(choice: str, gpu_spec, tables=None, moe_backend: str | None = None) -> tuple[KernelSource | None, str]:
    """(source, note): the measured source, or None and the reason the roofline times every kernel. tables: the
    engine's kernel database (runtime.kernel_database: engine, version, whether its tables stand in for the engine's
    kernels), default SGLang 0.5.14's; moe_backend: the
    engine's MoE backend flag (runtime.moe_backend), whose lanes time its MoE."""
    reason = roofline_reason(choice, gpu_spec)
    if reason is not None:
        return None, reason
    from . import measured
    if tables is None:
        return measured.MeasuredKernels(gpu_spec.kernel_database), ""
    return measured.MeasuredKernels(gpu_spec.kernel_database, tables.engine, tables.version, moe_backend,
                                    tables.stands_in), ""
