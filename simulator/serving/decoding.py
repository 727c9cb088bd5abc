"""The decode loop: the steps of the running batch, for every policy and fidelity, in one place (the simulator's hot
path).

A step: the policy decides (a fixed decision is read once), a full KV cache preempts (unless it queues), the step's
cost is drawn from the memoised tables (fast: FastStepCosts.step inlined) or run as processes (layer, link, event),
the clock moves on (Server._advance inlined: a timeout only where another process is due by the step's end), every
request walks its verify tree (Walks.walk), the step is logged (StepLog.append inlined), and the policy observes.
Inlined for speed: a fast step costs a few SimPy timeouts of Python, and each call is a large share of it. What the
loop reads once at its start (a fixed decision, preemption, the fidelity, a drafter that watches the verify) does
not change during a run.

Two shortcuts take a run of steps at once where nothing can change it (a static policy, fast fidelity, a KV cache
that queues, no step limit): a lone request that nothing can join before it completes takes decode_alone, the same
steps as arrays, its walks at once; a plain-decode batch takes serving.plainrun.decode_plain, runs of steps as
arrays until the batch changes (tests/test_speed.py runs each against this loop).
"""
from __future__ import annotations

import numpy as np

from ..timing.clock import delay_to
from ..timing.machine import context_anchors
from .plainrun import decode_plain, runs_plain
from .records import KIND_DECODE, KIND_SPEC


def fixed_decision(server) -> tuple[bool, object]:
    """(whether the policy's decision never changes, that decision): such a policy is neither asked nor told."""
    return (True, server.policy.decision) if getattr(server.policy, "fixed", False) else (False, None)


def runs_fixed(server) -> bool:
    """Whether a run of steps can be taken at once where nothing else can change it: fast fidelity, a fixed
    decision, a full KV cache that queues, no step limit and no policy watching the walks."""
    adm = server.admission
    return (server.fast and getattr(server.policy, "fixed", False) and adm.queue_mode and server.max_steps is None
            and server.walks.watch is None)


def runs_alone(server) -> bool:
    """Whether a lone request's steps can be taken at once (runs_fixed, one batch slot holding one request, and
    either a decision or no regime to move)."""
    adm = server.admission
    return (runs_fixed(server) and len(adm.active) == adm.concurrency == 1
            and (server.policy.decision is not None or server.walks.primary is None)
            and server.proposer(server.policy.decision) is None)  # a proposal-sized verify: step by step


def decode(server):
    """Generator: the next decode steps: a lone request's at once (decode_alone), a plain-decode batch's in runs
    (serving.plainrun.decode_plain), else decode_steps'."""
    if runs_alone(server):
        return decode_alone(server)
    if runs_fixed(server) and runs_plain(server):
        return decode_plain(server)
    return decode_steps(server)


def decode_steps(server):
    """Generator: decode steps of the running batch until it changes (a request completes, one is admitted and must
    prefill, or one is preempted away), then back to Server.run (see the module docstring)."""
    env, adm, log, costs, walks, view = server.env, server.admission, server.log, server.costs, server.walks, \
        server.view
    active, peek, timeout = adm.active, env.peek, env.timeout
    fixed, chosen = fixed_decision(server)
    decide, observe, admit, start_acceptance = server.policy.decide, server.policy.observe, adm.admit, \
        server._start_acceptance
    walk, plain, preempt, fast, max_steps = walks.walk, walks.plain, not adm.queue_mode, server.fast, \
        server.max_steps
    accepted_all = getattr(costs, "observe", None)  # a drafter beside the verify (serving.drafting)
    facts, costs_of_steps, flush_at = log.pending()
    if fast:
        indices, at_index = costs.indices, costs.index_at
    specs: dict = {}  # decision -> its step spec at this batch size
    batch = context = 0
    last, low, high = (), -1, -1  # the decision of the previous step (() before the first), its table's anchors
    proposer, shown = None, -1  # a proposal-sized verify (Server.proposer): the drafts the current spec verifies
    now, due = server.now, peek()  # the next other event: it cannot change while this loop yields nothing
    while max_steps is None or len(log) < max_steps:
        if adm.waiting and len(active) + len(adm.prefilling) < adm.concurrency:
            admit(now, start_acceptance)
            if adm.prefilling:
                break
        decision = chosen if fixed else decide(view)
        if preempt:
            adm.preempt_if_full(decision.tree.size if decision else 1)
            if not active:
                break
        if len(active) != batch:  # the first step, a request admitted, or one preempted away
            batch, specs, last, shown = len(active), {}, (), -1
            context = sum(r.prompt_tokens + r.generated for r in active)
        if decision is not last:  # policies hand out long-lived decisions: usually the same object
            spec = specs.get(decision)
            if spec is None:
                spec = specs[decision] = server.step_spec(KIND_SPEC if decision else KIND_DECODE, decision, batch)
            last, low, proposer, shown = decision, -1, server.proposer(decision), -1
        if proposer is not None:  # the engine verifies what the drafter proposed: the batch's mean, rounded up
            proposed = -(-sum(proposer(r.acceptance_state, r.output_tokens - r.generated, decision.tree.num_drafts)
                              for r in active) // batch)
            if proposed != shown:
                spec = specs.get((decision, proposed))
                if spec is None:
                    spec = specs[(decision, proposed)] = server.step_spec(KIND_SPEC, decision, batch, 1, proposed)
                shown, low = proposed, -1
        kv_tokens = context + (decision.tree.size * batch if decision else batch)  # nothing is prefilling
        if kv_tokens > adm.kv_peak:
            adm.kv_peak = kv_tokens
        start = now
        if fast:  # FastStepCosts.step and Server._advance, inlined
            anchors = context_anchors(context)
            if anchors[0] != low or anchors[1] != high:
                low, high = anchors[0], anchors[1]
                table = costs.pair(spec, low, high)
                durations, deltas, count = table.durations, table.duration_deltas, len(table.durations)
            weight = anchors[2]
            if at_index >= len(indices):
                indices, at_index = costs.next_index_block(), 0
            row = indices[at_index] % count
            at_index += 1
            duration = durations[row] + deltas[row] * weight
            now = start + duration
            if due <= now:
                server.now = start
                yield timeout(delay_to(env.now, now))
                due = peek()
        else:
            duration, table, row, weight = yield from costs.step(env, spec, context)
            now, due = env.now, peek()
        server.now = now
        waiting = len(adm.waiting)
        if decision:
            tokens, done = walk(active, decision, now)
            tree = decision.tree
            if accepted_all is not None:
                accepted_all(tokens == batch * (tree.depth + 1))
            depth, size = (tree.depth, tree.size) if proposer is None else (shown, shown + 1)
            facts += (KIND_SPEC, start, batch, tokens, depth, decision.drafter, size, kv_tokens, waiting,
                      context)  # StepFacts' order (a tuple: hot path)
        else:
            tokens, done = plain(active, now)
            facts += (KIND_DECODE, start, batch, tokens, 0, -1, 0, kv_tokens, waiting, context)
        costs_of_steps += (table, row, weight)  # StepLog.append, inlined
        if len(costs_of_steps) >= flush_at:
            log.flush()
        if not fixed:
            observe(decision, duration, tokens / batch, batch)
        context += tokens
        if done:
            adm.retire(active)
            break
    if fast:
        costs.index_at = at_index


def decode_alone(server):
    """Generator: a lone request's decode steps when nothing can join it before it completes (one batch slot):
    decode_steps' steps, computed as arrays. Its walks are taken at once (Walks.walk_alone: nothing else reads
    the acceptance stream meanwhile), which gives every step's context; the cost rows, durations and step ends
    follow as arrays (FastStepCosts.steps; the ends as a running sum: numpy adds in the same order, so the same
    floats), and SimPy sees a timeout only at the steps where another process is due, as in decode_steps."""
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
