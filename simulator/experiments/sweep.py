"""Sweeps: the points of a sweep file run on local workers or a Dask cluster, one checked row per point.

Workers get the scenario path and each point's override dict, never a Scenario, and keep the base scenario per
process, so a point costs one `with_overrides` plus the run; the engine's per-shape tables stay warm in a worker
from one point to the next (they are keyed by the physical parameters they depend on). Local workers are forked
and supervised (pool.py): a worker that dies is replaced and its points are retried one at a time; a point that
kills its worker twice is recorded as an error with the reason. SIGINT and SIGTERM stop the sweep at once: the
workers are killed, finished rows are already on disk, and a rerun resumes (store.py).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Iterator, NamedTuple

from ..config import Scenario, load_scenario
from ..config.errors import ConfigError
from ..results.files import check_output_file
from ..results.planner import lookup
from ..results.limits import cap_workers, check_points, check_work
from .metrics import PROVENANCE_COLUMNS, check_metrics
from .memory import after_point, sweep_gc, tune_malloc
from .pool import Died, ForkPool
from .store import Store, read_results  # noqa: F401  (read_results re-exported for callers)
from .sweepfile import Point, Sweep, check_axes, load_sweep, num_points, point_id, points  # noqa: F401

MAX_STRIKES = 2  # worker deaths a point may cause before it is recorded as an error


class ChunkTask(NamedTuple):
    """What a worker gets: the base scenario's path and fixed overrides, and the points' override dicts."""

    token: str  # names this sweep's base scenario in the worker's cache
    scenario_path: str
    fixed: dict[str, Any]
    metrics: tuple[str, ...]
    points: tuple[Point, ...]
    max_work: float | None = None  # each point's bound (simulator.results.limits)


@dataclass(frozen=True)
class SweepReport:
    name: str
    out: str
    num_points: int
    num_skipped: int  # had an ok row already
    num_ok: int
    num_failed: int
    wall_s: float
    empty_metrics: tuple[str, ...]  # metrics with no value in any point run now (a typo?)
    num_rejected: int = 0  # lines of the results file set aside into OUT.rejected on opening it

    def line(self) -> str:
        ran = self.num_ok + self.num_failed
        text = (f"sweep {self.name}: {self.num_points} points, {self.num_skipped} done before, {ran} run "
                f"({self.num_ok} ok, {self.num_failed} error) in {self.wall_s:.1f} s -> {self.out}")
        if self.num_rejected:
            text += f"; {self.num_rejected} damaged, duplicate or error line(s) set aside in {self.out}.rejected"
        if self.empty_metrics:
            text += f"; no value for metric(s) {', '.join(self.empty_metrics)}"
        return text


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so the sweep stops the way Ctrl-C stops it."""


# -- the worker side -----------------------------------------------------------------------------------------------
_BASES: "OrderedDict[str, Scenario]" = OrderedDict()  # sweep token -> base scenario, per process


def run_chunk(task: ChunkTask) -> list[tuple[str, str, str, list[Any]]]:
    """Run a chunk of points; each gives (point id, 'ok' or 'error', error message, metric values)."""
    from ..results.run import run_figures

    names = [metric.split(".", 1)[0] for metric in task.metrics]  # the top-level figures the rows keep
    out = []
    for point in task.points:
        try:
            base = _BASES.get(task.token)
            if base is None:
                base = _BASES[task.token] = load_scenario(task.scenario_path, list(task.fixed.items()))
                while len(_BASES) > 4:
                    _BASES.popitem(last=False)
            scenario = base.with_overrides(point.values)
            check_work(scenario, task.max_work)
            result = run_figures(scenario, names)
            out.append((point.id, "ok", "", [lookup(result, m) for m in task.metrics]))
        except Exception as exc:  # a failed point is a result: recorded, and the sweep goes on
            out.append((point.id, "error", _one_line(exc), []))
        after_point()
    return out


def _one_line(exc: BaseException) -> str:
    text = exc.line() if isinstance(exc, ConfigError) else f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())


# -- running ---------------------------------------------------------------------------------------------------------
def run_sweep(sweep: Sweep | str, *, workers: int | None = None, dask_address: str | None = None,
              out: str | None = None, fidelity: str | None = None, progress: bool | None = None,
              chunk_size: int | None = None, max_points: int | None = None, max_work: float | None = None
              ) -> SweepReport:
    """Run every point of a sweep that has no ok row in `out` yet, streaming rows to it.

    Local forked workers by default (`workers`, default and cap: the number of CPUs, and at most one per point;
    1 runs in this process), or the workers of the Dask scheduler at `dask_address`. A point that fails is
    recorded as an error row (and retried by the next run). Bounds: `max_points` points, `max_work` per point.
    """
    started = time.perf_counter()
    sweep = load_sweep(sweep) if isinstance(sweep, str) else sweep
    spec = sweep.spec
    fixed = {**spec.fixed, **({"fidelity": fidelity} if fidelity else {})}
    out = out or sweep.default_out
    check_output_file(out, "--out")
    check_points(num_points(sweep), sweep.file, max_points)
    base = load_scenario(sweep.scenario_path, list(fixed.items()))  # a bad base or `set` stops here, exit 2
    check_axes(sweep, base)
    check_work(base, max_work)
    check_metrics(base, spec.metrics, sweep.file)  # a misspelled metric stops here, before any point runs
    all_points = points(sweep, fixed)
    client = _dask_client(dask_address) if dask_address else None
    token = uuid.uuid4().hex
    _BASES[token] = base  # forked workers and this process start with the base scenario loaded
    try:
        metrics = [*spec.metrics, *PROVENANCE_COLUMNS]  # every row says what produced it
        with Store(out, ["point_id", "point", *spec.axes, *metrics, "status", "error"]) as store, \
                _stop_on_sigterm():
            todo = [p for p in all_points if p.id not in store.done]
            capacity = sum(client.nthreads().values()) if client else cap_workers(workers, len(todo), _cpus())
            tasks = [ChunkTask(token, sweep.scenario_path, fixed, tuple(metrics), tuple(todo[i:j]), max_work)
                     for i, j in chunk_bounds(len(todo), capacity, chunk_size)]
            bar = _progress(len(todo), sweep.name, progress)
            order = {p.id: i for i, p in enumerate(all_points)}  # the point's index in the sweep's own order
            recorder = _Recorder(store, spec.axes, metrics, bar, order)
            try:
                if client is not None:
                    recorder.record_all(_on_dask(client, tasks))
                elif capacity == 1 or len(tasks) <= 1:
                    tune_malloc()
                    with sweep_gc():
                        recorder.record_all((task, run_chunk(task)) for task in tasks)
                else:
                    with sweep_gc():  # entered before the fork: the workers inherit it
                        _on_processes(tasks, capacity, store.fds, recorder)
            finally:
                bar.close()
            store.reorder(order)  # complete: rows in point order, whatever order they finished in
    finally:
        _BASES.pop(token, None)
        if client is not None:
            client.close()
    counts, filled = recorder.counts, recorder.filled
    empty = tuple(m for m, f in zip(spec.metrics, filled) if not f) if counts["ok"] else ()
    return SweepReport(sweep.name, out, len(all_points), len(all_points) - len(todo), counts["ok"], counts["error"],
                       time.perf_counter() - started, empty, store.num_rejected)


MAX_CHUNK = 16  # points per task at most: few enough that a task's result comes back every second or so


def chunk_bounds(num: int, capacity: int, chunk_size: int | None = None) -> list[tuple[int, int]]:
    """The (start, end) of each task's points: `chunk_size` each if given, else guided: a quarter of what is left
    per worker, at most MAX_CHUNK, shrinking towards the end so that the workers finish together (the last tasks
    are single points, not a chunk that one worker runs while the others wait)."""
    bounds, start = [], 0
    while start < num:
        size = chunk_size or max(1, min(MAX_CHUNK, (num - start) // (4 * capacity)))
        bounds.append((start, min(num, start + size)))
        start += size
    return bounds


class _Recorder:
    """Appends each point's row as its chunk comes back; counts ok and error rows and which metrics had values."""

    def __init__(self, store: Store, axes: dict, metrics: list[str], bar, order: dict[str, int]):
        self.store, self.axes, self.metrics, self.bar, self.order = store, list(axes), metrics, bar, order
        self.counts = {"ok": 0, "error": 0}
        self.filled = [False] * len(metrics)

    def record(self, task: ChunkTask, rows: list) -> None:
        values = {p.id: p.values for p in task.points}
        for pid, status, error, metrics in rows:
            axes = [values[pid][a] for a in self.axes]
            self.store.append([pid, self.order[pid], *axes, *(metrics or [None] * len(self.metrics)), status,
                               error])
            self.counts[status] += 1
            if status == "ok":
                self.filled = [f or m is not None for f, m in zip(self.filled, metrics)]
        self.bar.update(len(rows))

    def record_all(self, results: Iterator[tuple[ChunkTask, list]]) -> None:
        for task, rows in results:
            self.record(task, rows)


def _on_processes(tasks: list[ChunkTask], workers: int, close_fds: tuple[int, ...], recorder: _Recorder) -> None:
    """Run the chunks on forked workers; a chunk whose worker died is retried point by point."""
    strikes: dict[str, int] = {}
    with ForkPool(run_chunk, min(workers, len(tasks)), close_fds) as pool:
        for task in tasks:
            pool.submit(task)
        for task, outcome in pool.results():
            if not isinstance(outcome, Died):
                recorder.record(task, outcome)
                continue
            for point in task.points:
                strikes[point.id] = strikes.get(point.id, 0) + 1
                if strikes[point.id] >= MAX_STRIKES:
                    message = f"the worker running this point died {strikes[point.id]} times ({outcome.reason})"
                    recorder.record(task._replace(points=(point,)), [(point.id, "error", message, [])])
                else:
                    pool.submit(task._replace(points=(point,)))


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


class _stop_on_sigterm:
    """While the sweep runs, SIGTERM raises Terminated in the main thread (finally blocks run, workers stop)."""

    def __enter__(self):
        self.previous = None
        if threading.current_thread() is threading.main_thread():
            def handler(signum, frame):
                raise Terminated()

            self.previous = signal.signal(signal.SIGTERM, handler)
        return self

    def __exit__(self, *exc) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)


def _dask_client(address: str):
    try:
        from dask.distributed import Client
    except ImportError:
        raise ConfigError("--dask", address, "dask.distributed is not installed", "pip install 'specsim[dask]'") from None
    try:
        return Client(address, timeout="10s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise ConfigError("--dask", address, f"cannot reach the scheduler: {_one_line(exc)}",
                          "the address of a running dask scheduler, tcp://HOST:PORT") from None


def _on_dask(client, tasks: list[ChunkTask]) -> Iterator[tuple[ChunkTask, list]]:
    from dask.distributed import as_completed as dask_completed

    futures = client.map(run_chunk, tasks, pure=False)
    by_key = {f.key: t for f, t in zip(futures, tasks)}
    try:
        for future in dask_completed(futures):
            try:
                yield by_key[future.key], future.result()
            except Exception as exc:  # the cluster lost the task: its points are error rows, retried next run
                yield by_key[future.key], [(p.id, "error", f"worker failed: {_one_line(exc)}", [])
                                           for p in by_key[future.key].points]
    finally:
        client.cancel(futures)


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, name: str, enabled: bool | None):
    """A tqdm bar on stderr (points done, rate, time left); by default only when stderr is a terminal."""
    if enabled is False or (enabled is None and not sys.stderr.isatty()):
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    tqdm.monitor_interval = 0  # no monitor thread: workers may be forked while the bar runs
    return tqdm(total=total, desc=name, unit="pt", file=sys.stderr, dynamic_ncols=True)
