"""The fast fidelity's per-shape samples: FAST_SAMPLES passes of a shape at an anchor context, drawn from the layer
model's closed form (timeline.sample_passes), kept in the run's store (simulator.cache) by value.

The standard normals depend on the seed and the shape without its context, not on the machine: anchors of one shape
and what-if runs of other machines share them (common random numbers), so interpolating between anchors and
comparing scenarios moves every sample smoothly. The normals are drawn from a generator seeded by the family's
value (_rng), never from a run's stream, so a stored hypercube is the draw itself. An eager shape's launches are the
same at every anchor and are computed once. Anchors whose plans sample the same values (PassPlan.sampled_key:
attention floor-bound at both, say) share one table, evaluated once; an eager anchor's ready times start from the
last anchor's of the same launches (a copy) with the segments whose kernel lines differ evaluated again (_ready).
Three ways to read the same samples, each the same floats: all of them with their breakdown (samples), their
durations alone (sample_durations: a mean needs no breakdown), or a few of them (sample_rows: a step drawn rarely,
such as a prefill, evaluates the passes it draws; a Latin hypercube is drawn whole, the normals and passes only for
those rows).
"""
from __future__ import annotations

import hashlib

import numpy as np

from ..cache import current, key_of
from ..hardware.gpu import Host
from .timeline import (breakdown, collective_ends, eager_launch, eager_ready, host_ready, last_collective_end,
                       latest_ready, sample_passes)

FAST_SAMPLES = 64  # passes drawn per shape (stratified) for the fast fidelity: the run-to-run SE of a mean pass ~0.3%
SAMPLE_FIELDS = ("duration", "compute", "memory", "launch", "allreduce_transfer", "allreduce_wait",
                 "allreduce_only", "allreduce_profile")


def _key(machine, part: str, shape, graph: bool, seed: int) -> tuple:
    """The value a shape's samples on a machine are computed from (the machine's digest, the pass, the seed)."""
    return (machine.key, part, key_of(shape), graph, seed)


def samples(machine, part: str, shape, graph: bool, seed: int) -> np.ndarray:
    """FAST_SAMPLES passes of this shape at an anchor context: array (samples, SAMPLE_FIELDS), read-only, stored."""
    return current().get(("sampling.samples", *_key(machine, part, shape, graph, seed)),
                         lambda: _table(machine, part, shape, graph, seed))


def _table(machine, part: str, shape, graph: bool, seed: int) -> np.ndarray:
    """samples()' table, shared by the anchors whose plans sample the same values."""
    plan, draws_key = _plan(machine, part, shape, graph, seed)

    def evaluate() -> np.ndarray:
        draws = _draws(machine, part, shape, graph, seed, draws_key, plan.num_segments)
        h = _ready(machine, plan, draws_key, draws)
        result = breakdown(plan, h, collective_ends(plan, h))  # sample_passes, with h from _ready
        return np.stack([result[f] for f in SAMPLE_FIELDS], axis=1)
    return current().get(("sampling.by_plan", machine.key, draws_key, _sampled(plan)), evaluate)


def sample_durations(machine, part: str, shape, graph: bool, seed: int) -> np.ndarray:
    """The duration column of samples() (the same floats), without the breakdown into categories unless samples()
    has it already: a planner that only averages durations (the break-even) pays for those alone."""
    store = current()
    hit = store.peek(("sampling.samples", *_key(machine, part, shape, graph, seed)))
    if hit is not None:
        return hit[:, 0]
    plan, draws_key = _plan(machine, part, shape, graph, seed)
    same = (machine.key, draws_key, _sampled(plan))
    table = store.peek(("sampling.by_plan", *same))
    if table is not None:
        return table[:, 0]

    def evaluate() -> np.ndarray:
        draws = _draws(machine, part, shape, graph, seed, draws_key, plan.num_segments)
        hmax = latest_ready(plan, machine.host, FAST_SAMPLES, draws) if plan.graph else \
            _ready(machine, plan, draws_key, draws).max(axis=1)
        return last_collective_end(plan, hmax)
    return store.get(("sampling.durations", *same), evaluate)


ROWS_ALONE = 1  # distinct rows of a shape evaluated alone before all of its rows are evaluated at once (all 64
# cost about two rows alone: measured on cluster16_h100_llama8b_dp128, 0.55 vs 1.2 ms a shape)


def sample_rows(machine, part: str, shape, graph: bool, seed: int, rows: list[int]) -> np.ndarray:
    """samples()[rows] (the same floats, a copy), evaluating only those passes unless samples() has them all: the
    normals of those columns of the family's hypercube (drawn whole, once), so that every array has the layout it
    has in the whole table (numpy's reductions pick their order by layout), and at least two passes (a lone pass
    reduces in another order). Stored by value (a run and its baseline draw the same prefill rows). Once
    ROWS_ALONE distinct rows of a shape were evaluated, a further one evaluates all of its FAST_SAMPLES rows at once
    (the same floats: any set of columns gives those columns' values; 5 KB a shape, without the whole table's
    draws and launches), read by every later row: a replica's prefill shapes recur (128 replicas, 100K requests:
    64,448 rows of 4,523 shapes, 940 of them drawn once), and a shape drawn once evaluates its row alone."""
    store = current()
    key = _key(machine, part, shape, graph, seed)
    hit = _at_hand(store, key)
    if hit is not None:
        return hit[rows]
    row_key = ("sampling.rows", *key, tuple(rows))
    if store.peek(row_key) is None:
        seen = store.peek(("sampling.rows_seen", *key)) or 0
        if seen >= ROWS_ALONE:
            every = _evaluate_rows(machine, part, shape, graph, seed, list(range(FAST_SAMPLES)))
            return store.put(("sampling.rows_all", *key), every)[rows]
        store.put(("sampling.rows_seen", *key), seen + 1)
    return store.get(row_key, lambda: _evaluate_rows(machine, part, shape, graph, seed, rows)).copy()


def rows_at_hand(machine, part: str, shape, graph: bool, seed: int) -> np.ndarray | None:
    """Every row of samples() where they are in the store already (the whole table, or sample_rows' rows all
    evaluated: the same floats), else None."""
    return _at_hand(current(), _key(machine, part, shape, graph, seed))


def _at_hand(store, key) -> np.ndarray | None:
    hit = store.peek(("sampling.samples", *key))
    return store.peek(("sampling.rows_all", *key)) if hit is None else hit


def _evaluate_rows(machine, part: str, shape, graph: bool, seed: int, rows: list[int]) -> np.ndarray:
    """samples()[rows], evaluating those passes alone (sample_rows)."""
    plan, draws_key = _plan(machine, part, shape, graph, seed)
    picked = rows if len(rows) > 1 else rows * 2
    draws = Host.normals(_cube(machine, part, shape, graph, seed, draws_key, plan.num_segments), machine.tp,
                         plan.num_segments, not graph, picked)  # a few columns: not stored (cheap, rarely again)
    launch = None if graph else eager_launch(plan, machine.host, None, len(picked), draws)
    result = sample_passes(plan, machine.host, None, len(picked), draws, launch)
    return np.stack([result[f] for f in SAMPLE_FIELDS], axis=1)[:len(rows)]


def _rng(part: str, shape, graph: bool, seed: int) -> np.random.Generator:
    """The stream of a shape family's normals: the seed and the shape without its context (a generator made from
    those values, so a stored draw of it is the draw)."""
    family = (part, shape.at(0), graph)
    entropy = int.from_bytes(hashlib.sha1(repr(family).encode()).digest()[:8], "little")
    return np.random.default_rng([seed, entropy])


def _plan(machine, part: str, shape, graph: bool, seed: int) -> tuple:
    """The anchor's plan, and the key of its family's normals."""
    plan = machine.anchor_plan(part, shape, graph)
    return plan, (part, key_of(shape.at(0)), graph, seed, plan.num_segments, machine.tp)


def _draws(machine, part: str, shape, graph: bool, seed: int, draws_key: tuple, segments: int) -> tuple:
    """The family's standard normals (Host.draws, stratified), shared by every anchor and machine of the family."""
    return current().get(("sampling.draws", draws_key), lambda: Host.normals(
        _cube(machine, part, shape, graph, seed, draws_key, segments), machine.tp, segments, not graph))


def _cube(machine, part: str, shape, graph: bool, seed: int, draws_key: tuple, segments: int) -> np.ndarray:
    """The Latin hypercube of the family's normals (Host.hypercube)."""
    return current().get(("sampling.hypercube", draws_key), lambda: Host.hypercube(
        _rng(part, shape, graph, seed), FAST_SAMPLES, machine.tp, segments, not graph))


def _launch(machine, plan, draws_key: tuple, draws: tuple) -> tuple | None:
    """An eager shape's launches, the same at every anchor (they do not depend on the context): computed once."""
    if plan.graph:
        return None
    return current().get(("sampling.launch", machine.key, draws_key, plan.launches.tobytes()),
                         lambda: eager_launch(plan, machine.host, None, FAST_SAMPLES, draws))


def _sampled(plan) -> tuple:
    """What the plan's samples depend on besides the machine and the draws: its sampled_key, or where it has none
    (a plan not built by Machine._build) every array the closed form reads, as bytes."""
    if plan.sampled_key is not None:
        return plan.sampled_key
    arrays = (plan.launches, plan.compute_us, plan.memory_us, plan.gap_us, plan.last_us, plan.collective_us,
              plan.allreduce_mask, *plan.ready_lines)
    return (plan.graph, plan.ranks, *((a.dtype.str, a.shape, np.ascontiguousarray(a).tobytes()) for a in arrays))


def _ready(machine, plan, draws_key: tuple, draws: tuple) -> np.ndarray:
    """host_ready of an anchor's FAST_SAMPLES passes. An eager shape's anchors share their launches and differ in the
    kernel lines of a few segments (attention's: the KV it reads): where another anchor was evaluated with the same
    launches, a copy of its h with only the segments whose lines differ evaluated again (timeline.eager_ready: the
    same floats, column by column). The store keeps the last h evaluated per launches: a starting point, which any
    anchor's h serves equally (the stored arrays are never written)."""
    launch = _launch(machine, plan, draws_key, draws)
    if plan.graph:
        return host_ready(plan, machine.host, None, FAST_SAMPLES, draws=draws)
    store = current()
    key = ("sampling.last_ready", machine.key, draws_key, plan.launches.tobytes())
    positions, suffixes = plan.ready_lines
    before = store.peek(key)
    if before is None or before[0].shape != positions.shape:
        h = host_ready(plan, machine.host, None, FAST_SAMPLES, draws=draws, launch=launch)
    else:
        changed = np.flatnonzero((before[0] != positions).any(axis=1) | (before[1] != suffixes).any(axis=1))
        if not changed.size:
            return before[2]
        h = before[2].copy(order="K")  # its layout too: numpy reduces over the ranks in the order of the layout
        start, H, one, bounds = launch
        h[..., changed] = eager_ready(start[..., changed], H[..., changed], one[..., changed],
                                      None if bounds is None else (bounds[0][changed], bounds[1][changed]),
                                      positions[changed], suffixes[changed])
    store.put(key, (positions, suffixes, h))
    return h
