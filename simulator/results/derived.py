"""Figures derived from a run besides its measurements: the break-even accept length, the report's quick what-if,
the all-reduce a layer runs, how the policy chose, and the acceptance model's analytic expectation.

All take the run's own drafters (`slots`, built once by the server) instead of building the speculation again.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..config import Scenario
from ..config.typical import typical_context
from ..timing.machine import Machine
from ..timing.costs import FastStepCosts
from ..timing.stepspec import (PassSpec, StepSpec, extra_verify_tokens, speculative_passes, step_overhead_us,
                               verify_pass)
from ..model.cost import PassShape
from .collective_sections import AllreduceChoice, AllreduceChoices, CollectiveFigures, CollectiveKind
from .sections import GraphVerifyWhatIf, PolicyFigures, WhatIf
from .summary import mean_step_us


def allreduce_choice(scenario: Scenario, machine: Machine, slots) -> AllreduceChoices:
    """The all-reduce a layer runs at a plain decode's message size, and at the scenario's verify size."""
    shapes = {"decode": PassShape(1, 1)}
    if slots:
        slot = slots[0]
        shapes["verify"] = verify_pass(slot.tree, 1, False, extra_verify_tokens(slot.drafter, slot.tree)).shape
    out = {}
    for name, shape in shapes.items():
        layout = machine.layout("target", shape)  # pass_layout(model, tp, shape, fused), memoised
        nbytes = layout.segments[1].collective_bytes  # an attention block's all-reduce
        out[name] = AllreduceChoice(nbytes, **machine.allreduce.cost(nbytes).as_dict())
    return AllreduceChoices(**out)


def collectives_per_pass(scenario: Scenario, machine: Machine) -> CollectiveFigures:
    """What a plain decode pass moves under a wider split (DP-attention, expert or pipeline parallelism): per
    collective kind, how many close its segments and what each takes, at the workload's concurrency and prompt
    length. Empty for one plain TP group (the all-reduce lines say it all)."""
    if machine.split.is_plain:
        return CollectiveFigures()
    w = scenario.spec.workload
    batch = min(w.concurrency, w.requests)
    context = typical_context(w) * batch
    shape = PassShape(1, batch, context)
    plan = machine.plan("target", shape, scenario.spec.runtime.cuda_graph_decode)
    layout = machine.layout("target", shape, machine.split)
    out: dict = {}
    for kind, us in zip((layout.segments[i].collective for i in layout.order), plan.collective_us.tolist()):
        if kind is not None:
            entry = out.setdefault(kind, {"count": 0, "ms_per_pass": 0.0})
            entry["count"] += 1
            entry["ms_per_pass"] += us / 1e3
    kinds = {kind: CollectiveKind(e["count"], e["ms_per_pass"], e["ms_per_pass"] * 1e3 / e["count"])
             for kind, e in out.items()}
    return CollectiveFigures(batch, kinds)


def breakeven_accept_len(machine: Machine, scenario: Scenario, main) -> float | None:
    """Accept length at which speculation matches plain decode: its step time over a plain decode step's at the
    same batch and context (docs/reference.md's accept_len > step_time x baseline_rate, batch by batch).

    Plain-decode step times come from the cost model's memoised samples for each speculative step's batch and
    context, so a batched run compares like with like.
    """
    steps = main.steps
    mask = main.spec_steps
    if not mask.any():
        return None
    host = scenario.host
    planner = FastStepCosts(machine, scenario.spec.seed, np.random.default_rng(0))
    batches = steps.at("batch", mask).astype(int)
    contexts = steps.at("context", mask).astype(int)
    plain = 0.0
    # per batch size, ascending (sorted set: np.unique without counts imports numpy.ma, ~10 ms of a main command)
    for batch in sorted(set(batches.tolist())):  # the plain step's mean cost, blended over contexts
        spec = StepSpec(PassSpec("target", PassShape(1, int(batch)), scenario.spec.runtime.cuda_graph_decode),
                        other_us=step_overhead_us(host, scenario.spec.runtime, False, int(batch)))
        at = contexts[batches == batch]
        if at.size > 1 and (at[1:] > at[:-1]).all():  # a lone request's contexts: already distinct and sorted
            distinct, counts = at, np.ones(at.size, dtype=np.int64)  # what np.unique returns for them, without a sort
        else:
            distinct, counts = np.unique(at, return_counts=True)
        for value in (counts * planner.mean_step_us_many(spec, distinct)).tolist():
            plain += value  # in the order of the contexts, as a running sum (the same float every time)
    return float(steps.at("duration_us", mask).sum()) / plain


def what_if(scenario: Scenario, machine: Machine, main, base, slots) -> WhatIf:
    """Quick levers for the report: the same steps with the verify pass captured in a CUDA graph.

    The graph verify is costed at each speculative step's batch (padded to a captured size where the engine names
    them) and the typical context per request, from the layer model's memoised samples, averaged over the run's
    speculative steps; `python -m simulator plan` runs the full what-if simulations for every lever.
    """
    spec_mask = main.spec_steps
    base_step = mean_step_us(base, base.decode_steps)
    if not spec_mask.any() or not base_step:
        return WhatIf()
    runtime = scenario.spec.runtime
    if not runtime.cuda_graph_verify:
        per_request = typical_context(scenario.spec.workload)
        batches, counts = np.unique(main.steps.at("batch", spec_mask).astype(int), return_counts=True)
        verify_us = 0.0
        for batch, count in zip(batches.tolist(), counts.tolist()):
            verify, _ = speculative_passes(slots[0].drafter, slots[0].tree, batch, runtime, True)
            shape = replace(verify.shape, context=per_request * batch)  # the cached context summed over the batch
            # a mean needs the durations alone
            verify_us += count * float(machine.sample_durations("target", shape, verify.graph, scenario.spec.seed).mean())
        verify_us /= float(counts.sum())
        # the run's own drafting and host work per speculative step (scheduler, syncs, the engine's host path)
        step = verify_us + float(main.steps.at("draft_us", spec_mask).mean()) + float(main.steps.at("other", spec_mask).mean())
        breakeven = step / base_step
        lengths = main.accept_lengths
        accept = float(lengths.mean()) if lengths.size else 1.0
        return WhatIf(GraphVerifyWhatIf(verify_us / 1e3, breakeven, accept / breakeven))
    return WhatIf()


def policy_summary(spec, run) -> PolicyFigures:
    """How often the policy speculated, and with which drafter."""
    steps = run.steps
    decode_or_spec = steps["kind"] > 0
    n = int(decode_or_spec.sum())
    drafters = steps.at("drafter", decode_or_spec)
    names = [spec.speculation.method] + ([spec.policy.fallback.method] if spec.policy.kind == "multi_drafter" else [])
    shares = {name: float((drafters == i).mean()) if n else 0.0 for i, name in enumerate(names)} \
        if len(names) > 1 else None
    return PolicyFigures(spec.policy.kind, n, float((drafters >= 0).mean()) if n else 0.0, shares)


def expected_accept_len(scenario: Scenario, slots) -> float | None:
    """The acceptance model's analytic tokens per verify for the scenario's own drafter and tree."""
    if not slots:
        return None
    slot = slots[0]
    config = scenario.spec.speculation.acceptance
    if config is None or config.kind == "ngram_context":
        return None  # its hit rate depends on the history (or the text): no single expectation
    return slot.acceptance.expected_tokens(slot.tree)
