"""The fast fidelity's decode loop under a policy whose decision never changes (static speculation): the simulator's
hot path, in one place.

Server._decode serves every policy and fidelity; when the decision is fixed, the fidelity is fast, a full KV cache
queues instead of preempting and no policy watches the walks, a step is only: draw its cost row
(FastStepCosts.step), move the clock (Server._advance), walk every request's verify tree (Walks.walk), log the step
(StepLog.append). This loop does exactly that, with the cost draw, the clock and the log inlined (inlined for speed: a
step costs a few SimPy timeouts of Python, and each call is a large share of it) and the per-step choices of the
general loop (decide, observe, preempt, a changed batch) left out. Nothing else can act between two steps unless another
process is due by the step's end (then a timeout, as in Server._decode), so admission is looked at when the loop
starts and after every timeout, not at every step. It reads the same random streams in the same order, so the
results are the same floats as Server._decode's (tests/test_speed.py runs both).
"""
from __future__ import annotations

import numpy as np

from ..timing.clock import delay_to
from ..timing.machine import context_anchors
from .plainrun import decode_plain, runs_plain
from .records import KIND_DECODE, KIND_SPEC


def runs_fixed(server) -> bool:
    """Whether this module serves the server's decode steps: fast fidelity, a decision that never changes, a full
    KV cache that queues, no step limit and no policy watching the walks."""
    return (server.fast and getattr(server.policy, "fixed", False) and server.admission.queue_mode
            and server.max_steps is None and server.walks.watch is None)


def decode(server):
    """Generator: the next decode steps of a server that runs_fixed: all of a lone request's at once when nothing can
    join it before it completes (one batch slot; plain decode where no regime moves), else decode_fixed's
    (speculating) or Server._decode's."""
    adm, decision = server.admission, server.policy.decision
    if len(adm.active) == adm.concurrency == 1 and (decision is not None or server.walks.primary is None):
        return decode_alone(server)
    if decision is not None:
        return decode_fixed(server)
    return decode_plain(server) if runs_plain(server) else server._decode()


def decode_fixed(server):
    """Generator: the decode steps of the running batch until it changes (a request completes, or one is admitted),
    then back to Server.run (the same steps as Server._decode; see the module docstring)."""
    env, adm, costs, walks, log, decision = server.env, server.admission, server.costs, server.walks, server.log, \
        server.policy.decision
    active, peek, timeout, batch = adm.active, env.peek, env.timeout, len(adm.active)
    context = sum(r.prompt_tokens + r.generated for r in active)
    spec = server.step_spec(KIND_SPEC, decision, batch)
    tree = decision.tree
    drafter, depth, size, lookahead = decision.drafter, tree.depth, tree.size, tree.size * batch
    facts, rows, flush_at = log.pending()
    indices, at_index, walk = costs.indices, costs.index_at, walks.walk
    now, due, check, low, high = server.now, peek(), True, -1, -1
    while True:
        if check:  # the loop's start, or another process ran: admission may have work
            if _admitted(server, now, batch):
                break
            waiting, check = len(adm.waiting), False
        kv_tokens = context + lookahead
        if kv_tokens > adm.kv_peak:
            adm.kv_peak = kv_tokens
        anchors = context_anchors(context)  # FastStepCosts.step, inlined
        if anchors[0] != low or anchors[1] != high:
            low, high = anchors[0], anchors[1]
            table = costs.pair(spec, low, high)
            durations, deltas, count = table.durations, table.duration_deltas, len(table.durations)
        weight = anchors[2]
        if at_index >= len(indices):
            indices, at_index = costs.next_index_block(), 0
        row = indices[at_index] % count
        at_index += 1
        start = now
        now = start + (durations[row] + deltas[row] * weight)
        if due <= now:  # Server._advance, inlined
            server.now = start
            yield timeout(delay_to(env.now, now))
            due, waiting, check = peek(), len(adm.waiting), True
        tokens, done = walk(active, decision, now)
        facts += (KIND_SPEC, start, batch, tokens, depth, drafter, size, kv_tokens, waiting, context)  # StepFacts' order
        rows += (table, row, weight)  # StepLog.append, inlined
        if len(rows) >= flush_at:
            log.flush()
        context += tokens
        if done:
            adm.retire(active)
            break
    costs.index_at, server.now = at_index, now


def _admitted(server, now: float, batch: int) -> bool:
    """Admit what fits (Server._decode's check); True if the batch changed (a request to prefill, or one decoding)."""
    adm = server.admission
    if adm.waiting and len(adm.active) + len(adm.prefilling) < adm.concurrency:
        adm.admit(now, server._start_acceptance)
        return bool(adm.prefilling) or len(adm.active) != batch
    return False


def decode_alone(server):
    """Generator: a lone request's decode steps when nothing can join it before it completes (one batch slot):
    decode_fixed's steps, computed as arrays. Its walks are taken at once (Walks.walk_alone: nothing else reads
    the acceptance stream meanwhile), which gives every step's context; the cost rows, durations and step ends
    follow as arrays (FastStepCosts.steps; the ends as a running sum: numpy adds in the same order, so the same
    floats), and SimPy sees a timeout only at the steps where another process is due, as in decode_fixed."""
    env, adm, decision = server.env, server.admission, server.policy.decision
    request = adm.active[0]
    waiting = len(adm.waiting)  # no batch slot is free: admission has nothing to do
    context = request.prompt_tokens + request.generated
    if decision is None:  # plain decode: a token a step (Walks.plain)
        emitted = np.ones(server.walks.plain_alone(request), dtype=np.int64)
        kind, depth, drafter, size, lookahead = KIND_DECODE, 0, -1, 0, 1
    else:
        emitted = np.array(server.walks.walk_alone(request, decision), dtype=np.int64)
        kind, depth, drafter = KIND_SPEC, decision.tree.depth, decision.drafter
        size = lookahead = decision.tree.size
    contexts = context + np.concatenate(([0], np.cumsum(emitted[:-1])))
    costs = server.costs.steps(server.step_spec(kind, decision, 1), contexts)
    ends = np.cumsum(np.concatenate(([server.now], costs.durations_us)))
    ends_at, n, k = ends.tolist(), len(emitted), 0
    waits = np.empty(n)
    while k < n:
        j = k + int(np.searchsorted(ends[1 + k:], env.peek(), side="left"))  # the next step another process is due by
        waits[k:j] = waiting
        if j == n:
            break
        server.now = ends_at[j]
        yield env.timeout(delay_to(env.now, ends_at[j + 1]))
        waits[j] = waiting = len(adm.waiting)
        k = j + 1
    server.log.extend({"kind": kind, "start_at": ends[:-1], "batch": 1, "tokens": emitted, "depth": depth,
                       "drafter": drafter, "verify_tokens": size, "kv_tokens": contexts + lookahead,
                       "waiting": waits, "context": contexts}, costs.tables, costs.rows, costs.weights)
    adm.kv_peak = max(adm.kv_peak, int(contexts[-1]) + lookahead)
    request.completed_at = server.now = ends_at[-1]
    adm.retire(adm.active)
