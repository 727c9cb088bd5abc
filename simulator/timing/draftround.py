"""A round of drafts as a process: the one implementation the layer, link and event fidelities run (the fast
fidelity's closed form, costs.FastStepCosts._draft_us, is the same sum per sample; tests/test_draft_round.py holds
the three to each other). What is modelled: the host-side proposals, the draft passes in order, then what the ops
issued behind the graphed drafts (and, on the target's GPUs, the verify's inputs and the tree mask) add past them
(timing.stepspec.exposed_behind_drafts_us)."""
from __future__ import annotations

from .stepspec import StepSpec, adds_behind_drafts, exposed_behind_drafts_us


def draft_round(env, step: StepSpec, context: int, gpu, run, own_gpus: bool = False):
    """Generator: one round of the step's drafts; `run(spec)` runs one draft pass (a generator returning its result,
    whose 'duration' is the pass's time); own_gpus: the drafter on GPUs of its own (runtime.draft_on_own_gpus).
    Returns the round's time as the sum of its parts: the host proposals, each pass's duration, what shows past
    the graphed passes (a pass waited for beyond its duration, as at event fidelity, is not in it)."""
    draft = step.draft_host_us
    if step.draft_host_us > 0:
        yield env.timeout(step.draft_host_us)
    graphed = 0.0
    for spec in step.drafts:
        result = yield from run(spec)
        draft += result["duration"]
        graphed += result["duration"] if spec.graph else 0.0
    if step.drafts and adds_behind_drafts(step):
        around = float(exposed_behind_drafts_us(step, graphed, context, gpu, own_gpus))
        if around > 0:
            yield env.timeout(around)
        draft += around
    return draft
