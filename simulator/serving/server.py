"""The serving loop of one TP group: requests arrive, wait for memory and a batch slot, are prefilled in chunks,
then decode or speculate in a continuous batch until done.

Each step is either a prefill step (the next prompt chunks, up to max_prefill_tokens, prefill first as SGLang's
scheduler does) or a decode step of the running batch: the policy picks plain decode or a drafter and its verify
tree, the drafter's passes and one verify pass carrying every request's tokens run on the ranks, and each request
walks its own tree with its own acceptance draws. KV memory bounds the admitted requests (serving.admission). At
`fast` fidelity a step is one SimPy event drawn from memoised per-shape samples of the layer model; at `layer` /
`link` fidelity every collective of every pass is an event. Every step is appended to a StepLog (serving.records).
"""
from __future__ import annotations

import numpy as np

from ..speculation.setup import build_speculation
from .admission import Admission
from .batch_view import BatchView
from ..timing.costs import FastStepCosts
from ..timing.stepspec import StepSpec
from ..timing.machine import Machine
from .records import (KIND_DECODE, KIND_PREFILL, KIND_SPEC, STEP_FACTS, STEP_FIELDS,  # noqa: F401  (re-exported)
                      StepFacts, StepLog)
from .requests import make_requests
from .stepspecs import StepSpecs
from .walking import Walks
from .decoding import decode
from ..timing.clock import delay_to


def prefill_quantum(tokens: int) -> int:
    """Prefill chunks are costed at a grid size (next power of two up to 128, then multiples of 128)."""
    if tokens <= 128:
        return 1 << max(0, (tokens - 1).bit_length())
    return -(-tokens // 128) * 128


class Server:
    """Serves a scenario's workload on its machine; `speculate=False` is the same machine with speculation off."""

    def __init__(self, env, machine: Machine, seed: int, fidelity: str, speculate: bool = True,
                 on_pass=None, max_steps: int | None = None, routed: bool = False, network=None):
        """routed: the requests come from a router (submit, close) instead of the server's own workload; network:
        at link fidelity, this instance's handle on links shared with other instances (serving.deployment)."""
        scenario = machine.scenario
        spec = scenario.spec
        self.env = env
        self.now = env.now  # the server's clock: SimPy's, or ahead of it between fast steps (see _advance)
        self.machine = machine
        self.fast = fidelity == "fast"
        self.workload = spec.workload
        setup = build_speculation(scenario, speculate)
        self.slots = setup.slots
        self.policy = setup.policy
        acceptance_seq, jitter_seq = np.random.SeedSequence(seed).spawn(2)
        self.walks = Walks(self.slots, self.policy, np.random.default_rng(acceptance_seq))
        self._primary = self.walks.primary
        self._policy_start = getattr(self.policy, "start_request", None)  # a per-request schedule (AssistantHeuristic)
        jitter = np.random.default_rng(jitter_seq)
        # the breakdown of a step's cost is evaluated only if read (a sweep point reads the durations alone)
        links = network or None
        if links is None and fidelity in ("link", "event"):  # the flow network: imported only at these fidelities
            from ..timing.linkpass import SharedLinks

            links = SharedLinks(env, machine.fabric).view(0)
        if fidelity == "event":  # the ranks, collectives and drafter as processes (serving/)
            from .steps import EventStepCosts
            self.costs = EventStepCosts(env, machine, jitter, on_pass, seed=seed, network=links)
        elif self.fast:
            self.costs = FastStepCosts(machine, seed, jitter, deferred=True)
        else:
            from ..timing.layercosts import LayerStepCosts

            self.costs = LayerStepCosts(machine, jitter, on_pass, seed=seed, network=links)
        self.max_steps = max_steps  # stop early (traces record the first steps only)
        self.specs = StepSpecs(machine, self.slots, speculate)  # what each step runs (serving.stepspecs)
        self.step_spec, self.proposer = self.specs.step_spec, self.specs.proposer  # bound once: the decode loop's
        self.routed = routed
        self.on_prefilled = None  # a prefill instance's hand-off of prefilled requests (serving.disaggregation)
        self.kv_received: list[tuple[float, float]] = []  # a decode instance's KV transfers: (bytes per rank, us)
        self.requests = [] if routed else make_requests(self.workload, seed, scenario.base_dir, scenario.source)
        self.lookahead = setup.lookahead  # the largest tree the drafters or the policy may verify
        self.kv_capacity = machine.memory["kv_capacity_tokens"]
        self.admission = Admission(self.workload, self.kv_capacity, self.lookahead)
        self.admission.check_fits(self.requests, machine.memory, scenario.source)
        self.view = BatchView(self)
        self.log = StepLog()
        self.accept_lengths = self.walks.lengths  # per request per speculative step, bonus token included
        self.accept_positions = self.walks.positions  # tokens the request had generated before that step
        self._arrived_all = False
        self._wake = env.event()
        self.run_in_flight = None  # a run of plain decode steps the server sleeps in (serving.plainrun)

    @property
    def kv_peak(self) -> int:
        return self.admission.kv_peak

    @property
    def link_delay_us(self) -> float:
        """At link fidelity, the time this instance's collectives took beyond what they take alone (contention)."""
        network = getattr(self.costs, "network", None)
        return network.delay_us if network is not None else 0.0

    @property
    def preemptions(self) -> int:
        return self.admission.preemptions

    # -- step costs ----------------------------------------------------------------------------------------------
    def _timed_cost(self, spec: StepSpec, context: int):
        """Generator: a prefill step's time passes; returns its StepCost for the log (fast
        fidelity evaluates only the rows it draws, sparse_step; the decode loop, serving/decoding.py, draws its step
        costs inline)."""
        if self.fast:
            cost = self.costs.sparse_step(spec, context)  # a prefill: its few rows evaluated alone
            yield from self._advance(cost.duration_us)
            return cost
        cost = yield from self.costs.step(self.env, spec, context)
        self.now = self.env.now
        return cost

    # -- the clock --------------------------------------------------------------------------------------------
    # A fast step that ends before anything else is scheduled moves the server's clock on without a SimPy event
    # (inlined for speed: no other process can act in between, so an event would change nothing); when another
    # process is due by the step's end, a timeout brings the environment to exactly that time and SimPy orders the
    # two as before. The times are the same floats as with one timeout per step.
    def _advance(self, duration: float):
        """Generator: the server's clock moves on by `duration` (inlined in the decode loop, serving/decoding.py)."""
        end = self.now + duration
        env = self.env
        if env.peek() <= end:
            yield env.timeout(delay_to(env.now, end))
        self.now = end

    def _sync(self):
        """Generator: the environment's clock catches up with the server's (before waiting on other processes)."""
        if self.env.now < self.now:
            yield self.env.timeout(delay_to(self.env.now, self.now))
        self.now = self.env.now

    # -- arrivals ---------------------------------------------------------------------------------------------
    @property
    def load(self) -> int:
        """Requests here now: waiting, prefilling or decoding (what a least-loaded router compares)."""
        adm = self.admission
        return len(adm.waiting) + len(adm.prefilling) + len(adm.active)

    def submit(self, request) -> None:
        """A request the router sends here arrives now (routed servers)."""
        self.requests.append(request)
        self.admission.waiting.append(request)
        self.admission.held += 1
        if self.run_in_flight is not None:  # a run of plain decode steps may end sooner (serving.plainrun)
            self.run_in_flight.arrived(self.env.now)
        if not self._wake.triggered:
            self._wake.succeed()

    def close(self) -> None:
        """The router will send nothing more: the server stops once it has served what it holds."""
        self._arrived_all = True
        if not self._wake.triggered:
            self._wake.succeed()

    def _arrivals(self):
        env = self.env
        if self.workload.turns > 1:
            self._conversations()
            return
        for request in self.requests:
            if request.arrived_at > env.now:
                yield env.timeout(request.arrived_at - env.now)
            self._arrive(request, env.now)
        self._arrived_all = True

    def _arrive(self, request, now: float) -> None:
        """A request reaches the server at `now`: it waits for admission, and a sleeping scheduler wakes."""
        self.admission.waiting.append(request)
        self.admission.held += 1
        if self.run_in_flight is not None:
            self.run_in_flight.arrived(now)
        if not self._wake.triggered:
            self._wake.succeed()

    def _conversations(self) -> None:
        """The client of workload.turns (all arrivals at once, config.checks): request i is turn
        i % turns of conversation i // turns; the first `max_concurrency` conversations (all, without one) send
        their first turn now, each later turn is sent when the turn before it completes, and a conversation's last
        turn completing sends the next waiting conversation's first (its client thread moves on). A request's
        arrived_at is when it is sent."""
        turns, requests = self.workload.turns, self.requests
        starts = list(range(0, len(requests), turns))
        clients = self.workload.max_concurrency or len(starts)
        queued = iter(starts[clients:])
        sent = 0

        def send(request) -> None:
            nonlocal sent
            request.arrived_at = self.now
            sent += 1
            if sent == len(requests):
                self._arrived_all = True
            self._arrive(request, self.now)

        def completed(request) -> None:
            i = request.request_id
            if (i + 1) % turns and i + 1 < len(requests):
                send(requests[i + 1])
            else:
                nxt = next(queued, None)
                if nxt is not None:
                    send(requests[nxt])

        self.admission.on_complete = completed
        for i in starts[:clients]:
            send(requests[i])

    def _start_acceptance(self, request) -> None:
        """A request's first admission: its acceptance state starts, and a policy that restarts per request does."""
        if self._primary is not None:
            request.acceptance_state = self._primary.start_request(request)
        if self._policy_start is not None:
            self._policy_start()

    # -- the loop --------------------------------------------------------------------------------------------
    def run(self):
        """SimPy process: serve every request, one prefill or decode step at a time."""
        env, adm, log = self.env, self.admission, self.log
        if not self.routed:
            env.process(self._arrivals())
        max_steps = self.max_steps
        while max_steps is None or len(log) < max_steps:
            if adm.waiting and len(adm.active) + len(adm.prefilling) < adm.concurrency:
                adm.admit(self.now, self._start_acceptance)
            if adm.prefilling:
                yield from self._prefill()
            elif adm.active:
                yield from decode(self)  # the decode loop (serving/decoding.py)
            elif self._arrived_all and not adm.waiting:
                break
            else:
                yield from self._sync()
                self._wake = env.event()
                yield self._wake  # idle until the next arrival
                self.now = env.now
        yield from self._sync()  # the run ends at the server's time

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
        start = self.now
        spec = self.step_spec(KIND_PREFILL, None, batch, prefill_quantum(-(-total // batch)))
        _, table, row, weight = yield from self._timed_cost(spec, cached)
        now = self.now
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
                elif self.on_prefilled is not None:  # a prefill instance: the KV cache moves to a decode instance
                    adm.release(request)
                    self.on_prefilled(request)
                else:
                    adm.active.append(request)
        kv_tokens = adm.kv_in_use()
        adm.note_kv(kv_tokens)
        self.log.append(StepFacts(KIND_PREFILL, start, batch, finished, 0, -1, total, kv_tokens, len(adm.waiting),
                                  cached), table, row, weight)
