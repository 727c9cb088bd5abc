"""A sweep's worker side: what a worker gets (ChunkTask) and does with it (run_chunk), and each point's deadline.

Workers get the scenario path and each point's override dict, never a Scenario, and keep the base scenario in the
store they hold (simulator.cache: a forked worker inherits the sweep's, which lives across its points; a Dask task
holds one for its chunk), so a point costs one `with_overrides` plus the run. A forked worker sends a
Deadline for each point from the point's own work estimate (pool.py kills a worker past it) and each row as its
point ends, so a worker killed mid-chunk loses only the point it was running.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

from ..cache import held, stored
from ..config import Scenario, load_scenario
from ..config.errors import ConfigError
from ..results.limits import check_work, estimated_seconds
from ..results.planner import lookup
from .memory import after_point
from .pool import Deadline
from .sweepfile import Point

# a point's deadline: the floor (imports, a first load of kernel tables) plus a multiple of its estimated time
# (results.limits: FAST_STEPS_PER_S is the order of one core's speed; the factor covers a machine 10x slower)
POINT_DEADLINE_FLOOR_S = 60.0
POINT_DEADLINE_FACTOR = 10.0


class ChunkTask(NamedTuple):
    """What a worker gets: the base scenario's path and fixed overrides, and the points' override dicts."""

    token: str  # names this sweep's base scenario in the worker's cache
    scenario_path: str
    fixed: dict[str, Any]
    metrics: tuple[str, ...]
    points: tuple[Point, ...]
    max_work: float | None = None  # each point's bound (simulator.results.limits)
    point_timeout_s: float | None = None  # each point's deadline (default: from its estimate)


@stored
def base_scenario(token: str, scenario_path: str, fixed: tuple) -> Scenario:
    """The base scenario of the sweep named `token`: its file with the fixed overrides ((path, value) pairs)."""
    return load_scenario(scenario_path, list(fixed))


def run_chunk(task: ChunkTask, send: Callable[[Any], None] | None = None) -> list[tuple[str, str, str, list[Any]]]:
    """Run a chunk of points; each gives (point id, 'ok' or 'error', error message, metric values). With `send`
    (a forked worker's pipe) each row is sent as its point ends, after a Deadline for the point, and none returned."""
    with held():  # the worker's store if it holds one (forked from the sweep), else one for this chunk
        return _run_chunk(task, send)


def _run_chunk(task: ChunkTask, send: Callable[[Any], None] | None) -> list[tuple[str, str, str, list[Any]]]:
    from ..api.run import run_figures

    names = [metric.split(".", 1)[0] for metric in task.metrics]  # the top-level figures the rows keep
    out = []
    for point in task.points:
        try:
            base = base_scenario(task.token, task.scenario_path, tuple(task.fixed.items()))
            scenario = base.with_overrides(point.values)
            work = check_work(scenario, task.max_work)
            if send is not None:
                send(Deadline(task.point_timeout_s or point_deadline_s(work)))
            result = run_figures(scenario, names)
            row = (point.id, "ok", "", [lookup(result, m) for m in task.metrics])
        except Exception as exc:  # a failed point is a result: recorded, and the sweep goes on
            row = (point.id, "error", _one_line(exc), [])
        if send is None:
            out.append(row)
        else:
            send(row)
        after_point()
    return out


def point_deadline_s(work: float) -> float:
    """How long a point of estimated `work` may run before its worker is taken for stuck and killed."""
    return POINT_DEADLINE_FLOOR_S + POINT_DEADLINE_FACTOR * estimated_seconds(work)


def _one_line(exc: BaseException) -> str:
    text = exc.line() if isinstance(exc, ConfigError) else f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())
