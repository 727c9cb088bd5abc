"""What each step of a server runs: its passes and host costs (timing.stepspec.StepSpec) from the step's kind (a
prefill chunk, plain decode, a drafter's speculative step), the policy's decision, the batch and, where the engine
verifies what was proposed (runtime.verify_tokens: proposed), the proposal's length. One StepSpec per value, kept in
the run's store; the serving loop (serving.server) only asks for them.
"""
from __future__ import annotations

import hashlib

from ..cache import current
from ..cache.keys import json_of
from ..model.cost import PassShape
from ..speculation.trees import Tree
from ..timing.stepspec import (PassSpec, StepSpec, around_drafts, expected_emitted, hidden_scheduler_us,
                               speculative_host_us, speculative_passes, step_overhead_us)
from .records import KIND_DECODE, KIND_PREFILL


class StepSpecs:
    """The step specs of one server: its scenario's runtime, host and acceptance, and its drafters (slots)."""

    def __init__(self, machine, slots, speculate: bool):
        spec = machine.scenario.spec
        self.runtime = spec.runtime
        self.slots = slots
        # the scheduler's per-step host work overlaps the GPU in plain decode, not while speculating (SGLang)
        self._host = machine.scenario.host
        self._acceptance_config = spec.speculation.acceptance
        self._stop_strings = spec.workload.stop_strings
        # what a step's spec is computed from besides its arguments, by value (the run's store keys them by it)
        self._spec_value = (machine.key, hashlib.sha1(json_of(spec).encode()).hexdigest(), speculate)

    def step_spec(self, kind: int, decision, batch: int, tokens: int = 1, proposed: int | None = None) -> StepSpec:
        """The passes and host costs of a step, in the run's store by value (the scenario's, the step's).
        `proposed`: drafts a request the drafter proposed this step, where the engine verifies what was proposed
        (runtime.verify_tokens: proposed)."""
        return current().get(("server.step_spec", self._spec_value, kind, decision, batch, tokens, proposed),
                             lambda: self._step_spec(kind, decision, batch, tokens, proposed))

    def proposer(self, decision):
        """The drafter's proposal length per request (TextAcceptance.proposed) where the engine verifies what it
        proposed; None where the verify is the decision's tree (runtime.verify_tokens fixed, or a model drafter)."""
        if not decision or self.runtime.verify_tokens != "proposed":
            return None
        return getattr(self.slots[decision.drafter].acceptance, "proposed", None)

    def _step_spec(self, kind: int, decision, batch: int, tokens: int, proposed: int | None = None) -> StepSpec:
        rt, host = self.runtime, self._host
        # the scheduler's host work a step (of this batch) overlaps the GPU in plain decode, not while speculating
        # (SGLang's overlap scheduler; the engine profile's)
        other_spec, hidden_verify = step_overhead_us(host, rt, True, batch), hidden_scheduler_us(host, rt, True, batch)
        if kind == KIND_PREFILL:
            return StepSpec(PassSpec("target", PassShape(tokens, batch), False), other_us=other_spec,
                            hidden_us=hidden_verify)
        if kind == KIND_DECODE:
            return StepSpec(PassSpec("target", PassShape(1, batch), rt.cuda_graph_decode),
                            other_us=step_overhead_us(host, rt, False, batch),
                            hidden_us=hidden_scheduler_us(host, rt, False, batch))
        slot, tree = self.slots[decision.drafter], decision.tree
        drafter, emitted = slot.drafter, expected_emitted(slot.acceptance, tree, self._acceptance_config)
        drafted = drafter.host_us(tree, batch)  # the drafter's work, bounded by its configured drafts
        if proposed == 0:  # nothing proposed: the engine runs a plain decode pass (no verify metadata), the drafter ran
            return StepSpec(PassSpec("target", PassShape(1, batch), rt.cuda_graph_decode), (), drafted,
                            other_spec, hidden_verify)
        if proposed is not None:
            tree = Tree.chain(proposed)
        verify, drafts = speculative_passes(drafter, tree, batch, rt, rt.cuda_graph_verify)
        return StepSpec(verify, drafts, drafted,
                        other_spec + speculative_host_us(host, rt, batch, tree, emitted, self._stop_strings),
                        hidden_verify, **around_drafts(host, rt, tree, batch))
