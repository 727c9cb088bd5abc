"""Plain decode (speculation off) at the fast fidelity, a run of steps at a time: the hot path of a large deployment.

Between two changes of its batch (a request completes, or an arrival is admitted) a plain-decode batch's steps are
known in advance: every request emits a token a step, so the contexts are an arithmetic series, and each step's cost
is its row of the row-index stream (FastStepCosts.steps_ahead, read without being consumed) and the step ends are
a running sum (numpy adds in the same order as the step-by-step loop: the same floats). The server then sleeps in
one SimPy event until the run's last step ends, where the serving loop (decoding.decode_steps) has one event a step whenever
another instance is due (in a deployment, always). What can end a run early is an arrival at this server that
admission would take (a free batch slot and room for its KV cache: Admission.would_admit): the run then stops at the
end of the step in progress at the arrival, as the step-by-step loop would (it looks at admission between steps),
and the index stream is consumed only for the steps that ran. Nothing else a run's steps depend on can change meanwhile
(queue mode: no preemption; a fixed decision; no regime that moves with each token). The router's view is the same
(a request leaves the batch at its last step's end either way), and so is every logged step (the waiting count of a
step is taken at its end, as the loop logs it). tests/test_speed.py compares it with decoding.decode_steps.
"""
from __future__ import annotations

import numpy as np

from ..timing.clock import delay_to
from .records import KIND_DECODE

RUN_STEPS = 256  # steps costed ahead at once (a longer run continues in another block: the same steps)


def runs_plain(server) -> bool:
    """Whether decode_plain serves the server's decode steps (given decoding.runs_fixed): plain decode, no
    regime moved per token, a batch of more than one slot."""
    return server.policy.decision is None and server.walks.primary is None and server.admission.concurrency > 1


class _Run:
    """A run in flight: its step ends, and when it stops (its last step, or the step an admitted arrival ends)."""

    __slots__ = ("env", "ends", "admission", "event", "steps", "arrivals", "admits")

    def __init__(self, env, ends: np.ndarray, admission):
        self.env, self.ends, self.admission = env, ends, admission
        self.event = env.event()
        self.steps = len(ends) - 1  # the steps the run takes unless an arrival is admitted sooner
        self.arrivals: list[float] = []
        self.admits = False
        self._at(self.steps)

    def _at(self, steps: int) -> None:
        """Wake the server when the run's first `steps` steps have ended."""
        timeout = self.env.timeout(delay_to(self.env.now, float(self.ends[steps])))
        timeout.callbacks.append(lambda _: self._stop(steps))

    def _stop(self, steps: int) -> None:
        if not self.event.triggered and steps == self.steps:
            self.event.succeed()

    def arrived(self, now: float) -> None:
        """A request arrived at the server now (Server.submit): counted; if admission would take it, the run ends
        with the step in progress (the first whose end is at or after now; the run's first step starts at or before
        now)."""
        self.arrivals.append(now)
        if not self.admits and self.admission.would_admit():
            self.admits = True
            steps = 1 + int(np.searchsorted(self.ends[1:], now, side="left"))
            if steps < self.steps:
                self.steps = steps
                self._at(steps)


def decode_plain(server):
    """Generator: the decode steps of the running batch until it changes (a request completes, or an arrival is
    admitted), then back to Server.run (the same steps as decoding.decode_steps; see the module docstring)."""
    env, adm, costs, log = server.env, server.admission, server.costs, server.log
    active = adm.active
    if adm.waiting and len(active) + len(adm.prefilling) < adm.concurrency:  # decoding.decode_steps's first look
        adm.admit(server.now, server._start_acceptance)
        if adm.prefilling:
            return
    batch = len(active)
    spec = server.step_spec(KIND_DECODE, None, batch)
    context = sum(r.prompt_tokens + r.generated for r in active)
    left = min(r.output_tokens - r.generated for r in active)
    while True:
        n = min(left, RUN_STEPS)
        contexts = context + batch * np.arange(n, dtype=np.int64)
        cost = costs.steps_ahead(spec, contexts)
        ends = np.cumsum(np.concatenate(([server.now], cost.durations_us)))
        waiting = len(adm.waiting)
        run = server.run_in_flight = _Run(env, ends, adm)
        yield run.event
        server.run_in_flight = None
        steps = run.steps
        costs.index_at += steps  # the index values those steps read
        _log(log, batch, ends, contexts, waiting + np.searchsorted(np.array(run.arrivals), ends[1:steps + 1], "right"),
             cost, steps)
        adm.kv_peak = max(adm.kv_peak, int(contexts[steps - 1]) + batch)
        server.now = end = float(ends[steps])
        for r in active:
            r.generated += steps
        if steps == left:  # a request completed (Walks.plain's test)
            for r in active:
                if r.generated >= r.output_tokens:
                    r.completed_at = end
            adm.retire(active)
            return
        if run.admits:  # admission takes an arrival at this step's end (Server.run)
            return
        context, left = context + batch * steps, left - steps


def _log(log, batch: int, ends: np.ndarray, contexts: np.ndarray, waits: np.ndarray, cost, steps: int) -> None:
    """The run's first `steps` steps onto the log as arrays (StepLog.add_run: the same values as appended one by
    one)."""
    tables, left = [], steps
    for table, count in cost.tables:
        tables.append((table, min(count, left)))
        left -= count
        if left <= 0:
            break
    context = contexts[:steps]
    log.add_run({"kind": KIND_DECODE, "start_at": ends[:steps], "batch": batch, "tokens": batch, "depth": 0,
                 "drafter": -1, "verify_tokens": 0, "kv_tokens": context + batch, "waiting": waits, "context": context},
                tables, cost.rows[:steps], cost.weights[:steps])
