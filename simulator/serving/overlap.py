"""Two-batch overlap (TBO) under expert parallelism at event fidelity, as SGLang's --enable-two-batch-overlap runs a
decode or verify pass (python/sglang/srt/batch_overlap/two_batch_overlap.py: compute_split_seq_index,
TboForwardBatchPreparer.prepare_raw, model_forward_stages; operations_strategy.py:
_compute_moe_deepseek_blog_decode; models/deepseek_v2.py: the first_k_dense_replace layers run unsplit).

What is modelled: the batch split by requests into two micro-batches (the first b // 2, the rest); the layers before
the first MoE layer and the tail (final norm, lm_head, logits) run on the whole batch, every MoE layer on each
micro-batch, priced by the plan at the micro-batch's own batch (the expert weights are read twice: why TBO pays only
at large batches). The micro-batches' segments are interleaved on each rank's one stream (A_k, B_k, A_k+1, ...),
and each waits only for its own micro-batch's previous collective, so that one micro-batch's dispatch or combine is
in flight while the stream computes the other's segment (DeepEP's low-latency all-to-all sends and receives without
holding the stream: its receive hook). Each micro-batch's all-to-all is its own collective process on the links.
Granularity: the segment between two collectives (SGLang yields at five points of a layer, staggered by two).
Assumptions: prefill and draft passes run unsplit (SGLang splits an extend too, with DeepEP's normal kernels taking
SMs from the GEMMs, not modelled; the draft worker never splits); a group with fewer than two requests runs unsplit;
a micro-batch's cached context is its requests' share. Its breakdown books what the overlap left exposed.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..config.errors import ConfigError
from ..timing.passplan import PassPlan
from ..model.cost import PassShape

SPLIT_FIELDS = ("launches", "compute_us", "memory_us", "gap_us", "last_us", "collective_us", "allreduce_mask")


def check_all_to_all(scenario) -> None:
    """One line unless the scenario's MoE layers close with expert parallelism's all-to-all (ep = tp > 1)."""
    par = scenario.spec.parallelism
    moe = scenario.model.moe is not None
    if not moe or par.ep < 2 or par.ep != par.tp:
        raise ConfigError(scenario.source, "runtime.two_batch_overlap",
                          f"two-batch overlap hides expert parallelism's all-to-all (ep = tp > 1, an MoE model); this "
                          f"scenario has ep={par.ep}, tp={par.tp}, {'an MoE' if moe else 'a dense'} model",
                          "false, or parallelism.ep = parallelism.tp with an MoE model card")


def check_two_batch_overlap(machine) -> None:
    """check_all_to_all, and one line unless the MoE layers are one run of layers."""
    check_all_to_all(machine.scenario)
    region(machine, PassShape(1, 2))


def region(machine, shape: PassShape) -> tuple[int, int]:
    """(first, last) position in the pass's segment order of the MoE layers' segments (those TBO splits)."""
    layout = machine.layout("target", shape, machine.split)
    segments = [layout.segments[i] for i in layout.order]
    moe = [k for k, s in enumerate(segments) if s.collective in ("dispatch", "combine")]
    first, last = moe[0], moe[-1]
    if first > 0 and segments[first - 1].group == "attention":  # the attention group's reduce-scatter before routing
        first -= 1
    if last + 1 < len(segments) and segments[last + 1].group == "attention":  # its all-gather after the combine
        last += 1
    inside = segments[first:last + 1]
    if any(s.collective not in ("dispatch", "combine") and s.group != "attention" for s in inside):
        raise ConfigError(machine.scenario.source, "runtime.two_batch_overlap", "the model's MoE layers are not one "
                          "run of layers (SGLang's TBO splits the layers from the first sparse one to the last)",
                          "false, or a model whose dense layers come first")
    return first, last


def micro_batches(shape: PassShape, context: int, groups: int):
    """The two micro-batches' (shape, context), or None where the pass runs unsplit (module docstring)."""
    if not (shape.verify or shape.tokens == 1) or -(-shape.batch // groups) < 2:
        return None
    a = shape.batch // 2
    ctx = context * a // shape.batch
    pad, rows = shape.padding // 2, shape.padding_rows // 2
    return ((replace(shape, batch=a, padding=pad, padding_rows=rows), ctx),
            (replace(shape, batch=shape.batch - a, padding=shape.padding - pad, padding_rows=shape.padding_rows - rows),
             context - ctx))


def split_plan(machine, spec, context: int):
    """(the pass's plan in stream order, what each item waits for) under TBO, or None where it runs unsplit."""
    parts = micro_batches(spec.shape, context, machine.split.groups) if spec.part == "target" else None
    if parts is None:
        return None
    whole = machine.plan_at("target", spec.shape, spec.graph, context)
    a, b = (machine.plan_at("target", shape, spec.graph, ctx) for shape, ctx in parts)
    first, last = region(machine, spec.shape)
    n = whole.num_segments
    order = [(whole, k) for k in range(first)]
    for k in range(first, last + 1):
        order += [(a, k), (b, k)]
    order += [(whole, k) for k in range(last + 1, n)]
    waits = [(i - 1,) if i else () for i in range(first)]
    waits += [(first - 1,) if first else () for _ in range(2)]
    waits += [(i - 2,) for i in range(first + 2, first + 2 * (last + 1 - first))]
    tail = first + 2 * (last + 1 - first)
    waits += [(tail - 1, tail - 2)][:len(order) - tail] + [(i - 1,) for i in range(tail + 1, len(order))]
    return merged(order, whole), [tuple(w) for w in waits]


def merged(order: list, whole: PassPlan) -> PassPlan:
    """One plan of the items in `order` ((plan, segment) each): the launches in that order, as the host issues them."""
    values = {name: np.array([getattr(p, name)[k] for p, k in order]) for name in SPLIT_FIELDS}
    lines = [p.ready_lines for p, _ in order]
    width = max(pos.shape[1] for pos, _ in lines)
    positions = np.zeros((len(order), width))
    suffixes = np.zeros((len(order), width))
    for i, ((p, k), (pos, suf)) in enumerate(zip(order, lines)):
        positions[i, :pos.shape[1]] = pos[k]
        suffixes[i, :suf.shape[1]] = suf[k]

    def steps() -> tuple:
        return tuple((p.collective_steps or (None,) * p.num_segments)[k] for p, k in order)

    return PassPlan(**values, graph=whole.graph, ranks=whole.ranks, label=f"{whole.label} tbo", steps_of=steps,
                    line_positions=positions, line_suffix_us=suffixes)


def overlapped_result(plan: PassPlan, order, traced: bool) -> dict:
    """A TBO pass's duration and breakdown: the stream's work, its waits for its own host (launch), and what is left,
    the collectives the overlap did not hide (their transfer up to their own time, the rest waiting)."""
    ends = order.ends()
    duration = ends[-1]
    compute, memory, gap = (float(getattr(plan, name).sum()) for name in ("compute_us", "memory_us", "gap_us"))
    launch = gap + float(np.mean(order.idle))
    exposed = max(0.0, duration - compute - memory - launch)
    transfer = min(exposed, float(plan.collective_us.sum()))
    only = min(exposed, float(plan.collective_us[plan.allreduce_mask].sum()))
    result = {"duration": duration, "compute": compute, "memory": memory, "launch": launch,
              "allreduce_transfer": transfer, "allreduce_wait": exposed - transfer, "allreduce_only": only,
              "allreduce_profile": only}
    if traced:
        from ..timing.timeline import spans

        result["_spans"] = spans(plan, order.h, order.H, np.asarray(ends), order.begin)
        result["_spans"]["arrive"] = np.asarray(order.arrive)
    return result
