"""Times one segment's kernels: the measured source where it covers a kernel's shape, the roofline otherwise.

Which source answered is counted per kernel family over the distinct shapes asked, so a result can say, e.g.,
"attention: measured, roofline for 2 of 14 shapes (outside the data)". Element-wise kernels (norms, activations,
rotary, copies) are not in the database and always take the roofline.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ..hardware.gpu import GPU
from .source import KernelSource, kernel_source


@dataclass(frozen=True)
class KernelTimes:
    """GPU time of one segment's kernels on one rank, split by what bounds each kernel."""

    compute_us: float
    memory_us: float
    last_kernel_us: float
    num_kernels: int
    gapless_kernels: int  # launches whose measured time already includes the device-side gap before the next


class KernelTimer:
    """Kernel times on one GPU for one scenario: measured, or the roofline, per kernel."""

    def __init__(self, gpu: GPU, choice: str = "roofline"):
        self.gpu = gpu
        self.source, self.note = kernel_source(choice, gpu.spec)
        self._measured: dict = {}
        self._shapes: dict[str, dict] = defaultdict(dict)  # family -> shape -> measured?

    def kernel_us(self, kernel) -> tuple[float, bool]:
        """(time, compute_bound): bound as the roofline classes the kernel, time from the source that answers."""
        t, compute_bound, _ = self._time(kernel)
        return t, compute_bound

    def _time(self, kernel) -> tuple[float, bool, bool]:
        roofline, compute_bound = self.gpu.kernel_us(kernel.flops, kernel.bytes, kernel.dtype)
        shape = kernel.shape
        if shape is None or self.source is None:
            if shape is not None:
                self._shapes[shape.family][shape] = False
            return roofline, compute_bound, False
        if shape in self._measured:
            t = self._measured[shape]
        else:
            t = self._measured[shape] = self.source.time_us(shape)
        self._shapes[shape.family][shape] = t is not None
        return (t, compute_bound, True) if t is not None else (roofline, compute_bound, False)

    def segment(self, segment, graph: bool = False) -> "KernelTimes":
        """GPU time of a segment's kernels. In a CUDA graph, kernels marked side_stream run beside the segment's
        other heavy kernels and only what outlasts them is exposed. Element-wise launches that a measured kernel's
        time includes (its `absorbs`) are not costed again, and neither is their device gap (gapless)."""
        compute = memory = last = 0.0
        side = []
        main_heavy = 0.0
        absorbed = measured = 0
        for kernel in segment.kernels:
            t, compute_bound, was_measured = self._time(kernel)
            if was_measured:
                measured += 1
                absorbed += kernel.absorbs
            if graph and kernel.side_stream:
                side.append((t, compute_bound))
                continue
            main_heavy += t
            if compute_bound:
                compute += t
            else:
                memory += t
            last = t
        exposed = max(0.0, sum(t for t, _ in side) - main_heavy)
        if side:
            scale = exposed / sum(t for t, _ in side)
            compute += scale * sum(t for t, c in side if c)
            memory += scale * sum(t for t, c in side if not c)
        smalls = max(0, segment.small_kernels - absorbed)
        small, _ = self.gpu.kernel_us(0.0, segment.small_bytes, "bf16")
        memory += small * smalls
        if smalls:
            last = small
        return KernelTimes(compute, memory, last, segment.num_kernels, measured + min(absorbed, segment.small_kernels))

    def report(self) -> dict:
        """The kernel-cost source, and per family which source timed the shapes costed so far."""
        if self.source is None:
            return {"source": self.note, "families": {f: "roofline" for f in sorted(self._shapes)} |
                    {"elementwise": "roofline"}}
        families = {}
        for family, shapes in sorted(self._shapes.items()):
            covered = sum(shapes.values())
            if covered == len(shapes):
                families[family] = "measured"
            elif covered == 0:
                families[family] = "roofline (outside the measured data)"
            else:
                families[family] = (f"measured, roofline for {len(shapes) - covered} of {len(shapes)} shapes "
                                     f"(outside the measured data)")
        families["elementwise"] = "roofline (not in the database)"
        return {"source": f"measured ({self.source.label})", "families": families}
