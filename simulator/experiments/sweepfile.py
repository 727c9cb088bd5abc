"""The sweep file: a base scenario, axes over dotted config paths, and the points they make.

A sweep file names a base scenario, `axes` (dotted paths, the same as `--set`), a `mode` that turns the axes into
points (grid: product, zip: side by side, random: seeded samples), fixed `set` overrides and the `metrics` to keep
(dotted paths into Result.to_dict()). A point's id is a hash of its resolved configuration (identity.py), so a
rerun recognises the points it has done and no others. Points are made lazily, one at a time. Axis values must be
finite numbers where they are numbers.
"""
from __future__ import annotations

import itertools
import json
import math
import os
from typing import Any, Iterable, Iterator, Literal, NamedTuple

import numpy as np
from pydantic import Field

from ..compiled import dataclass
from ..config import Scenario, load_scenario
from ..config.base import Strict, validate
from ..config.errors import ConfigError
from ..config.yaml_files import read_yaml
from .identity import base_id, point_id

RESERVED = ("point_id", "status", "error", "check")


class RandomAxis(Strict):
    """One axis of a random sweep: uniform (optionally log-uniform) over [low, high], or one of `choices`."""

    low: float | None = Field(None, description="lower bound of a uniform draw")
    high: float | None = Field(None, description="upper bound of a uniform draw")
    log: bool = Field(False, description="draw uniformly in log space (low > 0)")
    choices: list[Any] | None = Field(None, description="draw one of these values, equally likely", min_length=1)


class SweepSpec(Strict):
    """A sweep file."""

    name: str | None = Field(None, description="names the default results file; default: the sweep file's stem")
    description: str = Field("", description="what the sweep asks")
    scenario: str = Field(description="the base scenario, a path relative to the sweep file")
    mode: Literal["grid", "zip", "random"] = Field("grid", description="grid: product; zip: side by side; random")
    axes: dict[str, Any] = Field(min_length=1, description="dotted config path -> values (grid, zip) or a "
                                 "RandomAxis (random)")
    samples: int | None = Field(None, ge=1, description="number of random points (random mode only)")
    seed: int = Field(0, ge=0, description="seed of the random points (random mode only)")
    fixed: dict[str, Any] = Field(default_factory=dict, alias="set", description="overrides applied to every point")
    metrics: list[str] = Field(min_length=1, description="dotted paths into Result.to_dict() to keep")
    rank_by: str | None = Field(None, description="after the sweep, print the best points by this figure: "
                                "throughput, throughput_per_gpu, goodput, goodput_per_gpu, cost or speedup (its "
                                "dotted path must be among the metrics)")


KEYS = ("name", "description", "scenario", "mode", "axes", "samples", "seed", "set", "metrics", "rank_by")  # as users write them


@dataclass(frozen=True)
class Sweep:
    """A validated sweep file, its paths resolved."""

    spec: SweepSpec
    file: str
    scenario_path: str  # absolute
    name: str

    @property
    def default_out(self) -> str:
        return os.path.abspath(f"{self.name}.results.csv")  # the current directory, never beside a shipped sweep


class Point(NamedTuple):
    id: str
    values: dict[str, Any]  # axis path -> value
    index: int = 0  # its place in the sweep's order (the results file's `point` column)


def load_sweep(path: str) -> Sweep:
    """Read and validate a sweep file; mistakes raise ConfigError naming the file and key path."""
    raw = read_yaml(path)
    if isinstance(raw, dict):
        for key in raw:
            if key not in KEYS:
                raise ConfigError(path, str(key), "unknown key", ", ".join(KEYS))
    spec = validate(SweepSpec, raw, path)
    if spec.mode == "random":
        if spec.samples is None:
            raise ConfigError(path, "samples", "random mode needs the number of samples", "an integer >= 1")
        for name, axis in spec.axes.items():
            _check_random_axis(validate(RandomAxis, axis, path, prefix=f"axes.{name}"), path, f"axes.{name}")
    else:
        if spec.samples is not None:
            raise ConfigError(path, "samples", f"only random mode takes samples, this sweep is {spec.mode}")
        for name, values in spec.axes.items():
            if not isinstance(values, list) or not values:
                raise ConfigError(path, f"axes.{name}", f"{spec.mode} mode needs a non-empty list of values")
        lengths = {len(v) for v in spec.axes.values()}
        if spec.mode == "zip" and len(lengths) > 1:
            raise ConfigError(path, "axes", f"zip mode needs lists of equal length, got lengths {sorted(lengths)}")
    if spec.rank_by is not None:
        from .ranking import check_rank_by

        check_rank_by(spec.rank_by, spec.metrics, path, "rank_by")
    _check_finite(spec.axes, path, "axes")
    _check_finite(spec.fixed, path, "set")
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


def _check_random_axis(axis: RandomAxis, path: str, where: str) -> None:
    if axis.choices is not None:
        if axis.low is not None or axis.high is not None or axis.log:
            raise ConfigError(path, where, "give either low/high (and log) or choices, not both")
    elif axis.low is None or axis.high is None:
        raise ConfigError(path, where, "give low and high, or choices")
    elif axis.low > axis.high:
        raise ConfigError(path, f"{where}.low", f"low {axis.low:g} is above high {axis.high:g}", "low <= high")
    elif axis.log and axis.low <= 0:
        raise ConfigError(path, f"{where}.low", f"log needs low > 0, got {axis.low:g}", "low > 0")


def _check_finite(value: Any, path: str, where: str) -> None:
    """Numbers in axes and fixed overrides must be finite (a NaN or inf would reach the model as a parameter)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(path, where, f"{value} is not a finite number", "finite numbers")
    if isinstance(value, dict):
        for key, item in value.items():
            _check_finite(item, path, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_finite(item, path, f"{where}[{i}]")


def check_axes(sweep: Sweep, base: Scenario) -> None:
    """Every axis path must name a key of the base scenario (a path under a `kind` family is left to the run)."""
    raw = {**base.spec.model_dump(mode="json"), "topology": base.topology.model_dump(mode="json"),
           "model": base.model.model_dump(mode="json")}
    from ..config.loader import RENAMED_PATHS

    for path in sweep.spec.axes:
        node: Any = raw
        for key in RENAMED_PATHS.get(path, path).split("."):  # an old name sets its new key
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


def iter_points(sweep: Sweep, base: Scenario | None = None, fixed: dict[str, Any] | None = None
                ) -> Iterator[Point]:
    """The sweep's distinct points in a stable order, made one at a time (a 10^7-point grid is never held).

    `base`: the base scenario loaded with `fixed` (default: the file's `set`); ids hash its resolved configuration
    (identity.py). Grid axes are made distinct value by value, so their product has no repeats; zip and random
    points are made distinct by id (a set as large as the points: random samples are drawn up front anyway).
    """
    spec = sweep.spec
    if base is None:
        base = load_scenario(sweep.scenario_path, list((spec.fixed if fixed is None else fixed).items()))
    base_key, base_dir, memo = base_id(base), base.base_dir, {}
    names = list(spec.axes)
    seen: set[str] | None = set()
    if spec.mode == "grid":
        rows: Iterable = itertools.product(*(_distinct(values) for values in spec.axes.values()))
        seen = None
    elif spec.mode == "zip":
        rows = zip(*spec.axes.values())
    else:
        rng = np.random.default_rng(spec.seed)
        columns = [_draw(RandomAxis.model_validate(spec.axes[n]), spec.samples, rng) for n in names]
        rows = zip(*columns)
    index = 0
    for row in rows:
        values = {name: _plain(value) for name, value in zip(names, row)}
        pid = point_id(base_key, values, base_dir, memo)
        if seen is not None:
            if pid in seen:
                continue
            seen.add(pid)
        yield Point(pid, values, index)
        index += 1


def points(sweep: Sweep, fixed: dict[str, Any] | None = None, base: Scenario | None = None) -> list[Point]:
    """Every point of the sweep (iter_points as a list: for small sweeps and tests)."""
    return list(iter_points(sweep, base, fixed))


def _distinct(values: list[Any]) -> list[Any]:
    """An axis's values with repeats (equal as JSON) left out, in their order."""
    out: dict[str, Any] = {}
    for value in values:
        out.setdefault(json.dumps(value, sort_keys=True, default=str), value)
    return list(out.values())


def _plain(value: Any) -> Any:
    """A numpy scalar (a random draw) as the Python number it holds."""
    return value.item() if isinstance(value, np.generic) else value


def _draw(axis: RandomAxis, n: int, rng: np.random.Generator) -> Iterable[Any]:
    """n draws of one axis: an array (8 bytes a sample), read lazily; choices by index."""
    if axis.choices is not None:
        choices = axis.choices
        return (choices[i] for i in rng.integers(0, len(choices), n))
    u = rng.random(n)
    if axis.log:
        lo, hi = math.log(axis.low), math.log(axis.high)
        return np.clip(np.exp(lo + u * (hi - lo)), axis.low, axis.high)
    return np.clip(axis.low + u * (axis.high - axis.low), axis.low, axis.high)
