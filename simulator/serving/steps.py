"""A step at event fidelity: the drafter is a process, the passes are orders to the ranks' hosts (serving.ranks),
and the scheduler's host work runs where the engine runs it: serial with the GPU, or (the overlap scheduler)
after the hosts have launched the pass, while the GPU runs it, so that only what the GPU does not cover is exposed.

The serving loop itself (serving.server.Server.run: admission, batching, the policy's decision, the log) is the
scheduler process that calls `step`; the costs come back as STEP_COST values like the other fidelities'.
Assumption: the overlapped preparation of step n+1 does not depend on step n's sampled tokens (SGLang's overlap
scheduler resolves them on the GPU), so batches and decisions are those of the serial loop.
"""
from __future__ import annotations

import numpy as np

from ..config.errors import ConfigError
from ..timing.costs import FastStepCosts
from ..timing.machine import Machine
from ..timing.passbook import BookedCost, PassBook
from ..timing.costtable import STEP_COST, CostTable, StepCost
from ..timing import draftround
from ..timing.stepspec import PassSpec, StepSpec, exposed_before_verify_us
from ..timing.timeline import DURATION_ONLY, finish_pass
from .drafting import OwnGPUDrafter
from .overlap import check_two_batch_overlap, overlapped_result, split_plan
from .ranks import RankSet


def host_slowdown(machine: Machine) -> list[float] | None:
    """Each rank's host speed factor from runtime.host_slowdown (None: every rank alike), or one line."""
    slow = machine.scenario.spec.runtime.host_slowdown
    if not slow:
        return None
    ranks = machine.tp
    for rank in slow:
        if not 0 <= rank < ranks:
            raise ConfigError(machine.scenario.source, f"runtime.host_slowdown.{rank}",
                              f"rank {rank} is not one of the {ranks} ranks", f"0 to {ranks - 1}")
    return [slow.get(r, 1.0) for r in range(ranks)]


class Drafter:
    """The drafter as a process: host-side proposals (n-gram lookup) on the CPU, then its passes as orders to the
    ranks it runs on (the target's, in order on the same streams)."""

    own_gpus = False  # the verify's inputs and the tree mask are built behind its draft graph (stepspec)

    def __init__(self, env, machine: Machine, ranks: RankSet, rng: np.random.Generator, on_pass=None):
        self.env, self.machine, self.ranks, self.rng, self.on_pass = env, machine, ranks, rng, on_pass

    def propose(self, step: StepSpec, context: int):
        """SimPy process: one round of drafts for the batch; returns its time."""
        return (yield from draft_round(self, step, context))


def draft_round(owner, step: StepSpec, context: int):
    """Generator: one round of drafts on the owner's ranks (the target's, or the drafter's own: serving.drafting), its
    passes orders to them (timing.draftround.draft_round); returns its time as it passed (the passes waited for
    until every host has synced)."""
    start = owner.env.now
    yield from draftround.draft_round(owner.env, step, context, owner.machine.gpu,
                                      lambda spec: run_pass(owner, spec, context, main=False), owner.own_gpus)
    return owner.env.now - start


def run_pass(owner, spec: PassSpec, context: int, main: bool = True, after_us: float = 0.0, book=None):
    """Generator: one pass ordered from the owner's ranks, waited for until every host has synced; its result
    (timing.timeline.finish_pass: the duration, booked categories, spans when traced)."""
    split = split_plan(owner.machine, spec, context) if main and getattr(owner, "tbo", False) else None
    if split is None:
        plan = owner.machine.plan_at(spec.part, spec.shape, spec.graph, context)
        order = owner.ranks.launch(plan, owner.rng, after_us)
    else:  # two micro-batches interleaved (serving.overlap)
        plan, waits = split
        order = owner.ranks.launch(plan, owner.rng, after_us, waits)
    yield order.synced
    traced = owner.on_pass is not None
    book = None if traced else book if main else DURATION_ONLY
    if split is not None:
        result = overlapped_result(plan, order, traced)
    else:
        result = finish_pass(plan, order.h[None], order.H[None], order.ends(), order.begin, traced, book)
    result["synced_us"] = owner.env.now - order.begin
    if traced:
        owner.on_pass(spec, plan, result)
    return result


class EventStepCosts:
    """Steps whose passes run on rank processes (event fidelity); the drafter a process of its own."""

    def __init__(self, env, machine: Machine, rng: np.random.Generator, on_pass=None, seed: int = 0, network=None):
        self.env, self.machine, self.rng, self.on_pass = env, machine, rng, on_pass
        self.network = network
        self.book = PassBook()
        self.ranks = RankSet(env, machine.host, machine.tp, network, host_slowdown(machine))
        own = machine.scenario.spec.runtime.draft_on_own_gpus
        self.drafter = OwnGPUDrafter(env, machine, rng, network) if own else Drafter(env, machine, self.ranks, rng,
                                                                                        on_pass)
        self.observe = self.drafter.observe if own else None  # the serving loop tells it whether all were accepted
        self._planner = FastStepCosts(machine, seed, np.random.default_rng(seed))
        self.tbo = machine.scenario.spec.runtime.two_batch_overlap
        if self.tbo:
            check_two_batch_overlap(machine)

    def mean_step_us(self, step: StepSpec, context: int) -> float:
        """Expected step duration, from the fast fidelity's samples (what policies compare)."""
        return self._planner.mean_step_us(step, context)

    def step(self, env, step: StepSpec, context: int):
        """Generator (run by the scheduler process): the drafter's round, the main pass with the overlapped
        scheduler work after its launches, then the serial host work; returns a StepCost (row 0, weight 0). A drafter
        on its own GPUs starts the next step's drafts once this step's tokens have reached the target, which then
        builds its verify's inputs (timing.stepspec.exposed_before_verify_us, booked with the host work)."""
        start = env.now
        draft = 0.0
        if step.drafts or step.draft_host_us > 0:
            draft = yield env.process(self.drafter.propose(step, context))
        own = self.observe is not None and step.drafts
        if own:
            self.drafter.beside_verify(step, context)
            before = exposed_before_verify_us(step, context, self.machine.gpu, True)
            if before > 0:
                yield env.timeout(before)
        r = yield from run_pass(self, step.main, context, after_us=step.hidden_us, book=self.book)
        if own:
            yield from self.drafter.after_verify(step.main.shape.batch, step.main.shape.tokens * step.main.shape.batch)
        if step.other_us > 0:
            yield env.timeout(step.other_us)
        duration = env.now - start
        known = {"duration": duration, "pass_us": r["duration"], "draft_us": draft,
                 "other": duration - draft - r["duration"]}
        if "slot" in r:
            return StepCost(duration, BookedCost(self.book, r["slot"], known), 0, 0.0)
        cost = dict(r, **known)
        return StepCost(duration, CostTable.measured([cost[name] for name in STEP_COST]), 0, 0.0)
