"""The serving loop of one TP group: requests arrive, wait for memory and a batch slot, are prefilled in chunks,
then decode or speculate in a continuous batch until done.

Each step is either a prefill step (the next prompt chunks, up to max_prefill_tokens, prefill first as SGLang's
scheduler does) or a decode step of the running batch: the policy picks plain decode or a drafter and its verify
tree, the drafter's passes and one verify pass carrying every request's tokens run on the ranks, and each request
walks its own tree with its own acceptance draws. KV memory bounds the admitted requests (engine.admission). At
`fast` fidelity a step is one SimPy event drawn from memoised per-shape samples of the layer model; at `layer` /
`link` fidelity every collective of every pass is an event. Every step is appended to a StepLog (engine.records).
"""
from __future__ import annotations

import numpy as np

from ..model.cost import PassShape
from ..speculation.setup import build_speculation
from .admission import Admission
from .batch_view import BatchView
from .costs import FastStepCosts, LayerStepCosts, PassSpec, StepSpec, draft_passes, step_overhead_us, verify_pass
from .machine import Machine
from .records import (KIND_DECODE, KIND_PREFILL, KIND_SPEC, STEP_FACTS, STEP_FIELDS,  # noqa: F401  (re-exported)
                      CostTable, StepLog)
from .requests import make_requests

UNIFORM_BLOCK = 1 << 14
WALK_UNIFORMS = 16  # uniforms a tree walk takes (at least its depth): runs with different draft lengths stay aligned
STEP_SPEC_CACHE_SIZE = 1024  # step specs kept by (kind, decision, batch, tokens); a run uses a few per batch size


def prefill_quantum(tokens: int) -> int:
    """Prefill chunks are costed at a grid size (next power of two up to 128, then multiples of 128)."""
    if tokens <= 128:
        return 1 << max(0, (tokens - 1).bit_length())
    return -(-tokens // 128) * 128


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
        self._watch = getattr(self.policy, "observe_walk", None)  # a policy that learns from every request's walk
        # the model whose per-request state carries the text's regime (the primary drafter's, if stateful)
        self._primary = self.slots[0].acceptance if self.slots and self.slots[0].acceptance.stateful else None
        acceptance_seq, jitter_seq = np.random.SeedSequence(seed).spawn(2)
        self._acceptance_rng = np.random.default_rng(acceptance_seq)
        jitter = np.random.default_rng(jitter_seq)
        self.costs = FastStepCosts(machine, seed, jitter) if self.fast else \
            LayerStepCosts(machine, jitter, on_pass, links=fidelity == "link", seed=seed)
        self.max_steps = max_steps  # stop early (traces record the first steps only)
        self._uniforms: list[float] = []
        self._uniform_at = 0
        # the scheduler's per-step host work overlaps the GPU in plain decode, not while speculating (SGLang)
        self._other_spec = step_overhead_us(host, spec.runtime, speculating=True)
        self._other_plain = step_overhead_us(host, spec.runtime, speculating=False)
        self._step_specs: dict[tuple, StepSpec] = {}
        self.requests = make_requests(self.workload, seed, scenario.base_dir, scenario.source)
        self.lookahead = max((slot.tree.size for slot in self.slots), default=0)
        self.kv_capacity = machine.memory["kv_capacity_tokens"]
        self.admission = Admission(self.workload, self.kv_capacity, self.lookahead)
        self.admission.check_fits(self.requests, machine.memory, scenario.source)
        self.view = BatchView(self)
        self.log = StepLog()
        self.accept_lengths: list[int] = []  # per request per speculative step, bonus token included
        self.accept_positions: list[int] = []  # tokens the request had generated before that step
        self._arrived_all = False
        self._wake = env.event()

    @property
    def kv_peak(self) -> int:
        return self.admission.kv_peak

    @property
    def preemptions(self) -> int:
        return self.admission.preemptions

    # -- randomness ------------------------------------------------------------------------------------------
    def _uniform_row(self, n: int) -> list[float]:
        """n acceptance uniforms, drawn in numpy blocks (common random numbers across scenarios)."""
        if self._uniform_at + n > len(self._uniforms):
            self._uniforms = self._acceptance_rng.random(UNIFORM_BLOCK).tolist()
            self._uniform_at = 0
        row = self._uniforms[self._uniform_at:self._uniform_at + n]
        self._uniform_at += n
        return row

    # -- step costs ----------------------------------------------------------------------------------------------
    def step_spec(self, kind: int, decision, batch: int, tokens: int = 1) -> StepSpec:
        """The passes and host costs of a step, cached by value (bounded: emptied when full)."""
        key = (kind, decision, batch, tokens)
        spec = self._step_specs.get(key)
        if spec is None:
            rt = self.runtime
            if kind == KIND_PREFILL:
                spec = StepSpec(PassSpec("target", PassShape(tokens, batch), False), other_us=self._other_spec)
            elif kind == KIND_DECODE:
                spec = StepSpec(PassSpec("target", PassShape(1, batch), rt.cuda_graph_decode), other_us=self._other_plain)
            else:
                drafter, tree = self.slots[decision.drafter].drafter, decision.tree
                spec = StepSpec(verify_pass(tree, batch, rt.cuda_graph_verify), draft_passes(drafter, tree, batch),
                                drafter.host_us(tree, batch), self._other_spec)
            if len(self._step_specs) >= STEP_SPEC_CACHE_SIZE:
                self._step_specs.clear()
            self._step_specs[key] = spec
        return spec

    def _timed_cost(self, spec: StepSpec, context: int):
        """Generator: a step's time passes; returns (duration, cost table, row, weight) for the log (the decode
        loop inlines the same, see run)."""
        if self.fast:
            cost = self.costs.step(spec, context)
            yield self.env.timeout(cost[0])
            return cost
        measured = yield from self.costs.step(self.env, spec, context)
        return measured[0], CostTable.measured(measured), 0, 0.0

    # -- arrivals ---------------------------------------------------------------------------------------------
    def _arrivals(self):
        env = self.env
        for request in self.requests:
            if request.arrived_at > env.now:
                yield env.timeout(request.arrived_at - env.now)
            self.admission.waiting.append(request)
            if not self._wake.triggered:
                self._wake.succeed()
        self._arrived_all = True

    def _start_acceptance(self, request) -> None:
        if self._primary is not None:
            request.acceptance_state = self._primary.start(request.prompt_tokens)

    # -- the loop --------------------------------------------------------------------------------------------
    def run(self):
        """SimPy process: serve every request, one prefill or decode step at a time.

        Hot path: a decode step is set up and booked by plain method calls around one inlined cost draw and
        timeout, so that at fast fidelity this is the only generator a step resumes.
        """
        env, adm, log = self.env, self.admission, self.log
        env.process(self._arrivals())
        fast, timeout, step_cost = self.fast, env.timeout, self.costs.step
        max_steps = self.max_steps
        while max_steps is None or len(log) < max_steps:
            if adm.waiting and len(adm.active) + len(adm.prefilling) < adm.concurrency:
                adm.admit(env.now, self._start_acceptance)
            if adm.prefilling:
                yield from self._prefill()
                continue
            if not adm.active:
                if self._arrived_all and not adm.waiting:
                    return
                self._wake = env.event()
                yield self._wake  # idle until the next arrival
                continue
            step = self._begin_decode()
            if step is None:
                continue
            if fast:
                duration, table, row, weight = step_cost(step[-1], step[3])
                yield timeout(duration)
            else:
                cost = yield from step_cost(env, step[-1], step[3])
                duration, table, row, weight = cost[0], CostTable.measured(cost), 0, 0.0
            self._finish_decode(step, duration, table, row, weight)

    def _begin_decode(self) -> tuple | None:
        """The policy decides; preempt mode makes room; returns (decision, active, start, context, kv_tokens, step
        spec), or None when preemption emptied the batch."""
        adm = self.admission
        decision = self.policy.decide(self.view)
        if not adm.queue_mode:  # preempt mode
            adm.preempt_if_full(decision.tree.size if decision else 1)
        active = adm.active
        if not active:
            return None
        batch = len(active)
        context = 0
        for r in active:
            context += r.prompt_tokens + r.generated
        kv_tokens = context + (decision.tree.size * batch if decision else batch)
        if adm.prefilling:
            kv_tokens += sum(r.prefill_target for r in adm.prefilling)
        if kv_tokens > adm.kv_peak:
            adm.kv_peak = kv_tokens
        spec = self.step_spec(KIND_SPEC if decision else KIND_DECODE, decision, batch)
        return decision, active, self.env.now, context, kv_tokens, spec

    def _finish_decode(self, step: tuple, duration: float, table: CostTable, row: int, weight: float) -> None:
        """After the step's time: the requests advance, the step is logged, the policy observes it."""
        decision, active, start, context, kv_tokens, _ = step
        adm = self.admission
        batch = len(active)
        if decision:
            tokens, done = self._walk(active, decision, self.env.now)
            tree = decision.tree
            facts = (KIND_SPEC, start, batch, tokens, tree.depth, decision.drafter, tree.size, kv_tokens,
                     len(adm.waiting), context)
        else:
            tokens, done = self._plain(active, self.env.now)
            facts = (KIND_DECODE, start, batch, tokens, 0, -1, 0, kv_tokens, len(adm.waiting), context)
        self.log.append(facts, table, row, weight)
        self.policy.observe(decision, duration, tokens / batch, batch)
        if done:
            adm.retire(active)

    def _walk(self, active: list, decision, now: float) -> tuple[int, bool]:
        """Every request walks the verify tree with its own uniforms; returns (tokens emitted, any completed)."""
        tree, model = decision.tree, self.slots[decision.drafter].acceptance
        depth = tree.depth
        walk_uniforms = depth if depth > WALK_UNIFORMS else WALK_UNIFORMS
        stateful = model.stateful
        primary = self._primary
        moving = stateful or primary is not None  # one more uniform for the regime's switch
        uniform_row, watch = self._uniform_row, self._watch
        lengths, positions = self.accept_lengths, self.accept_positions
        tokens, done = 0, False
        for request in active:
            state = request.acceptance_state
            draws = uniform_row(walk_uniforms + 1 if moving else walk_uniforms)
            accepted = model.accepted(tree, state if stateful else None, draws)
            if watch is not None:
                watch(depth, accepted)
            emitted = min(accepted + 1, request.output_tokens - request.generated)
            lengths.append(emitted)
            positions.append(request.generated)
            if stateful:
                request.acceptance_state = model.advance(state, emitted, draws[walk_uniforms])
            elif primary is not None:  # the text's regime lives in the primary drafter's model
                request.acceptance_state = primary.advance(state, emitted, draws[walk_uniforms])
            request.generated += emitted
            tokens += emitted
            if request.generated >= request.output_tokens:
                request.completed_at = now
                done = True
        return tokens, done

    def _plain(self, active: list, now: float) -> tuple[int, bool]:
        """A plain decode step: one token per request (the regime still moves); returns (tokens, any completed)."""
        primary = self._primary
        done = False
        for request in active:
            request.generated += 1
            if primary is not None:
                request.acceptance_state = primary.advance(request.acceptance_state, 1, self._uniform_row(1)[0])
            if request.generated >= request.output_tokens:
                request.completed_at = now
                done = True
        return len(active), done

    def _prefill(self):
        """One prefill step: the next prompt chunks of the admitted requests, up to max_prefill_tokens."""
        adm = self.admission
        budget = self.workload.max_prefill_tokens
        chunk: list[tuple] = []
        for request in adm.prefilling:
            if budget <= 0:
                break
            take = min(request.prefill_target - request.prefilled, budget)
            chunk.append((request, take))
            budget -= take
        batch = len(chunk)
        total = sum(t for _, t in chunk)
        cached = sum(r.prefilled for r, _ in chunk)
        start = self.env.now
        spec = self.step_spec(KIND_PREFILL, None, batch, prefill_quantum(-(-total // batch)))
        _, table, row, weight = yield from self._timed_cost(spec, cached)
        now = self.env.now
        finished = 0
        for request, take in chunk:
            request.prefilled += take
            if request.prefilled >= request.prefill_target:
                adm.prefilling.remove(request)
                if request.generated == 0:  # the prefill's logits give the first output token
                    request.generated = 1
                    request.first_token_at = now
                    finished += 1
                if request.generated >= request.output_tokens:
                    request.completed_at = now
                    adm.release(request)
                else:
                    adm.active.append(request)
        kv_tokens = adm.kv_in_use()
        adm.note_kv(kv_tokens)
        self.log.append((KIND_PREFILL, start, batch, finished, 0, -1, total, kv_tokens, len(adm.waiting), cached),
                        table, row, weight)
