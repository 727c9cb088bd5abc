"""Sweeps: one base scenario, axes over dotted config paths, points run in parallel, rows streamed to a CSV.

A sweep file names a base scenario, `axes` (dotted paths, the same as `--set`), a `mode` that turns the axes into
points (grid: product, zip: side by side, random: seeded samples), fixed `set` overrides and the `metrics` to keep
(dotted paths into Result.to_dict()). Points run on local worker processes or on a Dask cluster; workers get the
scenario path and each point's override dict, never a Scenario, and keep the base scenario per process so a point
costs one `with_overrides` plus the run (pass costs are memoised per process by the engine).

The results file is the store: one row per point, appended with a single os.write on an O_APPEND descriptor, so a
killed sweep leaves whole rows (a trailing partial line is cut on the next start) and a rerun skips every point
that already has an ok row.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import sys
import time
import uuid
from collections import OrderedDict
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, Iterator, Literal, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..config import Scenario, load_scenario
from ..config.base import validate
from ..config.loader import read_yaml
from ..config.errors import ConfigError
from ..results.files import check_output_file
from ..results.limits import cap_workers, check_points, check_work
from .store import line as _line, open_store, write as _write
from .store import read_results  # noqa: F401  (re-exported: callers read results from simulator.sweep)

RESERVED = ("point_id", "status", "error")


class RandomAxis(BaseModel):
    """One axis of a random sweep: uniform (optionally log-uniform) over [low, high], or one of `choices`."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    low: float | None = Field(None, description="lower bound of a uniform draw")
    high: float | None = Field(None, description="upper bound of a uniform draw")
    log: bool = Field(False, description="draw uniformly in log space (low > 0)")
    choices: list[Any] | None = Field(None, description="draw one of these values, equally likely", min_length=1)

    @model_validator(mode="after")
    def _one_kind(self) -> "RandomAxis":
        if self.choices is not None:
            if self.low is not None or self.high is not None or self.log:
                raise ValueError("give either low/high (and log) or choices, not both")
        elif self.low is None or self.high is None:
            raise ValueError("give low and high, or choices")
        elif self.low > self.high:
            raise ValueError(f"low {self.low} is above high {self.high}")
        elif self.log and self.low <= 0:
            raise ValueError("log needs low > 0")
        return self


class SweepSpec(BaseModel):
    """A sweep file."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str | None = Field(None, description="names the default results file; default: the sweep file's stem")
    description: str = Field("", description="what the sweep asks")
    scenario: str = Field(description="the base scenario, a path relative to the sweep file")
    mode: Literal["grid", "zip", "random"] = Field("grid", description="grid: product; zip: side by side; random")
    axes: dict[str, Any] = Field(min_length=1, description="dotted config path -> values (grid, zip) or a "
                                 "RandomAxis (random)")
    samples: int | None = Field(None, ge=1, description="number of random points (random mode only)")
    seed: int = Field(0, description="seed of the random points (random mode only)")
    fixed: dict[str, Any] = Field(default_factory=dict, alias="set", description="overrides applied to every point")
    metrics: list[str] = Field(min_length=1, description="dotted paths into Result.to_dict() to keep")


@dataclass(frozen=True)
class Sweep:
    """A validated sweep file, its paths resolved."""

    spec: SweepSpec
    file: str
    scenario_path: str  # absolute
    name: str

    @property
    def default_out(self) -> str:
        return os.path.join(os.path.dirname(os.path.abspath(self.file)), f"{self.name}.results.csv")


class Point(NamedTuple):
    id: str
    values: dict[str, Any]  # axis path -> value


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

    def line(self) -> str:
        ran = self.num_ok + self.num_failed
        text = (f"sweep {self.name}: {self.num_points} points, {self.num_skipped} done before, {ran} run "
                f"({self.num_ok} ok, {self.num_failed} error) in {self.wall_s:.1f} s -> {self.out}")
        if self.empty_metrics:
            text += f"; no value for metric(s) {', '.join(self.empty_metrics)}"
        return text


# -- the sweep file ----------------------------------------------------------------------------------------------
def load_sweep(path: str) -> Sweep:
    """Read and validate a sweep file; mistakes raise ConfigError naming the file and key path."""
    spec = validate(SweepSpec, read_yaml(path), path)
    if spec.mode == "random":
        if spec.samples is None:
            raise ConfigError(path, "samples", "random mode needs the number of samples", "an integer >= 1")
        for name, axis in spec.axes.items():
            validate(RandomAxis, axis, path, prefix=f"axes.{name}")
    else:
        if spec.samples is not None:
            raise ConfigError(path, "samples", f"only random mode takes samples, this sweep is {spec.mode}")
        for name, values in spec.axes.items():
            if not isinstance(values, list) or not values:
                raise ConfigError(path, f"axes.{name}", f"{spec.mode} mode needs a non-empty list of values")
        lengths = {len(v) for v in spec.axes.values()}
        if spec.mode == "zip" and len(lengths) > 1:
            raise ConfigError(path, "axes", f"zip mode needs lists of equal length, got lengths {sorted(lengths)}")
    columns = list(RESERVED) + list(spec.axes) + list(spec.metrics)
    for name in columns:
        if columns.count(name) > 1:
            where = "metrics" if name in spec.metrics else "axes"
            raise ConfigError(path, where, f"column {name!r} appears twice", "distinct axes and metrics, none of "
                              + ", ".join(RESERVED))
    scenario_path = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(path)), spec.scenario))
    if not os.path.isfile(scenario_path):
        raise ConfigError(path, "scenario", f"file not found: {scenario_path}", "a path relative to the sweep file")
    name = spec.name or os.path.splitext(os.path.basename(path))[0]
    return Sweep(spec=spec, file=path, scenario_path=scenario_path, name=name)


def check_axes(sweep: Sweep, base: Scenario) -> None:
    """Every axis path must name a key of the base scenario (a path under a `kind` family is left to the run)."""
    raw = {**base.spec.model_dump(mode="json"), "topology": base.topology.model_dump(mode="json"),
           "model": base.model.model_dump(mode="json")}
    for path in sweep.spec.axes:
        node: Any = raw
        for key in path.split("."):
            if isinstance(node, dict):
                if key not in node:
                    if "kind" in node:
                        break
                    raise ConfigError(sweep.file, f"axes.{path}", f"no key {key!r} in the scenario",
                                      ", ".join(node) or None)
                node = node[key]
            elif isinstance(node, list):
                if not key.isdigit() or int(key) >= len(node):
                    raise ConfigError(sweep.file, f"axes.{path}", f"no element {key!r} in a list of {len(node)}")
                node = node[int(key)]
            else:
                break


def num_points(sweep: Sweep) -> float:
    """How many points the axes make (before duplicates are merged), computed without making them."""
    spec = sweep.spec
    if spec.mode == "random":
        return float(spec.samples)
    if spec.mode == "zip":
        return float(len(next(iter(spec.axes.values()))))
    return float(math.prod(len(v) for v in spec.axes.values()))


def point_id(scenario: str, overrides: dict[str, Any]) -> str:
    """A stable hash of a point: the base scenario as named in the sweep file and every override applied to it."""
    text = json.dumps({"scenario": scenario, "set": overrides}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def points(sweep: Sweep, fixed: dict[str, Any] | None = None) -> list[Point]:
    """The sweep's distinct points in a stable order; `fixed` (default: the file's `set`) goes into each id."""
    spec = sweep.spec
    fixed = dict(spec.fixed if fixed is None else fixed)
    names = list(spec.axes)
    if spec.mode == "grid":
        rows = itertools.product(*spec.axes.values())
    elif spec.mode == "zip":
        rows = zip(*spec.axes.values())
    else:
        rng = np.random.default_rng(spec.seed)
        columns = [_draw(RandomAxis.model_validate(spec.axes[n]), spec.samples, rng) for n in names]
        rows = zip(*columns)
    out: dict[str, Point] = {}
    for row in rows:
        values = dict(zip(names, row))
        pid = point_id(spec.scenario, {**fixed, **values})
        out.setdefault(pid, Point(pid, values))
    return list(out.values())


def _draw(axis: RandomAxis, n: int, rng: np.random.Generator) -> list[Any]:
    if axis.choices is not None:
        return [axis.choices[i] for i in rng.integers(0, len(axis.choices), n)]
    u = rng.random(n)
    if axis.log:
        lo, hi = math.log(axis.low), math.log(axis.high)
        return [float(x) for x in np.clip(np.exp(lo + u * (hi - lo)), axis.low, axis.high)]
    return [float(x) for x in axis.low + u * (axis.high - axis.low)]


# -- the worker side -----------------------------------------------------------------------------------------------
_BASES: "OrderedDict[str, Scenario]" = OrderedDict()  # sweep token -> base scenario, per process


def run_chunk(task: ChunkTask) -> list[tuple[str, str, str, list[Any]]]:
    """Run a chunk of points; each gives (point id, 'ok' or 'error', error message, metric values)."""
    from ..results.run import run

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
            result = run(scenario).to_dict()
            out.append((point.id, "ok", "", [_lookup(result, m) for m in task.metrics]))
        except Exception as exc:  # a failed point is a result: recorded, and the sweep goes on
            out.append((point.id, "error", _one_line(exc), []))
    return out


def _lookup(data: Any, path: str) -> Any:
    for key in path.split("."):
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _one_line(exc: BaseException) -> str:
    text = exc.line() if isinstance(exc, ConfigError) else f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())


# -- running ---------------------------------------------------------------------------------------------------------
def run_sweep(sweep: Sweep | str, *, workers: int | None = None, dask_address: str | None = None,
              out: str | None = None, fidelity: str | None = None, progress: bool | None = None,
              chunk_size: int | None = None, max_points: int | None = None, max_work: float | None = None
              ) -> SweepReport:
    """Run every point of a sweep that has no ok row in `out` yet, streaming rows to it.

    Local worker processes by default (`workers`, default: the number of CPUs; 1 runs in this process), or the
    workers of the Dask scheduler at `dask_address`. A point that fails is recorded as an error row.
    """
    started = time.perf_counter()
    sweep = load_sweep(sweep) if isinstance(sweep, str) else sweep
    spec = sweep.spec
    fixed = {**spec.fixed, **({"fidelity": fidelity} if fidelity else {})}
    base = load_scenario(sweep.scenario_path, list(fixed.items()))  # a bad base or `set` stops here, exit 2
    check_axes(sweep, base)
    out = out or sweep.default_out
    check_output_file(out, "--out")
    check_points(num_points(sweep), sweep.file, max_points)
    check_work(base, max_work)
    all_points = points(sweep, fixed)
    client = _dask_client(dask_address) if dask_address else None
    try:
        fd, done = open_store(out, ["point_id", *spec.axes, *spec.metrics, "status", "error"])
        try:
            todo = [p for p in all_points if p.id not in done]
            capacity = sum(client.nthreads().values()) if client else cap_workers(workers, len(todo), _cpus())
            size = chunk_size or max(1, min(16, len(todo) // (4 * capacity)))  # a few chunks per worker: balance
            token = uuid.uuid4().hex
            tasks = [ChunkTask(token, sweep.scenario_path, fixed, tuple(spec.metrics), tuple(todo[i:i + size]),
                               max_work)
                     for i in range(0, len(todo), size)]
            if client is not None:
                results = _on_dask(client, tasks)
            elif capacity == 1 or len(tasks) <= 1:
                results = ((task, run_chunk(task)) for task in tasks)
            else:
                results = _on_processes(tasks, min(capacity, len(tasks)))
            counts, filled = _record(fd, results, spec, _progress(len(todo), sweep.name, progress))
            os.fsync(fd)
        finally:
            os.close(fd)
    finally:
        if client is not None:
            client.close()
    empty = tuple(m for m, f in zip(spec.metrics, filled) if not f) if counts["ok"] else ()
    return SweepReport(sweep.name, out, len(all_points), len(all_points) - len(todo), counts["ok"], counts["error"],
                       time.perf_counter() - started, empty)


def _record(fd: int, results: Iterator[tuple[ChunkTask, list]], spec: SweepSpec, bar) -> tuple[dict, list[bool]]:
    """Write each point's row as its chunk comes back; count ok and error rows and which metrics had values."""
    counts = {"ok": 0, "error": 0}
    filled = [False] * len(spec.metrics)
    try:
        for task, rows in results:
            values = {p.id: p.values for p in task.points}
            for pid, status, error, metrics in rows:
                axes = [values[pid][a] for a in spec.axes]
                _write(fd, _line([pid, *axes, *(metrics or [None] * len(spec.metrics)), status, error]))
                counts[status] += 1
                if status == "ok":
                    filled = [f or m is not None for f, m in zip(filled, metrics)]
            bar.update(len(rows))
    finally:
        bar.close()
        results.close()
    return counts, filled


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _failed(task: ChunkTask, exc: BaseException) -> list[tuple[str, str, str, list[Any]]]:
    return [(p.id, "error", f"worker failed: {_one_line(exc)}", []) for p in task.points]


def _on_processes(tasks: list[ChunkTask], workers: int) -> Iterator[tuple[ChunkTask, list]]:
    import multiprocessing

    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
    try:
        futures = {pool.submit(run_chunk, task): task for task in tasks}
        for future in as_completed(futures):
            try:
                yield futures[future], future.result()
            except Exception as exc:  # a worker that died takes its chunk with it; the rows say so
                yield futures[future], _failed(futures[future], exc)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


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
            except Exception as exc:
                yield by_key[future.key], _failed(by_key[future.key], exc)
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
    return tqdm(total=total, desc=name, unit="pt", file=sys.stderr, dynamic_ncols=True)
