"""The decode loop of one TP group: admit requests, prefill them, then plain or speculative steps until done.

Each step serves the running batch: the policy picks plain decode or a drafter and its verify tree, the drafter's
passes (or host lookups) and the verify pass run on the ranks, the acceptance model walks each request's tree, and
the step is recorded with the decision taken. At `fast` fidelity a step is one SimPy event drawn from memoised
per-shape samples of the layer model; at `layer` fidelity every collective of every pass is an event.
"""
from __future__ import annotations

import numpy as np

from ..model.cost import PassShape
from ..speculation.setup import build_speculation
from ..workload import make_requests
from .costs import FastStepCosts, LayerStepCosts, PassSpec, StepSpec
from .machine import Machine

KIND_PREFILL, KIND_DECODE, KIND_SPEC = 0, 1, 2
STEP_FIELDS = ("kind", "start_at", "duration_us", "draft_us", "pass_us", "batch", "tokens", "depth",
               "compute", "memory", "launch", "allreduce_transfer", "allreduce_wait", "draft", "other",
               "allreduce_only", "allreduce_profile", "drafter", "verify_tokens")
UNIFORM_BLOCK = 1 << 14


class Server:
    """Serves a scenario's workload on its machine; `speculate=False` is the same machine with speculation off."""

    def __init__(self, env, machine: Machine, seed: int, fidelity: str, speculate: bool = True,
                 on_pass=None, max_steps: int | None = None):
        scenario = machine.scenario
        spec = scenario.spec
        self.env = env
        self.machine = machine
        self.fast = fidelity == "fast"
        self.runtime = spec.runtime
        self.workload = spec.workload
        host = scenario.topology.host
        setup = build_speculation(scenario, speculate)
        self.slots = setup.slots
        self.policy = setup.policy
        acceptance_seq, jitter_seq = np.random.SeedSequence(seed).spawn(2)
        self._acceptance_rng = np.random.default_rng(acceptance_seq)
        jitter = np.random.default_rng(jitter_seq)
        self.costs = FastStepCosts(machine, seed, jitter) if self.fast else \
            LayerStepCosts(machine, jitter, on_pass, links=fidelity == "link")
        self.max_steps = max_steps  # stop early (traces record the first steps only)
        self._uniforms: list[float] = []
        self._uniform_at = 0
        # the scheduler's per-step host work overlaps the GPU in plain decode, not while speculating (SGLang)
        self._other_spec = host.sync_us + host.step_overhead_us
        self._other_plain = host.sync_us + (0.0 if spec.runtime.overlap_schedule else host.step_overhead_us)
        self._step_specs: dict[tuple, StepSpec] = {}
        self.requests = make_requests(self.workload)
        self.active: list = []
        self.steps: list[tuple] = []
        self.accept_lengths: list[int] = []  # per request per speculative step, bonus token included
        self.accept_positions: list[int] = []  # tokens the request had generated before that step

    # -- randomness ------------------------------------------------------------------------------------------
    def _uniform_row(self, n: int) -> list[float]:
        """n acceptance uniforms, drawn in numpy blocks (common random numbers across scenarios)."""
        if self._uniform_at + n > len(self._uniforms):
            self._uniforms = self._acceptance_rng.random(UNIFORM_BLOCK).tolist()
            self._uniform_at = 0
        row = self._uniforms[self._uniform_at:self._uniform_at + n]
        self._uniform_at += n
        return row

    # -- what the policies may ask -----------------------------------------------------------------------------
    def match_tokens(self) -> list[int]:
        """Per active request, the n-gram cache match the primary drafter would find."""
        model = self.slots[0].acceptance if self.slots else None
        return [model.match_tokens(r.acceptance_state) for r in self.active] if model else []

    # -- step costs ----------------------------------------------------------------------------------------------
    def step_spec(self, kind: int, decision, batch: int, tokens: int = 1) -> StepSpec:
        tree = decision[1] if decision else None
        key = (kind, decision[0] if decision else -1, id(tree), batch, tokens)
        spec = self._step_specs.get(key)
        if spec is None:
            rt = self.runtime
            if kind == KIND_PREFILL:
                spec = StepSpec(PassSpec("target", PassShape(tokens, batch), False), other_us=self._other_spec)
            elif kind == KIND_DECODE:
                spec = StepSpec(PassSpec("target", PassShape(1, batch), rt.cuda_graph_decode), other_us=self._other_plain)
            else:
                drafter = self.slots[decision[0]].drafter
                is_tree = tree.depth < tree.num_drafts
                main = PassSpec("target", PassShape(tree.size, batch, 0, is_tree, True), rt.cuda_graph_verify)
                spec = StepSpec(main, drafter.passes(tree, batch), drafter.host_us(tree, batch), self._other_spec)
            self._step_specs[key] = spec
        return spec

    # -- the loop --------------------------------------------------------------------------------------------
    def run(self):
        """SimPy process: serve every request."""
        env = self.env
        pending = list(self.requests)
        concurrency = self.workload.concurrency
        steps = self.steps
        fast, timeout = self.fast, env.timeout
        step_cost = self.costs.step if fast else None
        policy = self.policy
        while pending or self.active:
            if self.max_steps is not None and len(steps) >= self.max_steps:
                return
            admitted = []
            while pending and len(self.active) + len(admitted) < concurrency:
                admitted.append(pending.pop(0))
            if admitted:
                yield from self._prefill(admitted)
                self.active.extend(r for r in admitted if not r.is_done)
                if not self.active:
                    continue
            active = self.active
            decision = policy.decide(self)
            batch = len(active)
            context = sum(r.prompt_tokens + r.generated for r in active)
            start = env.now
            kind = KIND_SPEC if decision else KIND_DECODE
            step_spec = self.step_spec(kind, decision, batch)
            if fast:  # inlined for speed: one table lookup and one event per step
                cost = step_cost(step_spec, context)
                yield timeout(cost[0])
            else:
                cost = yield from self.costs.step(env, step_spec, context)
            tokens = 0
            now = env.now
            if decision:
                slot = self.slots[decision[0]]
                tree, model = decision[1], slot.acceptance
                depth = tree.depth
                stateful = model.stateful
                # the text's regime lives in the primary drafter's model: it moves on whichever drafter ran
                primary = self.slots[0].acceptance if self.slots[0].acceptance.stateful else None
                for request in active:
                    state = request.acceptance_state if stateful else None
                    accepted = model.accepted(tree, state, self._uniform_row(depth))
                    emitted = min(accepted + 1, request.output_tokens - request.generated)
                    self.accept_lengths.append(emitted)
                    self.accept_positions.append(request.generated)
                    if stateful:
                        request.acceptance_state = model.advance(state, emitted, self._uniform_row(1)[0])
                    elif primary is not None:
                        request.acceptance_state = primary.advance(request.acceptance_state, emitted,
                                                                   self._uniform_row(1)[0])
                    request.generated += emitted
                    tokens += emitted
                    if request.generated >= request.output_tokens:
                        request.completed_at = now
                verify_tokens = tree.size
            else:
                for request in active:
                    request.generated += 1
                    if request.acceptance_state is not None and self.slots and self.slots[0].acceptance.stateful:
                        request.acceptance_state = self.slots[0].acceptance.advance(
                            request.acceptance_state, 1, self._uniform_row(1)[0])
                    if request.generated >= request.output_tokens:
                        request.completed_at = now
                tokens = batch
                depth = verify_tokens = 0
            steps.append((kind, start, cost[0], cost[2], cost[1], batch, tokens, depth, cost[3], cost[4], cost[5],
                          cost[6], cost[7], cost[2], cost[8], cost[9], cost[10],
                          decision[0] if decision else -1, verify_tokens))
            policy.observe(decision, cost[0], tokens / batch, batch)
            if any(r.completed_at is not None for r in active):
                self.active = [r for r in active if r.completed_at is None]

    def _prefill(self, admitted):
        env = self.env
        start = env.now
        for request in admitted:
            request.admitted_at = start
            if self.slots and self.slots[0].acceptance.stateful:
                request.acceptance_state = self.slots[0].acceptance.start(request.prompt_tokens)
        prompt = max(r.prompt_tokens for r in admitted)
        step_spec = self.step_spec(KIND_PREFILL, None, len(admitted), prompt)
        if self.fast:
            cost = self.costs.step(step_spec, 0)
            yield env.timeout(cost[0])
        else:
            cost = yield from self.costs.step(env, step_spec, 0)
        now = env.now
        for request in admitted:
            request.generated = 1  # the prefill's logits give the first output token
            request.first_token_at = now
            if request.is_done:
                request.completed_at = now
        self.steps.append((KIND_PREFILL, start, cost[0], 0.0, cost[1], len(admitted), len(admitted), 0, cost[3],
                           cost[4], cost[5], cost[6], cost[7], 0.0, cost[8], cost[9], cost[10], -1, 0))
