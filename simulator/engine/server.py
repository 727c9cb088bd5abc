"""The serving loop of one TP group: requests arrive, wait for memory and a batch slot, are prefilled in chunks,
then decode or speculate in a continuous batch until done.

Each step is either a prefill step (the next prompt chunks, up to max_prefill_tokens, prefill first as SGLang's
scheduler does) or a decode step of the running batch: the policy picks plain decode or a drafter and its verify
tree, the drafter's passes and one verify pass carrying every request's tokens run on the ranks, and each request
walks its own tree with its own acceptance draws. KV memory bounds the admitted requests (queue) or evicts the
newest when it fills (preempt). At `fast` fidelity a step is one SimPy event drawn from memoised per-shape samples
of the layer model; at `layer` / `link` fidelity every collective of every pass is an event.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from ..config.errors import ConfigError
from ..model.cost import PassShape
from ..speculation.setup import build_speculation
from .requests import make_requests
from .costs import (NO_DIFFERENCE, FastStepCosts, LayerStepCosts, PassSpec, StepSpec, draft_passes,
                    step_overhead_us, verify_pass)
from .machine import Machine

KIND_PREFILL, KIND_DECODE, KIND_SPEC = 0, 1, 2
# the step log: what happened (a tuple per step in Server.steps) and what it cost (Server.step_costs: an anchor row of
# STEP_COST fields, a difference row and a weight; metrics.step_table blends them into these columns)
STEP_FACTS = ("kind", "start_at", "batch", "tokens", "depth", "drafter", "verify_tokens", "kv_tokens", "waiting",
              "context")
STEP_FIELDS = ("kind", "start_at", "duration_us", "draft_us", "pass_us", "batch", "tokens", "depth",
               "compute", "memory", "launch", "allreduce_transfer", "allreduce_wait", "draft", "other",
               "allreduce_only", "allreduce_profile", "drafter", "verify_tokens", "kv_tokens", "waiting", "context")
UNIFORM_BLOCK = 1 << 14
WALK_UNIFORMS = 16  # uniforms a tree walk takes (at least its depth): runs with different draft lengths stay aligned


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
        self._check_fits(scenario.source)
        self.waiting: deque = deque()
        self.prefilling: list = []
        self.active: list = []  # decoding requests
        self.kv_reserved = 0
        self.kv_peak = 0
        self.preemptions = 0
        self.steps: list[tuple] = []  # STEP_FACTS per step
        self.step_costs: list[tuple] = []  # (STEP_COST row, difference row, weight) per step
        self.accept_lengths: list[int] = []  # per request per speculative step, bonus token included
        self.accept_positions: list[int] = []  # tokens the request had generated before that step
        self._arrived_all = False
        self._wake = env.event()

    def _check_fits(self, file: str) -> None:
        for r in self.requests:
            need = r.prompt_tokens + r.output_tokens + self.lookahead
            if need > self.kv_capacity:
                m = self.machine.memory
                raise ConfigError(file, "workload", f"request {r.request_id} needs {need:,} tokens of KV cache "
                                  f"({r.prompt_tokens:,} prompt + {r.output_tokens:,} output + {self.lookahead} "
                                  f"lookahead), more than the {self.kv_capacity:,} that fit ({m['kv_GB']:.1f} GB per "
                                  f"GPU after {m['weights_GB']:.1f} GB of weights)",
                                  "shorter requests, a larger tp or GPUs with more memory")

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

    def expected_step_us(self, decision, batch: int, context: int) -> float:
        """The mean cost of a step (the batch-time model a load-aware policy plans with)."""
        kind = KIND_SPEC if decision else KIND_DECODE
        return self.costs.mean_step_us(self.step_spec(kind, decision, batch), context)

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
                spec = StepSpec(verify_pass(tree, batch, rt.cuda_graph_verify), draft_passes(drafter, tree, batch),
                                drafter.host_us(tree, batch), self._other_spec)
            self._step_specs[key] = spec
        return spec

    # -- arrivals and memory ---------------------------------------------------------------------------------
    def _arrivals(self):
        env = self.env
        for request in self.requests:
            if request.arrived_at > env.now:
                yield env.timeout(request.arrived_at - env.now)
            self.waiting.append(request)
            if not self._wake.triggered:
                self._wake.succeed()
        self._arrived_all = True

    def _admit(self) -> None:
        """Admit waiting requests while a batch slot is free and their KV cache fits.

        queue: a request reserves its whole cache (prompt + output + lookahead) and never has to be evicted.
        preempt: a request is admitted when its current cache fits next to what is in use now.
        """
        cap = self.workload.concurrency
        queue = self.workload.kv_overflow == "queue"
        while self.waiting and len(self.active) + len(self.prefilling) < cap:
            request = self.waiting[0]
            if queue:
                need = request.prompt_tokens + request.output_tokens + self.lookahead
                if self.kv_reserved + need > self.kv_capacity:
                    break
                self.kv_reserved += need
            elif self._kv_in_use() + self._lookahead_in_use() + request.prompt_tokens + request.generated + \
                    self.lookahead > self.kv_capacity:
                break
            self.waiting.popleft()
            if request.admitted_at is None:
                request.admitted_at = self.env.now
                if self.slots and self.slots[0].acceptance.stateful:
                    request.acceptance_state = self.slots[0].acceptance.start(request.prompt_tokens)
            request.prefill_target = request.prompt_tokens + request.generated
            request.prefilled = 0
            self.prefilling.append(request)

    def _release(self, request) -> None:
        if self.workload.kv_overflow == "queue":
            self.kv_reserved -= request.prompt_tokens + request.output_tokens + self.lookahead

    def _kv_in_use(self) -> int:
        """Cached tokens: running requests' contexts, and prefilling requests at their full prefill (their pages
        are allocated when admitted)."""
        return sum(r.prompt_tokens + r.generated for r in self.active) + \
            sum(r.prefill_target for r in self.prefilling)

    def _lookahead_in_use(self) -> int:
        return self.lookahead * len(self.active)

    def _preempt_if_full(self, lookahead: int) -> None:
        """preempt mode: evict the newest requests (prefilling first) until the step's KV cache fits; an evicted
        request is recomputed (prompt + generated) when it is admitted again."""
        while self._kv_in_use() + lookahead * len(self.active) > self.kv_capacity:
            if self.prefilling:
                victim = self.prefilling.pop()
            elif len(self.active) > 1:
                victim = self.active.pop()
            else:
                return  # one request always fits: requests larger than the cache were refused at the start
            victim.preemptions += 1
            self.preemptions += 1
            victim.prefilled = 0
            self.waiting.appendleft(victim)

    # -- the loop --------------------------------------------------------------------------------------------
    def run(self):
        """SimPy process: serve every request. The decode step is the hot path: locals, no per-step allocation
        beyond the step record (inlined for speed)."""
        env = self.env
        env.process(self._arrivals())
        steps, step_costs = self.steps, self.step_costs
        fast, timeout = self.fast, env.timeout
        step_cost = self.costs.step if fast else None
        policy = self.policy
        preempt = self.workload.kv_overflow == "preempt"
        max_steps = self.max_steps
        uniform_row = self._uniform_row
        lengths, positions = self.accept_lengths, self.accept_positions
        watch = getattr(policy, "observe_walk", None)
        primary = self.slots[0].acceptance if self.slots and self.slots[0].acceptance.stateful else None
        specs: dict = {}  # (id(decision), batch) -> StepSpec: decisions are the policy's own, long-lived objects
        while True:
            if max_steps is not None and len(steps) >= max_steps:
                return
            if self.waiting and len(self.active) + len(self.prefilling) < self.workload.concurrency:
                self._admit()
            if self.prefilling:
                yield from self._prefill()
                continue
            active = self.active
            if not active:
                if self._arrived_all and not self.waiting:
                    return
                self._wake = env.event()
                yield self._wake  # idle until the next arrival
                continue
            decision = policy.decide(self)
            if preempt:
                self._preempt_if_full(decision[1].size if decision else 1)
                active = self.active
                if not active:
                    continue
            batch = len(active)
            context = 0
            for r in active:
                context += r.prompt_tokens + r.generated
            kv_tokens = context + (decision[1].size * batch if decision else batch)
            if self.prefilling:
                kv_tokens += sum(r.prefill_target for r in self.prefilling)
            if kv_tokens > self.kv_peak:
                self.kv_peak = kv_tokens
            start = env.now
            key = (id(decision), batch)
            step_spec = specs.get(key)
            if step_spec is None:
                step_spec = specs[key] = self.step_spec(KIND_SPEC if decision else KIND_DECODE, decision, batch)
            if fast:
                duration, row, delta, weight = step_cost(step_spec, context)
                yield timeout(duration)
            else:
                row = yield from self.costs.step(env, step_spec, context)
                duration, delta, weight = row[0], NO_DIFFERENCE, 0.0
            now = env.now
            done = False
            if decision:
                kind = KIND_SPEC
                tree, model = decision[1], self.slots[decision[0]].acceptance
                depth, verify_tokens = tree.depth, tree.size
                walk_uniforms = depth if depth > WALK_UNIFORMS else WALK_UNIFORMS
                stateful = model.stateful
                tokens = 0
                moving = stateful or primary is not None  # one more uniform for the regime's switch
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
            else:
                kind = KIND_DECODE
                for request in active:
                    request.generated += 1
                    if primary is not None:
                        request.acceptance_state = primary.advance(request.acceptance_state, 1, uniform_row(1)[0])
                    if request.generated >= request.output_tokens:
                        request.completed_at = now
                        done = True
                tokens = batch
                depth = verify_tokens = 0
            steps.append((kind, start, batch, tokens, depth, decision[0] if decision else -1, verify_tokens, kv_tokens,
                          len(self.waiting), context))
            step_costs.append((row, delta, weight))
            policy.observe(decision, duration, tokens / batch, batch)
            if done:
                for r in active:
                    if r.completed_at is not None:
                        self._release(r)
                self.active = [r for r in active if r.completed_at is None]

    def _prefill(self):
        """One prefill step: the next prompt chunks of the admitted requests, up to max_prefill_tokens."""
        env = self.env
        budget = self.workload.max_prefill_tokens
        chunk: list[tuple] = []
        for request in self.prefilling:
            if budget <= 0:
                break
            take = min(request.prefill_target - request.prefilled, budget)
            chunk.append((request, take))
            budget -= take
        batch = len(chunk)
        total = sum(t for _, t in chunk)
        cached = sum(r.prefilled for r, _ in chunk)
        tokens_each = prefill_quantum(-(-total // batch))
        start = env.now
        spec = self.step_spec(KIND_PREFILL, None, batch, tokens_each)
        if self.fast:
            duration, row, delta, weight = self.costs.step(spec, cached)
            yield env.timeout(duration)
        else:
            row = yield from self.costs.step(env, spec, cached)
            delta, weight = NO_DIFFERENCE, 0.0
        now = env.now
        finished = 0
        for request, take in chunk:
            request.prefilled += take
            if request.prefilled >= request.prefill_target:
                self.prefilling.remove(request)
                if request.generated == 0:  # the prefill's logits give the first output token
                    request.generated = 1
                    request.first_token_at = now
                    finished += 1
                if request.generated >= request.output_tokens:
                    request.completed_at = now
                    self._release(request)
                else:
                    self.active.append(request)
        kv_tokens = self._kv_in_use()
        self.kv_peak = max(self.kv_peak, kv_tokens)
        self.steps.append((KIND_PREFILL, start, batch, finished, 0, -1, total, kv_tokens, len(self.waiting), cached))
        self.step_costs.append((row, delta, weight))
