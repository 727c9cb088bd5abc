"""Times one segment's kernels: the measured source where it covers a kernel's shape, the roofline otherwise.

Which source answers is counted per kernel family over a given set of kernels, so a result can say, e.g.,
"attention: measured, roofline for 2 of 14 shapes (outside the data)". Element-wise kernels (norms, activations,
rotary, copies) are not in the database and always take the roofline.
"""
from __future__ import annotations

import hashlib
from collections import defaultdict

from ..compiled import dataclass
from ..cache import current, key_of
from ..config.names import MEASURED_GPU_FIELDS
from ..hardware.gpu import GPU
from .roofline import BYTES, ShapeRoofline
from .shapes import Gemm
from .source import kernel_source


@dataclass(frozen=True)
class KernelTimes:
    """GPU time of one segment's kernels on one rank, split by what bounds each kernel."""

    compute_us: float
    memory_us: float
    last_kernel_us: float
    num_kernels: int
    gapless_kernels: int  # launches whose measured time already includes the device-side gap before the next
    kernel_us: tuple[float, ...] = ()  # the heavy kernels' (exposed) times in launch order; the small ones follow
    small_us: float = 0.0  # each small element-wise launch's time (num_kernels - len(kernel_us) of them)


class KernelTimer:
    """Kernel times on one GPU for one scenario: measured, or the roofline, per kernel."""

    def __init__(self, gpu: GPU, choice: str = "roofline", measured_gpu: GPU | None = None, weight_only_gemv=None,
                 tables=None, unmeasured=None, moe_backend=None):
        """measured_gpu: the GPU the measured data are of, where `gpu` is a what-if of it (a physical field set away
        from the topology file's): each measured time is scaled by the roofline's ratio between the two GPUs.
        weight_only_gemv: the engine's own weight-only GEMV (runtime.weight_only_gemv), or None. tables: whose
        measured tables (runtime.kernel_database: engine, version), or None for SGLang 0.5.14's. unmeasured: family ->
        the engine's own kernel for it that the tables do not measure (runtime.unmeasured_kernels): the roofline times
        that family. moe_backend: the engine's MoE backend flag (runtime.moe_backend): its lanes time the MoE."""
        self.gpu = gpu
        self.weight_only_gemv = weight_only_gemv
        self.unmeasured = dict(unmeasured or {})
        self.source, self.note = kernel_source(choice, gpu.spec, tables, moe_backend)
        # with fitted efficiencies, shaped kernels take the shape-aware roofline; without, the datasheet roofline
        self.roofline = ShapeRoofline(gpu.spec) if gpu.spec.roofline else None
        # what a kernel's time is computed from besides the kernel, by value (the run's store keys them by it)
        self.value_key = hashlib.sha1("\0".join([gpu.spec.model_dump_json(), choice, measured_gpu.spec.model_dump_json()
                                                 if measured_gpu is not None else "",
                                                 getattr(self.source, "label", "")]).encode()).hexdigest()
        self._what_if = None
        if measured_gpu is not None and self.source is not None:
            # the loaded GPU's physical fields with this one's efficiencies: the ratio moves with the physics alone
            nominal = GPU(gpu.spec.model_copy(update={f: getattr(measured_gpu.spec, f) for f in MEASURED_GPU_FIELDS}))
            self._what_if = (nominal, ShapeRoofline(nominal.spec) if nominal.spec.roofline else None)
            self.note = ", ".join(f"{f} {getattr(gpu.spec, f)} (measured at {getattr(measured_gpu.spec, f)})"
                                  for f in MEASURED_GPU_FIELDS if getattr(gpu.spec, f) != getattr(measured_gpu.spec, f))

    def kernel_us(self, kernel) -> tuple[float, bool]:
        """(time, compute_bound): bound as the roofline classes the kernel, time from the source that answers."""
        t, compute_bound, _ = self._time(kernel)
        return t, compute_bound

    def _time(self, kernel) -> tuple[float, bool, bool]:
        """(time, compute_bound, whole_op): whole_op when the time stands for the engine's whole op as measured
        (the database, or the roofline fitted to it), element-wise stages and node gaps inside it included."""
        shape = kernel.shape
        if self._runs_weight_only_gemv(shape):
            return self._weight_only_gemv(kernel)
        if shape is not None and self.source is not None and shape.family not in self.unmeasured:
            t = current().get(("kernels.measured_us", self.value_key, key_of(shape)), lambda: self._measured_us(kernel))
            if t is not None:
                return t, self._bound(kernel), True
        if shape is not None and self.roofline is not None:
            return self.roofline.time_us(shape), self.roofline.is_compute_bound(shape), True
        roofline, compute_bound = self.gpu.kernel_us(kernel.flops, kernel.bytes, kernel.dtype)
        return roofline, compute_bound, False

    def _runs_weight_only_gemv(self, shape) -> bool:
        """Whether the engine's own weight-only GEMV times this shape: a GEMM of one of its weight dtypes at no more
        than its max_tokens rows (gpt-fast: int8 at one row); every other shape takes the source's kernel."""
        rule = self.weight_only_gemv
        return rule is not None and isinstance(shape, Gemm) and shape.dtype in rule.dtypes and shape.m <= rule.max_tokens

    def _weight_only_gemv(self, kernel) -> tuple[float, bool, bool]:
        """The engine's weight-only GEMV: the bf16 GEMV of the same shape (timed as any bf16 GEMM) streams 2 bytes a
        weight; this kernel streams the quantised weights and their scales at bandwidth_vs_bf16 of that rate, so its
        time is the bf16 GEMV's x (bytes a weight / 2) / bandwidth_vs_bf16. Assumed: the whole bf16 time scales so,
        its activations' bytes and any fixed floor included (at the few rows it runs at, the weights are nearly all
        the bytes)."""
        s = kernel.shape
        act = BYTES["bf16"]
        bf16 = type(kernel)(kernel.name, kernel.flops, s.n * s.k * act + s.m * (s.n + s.k) * act, "bf16",
                            Gemm(s.m, s.n, s.k, "bf16"))
        t, compute_bound, whole_op = self._time(bf16)
        weight = BYTES[s.dtype] + s.scale_bytes
        return t * weight / act / self.weight_only_gemv.bandwidth_vs_bf16, compute_bound, whole_op

    def _measured_us(self, kernel) -> float | None:
        """The source's time of the kernel's shape; on a what-if GPU, times the roofline's ratio of this GPU's time
        to the measured GPU's (the same roofline that times what the data do not cover)."""
        t = self.source.time_us(kernel.shape)
        if t is None or self._what_if is None:
            return t
        nominal, nominal_roofline = self._what_if
        if self.roofline is not None and nominal_roofline is not None:
            return t * self.roofline.time_us(kernel.shape) / nominal_roofline.time_us(kernel.shape)
        return t * self.gpu.kernel_us(kernel.flops, kernel.bytes, kernel.dtype)[0] / \
            nominal.kernel_us(kernel.flops, kernel.bytes, kernel.dtype)[0]

    def _bound(self, kernel) -> bool:
        if self.roofline is not None:
            return self.roofline.is_compute_bound(kernel.shape)
        return self.gpu.kernel_us(kernel.flops, kernel.bytes, kernel.dtype)[1]

    def _covered(self, shape) -> bool:
        if self._runs_weight_only_gemv(shape):
            shape = Gemm(shape.m, shape.n, shape.k, "bf16")
        return (self.source is not None and shape.family not in self.unmeasured
                and self.source.time_us(shape) is not None)

    def segment(self, segment, graph: bool = False) -> "KernelTimes":
        """GPU time of a segment's kernels. In a CUDA graph, kernels marked side_stream run beside the segment's
        other heavy kernels and only what outlasts them is exposed. Element-wise launches that a measured kernel's
        time includes (its `absorbs`) are not costed again, and neither is their device gap (gapless)."""
        compute = memory = last = 0.0
        side, times = [], []
        main_heavy = 0.0
        absorbed = whole_ops = 0
        for kernel in segment.kernels:
            t, compute_bound, whole_op = self._time(kernel)
            if whole_op:
                whole_ops += 1
                absorbed += kernel.absorbs
            if graph and kernel.side_stream:
                side.append((len(times), t, compute_bound))
                times.append(0.0)
                continue
            main_heavy += t
            if compute_bound:
                compute += t
            else:
                memory += t
            last = t
            times.append(t)
        if side:
            total = sum(t for _, t, _ in side)
            scale = max(0.0, total - main_heavy) / total  # the part that outlasts the main stream's heavy kernels
            for i, t, compute_bound in side:
                times[i] = scale * t
                compute, memory = (compute + scale * t, memory) if compute_bound else (compute, memory + scale * t)
        absorbed = min(absorbed, segment.small_kernels)
        small, _ = self.gpu.kernel_us(0.0, segment.small_bytes, "bf16")
        memory += small * (segment.small_kernels - absorbed)
        if segment.small_kernels > absorbed:
            last = small
        # the absorbed launches still happen (the op's own stages): spread the costed small time over all of them
        per_small = small * (segment.small_kernels - absorbed) / segment.small_kernels if segment.small_kernels else 0.0
        return KernelTimes(compute, memory, last, segment.num_kernels, whole_ops + absorbed, tuple(times), per_small)

    def _fills(self, covered_by: dict) -> str:
        """Where another table stood in for the engine's own (SGLang 0.5.14's for a shape the engine's tables lack,
        another engine's for a weight-only dtype)."""
        filled_from = getattr(self.source, "filled_from", None)
        own = [shape for shape in covered_by if self._runs_weight_only_gemv(shape)]
        fills = [filled_from(shape) for shape, hit in covered_by.items() if hit and shape not in own] \
            if filled_from else []
        by_table: dict[str, int] = defaultdict(int)
        for table in fills:
            if table:
                by_table[table] += 1
        text = "".join(f"; {n} of {len(covered_by)} shapes from {table}" for table, n in sorted(by_table.items()))
        if own:
            text += (f"; {len(own)} of {len(covered_by)} shapes the engine's weight-only GEMV (the bf16 GEMV's time, "
                     f"weights at {self.weight_only_gemv.bandwidth_vs_bf16:g} of its rate)")
        return text

    def report(self, kernels) -> dict:
        """The kernel-cost source, and per family which source times these kernels (a fixed set, e.g. the scenario's
        decode and verify passes, so the report does not depend on what earlier runs left in the caches)."""
        shapes: dict[str, dict] = defaultdict(dict)
        for kernel in kernels:
            if kernel.shape is not None:
                shapes[kernel.shape.family][kernel.shape] = self._covered(kernel.shape)
        fallback = "shape-aware roofline" if self.roofline is not None else "roofline"
        if self.source is None:
            return {"source": self.note.replace("roofline", fallback, 1),
                    "families": {f: fallback for f in sorted(shapes)} | {"elementwise": "roofline"}}
        families = {}
        for family, covered_by in sorted(shapes.items()):
            covered = sum(covered_by.values())
            if family in self.unmeasured:
                families[family] = f"{fallback} (the engine's own kernel, not the tables': {self.unmeasured[family]})"
                continue
            if covered == len(covered_by):
                families[family] = "measured"
            elif covered == 0:
                families[family] = f"{fallback} (outside the measured data)"
            else:
                families[family] = (f"measured, {fallback} for {len(covered_by) - covered} of {len(covered_by)} "
                                    f"shapes (outside the measured data)")
            families[family] += self._fills(covered_by)
        families["elementwise"] = "roofline (not in the database)"
        source = f"measured ({self.source.label})"
        if self._what_if is not None:
            source += f", scaled by the roofline to a what-if GPU: {self.note}"
        return {"source": source, "families": families}
