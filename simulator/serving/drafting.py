"""A drafter on its own GPUs beside the target's (PEARL, Liu et al. 2025; SwiftSpec, Zhang et al. 2025): the drafter's
ranks have their own hosts and streams, so it drafts while the target verifies.

What is modelled: while the target verifies step n's drafts, the drafter already drafts step n+1 from the end of
step n's chain (as if every draft is accepted: PEARL's post-verify). When step n accepted every draft, step n+1 uses
those drafts (waiting only for what is left of them); otherwise they are discarded, and the drafter drafts again
after the verify, from the corrected token. Between the two sides travel the draft tokens (to the target, before the
verify) and the target's hidden states of the step's tokens (to the drafter, after it: EAGLE-3's three feature
layers, `hidden_size` values each at 2 bytes), each a transfer over the fabric's links, rank i to rank i (each rank its 1/tp slice of the states).
The drafter issues its own ops behind its draft graph (its draft tokens and their parents chosen from its top-k);
the target builds the verify's inputs from them, its GPUs idle, before the verify: the tree's mask, positions and
retrieve indices and the verify's batch and attention metadata (SGLang 0.4.4.post2: build_tree_kernel_efficient after
its preprocess, EAGLEWorker.verify; timing.stepspec.exposed_before_verify_us).
Assumptions: the draft tokens' parents travel with them uncounted (a few bytes a token, under the link's latency);
the drafter's ranks are as many GPUs of the same kind after the target's, sharded as the target is;
its collectives take their cost alone (its own links are not shared with the target's); the ahead drafts do not
wait for the hidden states (the drafter continues from its own).
"""
from __future__ import annotations

import numpy as np

from ..config.errors import ConfigError
from ..hardware.interconnect import Fabric
from .ranks import RankSet

FEATURE_LAYERS = 3  # EAGLE-3 feeds the draft head three of the target's layers' hidden states
STATE_BYTES = 2  # bf16


def drafter_gpus(machine) -> list[str]:
    """The GPUs after the target's, as many as the target has, or one line."""
    topology, tp = machine.scenario.topology, machine.tp
    names = list(topology.gpu_names)
    target = list(machine.fabric.gpu_names)[:tp]
    rest = [g for g in names if g not in target]
    if len(rest) < tp:
        raise ConfigError(machine.scenario.source, "runtime.draft_on_own_gpus",
                          f"the drafter needs {tp} GPUs of its own beside the target's {tp}; the topology has "
                          f"{len(names)}", f"a topology with at least {2 * tp} GPUs, or parallelism.tp <= "
                          f"{len(names) // 2}")
    return rest[:tp]


class OwnGPUDrafter:
    """The drafter as a process on its own ranks, drafting one step ahead during the target's verify."""

    own_gpus = True  # the verify's inputs and the tree mask are the target's (timing.stepspec)

    def __init__(self, env, machine, rng: np.random.Generator, links):
        self.env, self.machine, self.rng, self.links = env, machine, rng, links
        self.on_pass = None
        self.ranks = RankSet(env, machine.host, machine.tp)  # its collectives alone (see the module docstring)
        tp = machine.tp
        both = Fabric(machine.scenario.topology, list(machine.fabric.gpu_names)[:tp] + drafter_gpus(machine))
        self.to_drafter = tuple(both.hop(i, tp + i) for i in range(tp))
        self.to_target = tuple(both.hop(tp + i, i) for i in range(tp))
        self.latency_us = max(both.latency_us(hop) for hop in self.to_drafter)
        self.hidden_size = machine.card.hidden_size
        self.ahead = None  # the process drafting the next step during this verify
        self.full_accept = False  # whether the last step accepted every draft
        self.redrafts = 0  # steps whose ahead drafts were discarded

    def _draft(self, step, context: int):
        """Generator: the same round as on the target's ranks (steps.draft_round: host proposals, passes, the ops
        behind the draft graph), on the drafter's own ranks and host: its own ops, not the verify's inputs."""
        from .steps import draft_round

        return (yield from draft_round(self, step, context))

    def transfer(self, hops, nbytes: float):
        """Generator: nbytes per rank over the hops (flows on the shared links, or alone)."""
        if self.links is not None:
            yield self.links.shared.flows.transfer_group(self.links.shared.routes(hops), nbytes, self.latency_us)
        else:
            yield self.env.timeout(self.latency_us)

    def propose(self, step, context: int):
        """SimPy process: this step's drafts (those made ahead if the last step accepted all, else drafted now),
        then the draft tokens to the target; returns the time the target waited."""
        env = self.env
        start = env.now
        if self.ahead is not None and self.full_accept:
            yield self.ahead
        else:
            if self.ahead is not None:
                self.redrafts += 1
                yield self.ahead  # its passes hold the drafter's streams until they end
            yield env.process(self._draft(step, context))
        tokens = sum(d.shape.tokens * d.shape.batch for d in step.drafts)
        yield from self.transfer(self.to_target, 4.0 * tokens)
        self.ahead = None
        return env.now - start

    def beside_verify(self, step, context: int) -> None:
        """The verify starts: draft the next step ahead on the drafter's own ranks."""
        self.ahead = self.env.process(self._draft(step, context))

    def after_verify(self, batch: int, tokens_verified: int):
        """Generator: the target's hidden states of the verified tokens to the drafter."""
        nbytes = tokens_verified * FEATURE_LAYERS * self.hidden_size * STATE_BYTES / max(1, self.machine.tp)
        yield from self.transfer(self.to_drafter, nbytes)

    def observe(self, accepted_all: bool) -> None:
        self.full_accept = accepted_all
