"""Sweeps: the points of a sweep file run on local workers or a Dask cluster, one checked row per point.

Workers (worker.py) keep the base scenario per process, so a point costs one `with_overrides` plus the run; the
engine's per-shape tables stay warm in a worker from one point to the next (they are keyed by the physical
parameters they depend on). Local workers are forked
and supervised (pool.py): a worker that dies, or runs past its point's deadline (POINT_DEADLINE_* of the point's
own work estimate, or `point_timeout_s`) and is killed, is replaced; the point it was running is retried alone, and
one that ends its worker twice is recorded as an error with the reason. Points and tasks are made lazily, as workers
free up. SIGINT and SIGTERM stop the sweep at once: the workers are killed, finished rows are already on disk, and
a rerun resumes (store.py).
"""
from __future__ import annotations

import itertools
import math
import os
import signal
import sys
import threading
import time
import uuid
from typing import Callable, Iterator

from ..compiled import dataclass
from ..cache import holding
from ..config.errors import ConfigError
from ..results.files import check_output_file
from ..results.limits import cap_workers, check_points, check_work
from . import cluster
from .identity import base_id
from .metrics import PROVENANCE_COLUMNS, check_metrics
from .memory import sweep_gc, tune_malloc
from .pool import Died, Done, ForkPool
from .worker import POINT_DEADLINE_FLOOR_S, ChunkTask, _one_line, base_scenario, run_chunk  # noqa: F401
from .rows import read_results  # noqa: F401  (re-exported for callers)
from .store import Store
from .sweepfile import (Point, Sweep, check_axes, iter_points, load_sweep, num_points, point_id,  # noqa: F401
                        points)

MAX_STRIKES = 2  # worker deaths a point may cause before it is recorded as an error


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
    num_rejected: int = 0  # lines of the results file set aside into OUT.rejected
    rejected: str = ""  # that file

    def line(self) -> str:
        ran = self.num_ok + self.num_failed
        text = (f"sweep {self.name}: {self.num_points} points, {self.num_skipped} done before, {ran} run "
                f"({self.num_ok} ok, {self.num_failed} error) in {self.wall_s:.1f} s -> {self.out}")
        if self.num_rejected:
            text += (f"; {self.num_rejected} damaged, duplicate, error or stale line(s) set aside in "
                     f"{self.rejected or self.out + '.rejected'}")
        if self.empty_metrics:
            text += f"; no value for metric(s) {', '.join(self.empty_metrics)}"
        return text


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so the sweep stops the way Ctrl-C stops it."""


# -- running ---------------------------------------------------------------------------------------------------------
@holding  # the sweep's store: forked workers inherit it, and keep it across their points
def run_sweep(sweep: Sweep | str, *, workers: int | None = None, dask_address: str | None = None,
              out: str | None = None, fidelity: str | None = None, progress: bool | None = None,
              chunk_size: int | None = None, max_points: float | None = None, max_work: float | None = None,
              point_timeout_s: float | None = None, no_worker_s: float | None = None) -> SweepReport:
    """Run every point of a sweep that has no ok row in `out` yet, streaming rows to it.

    Local forked workers by default (`workers`, default and cap: the number of CPUs, and at most one per point;
    1 runs in this process), or the workers of the Dask scheduler at `dask_address` (given up after `no_worker_s`
    without a live one: cluster.ClusterLost). A point that fails, or ends its worker twice (killed past its deadline:
    `point_timeout_s`, default from its estimate), is an error row (retried by the next run). Bounds: `max_points`
    points, `max_work` per point.
    """
    started = time.perf_counter()
    for name, value in (("--max-points", max_points), ("--point-timeout", point_timeout_s),
                        ("--no-worker-timeout", no_worker_s)):
        check_positive(value, name)
    sweep = load_sweep(sweep) if isinstance(sweep, str) else sweep
    spec = sweep.spec
    fixed = {**spec.fixed, **({"fidelity": fidelity} if fidelity else {})}
    out = out or sweep.default_out
    check_output_file(out, "--out")
    total = num_points(sweep)
    check_points(total, sweep.file, max_points)
    token = uuid.uuid4().hex
    # a bad base or `set` stops here, exit 2; held in this process's store, which forked workers inherit
    base = base_scenario(token, sweep.scenario_path, tuple(fixed.items()))
    check_axes(sweep, base)
    check_work(base, max_work)
    check_metrics(base, spec.metrics, sweep.file)  # a misspelled metric stops here, before any point runs
    client = cluster.connect(dask_address) if dask_address is not None else None
    metrics = [*spec.metrics, *PROVENANCE_COLUMNS]  # every row says what produced it
    identity = {"provenance.fidelity": base.spec.fidelity, "base_id": base_id(base)}
    header = ["point_id", "point", "base_id", *spec.axes, *metrics, "status", "error"]
    try:
        with Store(out, header, identity, older=([c for c in header if c != "base_id"],)) as store, \
                _stop_on_sigterm():
            found: dict[str, int] = {}  # ids of the points that have a row, -> their place in the sweep
            capacity = cluster.capacity(client) if client else cap_workers(workers, int(total), _cpus())
            make = lambda chunk: ChunkTask(token, sweep.scenario_path, fixed, tuple(metrics), tuple(chunk),  # noqa
                                           max_work, point_timeout_s)
            tasks = _chunks(iter_points(sweep, base), store.done, found, make, capacity, chunk_size, total)
            first = list(itertools.islice(tasks, 2))
            tasks = itertools.chain(first, tasks)
            bar = _progress(max(0, int(total) - len(store.done)), sweep.name, progress)
            recorder = _Recorder(store, spec.axes, identity["base_id"], metrics, bar)
            try:
                if client is not None:
                    recorder.record_all(_on_dask(client, tasks, no_worker_s))
                elif capacity == 1 or len(first) <= 1:
                    tune_malloc()
                    with sweep_gc():
                        recorder.record_all((task, run_chunk(task)) for task in tasks)
                else:
                    with sweep_gc():  # entered before the fork: the workers inherit it
                        _on_processes(tasks, capacity, store.fds, recorder, point_timeout_s)
            finally:
                bar.close()
            store.finish(found, store.done - found.keys())  # complete: point order, rows of other points aside
    finally:
        if client is not None:
            client.close()
    counts, filled = recorder.counts, recorder.filled
    empty = tuple(m for m, f in zip(spec.metrics, filled) if not f) if counts["ok"] else ()
    return SweepReport(sweep.name, out, len(found) + counts["ok"] + counts["error"], len(found), counts["ok"],
                       counts["error"], time.perf_counter() - started, empty, store.num_rejected, store.rejected_path)


def check_positive(value: float | None, flag: str) -> None:
    """A limit is a finite number above 0 (None: the default)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or not math.isfinite(value) or value <= 0):
        raise ConfigError("command line", flag, f"{value!r}", "a finite number above 0")


MAX_CHUNK = 16  # points per task at most: few enough that a task's result comes back every second or so


def guided_size(left: float, capacity: int, chunk_size: int | None = None) -> int:
    """Points in the next task: `chunk_size` if given, else a quarter of what is left per worker, at most
    MAX_CHUNK, shrinking towards the end so that the workers finish together (the last tasks are single points)."""
    return chunk_size or int(max(1, min(MAX_CHUNK, left // (4 * capacity))))


def chunk_bounds(num: int, capacity: int, chunk_size: int | None = None) -> list[tuple[int, int]]:
    """The (start, end) of each task's points, sized by guided_size."""
    bounds, start = [], 0
    while start < num:
        size = guided_size(num - start, capacity, chunk_size)
        bounds.append((start, min(num, start + size)))
        start += size
    return bounds


def _chunks(made: Iterator[Point], done: set[str], found: dict[str, int], make: Callable[[list[Point]], ChunkTask],
            capacity: int, chunk_size: int | None, total: float) -> Iterator[ChunkTask]:
    """The tasks of the points without a row, made as they are asked for; the points with one go into `found`."""
    chunk: list[Point] = []
    size = 0
    for point in made:
        if point.id in done:
            found[point.id] = point.index
            continue
        if not chunk:  # what is left to run, about: points not made yet, less the rows not found yet
            size = guided_size(total - point.index - (len(done) - len(found)), capacity, chunk_size)
        chunk.append(point)
        if len(chunk) >= size:
            yield make(chunk)
            chunk = []
    if chunk:
        yield make(chunk)


class _Recorder:
    """Appends each point's row as it comes back; counts ok and error rows and which metrics had values."""

    def __init__(self, store: Store, axes: dict, base: str, metrics: list[str], bar):
        self.store, self.axes, self.base, self.metrics, self.bar = store, list(axes), base, metrics, bar
        self.counts = {"ok": 0, "error": 0}
        self.filled = [False] * len(metrics)

    def record(self, task: ChunkTask, rows: list) -> None:
        by_id = {p.id: p for p in task.points}
        for pid, status, error, metrics in rows:
            point = by_id[pid]
            axes = [point.values[a] for a in self.axes]
            self.store.append([pid, point.index, self.base, *axes, *(metrics or [None] * len(self.metrics)),
                               status, error])
            self.counts[status] += 1
            if status == "ok":
                self.filled = [f or m is not None for f, m in zip(self.filled, metrics)]
        self.bar.update(len(rows))

    def record_all(self, results: Iterator[tuple[ChunkTask, list]]) -> None:
        for task, rows in results:
            self.record(task, rows)


def _on_processes(tasks: Iterator[ChunkTask], workers: int, close_fds: tuple[int, ...], recorder: _Recorder,
                  point_timeout_s: float | None) -> None:
    """Run the chunks on forked workers, rows recorded as each point ends. When a worker dies (or is killed past a
    deadline) the point it was running takes a strike and is retried alone; its chunk's other points go back."""
    strikes: dict[str, int] = {}
    reported: dict[int, set[str]] = {}  # id(task) -> ids of its points with a row
    with ForkPool(run_chunk, workers, close_fds, point_timeout_s or POINT_DEADLINE_FLOOR_S) as pool:
        for task, message in pool.results(tasks):
            rows = reported.setdefault(id(task), set())
            if isinstance(message, Done):
                reported.pop(id(task))
                continue
            if not isinstance(message, Died):
                recorder.record(task, [message])
                rows.add(message[0])
                continue
            reported.pop(id(task))
            left = [p for p in task.points if p.id not in rows]
            if not left:
                continue
            point, rest = left[0], left[1:]  # points run in order: the first without a row was running
            strikes[point.id] = strikes.get(point.id, 0) + 1
            if strikes[point.id] >= MAX_STRIKES:
                message = f"the worker running this point died {strikes[point.id]} times ({message.reason})"
                recorder.record(task, [(point.id, "error", message, [])])
            else:
                pool.submit(task._replace(points=(point,)))
            if rest:
                pool.submit(task._replace(points=tuple(rest)))


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


def _on_dask(client, tasks: Iterator[ChunkTask], no_worker_s: float | None) -> Iterator[tuple[ChunkTask, list]]:
    for task, outcome in cluster.run_tasks(client, run_chunk, tasks, no_worker_s):
        if isinstance(outcome, Exception):  # the cluster lost the task: its points are error rows, retried next run
            outcome = [(p.id, "error", f"worker failed: {_one_line(outcome)}", []) for p in task.points]
        yield task, outcome


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
