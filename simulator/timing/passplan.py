"""A pass's plan: per-segment arrays of one pass shape on one machine (what the timeline's closed form and the layer
and link passes read), and the blend between the plans of two anchor contexts."""
from __future__ import annotations

from dataclasses import fields
from functools import cached_property, partial
from typing import Callable

import numpy as np

from ..compiled import dataclass

CATEGORIES = ("compute", "memory", "launch", "allreduce_transfer", "allreduce_wait")


@dataclass(frozen=True)
class PassPlan:
    """Per-segment arrays of one pass shape on one machine (identical for every step of that shape)."""

    launches: np.ndarray  # host launches per segment: its kernels plus the collective's
    compute_us: np.ndarray  # GPU time of compute-bound kernels
    memory_us: np.ndarray  # GPU time of memory-bound (and floor-bound) kernels
    gap_us: np.ndarray  # device-side node gaps inside a CUDA graph
    last_us: np.ndarray  # the segment's last kernel
    collective_us: np.ndarray  # T_k, 0 where no collective closes the segment
    allreduce_mask: np.ndarray  # True where the closing collective is an all-reduce
    graph: bool
    ranks: int
    label: str = ""
    # what gives collective_steps when first read (machine.Machine._build: the collectives over the plan's layout)
    steps_of: Callable[[], tuple] | None = None
    # the kernels that can bind h (see kernel_lines), (K, M) each, padded with (0, 0); None: a segment is a first
    # kernel of W - last_us at the first launch and a last kernel of last_us just before the segment's final launch
    line_positions: np.ndarray | None = None
    line_suffix_us: np.ndarray | None = None
    # every value the closed form reads, exactly (machine.Machine._build: the distinct segments' rows and lines, their
    # order, graph); None where not known (a blended plan). Plans with the same key sample the same floats
    sampled_key: tuple | None = None
    # a graph pass captured piecewise (timing.piecewise): per segment when, after the first graph launch, the host
    # has let its kernels run (h = launch + graph_ready_us); None: one graph, every kernel queued at its launch
    graph_ready_us: np.ndarray | None = None

    @cached_property
    def collective_steps(self) -> tuple:
        """Per segment: its collective as a StepPlan over links, or None (link fidelity reads them; built when
        first read)."""
        return self.steps_of() if self.steps_of is not None else ()

    @cached_property
    def gpu_us(self) -> np.ndarray:
        """W per segment (computed once per plan: a layer pass reads it several times)."""
        return self.compute_us + self.memory_us + self.gap_us

    @property
    def graph_ready(self) -> np.ndarray:
        """A graph pass's h - (its launch) per segment: graph_ready_us where captured piecewise, else W."""
        return self.gpu_us if self.graph_ready_us is None else self.graph_ready_us

    def blended(self, other: "PassPlan", weight: float, label: str) -> "PassPlan":
        """This anchor's plan moved `weight` of the way to `other`'s (the next anchor of the same shape): what the
        context changes (compute, memory, the last kernel, the kernel lines) blended, the rest this plan's."""
        values = {name: self.__dict__[name] for name in _PLAN_FIELDS}
        values.update(compute_us=blend(self.compute_us, other.compute_us, weight),
                      memory_us=blend(self.memory_us, other.memory_us, weight),
                      last_us=blend(self.last_us, other.last_us, weight),
                      line_suffix_us=blend(self.line_suffix_us, other.line_suffix_us, weight), label=label,
                      sampled_key=None)
        if self.graph_ready_us is not None:  # the host's times are the anchors' own; the GPU's blend
            values["graph_ready_us"] = blend(self.graph_ready_us, other.graph_ready_us, weight)
        if self.steps_of is not None:  # the same steps as this anchor's (its steps_of would build them again)
            values["steps_of"] = partial(_steps_of_plan, self)
        return PassPlan(**values)

    @property
    def num_allreduces(self) -> int:
        return int(self.allreduce_mask.sum())

    @property
    def num_segments(self) -> int:
        return int(self.launches.shape[0])

    @property
    def ready_lines(self) -> tuple[np.ndarray, np.ndarray]:
        """(position, suffix) per segment: h - (segment start) = max_j position_j x one + suffix_j, `one` being the
        time of one launch."""
        if self.line_positions is None:
            positions = np.stack([np.ones_like(self.launches), self.launches - 1], axis=1)
            return positions, np.stack([self.gpu_us, self.last_us], axis=1)
        return self.line_positions, self.line_suffix_us


_PLAN_FIELDS = tuple(f.name for f in fields(PassPlan))


def _steps_of_plan(plan: PassPlan) -> tuple:
    """A blended plan's collective steps: its lower anchor's (the collectives do not move with the context)."""
    return plan.collective_steps


def blend(low_value, high_value, weight: float):
    """The value at weight in [0, 1] between the lower and the upper anchor's (floats or arrays)."""
    return low_value + (high_value - low_value) * weight
