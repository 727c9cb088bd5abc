"""The decode loop of one TP group: admit requests, prefill them, then plain or speculative steps until done.

Each step serves the running batch: the policy picks a draft length (0: plain decode), the drafter's passes and
the verify pass run on the ranks, the acceptance model draws how many drafts each request keeps, and the step is
recorded. At `fast` fidelity a step is one SimPy event whose passes are drawn from memoised per-shape samples of
the layer model; at `layer` fidelity every collective of every pass is an event (timeline.LayerPass).
"""
from __future__ import annotations

import math

import numpy as np

from ..model.cost import PassShape
from ..speculation.acceptance import build_acceptance
from ..speculation.drafters import build_drafter
from ..speculation.policies import build_policy
from ..workload import make_requests
from .machine import Machine
from .timeline import LayerPass

# One step record: kind, start_at, duration, draft, pass, batch, tokens, depth, and the time categories.
KIND_PREFILL, KIND_DECODE, KIND_SPEC = 0, 1, 2
PASS_FIELDS = ("duration", "compute", "memory", "launch", "allreduce_transfer", "allreduce_wait",
               "allreduce_only", "allreduce_profile")
STEP_FIELDS = ("kind", "start_at", "duration_us", "draft_us", "pass_us", "batch", "tokens", "depth",
               "compute", "memory", "launch", "allreduce_transfer", "allreduce_wait", "draft", "other",
               "allreduce_only", "allreduce_profile")
UNIFORM_BLOCK = 1 << 14


def context_bucket(context: int) -> int:
    """Round a context to a grid of ~6% relative width (256 tokens below 4K) so a pass shape is costed once."""
    if context <= 0:
        return 0
    quantum = max(256, 1 << max(0, int(math.log2(context)) - 4))
    return int(round(context / quantum)) * quantum


class Server:
    """Serves a scenario's workload on its machine; `speculate=False` is the same machine with speculation off."""

    def __init__(self, env, machine: Machine, seed: int, fidelity: str, speculate: bool = True):
        scenario = machine.scenario
        spec = scenario.spec
        self.env = env
        self.machine = machine
        self.seed = seed
        self.fast = fidelity == "fast"
        self.runtime = spec.runtime
        self.workload = spec.workload
        self.host_spec = scenario.topology.host
        speculation = spec.speculation if speculate else spec.speculation.model_copy(update={"method": "none"})
        self.speculation = speculation
        self.drafter = build_drafter(speculation.method, spec.runtime)
        self.acceptance = build_acceptance(speculation.acceptance) if speculation.method != "none" else None
        self.policy = build_policy(spec.policy, speculation)
        acceptance_seq, jitter_seq = np.random.SeedSequence(seed).spawn(2)
        self._acceptance_rng = np.random.default_rng(acceptance_seq)
        self._jitter_rng = np.random.default_rng(jitter_seq)
        self._uniforms: list[float] = []
        self._uniform_at = 0
        self._indices: list[int] = []
        self._index_at = 0
        self._tables: dict = {}
        self.requests = make_requests(self.workload)
        self.steps: list[tuple] = []
        self.accept_lengths: list[int] = []  # per request per speculative step, bonus token included

    # -- random streams, drawn in numpy blocks -------------------------------------------------------------
    def _uniform_row(self, n: int) -> list[float]:
        if self._uniform_at + n > len(self._uniforms):
            self._uniforms = self._acceptance_rng.random(UNIFORM_BLOCK).tolist()
            self._uniform_at = 0
        row = self._uniforms[self._uniform_at:self._uniform_at + n]
        self._uniform_at += n
        return row

    def _sample_index(self, size: int) -> int:
        if self._index_at >= len(self._indices):
            self._indices = self._jitter_rng.integers(0, 1 << 30, UNIFORM_BLOCK).tolist()
            self._index_at = 0
        value = self._indices[self._index_at]
        self._index_at += 1
        return value % size

    # -- passes ----------------------------------------------------------------------------------------------
    def _fast_pass(self, part: str, shape: PassShape, graph: bool) -> tuple:
        key = (part, shape, graph)
        table = self._tables.get(key)
        if table is None:
            samples = self.machine.samples(part, shape, graph, self.seed)
            table = self._tables[key] = list(zip(*(samples[f].tolist() for f in PASS_FIELDS)))
        return table[self._sample_index(len(table))]

    def _layer_pass(self, part: str, shape: PassShape, graph: bool):
        plan = self.machine.plan(part, shape, graph)
        result = yield from LayerPass(plan, self.machine.host).run(self.env, self._jitter_rng)
        return tuple(result[f] for f in PASS_FIELDS)

    def _run_passes(self, passes):
        """Generator: run passes back to back; returns (total duration, summed categories)."""
        totals = [0.0] * len(PASS_FIELDS)
        if self.fast:
            for part, shape, graph in passes:
                sample = self._fast_pass(part, shape, graph)
                for i, value in enumerate(sample):
                    totals[i] += value
            if totals[0] > 0.0:
                yield self.env.timeout(totals[0])
        else:
            for part, shape, graph in passes:
                sample = yield from self._layer_pass(part, shape, graph)
                for i, value in enumerate(sample):
                    totals[i] += value
        return totals

    # -- the loop --------------------------------------------------------------------------------------------
    def run(self):
        """SimPy process: serve every request."""
        env = self.env
        pending = list(self.requests)
        active: list = []
        concurrency = self.workload.concurrency
        overlap = self.runtime.overlap_schedule
        step_overhead = self.host_spec.step_overhead_us
        sync = self.host_spec.sync_us
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
            context = context_bucket(sum(r.context for r in active))
            start = env.now
            draft_us = draft_host = 0.0
            if depth > 0:
                draft_host = self.drafter.host_us(depth, batch)  # proposals computed on the CPU (n-gram lookup)
                draft_passes = [(p.part, p.shape, p.graph) for p in self.drafter.passes(depth, batch, context)]
                draft = yield from self._run_passes(draft_passes)
                draft_us = draft[0] + draft_host
                shape = PassShape(depth + 1, batch, context, False, True)
                main = yield from self._run_passes([("target", shape, self.runtime.cuda_graph_verify)])
            else:
                main = yield from self._run_passes([("target", PassShape(1, batch, context), self.runtime.cuda_graph_decode)])
            # the scheduler's per-step host work overlaps the GPU in plain decode, not with speculation (SGLang)
            other = sync + (step_overhead if (depth > 0 or not overlap) else 0.0)
            yield env.timeout(other + draft_host)
            tokens = 0
            now = env.now
            for request in active:
                if depth > 0:
                    accepted = self.acceptance.accepted(self._uniform_row(depth), depth)
                    emitted = min(accepted + 1, request.remaining)
                    self.accept_lengths.append(emitted)
                else:
                    emitted = 1
                request.generated += emitted
                tokens += emitted
                if request.is_done:
                    request.completed_at = now
            duration = now - start
            self.steps.append((KIND_SPEC if depth > 0 else KIND_DECODE, start, duration, draft_us, main[0], batch,
                               tokens, depth, main[1], main[2], main[3], main[4], main[5], draft_us, other,
                               main[6], main[7]))
            self.policy.observe(depth > 0, duration, tokens, batch)
            active = [r for r in active if not r.is_done]

    def _prefill(self, admitted):
        env = self.env
        start = env.now
        for request in admitted:
            request.admitted_at = start
        prompt = max(r.prompt_tokens for r in admitted)
        shape = PassShape(prompt, len(admitted), 0)
        main = yield from self._run_passes([("target", shape, False)])
        other = self.host_spec.sync_us + self.host_spec.step_overhead_us
        yield env.timeout(other)
        now = env.now
        for request in admitted:
            request.generated = 1  # the prefill's logits give the first output token
            request.first_token_at = now
            if request.is_done:
                request.completed_at = now
        self.steps.append((KIND_PREFILL, start, now - start, 0.0, main[0], len(admitted), len(admitted), 0,
                           main[1], main[2], main[3], main[4], main[5], 0.0, other, main[6], main[7]))
