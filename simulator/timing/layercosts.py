"""What a step costs at layer or link fidelity: every pass runs (layer: the collective recurrence stepped in Python,
a SimPy timeout only where another process is due; link: the collectives' flows on the shared links, their events).

The step's passes (drafts, then a decode/verify/prefill pass) and host-side costs, as timing.costs describes them;
the cost comes back as STEP_COST values like FastStepCosts.step's.
"""
from __future__ import annotations

import numpy as np

from .costs import FastStepCosts
from .draftround import draft_round
from .stepspec import PassSpec, StepSpec, exposed_before_verify_us
from .linkpass import LinkPass
from .machine import Machine
from .passbook import BookedCost, PassBook
from .costtable import STEP_COST, CostTable, StepCost
from .timeline import DURATION_ONLY, LayerPass


class LayerStepCosts:
    """Steps whose passes run at layer (the recurrence in Python, a few events a step) or link fidelity (one process
    a pass: the ranks' arrivals in closed form, each collective's transfers as flows on the shared links).

    `on_pass(spec, plan, result)`, when given, receives every pass with its rank timeline (result['_spans']).
    """

    def __init__(self, machine: Machine, rng: np.random.Generator, on_pass=None, seed: int = 0, network=None):
        """network: at link fidelity, this instance's handle on the shared links (linkpass.InstanceLinks)."""
        self.machine = machine
        self._rng = rng
        self.on_pass = on_pass
        self.network = network
        self.book = PassBook()
        self._planner = FastStepCosts(machine, seed, np.random.default_rng(seed))
        self.own_gpus = machine.scenario.spec.runtime.draft_on_own_gpus  # who builds the verify's inputs (stepspec)

    def mean_step_us(self, step: StepSpec, context: int) -> float:
        """Expected step duration, from the same memoised samples the fast fidelity uses (for policies)."""
        return self._planner.mean_step_us(step, context)

    def _run(self, env, spec: PassSpec, context: int, main: bool = True):
        """Generator: one pass; a draft pass (main False) yields only its duration unless a trace wants it all."""
        plan = self.machine.plan_at(spec.part, spec.shape, spec.graph, context)
        traced = self.on_pass is not None
        # a trace reads every pass's breakdown at once; a step's breakdown is its main pass's (drafting is a whole)
        book = None if traced else self.book if main else DURATION_ONLY
        if self.network is not None:  # link fidelity: ranks and collective steps as processes
            result = yield from LinkPass(plan, self.machine.host, self.network).run(env, self._rng, traced, book)
        else:
            result = yield from LayerPass(plan, self.machine.host).run(env, self._rng, with_spans=traced, book=book)
        if self.on_pass is not None:
            self.on_pass(spec, plan, result)
        return result

    def step(self, env, step: StepSpec, context: int):
        """Generator: runs the step's passes and host costs; returns a StepCost (row 0, weight 0) like
        FastStepCosts.step, the main pass's categories booked for when the log is read (timing.passbook)."""
        draft = yield from draft_round(env, step, context, self.machine.gpu,
                                       lambda spec: self._run(env, spec, context, main=False), self.own_gpus)
        other = step.other_us
        if self.own_gpus and step.drafts:  # the verify's inputs, built on the target's ranks before the verify
            before = exposed_before_verify_us(step, context, self.machine.gpu, True)
            if before > 0:
                yield env.timeout(before)
            other += before
        r = yield from self._run(env, step.main, context)
        if step.other_us > 0:
            yield env.timeout(step.other_us)
        known = {"duration": r["duration"] + draft + other, "pass_us": r["duration"], "draft_us": draft,
                 "other": other}
        if "slot" in r:
            return StepCost(known["duration"], BookedCost(self.book, r["slot"], known), 0, 0.0)
        cost = dict(r, **known)
        return StepCost(known["duration"], CostTable.measured([cost[name] for name in STEP_COST]), 0, 0.0)
