"""The fast fidelity's per-shape samples: FAST_SAMPLES passes of a shape at an anchor context, drawn from the layer
model's closed form (timeline.sample_passes), memoised per process by value.

The standard normals depend on the seed and the shape without its context, not on the machine: anchors of one shape
and what-if runs of other machines share them (common random numbers), so interpolating between anchors and
comparing scenarios moves every sample smoothly. An eager shape's launches are the same at every anchor and are
computed once. Anchors whose plans sample the same values (PassPlan.sampled_key: attention floor-bound at both,
say) share one table, evaluated once; an eager anchor's ready times are the previous anchor's with the segments
whose kernel lines differ evaluated again (_ready). Three ways to read the same samples, each the same floats: all
of them with their breakdown (samples), their durations alone (sample_durations: a mean needs no breakdown), or a
few of them (sample_rows: a step drawn rarely, such as a prefill, evaluates the passes it draws; a Latin hypercube
is drawn whole, the normals and passes only for those rows).
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict

import numpy as np

from ..hardware.gpu import Host
from .timeline import (breakdown, collective_ends, eager_launch, eager_ready, host_ready, last_collective_end,
                       latest_ready, sample_passes)

FAST_SAMPLES = 64  # passes drawn per shape (stratified) for the fast fidelity: the run-to-run SE of a mean pass ~0.3%
SAMPLE_FIELDS = ("duration", "compute", "memory", "launch", "allreduce_transfer", "allreduce_wait",
                 "allreduce_only", "allreduce_profile")
_SAMPLE_CACHE: "OrderedDict[tuple, np.ndarray]" = OrderedDict()  # (machine key, part, shape, graph, seed) -> samples
_SAMPLE_CACHE_SIZE = 4096
_DRAWS: dict[tuple, tuple] = {}  # (family, seed, segments, ranks) -> Host.draws' normals
_BY_PLAN: dict[tuple, np.ndarray] = {}  # (machine key, draws key, _sampled(plan)) -> samples' table
_DURATIONS: dict[tuple, np.ndarray] = {}  # _BY_PLAN's key -> the duration column, where only that was asked for
_LAUNCHES: dict[tuple, tuple] = {}  # (machine key, draws key, launch counts) -> timeline.eager_launch's arrays
_LAUNCHES_SIZE = 16  # each ~1.5 MB at 8 ranks x 124 segments; a run has a few eager shapes
_HYPERCUBES: dict[tuple, np.ndarray] = {}  # draws key -> the uniforms of its normals, for sample_rows
_HYPERCUBES_SIZE = 16  # each ~0.5 MB at 8 ranks x 124 segments
_READY: dict[tuple, tuple] = {}  # an eager family's launches on a machine -> (kernel lines, h) last evaluated with them
_READY_SIZE = 8  # each h ~0.5 MB at 64 samples x 8 ranks x 124 segments
_ROWS: dict[tuple, np.ndarray] = {}  # samples()' key and rows -> sample_rows' result (a run and its baseline share it)
_PICKED: dict[tuple, tuple] = {}  # (draws key, columns) -> the normals of those columns (every machine shares them)
_ROWS_SIZE = 256


def _bounded(cache: dict, key, value, size: int):
    """Store in a cache that forgets its oldest entry beyond `size`."""
    cache[key] = value
    if len(cache) > size:
        cache.pop(next(iter(cache)))
    return value


def samples(machine, part: str, shape, graph: bool, seed: int) -> np.ndarray:
    """FAST_SAMPLES passes of this shape at an anchor context: array (samples, SAMPLE_FIELDS), memoised."""
    key = (machine.key, part, shape, graph, seed)
    hit = _SAMPLE_CACHE.get(key)
    if hit is not None:
        _SAMPLE_CACHE.move_to_end(key)
        return hit
    plan, draws_key = _plan(machine, part, shape, graph, seed)
    same = (machine.key, draws_key, _sampled(plan))
    table = _BY_PLAN.get(same)
    if table is None:
        draws = _draws(machine, part, shape, graph, seed, draws_key, plan.num_segments)
        h = _ready(machine, plan, draws_key, draws)
        result = breakdown(plan, h, collective_ends(plan, h))  # sample_passes, with h from _ready
        table = _bounded(_BY_PLAN, same, np.stack([result[f] for f in SAMPLE_FIELDS], axis=1), _SAMPLE_CACHE_SIZE)
    _SAMPLE_CACHE[key] = table
    if len(_SAMPLE_CACHE) > _SAMPLE_CACHE_SIZE:
        _SAMPLE_CACHE.popitem(last=False)
    return table


def sample_durations(machine, part: str, shape, graph: bool, seed: int) -> np.ndarray:
    """The duration column of samples() (the same floats), without the breakdown into categories unless samples()
    has it already: a planner that only averages durations (the break-even) pays for those alone."""
    key = (machine.key, part, shape, graph, seed)
    hit = _SAMPLE_CACHE.get(key)
    if hit is not None:
        return hit[:, 0]
    plan, draws_key = _plan(machine, part, shape, graph, seed)
    same = (machine.key, draws_key, _sampled(plan))
    table = _BY_PLAN.get(same)
    if table is not None:
        return table[:, 0]
    durations = _DURATIONS.get(same)
    if durations is None:
        draws = _draws(machine, part, shape, graph, seed, draws_key, plan.num_segments)
        hmax = latest_ready(plan, machine.host, FAST_SAMPLES, draws) if plan.graph else \
            _ready(machine, plan, draws_key, draws).max(axis=1)
        durations = _bounded(_DURATIONS, same, last_collective_end(plan, hmax), _SAMPLE_CACHE_SIZE)
    return durations


def sample_rows(machine, part: str, shape, graph: bool, seed: int, rows: list[int]) -> np.ndarray:
    """samples()[rows] (the same floats), evaluating only those passes unless samples() has them all: the normals of
    those columns of the family's hypercube (drawn whole, once), so that every array has the layout it has in the
    whole table (numpy's reductions pick their order by layout), and at least two passes (a lone pass reduces in
    another order). Memoised per process by value (a run and its baseline draw the same prefill rows), and the
    normals of those columns too (every machine's)."""
    key = (machine.key, part, shape, graph, seed)
    hit = _SAMPLE_CACHE.get(key)
    if hit is not None:
        return hit[rows]
    done = _ROWS.get((key, tuple(rows)))
    if done is not None:
        return done.copy()
    plan, draws_key = _plan(machine, part, shape, graph, seed)
    picked = rows if len(rows) > 1 else rows * 2
    draws = _PICKED.get((draws_key, tuple(picked)))
    if draws is None:
        cube = _cube(machine, part, shape, graph, seed, draws_key, plan.num_segments)
        draws = _bounded(_PICKED, (draws_key, tuple(picked)),
                         Host.normals(cube, machine.tp, plan.num_segments, not graph, picked), _ROWS_SIZE)
    launch = None if graph else eager_launch(plan, machine.host, None, len(picked), draws)
    result = sample_passes(plan, machine.host, None, len(picked), draws, launch)
    return _bounded(_ROWS, (key, tuple(rows)), np.stack([result[f] for f in SAMPLE_FIELDS], axis=1)[:len(rows)],
                    _ROWS_SIZE).copy()


def _rng(part: str, shape, graph: bool, seed: int) -> np.random.Generator:
    """The stream of a shape family's normals: the seed and the shape without its context."""
    family = (part, shape.at(0), graph)
    entropy = int.from_bytes(hashlib.sha1(repr(family).encode()).digest()[:8], "little")
    return np.random.default_rng([seed, entropy])


def _plan(machine, part: str, shape, graph: bool, seed: int) -> tuple:
    """The anchor's plan, and the key of its family's normals."""
    plan = machine.anchor_plan(part, shape, graph)
    return plan, ((part, shape.at(0), graph), seed, plan.num_segments, machine.tp)


def _draws(machine, part: str, shape, graph: bool, seed: int, draws_key: tuple, segments: int) -> tuple:
    """The family's standard normals (Host.draws, stratified), shared by every anchor and machine of the family."""
    draws = _DRAWS.get(draws_key)
    if draws is None:
        cube = _cube(machine, part, shape, graph, seed, draws_key, segments)
        draws = _bounded(_DRAWS, draws_key, Host.normals(cube, machine.tp, segments, not graph), _SAMPLE_CACHE_SIZE)
    return draws


def _cube(machine, part: str, shape, graph: bool, seed: int, draws_key: tuple, segments: int) -> np.ndarray:
    """The Latin hypercube of the family's normals (Host.hypercube)."""
    cube = _HYPERCUBES.get(draws_key)
    if cube is None:
        cube = _bounded(_HYPERCUBES, draws_key, Host.hypercube(_rng(part, shape, graph, seed), FAST_SAMPLES,
                                                                machine.tp, segments, not graph), _HYPERCUBES_SIZE)
    return cube


def _launch(machine, plan, draws_key: tuple, draws: tuple) -> tuple | None:
    """An eager shape's launches, the same at every anchor (they do not depend on the context): computed once."""
    if plan.graph:
        return None
    launch_key = (machine.key, draws_key, plan.launches.tobytes())
    launch = _LAUNCHES.get(launch_key)
    if launch is None:
        launch = _bounded(_LAUNCHES, launch_key, eager_launch(plan, machine.host, None, FAST_SAMPLES, draws),
                          _LAUNCHES_SIZE)
    return launch


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
    launches, its h with only the segments whose lines differ evaluated again (timeline.eager_ready: the same
    floats, column by column)."""
    launch = _launch(machine, plan, draws_key, draws)
    if plan.graph:
        return host_ready(plan, machine.host, None, FAST_SAMPLES, draws=draws)
    key = (machine.key, draws_key, plan.launches.tobytes())
    positions, suffixes = plan.ready_lines
    before = _READY.get(key)
    if before is None or before[0].shape != positions.shape:
        h = host_ready(plan, machine.host, None, FAST_SAMPLES, draws=draws, launch=launch)
    else:
        changed = np.flatnonzero((before[0] != positions).any(axis=1) | (before[1] != suffixes).any(axis=1))
        # updated in place (its layout too: numpy reduces over the ranks in the order of the layout): every caller
        # reads h at once and keeps only what it computes from it, so the entry's h is read nowhere else
        h = before[2]
        if changed.size:
            start, H, one, bounds = launch
            h[..., changed] = eager_ready(start[..., changed], H[..., changed], one[..., changed],
                                          None if bounds is None else (bounds[0][changed], bounds[1][changed]),
                                          positions[changed], suffixes[changed])
    _bounded(_READY, key, (positions, suffixes, h), _READY_SIZE)
    return h
