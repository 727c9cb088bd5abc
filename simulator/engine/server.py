"""The decode loop of one TP group: admit requests, prefill them, then plain or speculative steps until done.

Each step serves the running batch: the policy picks a draft length (0: plain decode), the drafter's passes and
the verify pass run on the ranks, the acceptance model draws how many drafts each request keeps, and the step is
recorded. At `fast` fidelity a step is one SimPy event drawn from memoised per-shape samples of the layer model;
at `layer` fidelity every collective of every pass is an event (timeline.LayerPass).
"""
from __future__ import annotations

import numpy as np

from ..model.cost import PassShape
from ..speculation.acceptance import build_acceptance
from ..speculation.drafters import build_drafter
from ..speculation.policies import build_policy
from ..workload import make_requests
from .costs import FastStepCosts, LayerStepCosts, PassSpec, StepSpec
from .machine import Machine

KIND_PREFILL, KIND_DECODE, KIND_SPEC = 0, 1, 2
STEP_FIELDS = ("kind", "start_at", "duration_us", "draft_us", "pass_us", "batch", "tokens", "depth",
               "compute", "memory", "launch", "allreduce_transfer", "allreduce_wait", "draft", "other",
               "allreduce_only", "allreduce_profile")
UNIFORM_BLOCK = 1 << 14


class Server:
    """Serves a scenario's workload on its machine; `speculate=False` is the same machine with speculation off."""

    def __init__(self, env, machine: Machine, seed: int, fidelity: str, speculate: bool = True):
        scenario = machine.scenario
        spec = scenario.spec
        self.env = env
        self.machine = machine
        self.fast = fidelity == "fast"
        self.runtime = spec.runtime
        self.workload = spec.workload
        host = scenario.topology.host
        speculation = spec.speculation if speculate else spec.speculation.model_copy(update={"method": "none"})
        self.speculation = speculation
        self.drafter = build_drafter(speculation.method, spec.runtime)
        self.acceptance = build_acceptance(speculation.acceptance) if speculation.method != "none" else None
        self.policy = build_policy(spec.policy, speculation)
        acceptance_seq, jitter_seq = np.random.SeedSequence(seed).spawn(2)
        self._acceptance_rng = np.random.default_rng(acceptance_seq)
        jitter = np.random.default_rng(jitter_seq)
        self.costs = FastStepCosts(machine, seed, jitter) if self.fast else LayerStepCosts(machine, jitter)
        self._uniforms: list[float] = []
        self._uniform_at = 0
        # the scheduler's per-step host work overlaps the GPU in plain decode, not while speculating (SGLang)
        self._other_spec = host.sync_us + host.step_overhead_us
        self._other_plain = host.sync_us + (0.0 if spec.runtime.overlap_schedule else host.step_overhead_us)
        self._steps_specs: dict[tuple, StepSpec] = {}
        self.requests = make_requests(self.workload)
        self.steps: list[tuple] = []
        self.accept_lengths: list[int] = []  # per request per speculative step, bonus token included

    def _uniform_row(self, n: int) -> list[float]:
        """n acceptance uniforms, drawn in numpy blocks (common random numbers across scenarios)."""
        if self._uniform_at + n > len(self._uniforms):
            self._uniforms = self._acceptance_rng.random(UNIFORM_BLOCK).tolist()
            self._uniform_at = 0
        row = self._uniforms[self._uniform_at:self._uniform_at + n]
        self._uniform_at += n
        return row

    def step_spec(self, kind: int, depth: int, batch: int, tokens: int = 1) -> StepSpec:
        key = (kind, depth, batch, tokens)
        spec = self._steps_specs.get(key)
        if spec is None:
            rt = self.runtime
            if kind == KIND_PREFILL:
                spec = StepSpec(PassSpec("target", PassShape(tokens, batch), False), other_us=self._other_spec)
            elif kind == KIND_DECODE:
                spec = StepSpec(PassSpec("target", PassShape(1, batch), rt.cuda_graph_decode), other_us=self._other_plain)
            else:
                main = PassSpec("target", PassShape(depth + 1, batch, 0, False, True), rt.cuda_graph_verify)
                spec = StepSpec(main, self.drafter.passes(depth, batch), self.drafter.host_us(depth, batch),
                                self._other_spec)
            self._steps_specs[key] = spec
        return spec

    def _cost(self, spec: StepSpec, context: int):
        """Generator: wait out the step's cost; returns the STEP_COST list."""
        if self.fast:
            cost = self.costs.step(spec, context)
            yield self.env.timeout(cost[0])
            return cost
        cost = yield from self.costs.step(self.env, spec, context)
        return cost

    def run(self):
        """SimPy process: serve every request."""
        env = self.env
        pending = list(self.requests)
        active: list = []
        concurrency = self.workload.concurrency
        steps = self.steps
        fast, timeout = self.fast, env.timeout
        step_cost = self.costs.step if fast else None
        while pending or active:
            admitted = []
            while pending and len(active) + len(admitted) < concurrency:
                admitted.append(pending.pop(0))
            if admitted:
                yield from self._prefill(admitted)
                active.extend(r for r in admitted if not r.is_done)
                if not active:
                    continue
            depth = self.policy.decide() if self.drafter is not None else 0
            batch = len(active)
            context = sum(r.prompt_tokens + r.generated for r in active)
            start = env.now
            kind = KIND_SPEC if depth > 0 else KIND_DECODE
            step_spec = self._steps_specs.get((kind, depth, batch, 1)) or self.step_spec(kind, depth, batch)
            if fast:  # inlined for speed: one table lookup and one event per step
                cost = step_cost(step_spec, context)
                yield timeout(cost[0])
            else:
                cost = yield from self.costs.step(env, step_spec, context)
            tokens = 0
            now = env.now
            for request in active:
                if depth > 0:
                    accepted = self.acceptance.accepted(self._uniform_row(depth), depth)
                    emitted = min(accepted + 1, request.output_tokens - request.generated)
                    self.accept_lengths.append(emitted)
                else:
                    emitted = 1
                request.generated += emitted
                tokens += emitted
                if request.generated >= request.output_tokens:
                    request.completed_at = now
            steps.append((kind, start, cost[0], cost[2], cost[1], batch, tokens, depth, cost[3], cost[4], cost[5],
                          cost[6], cost[7], cost[2], cost[8], cost[9], cost[10]))
            self.policy.observe(depth > 0, cost[0], tokens, batch)
            if any(r.completed_at is not None for r in active):
                active = [r for r in active if r.completed_at is None]

    def _prefill(self, admitted):
        env = self.env
        start = env.now
        for request in admitted:
            request.admitted_at = start
        prompt = max(r.prompt_tokens for r in admitted)
        cost = yield from self._cost(self.step_spec(KIND_PREFILL, 0, len(admitted), prompt), 0)
        now = env.now
        for request in admitted:
            request.generated = 1  # the prefill's logits give the first output token
            request.first_token_at = now
            if request.is_done:
                request.completed_at = now
        self.steps.append((KIND_PREFILL, start, cost[0], 0.0, cost[1], len(admitted), len(admitted), 0, cost[3],
                           cost[4], cost[5], cost[6], cost[7], 0.0, cost[8], cost[9], cost[10]))
